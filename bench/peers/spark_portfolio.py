"""PySpark (local[N]) peer of bench/pipelines/portfolio-like.

Usage: spark_portfolio.py PARAMS.json --threads N
Same steps as duckdb_portfolio.py: string aggregation per account in Spark SQL, the formulas of
portfolio_calc.py as Python UDFs, the tag steps as an explode over the figure keys.
"""
import argparse
import json
import os
import sys

from pyspark.sql.types import ArrayType, LongType, StringType

from spark_common import spark_session, write_csv

PERIODS = [str(y) for y in range(2000, 2031)] + ["All"]
CLASSES = ["All", "Energy", "Finance", "Health", "Tech"]


def money(col):
    return (
        f"concat(CASE WHEN {col} < 0 THEN '-' ELSE '' END, CAST(abs({col}) DIV 100 AS STRING), '.', "
        f"lpad(CAST(abs({col}) % 100 AS STRING), 2, '0'))"
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("params")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    with open(a.params) as f:
        p = json.load(f)
    out = p["dir_out"]
    os.makedirs(out, exist_ok=True)
    dir_py = os.path.abspath(p["dir_py"])
    sys.path.insert(0, dir_py)
    import portfolio_calc as calc  # noqa: E402  (the pipeline's own formula file)

    spark = spark_session("plexus-bench-portfolio", a.threads)
    # Ship the formula file to the Python workers.
    spark.sparkContext.addPyFile(os.path.join(dir_py, "portfolio_calc.py"))

    def keys(perf):
        d = json.loads(perf)
        return [k for k in d if k.split("_", 1)[0] in PERIODS and k.split("_", 1)[1] in CLASSES]

    spark.udf.register("account_perf", calc.account_perf, StringType())
    spark.udf.register("perf_keys", keys, ArrayType(StringType()))
    spark.udf.register("figure_int", calc.figure_int, LongType())
    start, end = p["period_start_eod"], p["period_end_eod"]
    spark.read.csv(p["accounts_urls"], header=True).createOrReplaceTempView("accounts")
    spark.read.csv(p["txns_urls"], header=True).createOrReplaceTempView("txns_raw")
    spark.read.csv(p["holdings_urls"], header=True).createOrReplaceTempView("holdings_raw")
    spark.sql(
        f"""SELECT account_id, concat('[', concat_ws(',', collect_list(concat('"', ts, '|', ticker, '|',
                   CAST(CAST(qty AS BIGINT) AS STRING), '|', CAST(CAST(price AS DECIMAL(18,2)) AS STRING), '"'))), ']') AS txns
            FROM txns_raw WHERE ts > '{start}' AND ts <= '{end}' GROUP BY account_id"""
    ).createOrReplaceTempView("account_txns")
    spark.sql(
        f"""SELECT account_id, concat('[', concat_ws(',', collect_list(concat('"', d, '|', ticker, '|',
                   CAST(CAST(qty AS BIGINT) AS STRING), '"'))), ']') AS holdings
            FROM holdings_raw WHERE d > '{start}' AND d <= '{end}' GROUP BY account_id"""
    ).createOrReplaceTempView("account_holdings")
    spark.sql(
        """SELECT a.account_id, account_perf(coalesce(t.txns, '[]'), coalesce(h.holdings, '[]'), a.earliest_period_start) AS perf_json
           FROM accounts a LEFT JOIN account_txns t ON t.account_id = a.account_id
           LEFT JOIN account_holdings h ON h.account_id = a.account_id"""
    ).createOrReplaceTempView("perf")
    spark.sql(
        f"""WITH k AS (SELECT account_id, perf_json, explode(perf_keys(perf_json)) AS key FROM perf),
            pc AS (SELECT account_id, perf_json, split_part(key, '_', 1) AS period, split_part(key, '_', 2) AS cls FROM k)
            SELECT account_id, period, cls,
                   figure_int(perf_json, period, cls, 'trades') AS trades,
                   {money("figure_int(perf_json, period, cls, 'net_cash')")} AS net_cash,
                   {money("figure_int(perf_json, period, cls, 'realized')")} AS realized_pnl,
                   figure_int(perf_json, period, cls, 'eoy_qty') AS eoy_qty
            FROM pc"""
    ).cache().createOrReplaceTempView("figures")
    write_csv(
        spark.sql("SELECT * FROM figures ORDER BY account_id, period, cls"),
        os.path.join(out, "account_period_class_perf.csv"),
    )
    write_csv(
        spark.sql("SELECT * FROM figures WHERE length(period) = 4 AND cls = 'All' ORDER BY account_id, period"),
        os.path.join(out, "account_year_perf.csv"),
    )
    spark.stop()


if __name__ == "__main__":
    main()
