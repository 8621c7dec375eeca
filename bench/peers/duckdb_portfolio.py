"""DuckDB peer of bench/pipelines/portfolio-like.

Usage: duckdb_portfolio.py PARAMS.json --threads N
Same params file as the Plexus run. The per-account strings are built with string_agg like the
script does, and the formulas of the pipeline's portfolio_calc.py run as Python UDFs; the two
tag_and_denormalize steps become an unnest over the figure keys.
"""
import argparse
import importlib.util
import json
import os

import duckdb
try:
    from duckdb.sqltypes import BIGINT, VARCHAR
except ImportError:  # duckdb < 1.4
    from duckdb.typing import BIGINT, VARCHAR

# The script's tag lists (bench/pipelines/portfolio-like/make_script.py).
PERIODS = [str(y) for y in range(2000, 2031)] + ["All"]
CLASSES = ["All", "Energy", "Finance", "Health", "Tech"]


def load_calc(dir_py):
    spec = importlib.util.spec_from_file_location("portfolio_calc", os.path.join(dir_py, "portfolio_calc.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sql_list(urls):
    return "[" + ",".join("'" + u.replace("'", "''") + "'" for u in urls) + "]"


def money(col):
    return (
        f"(CASE WHEN {col} < 0 THEN '-' ELSE '' END) || (abs({col}) // 100)::VARCHAR || '.' "
        f"|| lpad((abs({col}) % 100)::VARCHAR, 2, '0')"
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("params")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    with open(a.params) as f:
        p = json.load(f)
    calc = load_calc(p["dir_py"])
    out = p["dir_out"]
    os.makedirs(out, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"SET threads TO {a.threads}")

    def keys(perf):
        # The tag criteria of the script, as key membership.
        d = json.loads(perf)
        return [k for k in d if k.split("_", 1)[0] in PERIODS and k.split("_", 1)[1] in CLASSES]

    con.create_function("account_perf", calc.account_perf, [VARCHAR, VARCHAR, VARCHAR], VARCHAR)
    con.create_function("perf_keys", keys, [VARCHAR], duckdb.list_type(VARCHAR))
    con.create_function("figure_int", calc.figure_int, [VARCHAR, VARCHAR, VARCHAR, VARCHAR], BIGINT)
    start, end = p["period_start_eod"], p["period_end_eod"]
    con.execute(
        f"""CREATE TABLE accounts AS SELECT account_id, earliest_period_start
            FROM read_csv({sql_list(p["accounts_urls"])}, header=true, all_varchar=true)"""
    )
    # Prices: Plexus reads them with %f into decimal2 and prints the canonical text; the
    # formula parses them back to cents, so any exact 2-decimal text gives the same figures.
    con.execute(
        f"""CREATE TABLE account_txns AS
            SELECT account_id, '[' || string_agg('"' || ts || '|' || ticker || '|' || CAST(qty AS BIGINT)::VARCHAR || '|'
                   || CAST(price AS DECIMAL(18,2))::VARCHAR || '"', ',') || ']' AS txns
            FROM read_csv({sql_list(p["txns_urls"])}, header=true, all_varchar=true)
            WHERE ts > '{start}' AND ts <= '{end}'
            GROUP BY account_id"""
    )
    con.execute(
        f"""CREATE TABLE account_holdings AS
            SELECT account_id, '[' || string_agg('"' || d || '|' || ticker || '|' || CAST(qty AS BIGINT)::VARCHAR || '"', ',') || ']' AS holdings
            FROM read_csv({sql_list(p["holdings_urls"])}, header=true, all_varchar=true)
            WHERE d > '{start}' AND d <= '{end}'
            GROUP BY account_id"""
    )
    con.execute(
        """CREATE TABLE perf AS
           SELECT a.account_id, account_perf(coalesce(t.txns, '[]'), coalesce(h.holdings, '[]'), a.earliest_period_start) AS perf_json
           FROM accounts a LEFT JOIN account_txns t USING (account_id) LEFT JOIN account_holdings h USING (account_id)"""
    )
    con.execute(
        f"""CREATE TABLE figures AS
            WITH k AS (SELECT account_id, perf_json, unnest(perf_keys(perf_json)) AS key FROM perf),
            pc AS (SELECT account_id, perf_json, split_part(key, '_', 1) AS period, split_part(key, '_', 2) AS cls FROM k)
            SELECT account_id, period, cls,
                   figure_int(perf_json, period, cls, 'trades') AS trades,
                   {money("figure_int(perf_json, period, cls, 'net_cash')")} AS net_cash,
                   {money("figure_int(perf_json, period, cls, 'realized')")} AS realized_pnl,
                   figure_int(perf_json, period, cls, 'eoy_qty') AS eoy_qty
            FROM pc"""
    )
    opts = "(HEADER, DELIMITER ',', QUOTE '')"
    con.execute(f"COPY (SELECT * FROM figures ORDER BY account_id, period, cls) TO '{out}/account_period_class_perf.csv' {opts}")
    con.execute(
        f"""COPY (SELECT * FROM figures WHERE length(period) = 4 AND cls = 'All' ORDER BY account_id, period)
            TO '{out}/account_year_perf.csv' {opts}"""
    )


if __name__ == "__main__":
    main()
