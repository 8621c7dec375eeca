"""Writes script.json of the portfolio-like pipeline (the period tag list is long, so it is
generated; edit this file, not script.json, and rerun `python3 make_script.py`)."""
import json

PERIODS = [str(y) for y in range(2000, 2031)] + ["All"]
CLASSES = ["All", "Energy", "Finance", "Health", "Tech"]

POLICY = {
    "current_active_first_stopped_nogo": {
        "is_default": True,
        "event_priority_order": "run_is_current(desc), run_id(desc)",
        "rules": [
            {"cmd": "go", "expression": "nrs.run_is_current == true && nrs.run_status == wfmodel.RunStart && nrs.node_status == wfmodel.NodeBatchSuccess"},
            {"cmd": "wait", "expression": "nrs.run_is_current == true && (nrs.run_status == wfmodel.RunStart || nrs.run_status == wfmodel.RunNone) && nrs.node_status == wfmodel.NodeBatchNone"},
            {"cmd": "wait", "expression": "nrs.run_is_current == true && (nrs.run_status == wfmodel.RunStart || nrs.run_status == wfmodel.RunNone) && nrs.node_status == wfmodel.NodeBatchStart"},
            {"cmd": "nogo", "expression": "nrs.run_is_current == true && nrs.run_status == wfmodel.RunStart && nrs.node_status == wfmodel.NodeBatchFail"},
            {"cmd": "go", "expression": "nrs.run_is_current == false && nrs.run_status == wfmodel.RunStart && nrs.node_status == wfmodel.NodeBatchSuccess"},
            {"cmd": "wait", "expression": "nrs.run_is_current == false && (nrs.run_status == wfmodel.RunStart || nrs.run_status == wfmodel.RunNone) && nrs.node_status == wfmodel.NodeBatchNone"},
            {"cmd": "wait", "expression": "nrs.run_is_current == false && (nrs.run_status == wfmodel.RunStart || nrs.run_status == wfmodel.RunNone) && nrs.node_status == wfmodel.NodeBatchStart"},
            {"cmd": "go", "expression": "nrs.run_is_current == false && nrs.run_status == wfmodel.RunComplete && nrs.node_status == wfmodel.NodeBatchSuccess"},
            {"cmd": "nogo", "expression": "nrs.run_is_current == false && nrs.run_status == wfmodel.RunComplete && nrs.node_status == wfmodel.NodeBatchFail"},
            {"cmd": "nogo", "expression": "nrs.run_is_current == false && nrs.run_status == wfmodel.RunStop"},
        ],
    }
}


def csv_col(hdr, typ, fmt=None):
    c = {"csv": {"col_hdr": hdr}, "col_type": typ}
    if fmt:
        c["csv"]["col_format"] = fmt
    return c


def field(expr, typ, default=None):
    f = {"expression": expr, "type": typ}
    if default is not None:
        f["default_value"] = default
    return f


def out_col(name, typ, fmt):
    return {"name": name, "expression": "r." + name, "type": typ, "csv": {"header": name, "format": fmt}}


CSV = {"hdr_line_idx": 0, "first_data_line_idx": 1}
PERF_COLUMNS = [
    out_col("account_id", "string", "%s"),
    out_col("period", "string", "%s"),
    out_col("cls", "string", "%s"),
    out_col("trades", "int", "%d"),
    out_col("net_cash", "decimal2", "%s"),
    out_col("realized_pnl", "decimal2", "%s"),
    out_col("eoy_qty", "int", "%d"),
]

nodes = {
    "1_read_accounts": {
        "type": "file_table",
        "desc": "Load accounts",
        "r": {"urls": "{accounts_urls|stringlist}", "csv": CSV, "columns": {
            "col_account_id": csv_col("account_id", "string"),
            "col_earliest_period_start": csv_col("earliest_period_start", "string"),
        }},
        "w": {"name": "accounts", "fields": {
            "account_id": field("r.col_account_id", "string"),
            "earliest_period_start": field("r.col_earliest_period_start", "string"),
        }},
    },
    "1_read_txns": {
        "type": "file_table",
        "desc": "Load txns of the period, each as one pipe-separated JSON string",
        "r": {"urls": "{txns_urls|stringlist}", "csv": CSV, "columns": {
            "col_ts": csv_col("ts", "string"),
            "col_account_id": csv_col("account_id", "string"),
            "col_ticker": csv_col("ticker", "string"),
            "col_qty": csv_col("qty", "int", "%d"),
            "col_price": csv_col("price", "decimal2", "%f"),
        }},
        "w": {
            "name": "txns",
            "having": "w.ts > \"{period_start_eod}\" && w.ts <= \"{period_end_eod}\"",
            "fields": {
                "ts": field("r.col_ts", "string"),
                "account_id": field("r.col_account_id", "string"),
                "txn_json": field("fmt.Sprintf(`\"%s|%s|%d|%s\"`, r.col_ts, r.col_ticker, r.col_qty, decimal2(r.col_price))", "string"),
            },
            "indexes": {"idx_txns_account_id": "non_unique(account_id)"},
        },
    },
    "1_read_holdings": {
        "type": "file_table",
        "desc": "Load holdings snapshots of the period",
        "r": {"urls": "{holdings_urls|stringlist}", "csv": CSV, "columns": {
            "col_d": csv_col("d", "string"),
            "col_account_id": csv_col("account_id", "string"),
            "col_ticker": csv_col("ticker", "string"),
            "col_qty": csv_col("qty", "int", "%d"),
        }},
        "w": {
            "name": "holdings",
            "having": "w.d > \"{period_start_eod}\" && w.d <= \"{period_end_eod}\"",
            "fields": {
                "d": field("r.col_d", "string"),
                "account_id": field("r.col_account_id", "string"),
                "holding_json": field("fmt.Sprintf(`\"%s|%s|%d\"`, r.col_d, r.col_ticker, r.col_qty)", "string"),
            },
            "indexes": {"idx_holdings_account_id": "non_unique(account_id)"},
        },
    },
    "2_account_txns_outer": {
        "type": "table_lookup_table",
        "desc": "All txns of an account in one string (grouped left lookup)",
        "r": {"table": "accounts", "expected_batches_total": "{lookup_batches|number}"},
        "l": {"index_name": "idx_txns_account_id", "join_on": "r.account_id", "group": True, "join_type": "left"},
        "w": {"name": "account_txns", "fields": {
            "account_id": field("r.account_id", "string"),
            "earliest_period_start": field("r.earliest_period_start", "string"),
            "txns_json": field("string_agg(l.txn_json, \",\")", "string"),
        }},
    },
    "2_account_holdings_outer": {
        "type": "table_lookup_table",
        "desc": "All holdings of an account in one string (grouped left lookup)",
        "r": {"table": "accounts", "expected_batches_total": "{lookup_batches|number}"},
        "l": {"index_name": "idx_holdings_account_id", "join_on": "r.account_id", "group": True, "join_type": "left"},
        "w": {
            "name": "account_holdings",
            "fields": {
                "account_id": field("r.account_id", "string"),
                "holdings_json": field("string_agg(l.holding_json, \",\")", "string"),
            },
            "indexes": {"idx_account_holdings_account_id": "unique(account_id)"},
        },
    },
    "3_build_account_activity": {
        "type": "table_lookup_table",
        "desc": "Join each account's txns and holdings (left lookup on a unique index)",
        "r": {"table": "account_txns", "expected_batches_total": "{lookup_batches|number}"},
        "l": {"index_name": "idx_account_holdings_account_id", "join_on": "r.account_id", "group": False, "join_type": "left"},
        "w": {"name": "account_activity", "fields": {
            "account_id": field("r.account_id", "string"),
            "earliest_period_start": field("r.earliest_period_start", "string"),
            "txns": field("\"[\" + r.txns_json + \"]\"", "string"),
            "holdings": field("\"[\" + l.holdings_json + \"]\"", "string", "[]"),
        }},
    },
    "4_calc_account_perf": {
        "type": "table_custom_tfm_table",
        "custom_proc_type": "py_calc",
        "desc": "Per account and year: trades, net invested cash, realised FIFO P&L, year-end quantity",
        "r": {"table": "account_activity", "expected_batches_total": "{calc_batches|number}", "rowset_size": 100},
        "p": {
            "python_code_urls": ["{dir_py}/portfolio_calc.py"],
            "calculated_fields": {
                "perf_json": {"expression": "account_perf(r.txns, r.holdings, r.earliest_period_start)", "type": "string"},
            },
        },
        "w": {"name": "account_perf", "fields": {
            "account_id": field("r.account_id", "string"),
            "perf_json": field("p.perf_json", "string"),
        }},
    },
    "5_tag_by_period": {
        "type": "table_custom_tfm_table",
        "custom_proc_type": "tag_and_denormalize",
        "desc": "One row per account and period that has figures",
        "r": {"table": "account_perf", "expected_batches_total": "{lookup_batches|number}"},
        "p": {"tag_field_name": "period", "tag_criteria": {
            p: "re.MatchString(`\"" + p + "_`, r.perf_json)" for p in PERIODS
        }},
        "w": {"name": "account_period_perf", "fields": {
            "account_id": field("r.account_id", "string"),
            "period": field("p.period", "string"),
            "perf_json": field("r.perf_json", "string"),
        }},
    },
    "6_tag_by_class": {
        "type": "table_custom_tfm_table",
        "custom_proc_type": "tag_and_denormalize",
        "desc": "One row per account, period and ticker class that has figures",
        "r": {"table": "account_period_perf", "expected_batches_total": "{lookup_batches|number}"},
        "p": {"tag_field_name": "cls", "tag_criteria": {
            c: "re.MatchString(r.period + \"_" + c + "\", r.perf_json)" for c in CLASSES
        }},
        "w": {"name": "account_period_class_perf_json", "fields": {
            "account_id": field("r.account_id", "string"),
            "period": field("r.period", "string"),
            "cls": field("p.cls", "string"),
            "perf_json": field("r.perf_json", "string"),
        }},
    },
    "7_perf_to_columns": {
        "type": "table_custom_tfm_table",
        "custom_proc_type": "py_calc",
        "desc": "Pick the figures of the row's period and class out of the JSON",
        "r": {"table": "account_period_class_perf_json", "expected_batches_total": "{calc_batches|number}", "rowset_size": 1000},
        "p": {
            "python_code_urls": ["{dir_py}/portfolio_calc.py"],
            "calculated_fields": {
                "trades": {"expression": "figure_int(r.perf_json, r.period, r.cls, \"trades\")", "type": "int"},
                "net_cash": {"expression": "figure_money(r.perf_json, r.period, r.cls, \"net_cash\")", "type": "decimal2"},
                "realized_pnl": {"expression": "figure_money(r.perf_json, r.period, r.cls, \"realized\")", "type": "decimal2"},
                "eoy_qty": {"expression": "figure_int(r.perf_json, r.period, r.cls, \"eoy_qty\")", "type": "int"},
            },
        },
        "w": {"name": "account_period_class_perf", "fields": {
            "account_id": field("r.account_id", "string"),
            "period": field("r.period", "string"),
            "cls": field("r.cls", "string"),
            "trades": field("p.trades", "int"),
            "net_cash": field("p.net_cash", "decimal2"),
            "realized_pnl": field("p.realized_pnl", "decimal2"),
            "eoy_qty": field("p.eoy_qty", "int"),
        }},
    },
    "8_file_account_period_class_perf": {
        "type": "table_file",
        "desc": "Every account, period and class, sorted",
        "r": {"table": "account_period_class_perf"},
        "w": {
            "top": {"order": "account_id,period,cls"},
            "url_template": "{dir_out}/account_period_class_perf.csv",
            "columns": PERF_COLUMNS,
        },
    },
    "8_file_account_year_perf": {
        "type": "table_file",
        "desc": "Yearly totals over all classes, sorted",
        "r": {"table": "account_period_class_perf"},
        "w": {
            "top": {"order": "account_id,period"},
            "having": "len(w.period) == 4 && w.cls == \"All\"",
            "url_template": "{dir_out}/account_year_perf.csv",
            "columns": PERF_COLUMNS,
        },
    },
}

with open("script.json", "w") as f:
    json.dump({"nodes": nodes, "dependency_policies": POLICY}, f, indent=2)
    f.write("\n")
