//! One script node → one plan node: its type, reader, processor and writer put together
//! (spec §3.2–§3.12), each checked in its own file beside this one.

use super::*;

impl Compiler<'_> {
    pub(super) fn plan_node(
        &mut self,
        name: &str,
        node: &script::Node,
        tables: &BTreeMap<String, DeclaredTable>,
        indexes: &BTreeMap<String, DeclaredIndex>,
        policies: &BTreeMap<String, DependencyPolicy>,
    ) -> Option<PlanNode> {
        let subject = Subject::Node(name.to_string());
        let node_type = NodeType::from_name(&node.node_type);
        if node_type.is_none() {
            self.err(
                &subject,
                "type",
                format!(
                    "unknown node type {:?}, expected one of file_table, table_table, table_lookup_table, distinct_table, table_file, table_custom_tfm_table",
                    node.node_type
                ),
            );
        }
        let start_policy = match node.start_policy.as_str() {
            "auto" => Some(StartPolicy::Auto),
            "manual" => Some(StartPolicy::Manual),
            other => {
                self.err(
                    &subject,
                    "start_policy",
                    format!("unknown start policy {other:?}, expected auto or manual"),
                );
                None
            }
        };
        let rerun_policy = match node.rerun_policy.as_str() {
            "rerun" => Some(RerunPolicy::Rerun),
            "fail" => Some(RerunPolicy::Fail),
            other => {
                self.err(
                    &subject,
                    "rerun_policy",
                    format!("unknown rerun policy {other:?}, expected rerun or fail"),
                );
                None
            }
        };
        if node.max_batch_processing_time <= 0 {
            self.err(
                &subject,
                "max_batch_processing_time",
                format!(
                    "must be a positive number of milliseconds, got {}",
                    node.max_batch_processing_time
                ),
            );
        }
        let node_type = node_type?;

        // Reader.
        let Some(r) = &node.r else {
            self.err(&subject, "r", "reader section is missing");
            return None;
        };
        let (reader, reader_fields, batches, mut depends_on) = if node_type == NodeType::FileTable {
            let (fr, fields) = self.file_reader(&subject, r)?;
            let n = fr.urls.len() as u32;
            (Reader::File(fr), fields, n, BTreeSet::new())
        } else {
            let (tr, fields, creator) = self.table_reader(&subject, r, tables)?;
            let n = tr.expected_batches_total;
            (Reader::Table(tr), fields, n, BTreeSet::from([creator]))
        };

        // Dependency policy: only nodes that read a table have one (spec §3.4).
        let dependency_policy = if node_type == NodeType::FileTable {
            None
        } else if node.dependency_policy.is_empty() {
            self.loaded
                .script
                .dependency_policies
                .iter()
                .find(|(_, p)| p.is_default)
                .map(|(n, _)| n.clone())
        } else if policies.contains_key(&node.dependency_policy)
            || self
                .loaded
                .script
                .dependency_policies
                .contains_key(&node.dependency_policy)
        {
            Some(node.dependency_policy.clone())
        } else {
            self.err(
                &subject,
                "dependency_policy",
                format!("unknown dependency policy {:?}", node.dependency_policy),
            );
            None
        };

        // Lookup.
        let mut lookup = None;
        let mut lookup_fields: Vec<Field> = Vec::new();
        if node_type == NodeType::TableLookupTable {
            match &node.l {
                None => self.err(&subject, "l", "table_lookup_table needs a lookup section"),
                Some(l) => {
                    if let Some((lk, fields, creator)) =
                        self.lookup(&subject, l, &reader_fields, tables, indexes)
                    {
                        depends_on.insert(creator);
                        lookup_fields = fields;
                        lookup = Some(lk);
                    }
                }
            }
        }

        // Processor.
        let mut processor = None;
        let mut p_fields: Vec<Field> = Vec::new();
        if node_type == NodeType::TableCustomTfmTable {
            match &node.p {
                None => self.err(&subject, "p", "table_custom_tfm_table needs a p section"),
                Some(p) => {
                    if let Some((proc_, fields)) =
                        self.processor(&subject, name, node, p, &reader_fields)
                    {
                        p_fields = fields;
                        processor = Some(proc_);
                    }
                }
            }
        }

        // Writer.
        let Some(w) = &node.w else {
            self.err(&subject, "w", "writer section is missing");
            return None;
        };
        let writer = if node_type == NodeType::TableFile {
            Writer::File(self.file_writer(&subject, w, &reader_fields)?)
        } else {
            let grouped = lookup.as_ref().is_some_and(|l: &Lookup| l.group);
            let tw = self.table_writer(
                &subject,
                node_type,
                w,
                &reader_fields,
                lookup.as_ref().map(|_| lookup_fields.as_slice()),
                processor.as_ref().map(|_| p_fields.as_slice()),
                grouped,
                tables,
                indexes,
            )?;
            if node_type == NodeType::DistinctTable {
                if rerun_policy != Some(RerunPolicy::Fail) {
                    self.err(
                        &subject,
                        "rerun_policy",
                        "distinct_table requires rerun_policy \"fail\"",
                    );
                }
                let uniques = tw
                    .indexes
                    .values()
                    .filter(|d| d.kind == IndexKind::Unique)
                    .count();
                if uniques != 1 {
                    self.err(
                        &subject,
                        "w.indexes",
                        format!("distinct_table needs exactly one unique index, found {uniques}"),
                    );
                }
                if !w.having.trim().is_empty() {
                    self.err(
                        &subject,
                        "w.having",
                        "distinct_table is not allowed to have a having condition",
                    );
                }
            }
            Writer::Table(tw)
        };

        Some(PlanNode {
            name: name.to_string(),
            node_type,
            desc: node.desc.clone(),
            start_policy: start_policy?,
            rerun_policy: rerun_policy?,
            max_batch_processing_time_ms: node.max_batch_processing_time,
            dependency_policy,
            depends_on: depends_on.into_iter().collect(),
            batches,
            reader,
            lookup,
            processor,
            writer,
        })
    }

    pub(super) fn processor(
        &mut self,
        subject: &Subject,
        name: &str,
        node: &script::Node,
        p: &script::Processor,
        reader_fields: &[Field],
    ) -> Option<(Processor, Vec<Field>)> {
        match node.custom_proc_type.as_str() {
            "py_calc" => {
                let code = self
                    .loaded
                    .python_code
                    .get(name)
                    .cloned()
                    .unwrap_or_default();
                if p.python_code_urls.is_empty() {
                    self.err(
                        subject,
                        "p.python_code_urls",
                        "py_calc needs at least one Python file",
                    );
                }
                match py_calc_check::check(p, &code, reader_fields) {
                    Ok(fields) => {
                        let out: Vec<Field> = fields
                            .iter()
                            .map(|f| Field {
                                name: f.name.clone(),
                                ty: f.ty,
                            })
                            .collect();
                        Some((
                            Processor::PyCalc(PyCalc {
                                code_urls: p.python_code_urls.clone(),
                                code,
                                code_lines: self
                                    .loaded
                                    .python_code_lines
                                    .get(name)
                                    .cloned()
                                    .unwrap_or_default(),
                                fields,
                            }),
                            out,
                        ))
                    }
                    Err(errs) => {
                        for (path, msg) in errs {
                            self.err(subject, path, msg);
                        }
                        None
                    }
                }
            }
            "tag_and_denormalize" => {
                let inline = !p.tag_criteria.is_empty();
                let url = !p.tag_criteria_url.is_empty();
                if inline && url {
                    self.err(
                        subject,
                        "p.tag_criteria",
                        "give either tag_criteria or tag_criteria_url, not both",
                    );
                    return None;
                }
                let criteria_src = if url {
                    self.loaded
                        .tag_criteria
                        .get(name)
                        .cloned()
                        .unwrap_or_default()
                } else {
                    p.tag_criteria.clone()
                };
                if criteria_src.is_empty() {
                    self.err(
                        subject,
                        "p.tag_criteria",
                        "tag_and_denormalize needs tag_criteria or tag_criteria_url with at least one tag",
                    );
                    return None;
                }
                if p.tag_field_name.is_empty() {
                    self.err(subject, "p.tag_field_name", "tag field name is empty");
                    return None;
                }
                let sc = scope(&[(Alias::R, reader_fields)], false);
                let mut criteria = Vec::new();
                let mut ok = true;
                for (tag, src) in &criteria_src {
                    let path = format!("p.tag_criteria.{tag}");
                    if src.trim().is_empty() {
                        self.err(subject, &path, "criterion is empty");
                        ok = false;
                        continue;
                    }
                    match self.parsed(subject, &path, src, &sc) {
                        Some(ast) => criteria.push((
                            tag.clone(),
                            PlanExpr {
                                src: src.clone(),
                                ast,
                            },
                        )),
                        None => ok = false,
                    }
                }
                let fields = vec![Field {
                    name: p.tag_field_name.clone(),
                    ty: Type::String,
                }];
                ok.then(|| {
                    (
                        Processor::TagAndDenormalize(TagAndDenormalize {
                            tag_field: p.tag_field_name.clone(),
                            criteria,
                        }),
                        fields,
                    )
                })
            }
            other => {
                self.err(
                    subject,
                    "custom_proc_type",
                    format!("unknown custom processor type {other:?}, expected py_calc or tag_and_denormalize"),
                );
                None
            }
        }
    }
}
