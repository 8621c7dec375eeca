# Formulas of the portfolio-like benchmark pipeline. Plexus runs them as py_calc functions; the
# DuckDB and Spark peers import this file and run the same functions as UDFs, so all engines
# compute identical figures.
#
# Inputs per account (built by the script with fmt.Sprintf + string_agg, in random order):
#   txns     '["2021-01-05|AAPL|10|123.45", ...]'   ts|ticker|qty|price (qty < 0 = sell)
#   holdings '["2021-12-31|AAPL|10", ...]'          d|ticker|qty
# Output of account_perf: a JSON object keyed "<period>_<class>" (period = a year or "All",
# class = a ticker class or "All") with integer figures; money is in cents so that the result
# does not depend on float rounding or on the order string_agg produced.
import json

TICKER_CLASSES = ("Energy", "Finance", "Health", "Tech")


def ticker_class(ticker):
    return TICKER_CLASSES[sum(ord(c) for c in ticker) % len(TICKER_CLASSES)]


def _cents(text):
    # Prices carry at most 2 decimals, so rounding the scaled float is exact.
    return int(round(float(text) * 100))


def _parse_list(text):
    if text is None or text == "" or text == "[]":
        return []
    return json.loads(text)


def _figures(acc, key):
    f = acc.get(key)
    if f is None:
        f = {"trades": 0, "net_cash": 0, "realized": 0, "eoy_qty": 0}
        acc[key] = f
    return f


def account_perf(txns, holdings, period_start):
    rows = []
    for t in _parse_list(txns):
        ts, ticker, qty, price = t.split("|")
        rows.append((ts, ticker, int(qty), _cents(price)))
    # string_agg order is unspecified: sort so that FIFO lot matching is deterministic.
    rows.sort()
    acc = {}
    lots = {}
    for ts, ticker, qty, price in rows:
        realized = 0
        queue = lots.setdefault(ticker, [])
        left = qty
        # FIFO: a txn first closes lots of the opposite sign, the rest opens a new lot.
        while left != 0 and queue and (queue[0][0] > 0) != (left > 0):
            lot_qty, lot_price = queue[0]
            matched = min(abs(lot_qty), abs(left))
            sign = 1 if lot_qty > 0 else -1
            realized += matched * sign * (price - lot_price)
            lot_qty -= sign * matched
            left += sign * matched
            if lot_qty == 0:
                queue.pop(0)
            else:
                queue[0] = (lot_qty, lot_price)
        if left != 0:
            queue.append((left, price))
        if ts < period_start:
            # Before the account's first period the txn only builds lots.
            continue
        year = ts[:4]
        cls = ticker_class(ticker)
        for key in (year + "_All", year + "_" + cls, "All_All", "All_" + cls):
            f = _figures(acc, key)
            f["trades"] += 1
            f["net_cash"] -= qty * price
            f["realized"] += realized
    # Holdings: per year, the quantities of the year's last snapshot date.
    last_date = {}
    parsed = []
    for h in _parse_list(holdings):
        d, ticker, qty = h.split("|")
        parsed.append((d, ticker, int(qty)))
        year = d[:4]
        if d > last_date.get(year, ""):
            last_date[year] = d
    for d, ticker, qty in parsed:
        year = d[:4]
        if d != last_date[year] or d < period_start:
            continue
        cls = ticker_class(ticker)
        for key in (year + "_All", year + "_" + cls):
            _figures(acc, key)["eoy_qty"] += qty
    return json.dumps(acc, sort_keys=True, separators=(",", ":"))


_cache = [None, None]


def _perf(perf_json):
    # The four column functions of one row parse the same JSON; keep the last parse.
    if _cache[0] != perf_json:
        _cache[0] = perf_json
        _cache[1] = json.loads(perf_json)
    return _cache[1]


def figure_int(perf_json, period, cls, name):
    return _perf(perf_json)[period + "_" + cls][name]


def figure_money(perf_json, period, cls, name):
    return _perf(perf_json)[period + "_" + cls][name] / 100.0
