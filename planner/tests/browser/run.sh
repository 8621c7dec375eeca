#!/usr/bin/env bash
# Browser test of the web console (issue #16): headless Chromium drives `planner serve`.
#
# 1. installs chromium + chromium-driver (Debian) when missing;
# 2. builds `planner`; copies the lookup conformance inputs to a temp dir; `planner run` makes
#    run 1 (complete) and run 2 (read_orders fails: its input file is missing) of
#    keyspace lookup_quicktest;
# 3. starts a slow HTTP server (inputs of the run the test stops), a page server on another
#    port (evil.html: the cross-origin attacks) and `planner serve` on loopback without a
#    token (it prints a console link carrying the one it made), then console_test.py signs in
#    through that link, checks that the other origin's CSRF POST and API read fail, walks the
#    pages and starts runs, saving screenshots into
#    $CARGO_TARGET_DIR/test-artifacts/console (default target/test-artifacts/console).
#
# Every process started here is killed by its pid on exit, failed or not. Without conformance
# data the test is skipped (with CI=true it fails), as the cargo tests do.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
cd "$root"
start=$SECONDS

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "installing chromium chromium-driver (needed by the browser test)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# The conformance data, in the finder's order (plexus_testkit::conformance).
conf=""
if [ -n "${PLEXUS_CONFORMANCE_DIR:-}" ]; then
  conf="$PLEXUS_CONFORMANCE_DIR/lookup"
  ins="$conf/in"; cfg="$conf/cfg"
elif [ -n "${PLEXUS_CAPILLARIES_DIR:-}" ]; then
  ins="$PLEXUS_CAPILLARIES_DIR/test/data/in/lookup_quicktest"
  cfg="$PLEXUS_CAPILLARIES_DIR/test/data/cfg/lookup_quicktest"
  conf="$cfg"
elif [ -d "$root/../shared/conformance/lookup" ]; then
  conf="$root/../shared/conformance/lookup"
  ins="$conf/in"; cfg="$conf/cfg"
fi
if [ -z "$conf" ] || [ ! -f "$cfg/script_quick.yaml" ]; then
  if [ "${CI:-}" = true ]; then echo "browser test: no conformance data" >&2; exit 1; fi
  echo "browser test skipped: no conformance data (set PLEXUS_CONFORMANCE_DIR)"
  exit 0
fi

target_dir="${CARGO_TARGET_DIR:-$root/target}"
cargo build --locked -p planner --bin planner "$@"
planner="$target_dir/debug/planner"
art="$target_dir/test-artifacts/console"
rm -rf "$art"; mkdir -p "$art"

tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

mkdir -p "$tmp/in" "$tmp/in_missing" "$tmp/out" "$tmp/out_missing" "$tmp/out_slow" "$tmp/data"
cp "$ins"/*.csv "$tmp/in/"
cp "$ins/olist_order_items_dataset.csv" "$tmp/in_missing/"
cp "$cfg/script_quick.yaml" "$tmp/script_quick.yaml"
params() { # dir_in dir_out file
  cat >"$3" <<EOF
{"start_date": "2016-01-01 00:00:00", "end_date": "2018-12-31 23:23:59",
 "default_shipping_limit_date": "1980-02-03T04:05:06.777+00:00", "default_order_item_id": "999",
 "default_order_item_value": "999.00", "lookup_node_batches_total": 10, "manual_if_multi": "auto",
 "dir_in": "$1", "dir_out": "$2"}
EOF
}
params "$tmp/in" "$tmp/out" "$tmp/params.json"
params "$tmp/in_missing" "$tmp/out_missing" "$tmp/params_missing.json"

"$planner" run "$tmp/script_quick.yaml" --params "$tmp/params.json" --keyspace lookup_quicktest \
  --data-dir "$tmp/data" --threads 2 >"$art/run1.log" 2>&1
if "$planner" run "$tmp/script_quick.yaml" --params "$tmp/params_missing.json" \
  --keyspace lookup_quicktest --data-dir "$tmp/data" --threads 2 >"$art/run2.log" 2>&1; then
  echo "run 2 should have failed (missing input)" >&2; exit 1
fi

# Inputs that take 30 s to arrive: the run the test stops is still going when it stops it.
python3 - "$tmp/in" >"$tmp/slow.port" 2>"$art/slow-http.log" <<'EOF' &
import http.server, os, sys, time, socketserver
root = sys.argv[1]
class Slow(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory=root, **k)
    def do_GET(self):
        time.sleep(30)
        super().do_GET()
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
s = Server(("127.0.0.1", 0), Slow)
print(s.server_address[1], flush=True)
s.serve_forever()
EOF
pids+=($!)
# Up to 30 s for each server to start: python3 and planner start slowly on a loaded machine.
for _ in $(seq 300); do [ -s "$tmp/slow.port" ] && break; sleep 0.1; done
slow_port="$(head -1 "$tmp/slow.port")"
[ -n "$slow_port" ] || { echo "the slow HTTP server did not start" >&2; cat "$art/slow-http.log" >&2; exit 1; }
params "http://127.0.0.1:$slow_port" "$tmp/out_slow" "$tmp/params_slow.json"

# A page of another origin (another port of the same host: same-site for cookies, so only the
# server's Origin and Content-Type checks stop it) that tries a CSRF POST and an API read.
mkdir -p "$tmp/evil"
cp "$here/evil.html" "$tmp/evil/index.html"
python3 -m http.server 0 --bind 127.0.0.1 --directory "$tmp/evil" >"$tmp/evil.out" 2>&1 &
pids+=($!)
for _ in $(seq 300); do grep -q 'port ' "$tmp/evil.out" 2>/dev/null && break; sleep 0.1; done
evil_port="$(sed -n 's/.* port \([0-9]*\).*/\1/p' "$tmp/evil.out" | head -1)"
[ -n "$evil_port" ] || { echo "the other-origin server did not start" >&2; cat "$tmp/evil.out" >&2; exit 1; }

# No token given: planner serve makes one and prints it once, in the console link.
env -u PLEXUS_CONSOLE_TOKEN "$planner" serve --data-dir "$tmp/data" --listen 127.0.0.1:0 --threads 2 \
  --file-root "$tmp" >"$tmp/serve.out" 2>"$art/serve.log" &
pids+=($!)
for _ in $(seq 300); do grep -q '^console: ' "$tmp/serve.out" 2>/dev/null && break; sleep 0.1; done
base="$(sed -n 's/^listening on //p' "$tmp/serve.out" | head -1)"
link="$(sed -n 's/^console: //p' "$tmp/serve.out" | head -1)"
[ -n "$base" ] && [ -n "$link" ] || { echo "planner serve did not start:" >&2; cat "$art/serve.log" >&2; exit 1; }
echo "planner serve at $base"

python3 "$here/console_test.py" "$base" "$art" "$tmp/script_quick.yaml" "$tmp/params.json" \
  "$tmp/params_slow.json" "$link" "http://127.0.0.1:$evil_port"
echo "browser test took $((SECONDS - start))s (build included); screenshots in $art"
