#!/usr/bin/env bash
# Creates bench/.venv with the peer engines (DuckDB, PySpark) used by `plexus-bench run --peers`.
# PySpark needs a Java 17+ runtime on PATH (`java -version`); DuckDB needs nothing else.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${PLEXUS_BENCH_VENV:-$here/.venv}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --upgrade pip
# pandas and pyarrow: DuckDB's and Spark's Python UDFs run vectorised through Arrow.
"$venv/bin/pip" install --quiet duckdb pyspark pandas pyarrow
if ! java -version >/dev/null 2>&1; then
    echo "warning: no java on PATH; the spark peer will not run" >&2
fi
"$venv/bin/python" -c 'import duckdb, pyspark; print("duckdb", duckdb.__version__, "pyspark", pyspark.__version__)'
