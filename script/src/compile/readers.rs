//! The reader side of a node: file readers (CSV and Parquet columns, formats, URLs), table
//! readers and lookups (spec §3.5, §3.6, §3.10).

use super::*;

impl Compiler<'_> {
    pub(super) fn file_reader(
        &mut self,
        subject: &Subject,
        r: &script::Reader,
    ) -> Option<(FileReader, Vec<Field>)> {
        let mut ok = true;
        if r.urls.is_empty() {
            self.err(subject, "r.urls", "a file reader needs at least one URL");
            ok = false;
        }
        for (i, u) in r.urls.iter().enumerate() {
            if u.trim().is_empty() {
                self.err(subject, format!("r.urls[{i}]"), "URL is empty");
                ok = false;
            }
        }
        if r.urls.len() as i64 > MAX_BATCHES {
            self.err(
                subject,
                "r.urls",
                format!("{} URLs, at most {MAX_BATCHES} are supported", r.urls.len()),
            );
            ok = false;
        }
        if r.columns.is_empty() {
            self.err(
                subject,
                "r.columns",
                "a file reader needs at least one column",
            );
            return None;
        }
        // File type detection (spec §3.6).
        let parquet = r.columns.values().any(|c| !c.parquet.col_name.is_empty());
        let csv = !parquet
            && (r.columns.values().any(|c| {
                c.csv.col_hdr.as_deref().is_some_and(|h| !h.is_empty()) || c.csv.col_idx > 0
            }) || r.columns.len() == 1);
        let format = if parquet {
            FileReaderFormat::Parquet
        } else if csv {
            let by_header = r
                .columns
                .values()
                .any(|c| c.csv.col_hdr.as_deref().is_some_and(|h| !h.is_empty()));
            let by_index = r
                .columns
                .values()
                .any(|c| c.csv.col_hdr.as_deref().is_none_or(str::is_empty));
            if by_header && by_index {
                self.err(
                    subject,
                    "r.columns",
                    "address all CSV columns by col_hdr or all by col_idx, not a mix",
                );
                ok = false;
            }
            let sep = r.csv.separator.as_bytes().first().copied();
            if sep.is_none() {
                self.err(subject, "r.csv.separator", "separator is empty");
                ok = false;
            }
            if r.csv.hdr_line_idx < -1 {
                self.err(
                    subject,
                    "r.csv.hdr_line_idx",
                    format!(
                        "must be -1 (no header) or a record index, got {}",
                        r.csv.hdr_line_idx
                    ),
                );
                ok = false;
            }
            if by_header && r.csv.hdr_line_idx < 0 {
                self.err(
                    subject,
                    "r.csv.hdr_line_idx",
                    "columns are addressed by col_hdr but the reader has no header line",
                );
                ok = false;
            }
            if r.csv.first_data_line_idx < 0 {
                self.err(
                    subject,
                    "r.csv.first_data_line_idx",
                    format!("must not be negative, got {}", r.csv.first_data_line_idx),
                );
                ok = false;
            }
            let compression = match r.csv.compression.as_deref() {
                None => Compression::Auto,
                Some(name) => match Compression::NAMES.iter().find(|(n, _)| *n == name) {
                    Some((_, c)) => *c,
                    None => {
                        self.err(
                            subject,
                            "r.csv.compression",
                            format!("must be auto, none, gzip or zstd, got {name:?}"),
                        );
                        ok = false;
                        Compression::Auto
                    }
                },
            };
            FileReaderFormat::Csv(CsvReaderSettings {
                hdr_line_idx: r.csv.hdr_line_idx,
                first_data_line_idx: r.csv.first_data_line_idx,
                separator: sep.unwrap_or(b','),
                by_header,
                compression,
            })
        } else {
            self.err(
                subject,
                "r.columns",
                "cannot detect file reader type: give every column csv.col_hdr or csv.col_idx, or parquet.col_name",
            );
            return None;
        };
        let mut columns = Vec::new();
        let mut fields = Vec::new();
        for (cname, c) in &r.columns {
            let path = format!("r.columns.{cname}");
            let Some(ty) = Type::from_name(&c.col_type) else {
                self.err(
                    subject,
                    format!("{path}.col_type"),
                    unknown_type(&c.col_type),
                );
                ok = false;
                continue;
            };
            if c.csv.col_idx < 0 {
                self.err(
                    subject,
                    format!("{path}.csv.col_idx"),
                    format!("column index must not be negative, got {}", c.csv.col_idx),
                );
                ok = false;
            }
            if matches!(format, FileReaderFormat::Csv(_)) {
                if let Err(msg) = check_col_format(ty, &c.csv.col_format) {
                    self.err(subject, format!("{path}.csv.col_format"), msg);
                    ok = false;
                }
            } else if c.parquet.col_name.is_empty() {
                self.err(
                    subject,
                    format!("{path}.parquet.col_name"),
                    "every column of a Parquet reader needs parquet.col_name",
                );
                ok = false;
            }
            columns.push(ReaderColumn {
                name: cname.clone(),
                ty,
                default_value: c.col_default_value.clone(),
                csv_idx: c.csv.col_idx,
                csv_header: c.csv.col_hdr.clone().unwrap_or_default(),
                csv_format: c.csv.col_format.clone(),
                parquet_column: c.parquet.col_name.clone(),
            });
            fields.push(Field {
                name: cname.clone(),
                ty,
            });
        }
        ok.then(|| {
            (
                FileReader {
                    urls: r.urls.clone(),
                    format,
                    columns,
                    splits: Vec::new(),
                },
                fields,
            )
        })
    }

    pub(super) fn table_reader(
        &mut self,
        subject: &Subject,
        r: &script::Reader,
        tables: &BTreeMap<String, DeclaredTable>,
    ) -> Option<(TableReader, Vec<Field>, String)> {
        let mut ok = true;
        let batches = r.batches_total();
        if !(1..=MAX_BATCHES).contains(&batches) {
            self.err(
                subject,
                "r.expected_batches_total",
                format!("must be between 1 and {MAX_BATCHES}, got {batches}"),
            );
            ok = false;
        }
        let rowset = r.effective_rowset_size();
        if !(1..=MAX_ROWSET_SIZE).contains(&rowset) {
            self.err(
                subject,
                "r.rowset_size",
                format!("must be between 0 and {MAX_ROWSET_SIZE}, got {rowset}"),
            );
            ok = false;
        }
        if r.table.is_empty() {
            self.err(subject, "r.table", "table reader needs a table name");
            return None;
        }
        let Some(t) = tables.get(&r.table) else {
            self.err(
                subject,
                "r.table",
                format!("cannot find the node that creates table {:?}", r.table),
            );
            return None;
        };
        ok.then(|| {
            (
                TableReader {
                    table: r.table.clone(),
                    expected_batches_total: batches as u32,
                    rowset_size: rowset as u32,
                },
                t.fields.clone(),
                t.node.clone(),
            )
        })
    }

    pub(super) fn lookup(
        &mut self,
        subject: &Subject,
        l: &script::Lookup,
        reader_fields: &[Field],
        tables: &BTreeMap<String, DeclaredTable>,
        indexes: &BTreeMap<String, DeclaredIndex>,
    ) -> Option<(Lookup, Vec<Field>, String)> {
        let mut ok = true;
        let join_type = match l.join_type.as_str() {
            "inner" => Some(JoinType::Inner),
            "left" => Some(JoinType::Left),
            other => {
                self.err(
                    subject,
                    "l.join_type",
                    format!("unknown join type {other:?}, expected inner or left"),
                );
                None
            }
        };
        let mut sizes = [0u32; 2];
        for (i, (field, v)) in [
            ("l.idx_read_batch_size", l.idx_read_batch_size),
            (
                "l.right_lookup_read_batch_size",
                l.right_lookup_read_batch_size,
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let v = if v <= 0 { DEFAULT_LOOKUP_BATCH } else { v };
            if v > MAX_LOOKUP_BATCH {
                self.err(
                    subject,
                    field,
                    format!("must be at most {MAX_LOOKUP_BATCH}, got {v}"),
                );
                ok = false;
            }
            sizes[i] = v as u32;
        }
        let Some(idx) = indexes.get(&l.index_name) else {
            self.err(
                subject,
                "l.index_name",
                format!(
                    "cannot find index {:?} in any node's w.indexes",
                    l.index_name
                ),
            );
            return None;
        };
        let table = tables.get(&idx.table)?;
        let def = idx.def.clone()?;
        let mut join_on = Vec::new();
        let items: Vec<&str> = l.join_on.split(',').map(str::trim).collect();
        for item in &items {
            let Some(fname) = item.strip_prefix("r.") else {
                self.err(
                    subject,
                    "l.join_on",
                    format!("{item:?} must be a reader field reference r.<field>"),
                );
                ok = false;
                continue;
            };
            match reader_fields.iter().find(|f| f.name == fname) {
                Some(f) => join_on.push(f.clone()),
                None => {
                    self.err(
                        subject,
                        "l.join_on",
                        format!("unknown field r.{fname} (the reader table has no such field)"),
                    );
                    ok = false;
                }
            }
        }
        if ok && join_on.len() != def.components.len() {
            self.err(
                subject,
                "l.join_on",
                format!(
                    "{} join fields for index {} with {} components",
                    join_on.len(),
                    l.index_name,
                    def.components.len()
                ),
            );
            ok = false;
        }
        if ok {
            for (f, c) in join_on.iter().zip(&def.components) {
                if f.ty != c.ty {
                    self.err(
                        subject,
                        "l.join_on",
                        format!(
                            "r.{} is {} but index {} component {} is {}",
                            f.name, f.ty, l.index_name, c.field, c.ty
                        ),
                    );
                    ok = false;
                }
            }
        }
        let filter = if l.filter.trim().is_empty() {
            None
        } else {
            let e = self.condition(subject, "l.filter", &l.filter, &[(Alias::L, &table.fields)]);
            ok &= e.is_some();
            e
        };
        let join_type = join_type?;
        ok.then(|| {
            (
                Lookup {
                    index_name: l.index_name.clone(),
                    table: idx.table.clone(),
                    index: def,
                    join_on: join_on.into_iter().map(|f| f.name).collect(),
                    join_type,
                    group: l.group,
                    filter,
                    idx_read_batch_size: sizes[0],
                    right_lookup_read_batch_size: sizes[1],
                },
                table.fields.clone(),
                table.node.clone(),
            )
        })
    }
}

/// Load-time check of a CSV column's `col_format` (spec §4.3): Capillaries only finds these
/// mistakes when a batch reads the first cell; we report them before anything runs.
fn check_col_format(ty: Type, format: &str) -> Result<(), String> {
    match ty {
        Type::String | Type::Bool if !format.is_empty() => Err(format!(
            "a {ty} column must not have a col_format, got {format:?}"
        )),
        Type::DateTime if format.is_empty() => {
            Err("a datetime column needs a col_format with a Go time layout such as \"2006-01-02 15:04:05\"".to_string())
        }
        Type::Int if !format.is_empty() && !sscanf_verb_only(format, 'd') => Err(format!(
            "an int column's col_format must use the %d verb, got {format:?}"
        )),
        Type::Float | Type::Decimal2 if !format.is_empty() && !sscanf_verb_only(format, 'f') => {
            Err(format!(
                "a {ty} column's col_format must use a float verb such as %f, got {format:?}"
            ))
        }
        _ => Ok(()),
    }
}

/// True when `format` holds exactly one Sscanf verb and it is `%<verb>` (or, for floats, one
/// of Go's equivalent float verbs), other text being literal.
fn sscanf_verb_only(format: &str, verb: char) -> bool {
    let mut verbs = Vec::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c == '%' {
            match chars.next() {
                Some('%') => {}
                Some(v) => verbs.push(v),
                None => return false,
            }
        }
    }
    let accepted: &[char] = if verb == 'f' {
        &['f', 'F', 'e', 'E', 'g', 'G', 'v']
    } else {
        &['d', 'v']
    };
    verbs.len() == 1 && accepted.contains(&verbs[0])
}
