"""Shared set-up of the PySpark peers: a local[N] session tuned for one small machine."""
import csv

from pyspark.sql import SparkSession


def spark_session(name, threads):
    return (
        SparkSession.builder.master(f"local[{threads}]")
        .appName(name)
        # Small data, few cores: the default 200 shuffle partitions only add scheduling overhead.
        .config("spark.sql.shuffle.partitions", str(max(2, threads * 2)))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )


def write_csv(df, path):
    """Writes a DataFrame of strings/ints as one CSV file: header, then rows in df order."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
        w.writerow(df.columns)
        for row in df.toLocalIterator():
            w.writerow(["" if v is None else v for v in row])
