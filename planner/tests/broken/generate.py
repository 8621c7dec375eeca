# Generates planner/tests/broken/*: deliberately broken scripts and the message each must produce.
import json, copy, os, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
POLICY = {"p1": {"is_default": True, "event_priority_order": "run_is_current(desc), run_id(desc)",
          "rules": [{"cmd": "go", "expression": "nrs.run_is_current == true && nrs.node_status == wfmodel.NodeBatchSuccess"},
                    {"cmd": "wait", "expression": "nrs.node_status == wfmodel.NodeBatchNone"}]}}
BASE = {"nodes": {
  "read_items": {"type": "file_table", "r": {"urls": ["/tmp/in/items.csv"], "csv": {"hdr_line_idx": 0, "first_data_line_idx": 1},
      "columns": {"col_id": {"csv": {"col_hdr": "id"}, "col_type": "string"},
                  "col_qty": {"csv": {"col_hdr": "qty", "col_format": "%d"}, "col_type": "int"},
                  "col_price": {"csv": {"col_hdr": "price", "col_format": "%f"}, "col_type": "decimal2"},
                  "col_ts": {"csv": {"col_hdr": "ts", "col_format": "2006-01-02"}, "col_type": "datetime"}}},
      "w": {"name": "items", "fields": {"id": {"expression": "r.col_id", "type": "string"},
                                         "qty": {"expression": "r.col_qty", "type": "int"},
                                         "price": {"expression": "r.col_price", "type": "decimal2"},
                                         "ts": {"expression": "r.col_ts", "type": "datetime"}},
            "indexes": {"idx_items_id": "non_unique(id)"}}},
  "read_ids": {"type": "file_table", "r": {"urls": ["/tmp/in/ids.csv"], "csv": {"hdr_line_idx": -1, "first_data_line_idx": 0},
      "columns": {"col_id": {"csv": {"col_idx": 0}, "col_type": "string"}}},
      "w": {"name": "ids", "fields": {"id": {"expression": "r.col_id", "type": "string"}}}},
  "totals": {"type": "table_lookup_table", "r": {"table": "ids", "expected_batches_total": 2},
      "l": {"index_name": "idx_items_id", "join_on": "r.id", "join_type": "left", "group": True},
      "w": {"name": "totals", "fields": {"id": {"expression": "r.id", "type": "string"},
                                          "total": {"expression": "sum(l.price)", "type": "decimal2"},
                                          "n": {"expression": "count()", "type": "int"}}}},
  "file_totals": {"type": "table_file", "r": {"table": "totals"},
      "w": {"url_template": "/tmp/out/totals_{batch_idx}.csv", "top": {"order": "id(asc)"},
            "columns": [{"name": "id", "expression": "r.id", "type": "string", "csv": {"header": "id", "format": "%s"}},
                        {"name": "total", "expression": "r.total", "type": "decimal2", "csv": {"header": "total", "format": "%s"}}]}}},
  "dependency_policies": POLICY}
cases = []
def case(name, mutate, *expect, raw=None, ext="json"):
    fn = f"{len(cases)+1:02d}_{name}.{ext}"
    if raw is not None:
        text = raw
    else:
        s = copy.deepcopy(BASE); mutate(s); text = json.dumps(s, indent=1)
    open(os.path.join(out, fn), "w").write(text)
    cases.append((fn, expect))
N = lambda s: s["nodes"]
def setp(path, val):
    def m(s):
        o = s
        for k in path[:-1]: o = o[k]
        o[path[-1]] = val
    return m
def delp(path):
    def m(s):
        o = s
        for k in path[:-1]: o = o[k]
        del o[path[-1]]
    return m
case("bad_json", None, "01_bad_json.json", "line 2", raw='{"nodes": {\n  "a": {"type": "file_table",, }\n}}\n')
case("bad_yaml", None, "02_bad_yaml.yaml", "line", raw="nodes:\n  a:\n    type: [file_table\n", ext="yaml")
case("unknown_node_type", setp(["nodes","read_ids","type"], "file_tabel"), "node read_ids: type: unknown node type \"file_tabel\"")
case("missing_table", setp(["nodes","file_totals","r","table"], "totalz"), "node file_totals: r.table: cannot find the node that creates table \"totalz\"")
def cyc(s):
    N(s)["a"] = {"type": "table_table", "r": {"table": "b_t"}, "w": {"name": "a_t", "fields": {"x": {"expression": "r.x", "type": "int"}}}}
    N(s)["b"] = {"type": "table_table", "r": {"table": "a_t"}, "w": {"name": "b_t", "fields": {"x": {"expression": "r.x", "type": "int"}}}}
case("cycle", cyc, "dependency cycle", "a -> b -> a")
case("expr_syntax", setp(["nodes","totals","w","fields","id","expression"], "strings.ReplaceAll(r.id, \"a\", \"b\""), "node totals: w.fields.id.expression:", "1:34: missing ','")
case("type_mismatch", setp(["nodes","read_items","w","fields","price","expression"], "r.col_qty"), "node read_items: w.fields.price.expression:", "decimal2", "int")
case("int_into_float", setp(["nodes","read_items","w","fields","qty","type"], "float"), "node read_items: w.fields.qty.expression:", "float")
case("unknown_function", setp(["nodes","read_items","w","fields","id","expression"], "strings.ToLower(r.col_id)"), "node read_items: w.fields.id.expression:", "strings.ToLower")
case("wrong_arg_count", setp(["nodes","read_items","w","fields","id","expression"], "strings.ReplaceAll(r.col_id, \"a\")"), "node read_items: w.fields.id.expression:", "requires 3 args, 2 supplied")
case("unknown_field_prefix", setp(["nodes","read_items","w","fields","id","expression"], "q.col_id"), "node read_items: w.fields.id.expression:", "q.col_id")
case("unknown_field", setp(["nodes","read_items","w","fields","id","expression"], "r.col_idd"), "node read_items: w.fields.id.expression:", "unknown field r.col_idd")
case("bad_index_def", setp(["nodes","read_items","w","indexes","idx_items_id"], "non_unique(id(sideways))"), "node read_items: w.indexes.idx_items_id:", "sideways")
case("bad_index_kind", setp(["nodes","read_items","w","indexes","idx_items_id"], "primary(id)"), "node read_items: w.indexes.idx_items_id:", "primary")
case("index_unknown_field", setp(["nodes","read_items","w","indexes","idx_items_id"], "non_unique(sku)"), "node read_items: w.indexes.idx_items_id:", "sku")
case("bad_col_format_string", setp(["nodes","read_items","r","columns","col_id","csv","col_format"], "%s"), "node read_items: r.columns.col_id.csv.col_format:", "string")
case("datetime_without_format", delp(["nodes","read_items","r","columns","col_ts","csv","col_format"]), "node read_items: r.columns.col_ts.csv.col_format:", "datetime")
case("int_with_float_format", setp(["nodes","read_items","r","columns","col_qty","csv","col_format"], "%f"), "node read_items: r.columns.col_qty.csv.col_format:", "%f")
case("unresolved_param", setp(["nodes","read_items","r","urls"], ["{dir_in}/items.csv"]), "dir_in")
case("number_param_placement", setp(["nodes","totals","r","expected_batches_total"], "x{n|number}"), "extra characters")
case("unused_index", setp(["nodes","read_ids","w","indexes"], {"idx_ids_id": "unique(id)"}), "node read_ids: w.indexes.idx_ids_id:", "consider removing this index")
case("duplicate_table", setp(["nodes","read_ids","w","name"], "items"), "table \"items\"", "read_ids", "read_items")
case("index_name_is_table", lambda s: (N(s)["read_items"]["w"]["indexes"].update({"idx_x": "non_unique(id)"}), N(s)["read_ids"]["w"].update({"name": "idx_x"})), "node read_ids: w.name:")
case("bad_table_name", setp(["nodes","read_ids","w","name"], "wf_ids"), "node read_ids: w.name:", "wf_ids")
case("distinct_needs_fail_policy", lambda s: N(s).update({"uniq": {"type": "distinct_table", "r": {"table": "ids"}, "w": {"name": "uniq_ids", "fields": {"id": {"expression": "r.id", "type": "string"}}, "indexes": {"idx_uniq_ids": "unique(id)"}}}}), "node uniq: rerun_policy:", "fail")
case("no_default_policy", setp(["dependency_policies","p1","is_default"], False), "found 0 default policies, required 1")
case("join_on_count", setp(["nodes","totals","l","join_on"], "r.id, r.id"), "node totals: l.join_on:", "1")
case("join_on_type", lambda s: (N(s)["read_items"]["w"]["indexes"].update({"idx_items_id": "non_unique(qty)"})), "node totals: l.join_on:", "int")
case("aggregate_not_grouped", setp(["nodes","totals","l","group"], False), "node totals: w.fields.total.expression:", "agg")
case("aggregate_not_root", setp(["nodes","totals","w","fields","n","expression"], "count()+1"), "node totals: w.fields.n.expression:", "aggregate")
case("having_uses_reader", setp(["nodes","read_items","w","having"], "r.col_qty > 0"), "node read_items: w.having:", "r.col_qty")
case("file_writer_kind", lambda s: [c.pop("csv") for c in N(s)["file_totals"]["w"]["columns"]], "node file_totals: w.columns", "cannot detect")
case("top_limit", setp(["nodes","file_totals","w","top","limit"], 6000000), "node file_totals: w.top.limit:", "5000000")
case("batches_out_of_range", setp(["nodes","totals","r","expected_batches_total"], -3), "node totals: r.expected_batches_total:", "-3")
case("bad_start_policy", setp(["nodes","totals","start_policy"], "sometimes"), "node totals: start_policy:", "sometimes")
case("mixed_csv_addressing", setp(["nodes","read_items","r","columns","col_qty","csv"], {"col_idx": 1, "col_format": "%d"}), "node read_items: r.columns:", "col_hdr")
case("unknown_rule_cmd", setp(["dependency_policies","p1","rules",0,"cmd"], "maybe"), "policy p1: rules[0].cmd:", "maybe")
case("len_into_int", setp(["nodes","read_items","w","fields","qty","expression"], "len(r.col_id)"), "node read_items: w.fields.qty.expression:", "unexpected type int")
case("parse_dummy_string", setp(["nodes","read_items","w","fields","ts","expression"], "time.Parse(\"2006-01-02\", r.col_id)"), "node read_items: w.fields.ts.expression:", "12345")
case("unknown_join_type", setp(["nodes","totals","l","join_type"], "outer"), "node totals: l.join_type:", "outer")
case("unknown_lookup_index", setp(["nodes","totals","l","index_name"], "idx_nope"), "node totals: l.index_name:", "idx_nope")
case("wrong_json_type", setp(["nodes","totals","r","expected_batches_total"], "two"), "expected_batches_total", "string")
case("unknown_codec", lambda s: N(s)["file_totals"]["w"].update({"parquet": {"codec": "lz5"}}) or [c.update({"parquet": {"column_name": c["name"]}}) or c.pop("csv") for c in N(s)["file_totals"]["w"]["columns"]], "node file_totals: w.parquet.codec:", "lz5")
def many(s):
    N(s)["read_ids"]["type"] = "nope"
    N(s)["totals"]["w"]["fields"]["id"]["expression"] = "r.idd"
    N(s)["file_totals"]["w"]["top"]["limit"] = 99999999
case("many_errors_at_once", many, "node read_ids: type:", "node totals: w.fields.id.expression:", "node file_totals: w.top.limit:")
with open(os.path.join(out, "EXPECTED"), "w") as f:
    f.write("# <file>\\t<substring the error output must contain>; one line per expected substring\n")
    for fn, ex in cases:
        for e in ex:
            f.write(f"{fn}\t{e}\n")
print(len(cases), "cases")
