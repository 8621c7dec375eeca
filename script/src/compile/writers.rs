//! The writer side of a node: table writers (fields, indexes, distinct) and file writers (CSV
//! and Parquet columns, formats, templates; spec §3.8, §3.11).

use super::*;

impl Compiler<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn table_writer(
        &mut self,
        subject: &Subject,
        node_type: NodeType,
        w: &script::Writer,
        reader_fields: &[Field],
        lookup_fields: Option<&[Field]>,
        p_fields: Option<&[Field]>,
        grouped: bool,
        tables: &BTreeMap<String, DeclaredTable>,
        indexes: &BTreeMap<String, DeclaredIndex>,
    ) -> Option<TableWriter> {
        let mut ok = true;
        let Some(table) = tables.get(&w.name) else {
            // Name errors were reported when tables were declared.
            return None;
        };
        if w.fields.is_empty() {
            self.err(
                subject,
                "w.fields",
                "a table writer needs at least one field",
            );
            return None;
        }
        let mut aliases: Vec<(Alias, &[Field])> = vec![(Alias::R, reader_fields)];
        if let Some(l) = lookup_fields {
            aliases.push((Alias::L, l));
        }
        if let Some(p) = p_fields {
            aliases.push((Alias::P, p));
        }
        let sc = scope(&aliases, false);
        let agg = if grouped {
            AggPolicy::RootOnly
        } else {
            AggPolicy::Forbidden
        };
        let mut fields = Vec::new();
        for f in &table.fields {
            let Some(def) = w.fields.get(&f.name) else {
                continue;
            };
            let path = format!("w.fields.{}.expression", f.name);
            match self.typed_expr(subject, &path, &def.expression, &sc, f.ty, agg, true) {
                Some(expr) => fields.push(WriterField {
                    name: f.name.clone(),
                    ty: f.ty,
                    expr,
                    default_value: (!def.default_value.is_empty())
                        .then(|| def.default_value.clone()),
                }),
                None => ok = false,
            }
        }
        let having = if w.having.trim().is_empty() || node_type == NodeType::DistinctTable {
            None
        } else {
            let e = self.condition(subject, "w.having", &w.having, &[(Alias::W, &table.fields)]);
            ok &= e.is_some();
            e
        };
        let mut idx = BTreeMap::new();
        for iname in w.indexes.keys() {
            match indexes.get(iname).and_then(|i| i.def.clone()) {
                Some(d) => {
                    idx.insert(iname.clone(), d);
                }
                None => ok = false,
            }
        }
        ok.then(|| TableWriter {
            name: w.name.clone(),
            fields,
            having,
            indexes: idx,
            table_options: w.table_options.clone(),
        })
    }

    pub(super) fn file_writer(
        &mut self,
        subject: &Subject,
        w: &script::Writer,
        reader_fields: &[Field],
    ) -> Option<FileWriter> {
        let mut ok = true;
        if w.url_template.trim().is_empty() {
            self.err(
                subject,
                "w.url_template",
                "a file writer needs url_template",
            );
            ok = false;
        }
        let Some(first) = w.columns.first() else {
            self.err(
                subject,
                "w.columns",
                "a file writer needs at least one column",
            );
            return None;
        };
        let format = if !first.parquet.column_name.is_empty() {
            let codec = match w.parquet.codec.as_str() {
                "gzip" => Some(ParquetCodec::Gzip),
                "snappy" => Some(ParquetCodec::Snappy),
                "uncompressed" => Some(ParquetCodec::Uncompressed),
                other => {
                    self.err(
                        subject,
                        "w.parquet.codec",
                        format!(
                            "unknown Parquet codec {other:?}, expected gzip, snappy or uncompressed"
                        ),
                    );
                    None
                }
            };
            FileWriterFormat::Parquet {
                codec: codec.unwrap_or(ParquetCodec::Gzip),
            }
        } else if !first.csv.header.is_empty() {
            if w.csv.separator.is_empty() {
                self.err(subject, "w.csv.separator", "separator is empty");
                ok = false;
            }
            FileWriterFormat::Csv {
                separator: w.csv.separator.clone(),
            }
        } else {
            self.err(
                subject,
                "w.columns[0]",
                "cannot detect file writer type: the first column needs csv.header or parquet.column_name",
            );
            return None;
        };
        let parquet = matches!(format, FileWriterFormat::Parquet { .. });
        let sc = scope(&[(Alias::R, reader_fields)], false);
        let mut columns = Vec::new();
        let mut col_fields = Vec::new();
        let mut names = BTreeSet::new();
        for (i, c) in w.columns.iter().enumerate() {
            let path = format!("w.columns[{i}]");
            if c.name.is_empty() {
                self.err(subject, format!("{path}.name"), "column name is empty");
                ok = false;
            } else if !names.insert(c.name.clone()) {
                self.err(
                    subject,
                    format!("{path}.name"),
                    format!("duplicate column name {:?}", c.name),
                );
                ok = false;
            }
            let Some(ty) = Type::from_name(&c.field_type) else {
                self.err(subject, format!("{path}.type"), unknown_type(&c.field_type));
                ok = false;
                continue;
            };
            if parquet && c.parquet.column_name.is_empty() {
                self.err(
                    subject,
                    format!("{path}.parquet.column_name"),
                    "every column of a Parquet writer needs parquet.column_name",
                );
                ok = false;
            }
            if !parquet && c.csv.header.is_empty() {
                self.err(
                    subject,
                    format!("{path}.csv.header"),
                    "every column of a CSV writer needs csv.header",
                );
                ok = false;
            }
            // Quirk (spec §3.9, §5.10, #49): Capillaries accepts a root aggregate here and then
            // fails every batch; we reject it at load.
            let e = self.typed_expr(
                subject,
                &format!("{path}.expression"),
                &c.expression,
                &sc,
                ty,
                AggPolicy::Forbidden,
                true,
            );
            col_fields.push(Field {
                name: c.name.clone(),
                ty,
            });
            match e {
                Some(expr) => columns.push(FileColumn {
                    name: c.name.clone(),
                    ty,
                    expr,
                    header: c.csv.header.clone(),
                    format: c.csv.format.clone(),
                    parquet_column: c.parquet.column_name.clone(),
                }),
                None => ok = false,
            }
        }
        let having = if w.having.trim().is_empty() {
            None
        } else {
            let e = self.condition(subject, "w.having", &w.having, &[(Alias::W, &col_fields)]);
            ok &= e.is_some();
            e
        };
        let top = if w.top.order.trim().is_empty() {
            None
        } else {
            let limit = if w.top.limit <= 0 {
                MAX_TOP_LIMIT
            } else {
                w.top.limit
            };
            if limit > MAX_TOP_LIMIT {
                self.err(
                    subject,
                    "w.top.limit",
                    format!("must be at most {MAX_TOP_LIMIT}, got {limit}"),
                );
                ok = false;
            }
            match key::parse_order_expr(&w.top.order, &fields_of(&col_fields)) {
                Ok(order) => Some(Top {
                    order,
                    limit: limit as u64,
                }),
                Err(e) => {
                    self.err(subject, "w.top.order", format!("{:?}: {e}", w.top.order));
                    ok = false;
                    None
                }
            }
        };
        ok.then(|| FileWriter {
            url_template: w.url_template.clone(),
            format,
            columns,
            having,
            top,
        })
    }
}
