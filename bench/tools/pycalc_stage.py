"""The portfolio-like py_calc stage outside the engine, over a `plexus-bench gen portfolio`
directory: what the formula costs, what its input order costs, and what Plexus's worker adds.

`account_perf` (bench/pipelines/portfolio-like/portfolio_calc.py) gets each account's
transactions and holdings as the script's `string_agg` builds them. Modes:

  order GEN_DIR [ROUNDS] [SEED]
      The formula in this process over the same accounts, its inputs in file order (what a
      scan-order aggregate such as DuckDB's gives: the generator writes each account's
      transactions by day) and in a random order (what Plexus's and Capillaries' matches in
      rowid order give), alternating rounds; means and the ratio. The figures must be equal.
  driver GEN_DIR [WORKERS] [VARIANT]
      Plexus's worker (node/src/pycalc/driver.py, run as `python -c` like the engine does) fed
      chunks of 100 accounts encoded as `PyProgram::chunk` encodes them (inputs in file order),
      on WORKERS workers at once; the workers' CPU seconds. VARIANT `gc-off`
      disables the collector first, `no-threads` drops the driver's two watcher threads,
      `no-formula` loads a formula that returns at once (the worker's own cost alone).
  bare GEN_DIR
      The formula in a bare loop over the same inputs (file order), for the driver's baseline.

CPU seconds, not wall: compare modes in the same session, on a quiet machine.
"""
import csv
import json
import os
import random
import resource
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FORMULA = os.path.join(HERE, "..", "pipelines", "portfolio-like", "portfolio_calc.py")
DRIVER = os.path.join(HERE, "..", "..", "node", "src", "pycalc", "driver.py")
sys.path.insert(0, os.path.dirname(FORMULA))
import portfolio_calc  # noqa: E402

# The py_calc function Plexus generates for the script's one calculated field.
CALC_NAME = "__plexus_calc_0123456789abcdef"
CALC = (
    "def %s(__plexus_i):\n  global p_perf_json\n  try:\n"
    "    p_perf_json = account_perf(r_txns, r_holdings, r_earliest_period_start)\n"
    '    __plexus_row_ok(__plexus_i, {"perf_json":p_perf_json})\n  except:\n'
    "    __plexus_row_fail(__plexus_i, 1)\n" % CALC_NAME
)


def read(path, fmt, cols):
    by_account = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            by_account.setdefault(r["account_id"], []).append(fmt % tuple(c(r) for c in cols))
    return by_account


def inputs(gen_dir):
    """(account, start, txn items, holding items) per account, items in file order."""
    with open(os.path.join(gen_dir, "accounts.csv"), newline="") as f:
        start = {r["account_id"]: r["earliest_period_start"] for r in csv.DictReader(f)}
    txns = read(
        os.path.join(gen_dir, "txns.csv"),
        '"%s|%s|%d|%.2f"',
        [lambda r: r["ts"], lambda r: r["ticker"], lambda r: int(r["qty"]), lambda r: float(r["price"])],
    )
    holdings = read(
        os.path.join(gen_dir, "holdings.csv"),
        '"%s|%s|%d"',
        [lambda r: r["d"], lambda r: r["ticker"], lambda r: int(r["qty"])],
    )
    return [(a, start[a], txns.get(a, []), holdings.get(a, [])) for a in sorted(start)]


def agg(items, rnd=None):
    # The literal the script builds: '[' + string_agg('"…"', ',') + ']'.
    items = list(items)
    if rnd is not None:
        rnd.shuffle(items)
    return "[" + ",".join(items) + "]"


def cpu():
    t = os.times()
    return t.user + t.system


def order(gen_dir, rounds=6, seed=1):
    print("seed %d (replay: pycalc_stage.py order %s %d %d)" % (seed, gen_dir, rounds, seed))
    accounts = inputs(gen_dir)
    rnd = random.Random(seed)
    by_order = {
        "file": [(a, s, agg(t), agg(h)) for a, s, t, h in accounts],
        "random": [(a, s, agg(t, rnd), agg(h, rnd)) for a, s, t, h in accounts],
    }
    figures, seconds = {}, {name: [] for name in by_order}
    for _ in range(rounds):
        for name, rows in by_order.items():
            before = cpu()
            out = [portfolio_calc.account_perf(t, h, s) for _, s, t, h in rows]
            seconds[name].append(cpu() - before)
            print("%s order: %d accounts, %.2f CPU-s" % (name, len(out), seconds[name][-1]), flush=True)
            if figures.setdefault(name, out) != out:
                sys.exit("the formula gave different figures in two rounds of %s order" % name)
    if figures["file"] != figures["random"]:
        sys.exit("the figures depend on the input order")
    mean = {name: sum(s) / len(s) for name, s in seconds.items()}
    print("mean CPU-s: file order %.2f, random order %.2f, random/file %.3f (same figures)"
          % (mean["file"], mean["random"], mean["random"] / mean["file"]))


READERS = ["account_id", "txns", "holdings", "earliest_period_start"]


def request(rows, code):
    """The request frame `PyProgram::chunk` and `RunRequest::frame` build: every value of these
    inputs is a string Python reads back unchanged, so every row travels as data."""
    items, texts = [], bytearray()
    for a, s, t, h in rows:
        item = []
        for value in (a, t, h, s):
            if any(c in value for c in "\\\n\r\0"):
                sys.exit("a value that would travel as a program: %r" % value[:80])
            b = value.encode("utf-8")
            texts += b
            item.append([len(b)])
        items.append(item)
    header = {"hash": "portfolio", "calc_name": CALC_NAME, "calc": CALC, "readers": READERS,
              "deadline_s": 0}
    if code is not None:
        header["code"] = code
    sections = [json.dumps(header).encode(), json.dumps(items).encode(), bytes(texts)]
    return b"".join(struct.pack(">I", len(x)) for x in sections) + b"".join(sections)


def worker(chunks, variant, replies):
    with open(FORMULA) as f:
        code = f.read()
    with open(DRIVER) as f:
        driver = f.read()
    if variant == "gc-off":
        driver = "import gc\ngc.disable()\n" + driver
    elif variant == "no-formula":
        # What the worker adds alone: the same requests and answers around a formula that
        # does nothing.
        code = "def account_perf(txns, holdings, start):\n    return ''\n"
    elif variant == "no-threads":
        for start in ("threading.Thread(target=_watch_parent, args=(_PARENT,), daemon=True).start()",
                      "threading.Thread(target=_watchdog, daemon=True).start()"):
            if start not in driver:
                sys.exit("driver.py changed: cannot drop %r" % start)
            driver = driver.replace(start, "")
    p = subprocess.Popen([sys.executable, "-c", driver], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        def reply():
            head = p.stdout.read(4)
            if len(head) != 4:
                sys.exit("the worker ended early")
            return json.loads(p.stdout.read(struct.unpack(">I", head)[0]))

        if reply().get("status") != "hello":
            sys.exit("the worker did not say hello")
        for i, rows in enumerate(chunks):
            p.stdin.write(request(rows, code if i == 0 else None))
            p.stdin.flush()
            r = reply()
            if r.get("status") != "ok":
                sys.exit("chunk %d: %r" % (i, r))
            replies.extend(r["rows"])
        p.stdin.close()
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def driver(gen_dir, workers=1, variant=""):
    rows = [(a, s, agg(t), agg(h)) for a, s, t, h in inputs(gen_dir)]
    chunks = [rows[i:i + 100] for i in range(0, len(rows), 100)]
    replies, started = [], time.time()
    threads = [threading.Thread(target=worker, args=(chunks[w::workers], variant, replies))
               for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(replies) != len(rows):
        sys.exit("%d rows answered of %d" % (len(replies), len(rows)))
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    print("driver%s: %d accounts on %d workers: %.2f CPU-s in the workers, %.2f s wall"
          % (" " + variant if variant else "", len(rows), workers, ch.ru_utime + ch.ru_stime,
             time.time() - started))


def bare(gen_dir):
    rows = [(a, s, agg(t), agg(h)) for a, s, t, h in inputs(gen_dir)]
    before = cpu()
    out = [portfolio_calc.account_perf(t, h, s) for _, s, t, h in rows]
    print("bare: %d accounts, %.2f CPU-s" % (len(out), cpu() - before))


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("order", "driver", "bare"):
        sys.exit(__doc__)
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "order":
        order(rest[0], *[int(x) for x in rest[1:3]])
    elif mode == "driver":
        driver(rest[0], int(rest[1]) if len(rest) > 1 else 1, rest[2] if len(rest) > 2 else "")
    else:
        bare(rest[0])
