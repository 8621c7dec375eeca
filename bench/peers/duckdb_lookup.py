"""DuckDB peer of bench/pipelines/lookup: the four lookup flavours as SQL.

Usage: duckdb_lookup.py PARAMS.json --threads N
Reads the same params file as the Plexus run (orders_urls, items_urls, start_date, end_date,
default_*, dir_out) and writes the four CSV outputs into dir_out with Plexus' formatting.
"""
import argparse
import json
import os

import duckdb


TOP_LIMIT = 5_000_000


def sql_list(urls):
    return "[" + ",".join("'" + u.replace("'", "''") + "'" for u in urls) + "]"


def money(col):
    # Cents (BIGINT) -> text with exactly 2 decimals, as Plexus writes decimal2.
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
    out = p["dir_out"]
    os.makedirs(out, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"SET threads TO {a.threads}")
    con.execute("SET preserve_insertion_order = false")
    # Plexus reads prices with %f and rounds to cents; DECIMAL(18,2) rounds the same way.
    con.execute(
        f"""CREATE TABLE orders AS
        SELECT order_id, strptime(order_purchase_timestamp, '%Y-%m-%d %H:%M:%S') AS ts
        FROM read_csv({sql_list(p["orders_urls"])}, header=true, all_varchar=true)
        WHERE strptime(order_purchase_timestamp, '%Y-%m-%d %H:%M:%S')
            BETWEEN TIMESTAMP '{p["start_date"]}' AND TIMESTAMP '{p["end_date"]}'"""
    )
    con.execute(
        f"""CREATE TABLE items AS
        SELECT column0 AS order_id, CAST(column1 AS BIGINT) AS order_item_id,
               column2 AS product_id, column3 AS seller_id,
               strptime(column4, '%Y-%m-%d %H:%M:%S') AS shipping_limit_date,
               CAST(round(CAST(CAST(column5 AS DECIMAL(18,2)) + CAST(column6 AS DECIMAL(18,2)) AS DECIMAL(18,2)) * 100) AS BIGINT) AS value_cents
        FROM read_csv({sql_list(p["items_urls"])}, header=false, skip=1, all_varchar=true)"""
    )
    default_id = int(p["default_order_item_id"])
    default_cents = int(round(float(p["default_order_item_value"]) * 100))
    default_date = p["default_shipping_limit_date"][:19].replace("T", " ")
    ts = "strftime(o.ts, '%Y-%m-%d %H:%M:%S')"

    def copy(select, name, order):
        con.execute(
            # Capillaries' `top` keeps at most 5,000,000 rows per file when no limit is given.
            f"COPY ({select} ORDER BY {order} LIMIT {TOP_LIMIT}) TO '{out}/{name}.csv' (HEADER, DELIMITER ',', QUOTE '')"
        )

    copy(
        f"""SELECT o.order_id AS order_id, lpad(i.order_item_id::VARCHAR, 5, '0') AS order_item_id,
                   i.product_id AS product_id, i.seller_id AS seller_id,
                   strftime(i.shipping_limit_date, '%Y-%m-%d %H:%M:%S') AS shipping_limit_date,
                   {money('i.value_cents')} AS value
            FROM orders o JOIN items i ON i.order_id = o.order_id""",
        "order_item_date_inner",
        "1, 2",
    )
    copy(
        f"""SELECT o.order_id AS order_id,
                   lpad(coalesce(i.order_item_id, {default_id})::VARCHAR, 5, '0') AS order_item_id,
                   coalesce(i.product_id, '') AS product_id, coalesce(i.seller_id, '') AS seller_id,
                   coalesce(strftime(i.shipping_limit_date, '%Y-%m-%d %H:%M:%S'), '{default_date}') AS shipping_limit_date,
                   {money(f'coalesce(i.value_cents, {default_cents})')} AS value
            FROM orders o LEFT JOIN items i ON i.order_id = o.order_id""",
        "order_item_date_left_outer",
        "1, 2",
    )
    # Grouped: avg is the exact quotient rounded half away from zero to cents.
    grouped = f"""
        WITH g AS (
            SELECT o.order_id, o.ts, sum(i.value_cents) AS s, count(i.order_id) AS c,
                   min(i.value_cents) AS mn, max(i.value_cents) AS mx,
                   min(i.product_id) AS minp, max(i.product_id) AS maxp
            FROM orders o {{join}} items i ON i.order_id = o.order_id
            GROUP BY o.order_id, o.ts)
        SELECT lpad({money('coalesce(s, 0)')}, 10, ' ') AS total_value,
               {ts.replace('o.ts', 'g.ts')} AS order_purchase_timestamp, order_id,
               {money('CASE WHEN c = 0 THEN 0 WHEN s >= 0 THEN (2 * s + c) // (2 * c) ELSE -((-2 * s + c) // (2 * c)) END')} AS avg_value,
               {money('coalesce(mn, 0)')} AS min_value, {money('coalesce(mx, 0)')} AS max_value,
               coalesce(minp, '') AS min_product_id, coalesce(maxp, '') AS max_product_id,
               c AS item_count
        FROM g"""
    copy(grouped.format(join="JOIN"), "order_date_value_grouped_inner", "coalesce(s, 0) DESC, ts DESC, order_id DESC")
    copy(grouped.format(join="LEFT JOIN"), "order_date_value_grouped_left_outer", "coalesce(s, 0) DESC, ts DESC, order_id DESC")


if __name__ == "__main__":
    main()
