#!/usr/bin/env python3
"""Drives the Plexus console in headless Chromium over the W3C WebDriver protocol.

No third-party package: chromedriver speaks JSON over HTTP, urllib is enough. run.sh prepares the
data directory and starts `planner serve`; this script starts chromedriver (and kills it by pid),
walks the pages, saves a screenshot of each into the artifacts directory and checks what the
pages say.

Usage: console_test.py BASE_URL ARTIFACTS_DIR SCRIPT_URL PARAMS_URL SLOW_PARAMS_URL LINK EVIL_BASE
(LINK: the console link with the token `planner serve` printed; EVIL_BASE: a server of another
origin serving evil.html.)
"""

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

BASE, ART, SCRIPT, PARAMS, SLOW_PARAMS, LINK, EVIL = sys.argv[1:8]
CSRF_KS = "csrf_attack"
KS = "lookup_quicktest"
SLOW_KS = "slow_inputs"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Driver:
    """A WebDriver session: the few commands the test needs."""

    def __init__(self):
        self.port = free_port()
        self.profile = tempfile.mkdtemp(prefix="plexus-chromium-")
        self.proc = subprocess.Popen(
            ["chromedriver", f"--port={self.port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        # Up to 30 s for chromedriver to answer (a loaded machine starts it slowly).
        for _ in range(300):
            try:
                self.call("GET", "/status")
                break
            except Exception:
                time.sleep(0.1)
        flags = [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={self.profile}", "--window-size=1400,900",
        ]
        options = {"args": flags}
        # Debian's /usr/bin/chromium is a wrapper script; chromedriver wants the binary.
        if os.path.exists("/usr/lib/chromium/chromium"):
            options["binary"] = "/usr/lib/chromium/chromium"
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}}
        self.session = self.call("POST", "/session", caps)["sessionId"]

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.loads(r.read() or b"{}").get("value")
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"webdriver {method} {path}: {e.read()[:500]!r}") from None

    def s(self, method, path, body=None):
        return self.call(method, f"/session/{self.session}{path}", body)

    def go(self, url):
        self.s("POST", "/url", {"url": url})

    def js(self, script, *args):
        return self.s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def text(self, css="body"):
        return self.js("const e = document.querySelector(arguments[0]); return e ? e.innerText : null;", css)

    def click(self, css):
        # Pages re-render every second while a run is going: an element found a moment ago
        # may be gone; find it again.
        for attempt in range(5):
            try:
                el = self.s("POST", "/element", {"using": "css selector", "value": css})
                self.s("POST", f"/element/{list(el.values())[0]}/click", {})
                return
            except RuntimeError as e:
                if "stale element" not in str(e) or attempt == 4:
                    raise
                time.sleep(0.2)

    def type(self, css, value):
        el = self.s("POST", "/element", {"using": "css selector", "value": css})
        eid = list(el.values())[0]
        self.s("POST", f"/element/{eid}/clear", {})
        if value:
            self.s("POST", f"/element/{eid}/value", {"text": value})

    def wait(self, what, cond, timeout=30.0):
        """Polls the JS expression `cond` until it is truthy; fails with `what` otherwise."""
        end = time.time() + timeout
        while time.time() < end:
            v = self.js(f"try {{ return ({cond}); }} catch (e) {{ return null; }}")
            if v:
                return v
            time.sleep(0.2)
        self.shot("timeout")
        raise AssertionError(f"timed out waiting for {what}; page says:\n{self.text()}")

    def shot(self, name):
        png = base64.b64decode(self.s("GET", "/screenshot"))
        path = os.path.join(ART, f"{name}.png")
        with open(path, "wb") as f:
            f.write(png)
        print(f"  screenshot {path}")

    def quit(self):
        try:
            self.s("DELETE", "")
        except Exception:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)
    print(f"  ok: {msg}")


def main():
    os.makedirs(ART, exist_ok=True)
    d = Driver()
    try:
        # 0. The console link signs the browser in: the token becomes an HttpOnly cookie and
        #    leaves the address bar.
        d.go(LINK)
        d.wait("the console after the link", "document.querySelector('#main')")
        url = d.js("return location.href")
        check("token" not in url, f"the token left the address bar ({url})")
        check("token" not in (d.js("return document.cookie") or ""), "the page's script cannot read the token cookie")
        d.wait("signed in", "document.querySelector('#token-btn') && document.querySelector('#token-btn').hidden")

        # 0b. A page of another origin, with the cookie in this browser, tries a simple
        #     cross-site POST (text/plain, no preflight), a JSON POST and an API read.
        d.go(f"{EVIL}/index.html?target={urllib.parse.quote(BASE)}&script={urllib.parse.quote(SCRIPT)}&params={urllib.parse.quote(PARAMS)}&ks={CSRF_KS}")
        d.wait("the attacks to finish", "window.results && window.results.done", 30)
        res = d.js("return window.results")
        d.shot("00-other-origin")
        check(res.get("read", "").startswith("blocked"), f"the other origin cannot read the API ({res.get('read')})")
        check(res.get("json", "").startswith("blocked"), f"its JSON POST is blocked ({res.get('json')})")
        time.sleep(1)
        with urllib.request.urlopen(BASE + "/api/keyspaces", timeout=30) as r:
            names = [k["name"] for k in json.loads(r.read())["keyspaces"]]
        check(CSRF_KS not in names, f"no run was created by the other origin (keyspaces: {names})")

        # 1. The keyspace list shows the keyspace of the finished conformance run.
        d.go(BASE + "/")
        d.wait("the keyspace card", f"document.querySelector('[data-keyspace=\"{KS}\"]')")
        d.shot("01-keyspaces")
        body = d.text()
        check(KS in body, f"keyspace list names {KS}")
        check("Start a run" in body, "keyspace list offers to start a run")

        # 2. Its matrix at #/ks/<keyspace>: run 1 complete, run 2 (missing input file) with a failure.
        d.go(f"{BASE}/#/ks/{KS}")
        d.wait("the matrix", "document.querySelectorAll('#matrix tbody tr[data-run]').length >= 2")
        d.shot("02-matrix")
        ok = d.js("return [...document.querySelectorAll('tr[data-run=\"1\"] a[data-status]')].map(a => a.dataset.status)")
        check(ok and all(s == "success" for s in ok), f"run 1: every node success ({len(ok or [])} nodes)")
        failed = d.js("return [...document.querySelectorAll('tr[data-run=\"2\"] a[data-status=\"fail\"]')].map(a => a.dataset.node)")
        check(failed and "read_orders" in failed, f"run 2: read_orders failed (failed nodes: {failed})")
        check("read_order_items" in d.text("#matrix"), "matrix has a column per script node")

        # 3. The failed node's batches, with the error text.
        d.click('tr[data-run="2"] a[data-node="read_orders"]')
        d.wait("the batch table", "document.querySelector('#batches tr.batch')")
        d.shot("03-batches-failed")
        err = d.text(".batch-error") or ""
        check("olist_orders_dataset.csv" in err, f"the failed batch shows its error: {err[:160]!r}")
        check(d.js("return !!document.querySelector('.bar-track')"), "each batch has a duration bar")

        # 4. The run page: DAG coloured by status and the node history.
        d.go(f"{BASE}/#/ks/{KS}/run/2")
        d.wait("the DAG", "document.querySelector('#dag svg [data-node]')")
        d.shot("04-run-dag")
        fill = d.js("return document.querySelector('#dag svg [data-node=\"read_orders\"]').dataset.status")
        check(fill == "fail", "the DAG marks read_orders as failed")
        check("read_orders" in d.text("#node-history"), "node history lists read_orders")

        # 4b. The tables of the keyspace, one of them with its rows per batch and first rows.
        d.go(f"{BASE}/#/ks/{KS}/tables")
        d.wait("the table list", "document.querySelector('#tables tr.table-row')")
        d.shot("04b-tables")
        check("orders" in d.text("#tables"), "the tables page lists the orders table")
        d.click('#tables tr.table-row[data-table="orders"][data-run="1"] a')
        d.wait("the table's rows", "document.querySelector('#table-rows tbody tr td')")
        d.shot("04c-table")
        check(d.js("return document.querySelectorAll('#batch-rows tbody tr').length") >= 1, "rows per batch are shown")
        href = d.js("return document.querySelector('#download').getAttribute('href')")
        with urllib.request.urlopen(BASE + href, timeout=30) as r:
            csv_lines = r.read().decode().splitlines()
        check(csv_lines and csv_lines[0].startswith("rowid,"), f"the download is the table as CSV ({csv_lines[:1]})")

        # 5. A successful run from the start dialog; the matrix turns green.
        d.go(f"{BASE}/#/ks/{KS}")
        d.wait("the start button", "document.querySelector('#start-run')")
        d.click("#start-run")
        d.type("#start-script", SCRIPT)
        d.type("#start-params", PARAMS)
        d.type("#start-desc", "from the browser test")
        d.click("#start-review")
        d.wait("the confirmation", "document.querySelector('#start-summary')")
        d.shot("05-start-dialog")
        d.click("#start-confirm")
        d.wait("run 3 in the matrix", "document.querySelector('tr[data-run=\"3\"]')")
        d.wait("run 3 complete", "document.querySelector('tr[data-run=\"3\"]').dataset.status === 'complete'", 60)
        d.shot("06-matrix-green")
        st = d.js("return [...document.querySelectorAll('tr[data-run=\"3\"] a[data-status]')].map(a => a.dataset.status)")
        check(st and all(s == "success" for s in st), f"run 3: all {len(st or [])} nodes success")

        # 6. A refused start: the dialog lists the validation errors.
        d.click("#start-run")
        d.type("#start-script", "/nonexistent/script.json")
        d.type("#start-params", "")
        d.click("#start-review")
        d.click("#start-confirm")
        d.wait("the error box", "document.querySelector('#dialog-errors')")
        d.shot("07-start-refused")
        check("script.json" in d.text("#dialog-errors"), "a script outside the file roots is refused with its path")
        d.click("#start-cancel")

        # 7. A long run (inputs behind a slow HTTP server), stopped from the dialog.
        d.go(BASE + "/")
        d.wait("the new-run button", "document.querySelector('#new-run')")
        d.click("#new-run")
        d.type("#start-keyspace", SLOW_KS)
        d.type("#start-script", SCRIPT)
        d.type("#start-params", SLOW_PARAMS)
        d.click("#start-review")
        d.click("#start-confirm")
        d.wait("the slow run going", "document.querySelector('tr[data-run=\"1\"][data-status=\"start\"]')", 30)
        d.wait("the live marker", "!document.querySelector('#live').hidden")
        d.shot("08-long-run")
        d.click('.stop-btn[data-run="1"]')
        d.wait("the stop dialog", "document.querySelector('#stop-confirm')")
        d.shot("09-stop-dialog")
        d.click("#stop-confirm")
        d.wait("run 1 stopped", "document.querySelector('tr[data-run=\"1\"][data-status=\"stop\"]')", 30)
        d.shot("10-stopped")
        check(True, "the long run is stopped")
    finally:
        d.quit()


if __name__ == "__main__":
    t = time.time()
    main()
    print(f"browser test passed in {time.time() - t:.1f}s")
