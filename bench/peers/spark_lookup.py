"""PySpark (local[N]) peer of bench/pipelines/lookup: the four lookup flavours in Spark SQL.

Usage: spark_lookup.py PARAMS.json --threads N
Same params file and outputs as duckdb_lookup.py. Results are collected to the driver and
written as one CSV per output, so the files look like Plexus' (Spark's own writer makes a
directory of part files).
"""
import argparse
import json
import os

from spark_common import spark_session, write_csv


TOP_LIMIT = 5_000_000


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
    spark = spark_session("plexus-bench-lookup", a.threads)
    spark.read.csv(p["orders_urls"], header=True).createOrReplaceTempView("orders_raw")
    spark.read.csv(p["items_urls"], header=True).createOrReplaceTempView("items_raw")
    spark.sql(
        f"""SELECT order_id, to_timestamp(order_purchase_timestamp, 'yyyy-MM-dd HH:mm:ss') AS ts
            FROM orders_raw
            WHERE to_timestamp(order_purchase_timestamp, 'yyyy-MM-dd HH:mm:ss')
                BETWEEN TIMESTAMP '{p["start_date"]}' AND TIMESTAMP '{p["end_date"]}'"""
    ).createOrReplaceTempView("orders")
    spark.sql(
        """SELECT order_id, CAST(order_item_id AS BIGINT) AS order_item_id, product_id, seller_id,
                  to_timestamp(shipping_limit_date, 'yyyy-MM-dd HH:mm:ss') AS shipping_limit_date,
                  CAST(round((CAST(price AS DECIMAL(18,2)) + CAST(freight_value AS DECIMAL(18,2))) * 100) AS BIGINT) AS value_cents
           FROM items_raw"""
    ).createOrReplaceTempView("items")
    default_id = int(p["default_order_item_id"])
    default_cents = int(round(float(p["default_order_item_value"]) * 100))
    default_date = p["default_shipping_limit_date"][:19].replace("T", " ")
    fmt_ts = "date_format({}, 'yyyy-MM-dd HH:mm:ss')"

    def save(select, name, order):
        # Capillaries' `top` keeps at most 5,000,000 rows per file when no limit is given.
        df = spark.sql(f"{select} ORDER BY {order} LIMIT {TOP_LIMIT}")
        write_csv(df, os.path.join(out, name + ".csv"))

    save(
        f"""SELECT o.order_id AS order_id, lpad(CAST(i.order_item_id AS STRING), 5, '0') AS order_item_id,
                   i.product_id AS product_id, i.seller_id AS seller_id,
                   {fmt_ts.format('i.shipping_limit_date')} AS shipping_limit_date,
                   {money('i.value_cents')} AS value
            FROM orders o JOIN items i ON i.order_id = o.order_id""",
        "order_item_date_inner",
        "1, 2",
    )
    save(
        f"""SELECT o.order_id AS order_id,
                   lpad(CAST(coalesce(i.order_item_id, {default_id}) AS STRING), 5, '0') AS order_item_id,
                   coalesce(i.product_id, '') AS product_id, coalesce(i.seller_id, '') AS seller_id,
                   coalesce({fmt_ts.format('i.shipping_limit_date')}, '{default_date}') AS shipping_limit_date,
                   {money(f'coalesce(i.value_cents, {default_cents})')} AS value
            FROM orders o LEFT JOIN items i ON i.order_id = o.order_id""",
        "order_item_date_left_outer",
        "1, 2",
    )
    avg = "CASE WHEN c = 0 THEN 0 WHEN s >= 0 THEN (2 * s + c) DIV (2 * c) ELSE -((-2 * s + c) DIV (2 * c)) END"
    for join, name in (("JOIN", "order_date_value_grouped_inner"), ("LEFT JOIN", "order_date_value_grouped_left_outer")):
        save(
            f"""WITH g AS (
                    SELECT o.order_id, o.ts, coalesce(sum(i.value_cents), 0) AS s, count(i.order_id) AS c,
                           min(i.value_cents) AS mn, max(i.value_cents) AS mx,
                           min(i.product_id) AS minp, max(i.product_id) AS maxp
                    FROM orders o {join} items i ON i.order_id = o.order_id
                    GROUP BY o.order_id, o.ts)
                SELECT lpad({money('s')}, 10, ' ') AS total_value,
                       {fmt_ts.format('ts')} AS order_purchase_timestamp, order_id,
                       {money(avg)} AS avg_value,
                       {money('coalesce(mn, 0)')} AS min_value, {money('coalesce(mx, 0)')} AS max_value,
                       coalesce(minp, '') AS min_product_id, coalesce(maxp, '') AS max_product_id,
                       c AS item_count
                FROM g""",
            name,
            "s DESC, ts DESC, order_id DESC",
        )
    spark.stop()


if __name__ == "__main__":
    main()
