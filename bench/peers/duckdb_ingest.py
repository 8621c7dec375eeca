"""DuckDB peer of bench/pipelines/ingest: one large CSV file into a table with one index.

Usage: duckdb_ingest.py PARAMS.json --threads N
Reads the same params file as the Plexus run (items_urls, rows) and loads the file with
read_csv into a table of the same column types as the Plexus table, then builds a
(non-unique) index on seller_id, as Plexus writes idx_items_seller_id. Fails when the row
count differs from `rows`. The database lives in a file next to dir_out (an on-disk store,
as Plexus' embedded store is).
"""
import argparse
import json
import os

import duckdb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("params")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    with open(a.params) as f:
        p = json.load(f)
    out = p["dir_out"]
    os.makedirs(out, exist_ok=True)
    db = os.path.join(out, "ingest.duckdb")
    if os.path.exists(db):
        os.remove(db)
    con = duckdb.connect(db)
    con.execute(f"SET threads TO {a.threads}")
    urls = "[" + ",".join("'" + u.replace("'", "''") + "'" for u in p["items_urls"]) + "]"
    con.execute(
        f"""CREATE TABLE items AS SELECT * FROM read_csv({urls}, header=true, quote='"',
        escape='"', delim=',', columns={{
            'item_id': 'BIGINT', 'order_id': 'VARCHAR', 'seller_id': 'VARCHAR',
            'shipping_limit_date': 'TIMESTAMP', 'price': 'DECIMAL(18,2)',
            'freight_value': 'DECIMAL(18,2)', 'note': 'VARCHAR'}},
        timestampformat='%Y-%m-%d %H:%M:%S')"""
    )
    con.execute("CREATE INDEX idx_items_seller_id ON items (seller_id)")
    con.execute("CHECKPOINT")
    (n,) = con.execute("SELECT count(*) FROM items").fetchone()
    if n != p["rows"]:
        raise SystemExit(f"read {n} rows, expected {p['rows']}")
    print(f"duckdb: {n} rows into items with an index on seller_id")


if __name__ == "__main__":
    main()
