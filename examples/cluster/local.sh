#!/usr/bin/env bash
# A local Plexus cluster on loopback: a CQL double and N plexus-node peers.
#
#   examples/cluster/local.sh up [N] [--executors M]
#                                         start (default 3 voters, no executor peers; executor
#                                         peers n(N+1)..n(N+M) commit through the voters and are
#                                         recorded with `planner cluster add --executor`);
#                                         prints PLEXUS_* lines for eval
#   examples/cluster/local.sh down        stop exactly what `up` started (by pid), remove its files
#   examples/cluster/local.sh kill nX     SIGKILL one peer
#   examples/cluster/local.sh start nX    start a stopped peer again on its data and address
#   examples/cluster/local.sh status      planner cluster status
#
# It builds nothing: binaries come from target/release (cargo build --release -p plexus-node
# -p planner -p plexus-testkit), or from PLEXUS_BIN_DIR. State lives in PLEXUS_LOCAL_DIR
# (default /tmp/plexus-local-$USER).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${PLEXUS_BIN_DIR:-$root/target/release}
state=${PLEXUS_LOCAL_DIR:-/tmp/plexus-local-${USER:-$(id -un)}}

die() { echo "local.sh: $*" >&2; exit 1; }

need_bins() {
  for b in plexus-node planner cql-double; do
    [ -x "$bin/$b" ] || die "$bin/$b missing: cargo build --release -p plexus-node -p planner -p plexus-testkit (or set PLEXUS_BIN_DIR)"
  done
}

# A free UDP port on 127.0.0.1 (QUIC); the kernel picks it.
free_udp_port() {
  python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start_peer() {
  local name=$1
  [ -f "$state/$name.toml" ] || die "no config for $name in $state"
  local extra=()
  [ "$name" = n1 ] && [ ! -d "$state/$name/raft" ] && extra=(--init)
  # Executor peers keep no Raft log; their config says their role.
  nohup "$bin/plexus-node" start --config "$state/$name.toml" "${extra[@]}" \
    >>"$state/$name.log" 2>&1 &
  echo $! >"$state/$name.pid"
}

wait_leader() {
  local n=$1
  for _ in $(seq 1 150); do
    if out=$("$bin/planner" cluster status --cluster "$(cat "$state/cluster")" --tls-dir "$state/tls" 2>/dev/null) \
      && ! grep -q "^leader none" <<<"$out" \
      && [ "$(grep -cE '^n[0-9]+,(leader|voter),' <<<"$out")" -ge "$n" ]; then
      return 0
    fi
    sleep 0.2
  done
  die "no leader after 30 s; logs in $state/*.log"
}

up() {
  local n=3 m=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --executors) [ $# -ge 2 ] || die "--executors needs a number"; m=$2; shift 2 ;;
      --executors=*) m=${1#--executors=}; shift ;;
      *) n=$1; shift ;;
    esac
  done
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "the number of voters must be a positive integer, not '$n'"
  [[ "$m" =~ ^[0-9]+$ ]] || die "the number of executor peers must be an integer, not '$m'"
  local total=$((n + m))
  need_bins
  [ -e "$state/pids" ] && die "already up ($state); run down first"
  mkdir -p "$state"
  : >"$state/pids"
  "$bin/plexus-node" certs init --dir "$state/tls" --peers "$(seq -s, -f 'n%g' 1 "$total")" --clients planner >/dev/null

  "$bin/cql-double" --listen 127.0.0.1:0 >"$state/cql.out" 2>"$state/cql.log" &
  echo $! >"$state/cql.pid"
  echo "$(cat "$state/cql.pid")" >>"$state/pids"
  local cql=""
  for _ in $(seq 1 100); do
    cql=$(sed -n 's/^listening on //p' "$state/cql.out")
    [ -n "$cql" ] && break
    sleep 0.1
  done
  [ -n "$cql" ] || die "the CQL double did not start; see $state/cql.log"

  local peers="" addrs=""
  for i in $(seq 1 "$n"); do
    local port; port=$(free_udp_port)
    peers+="n$i = \"127.0.0.1:$port\"\n"
    addrs+="${addrs:+,}127.0.0.1:$port"
    echo "127.0.0.1:$port" >"$state/n$i.addr"
  done
  echo "$addrs" >"$state/cluster"
  for i in $(seq 1 "$total"); do
    local role=voter
    [ "$i" -gt "$n" ] && role=executor
    [ "$role" = executor ] && echo "127.0.0.1:$(free_udp_port)" >"$state/n$i.addr"
    cat >"$state/n$i.toml" <<EOF
id = "n$i"
listen = "$(cat "$state/n$i.addr")"
data-dir = "$state/n$i"
tls-dir = "$state/tls"
threads = ${PLEXUS_LOCAL_THREADS:-2}
role = "$role"
[peers]
$(printf "%b" "$peers")
[store]
kind = "cql"
cql = { contact-points = ["$cql"] }
[raft]
heartbeat-ms = 150
election-min-ms = 600
election-max-ms = 1200
lease-ms = 2000
lease-renew-ms = 400
[telemetry]
# Several peers on one host: each takes a free port (logged as "serving /metrics").
metrics-listen = "127.0.0.1:0"
EOF
    [ "$role" = voter ] || continue
    start_peer "n$i"
    cat "$state/n$i.pid" >>"$state/pids"
  done
  wait_leader "$n"
  for i in $(seq $((n + 1)) "$total"); do
    start_peer "n$i"
    cat "$state/n$i.pid" >>"$state/pids"
    "$bin/planner" cluster add --executor "n$i" "$(cat "$state/n$i.addr")" \
      --cluster "$addrs" --tls-dir "$state/tls" >/dev/null \
      || die "could not record executor peer n$i; logs in $state/*.log"
  done
  echo "PLEXUS_CLUSTER=$addrs"
  echo "PLEXUS_TLS_DIR=$state/tls"
}

down() {
  [ -d "$state" ] || return 0
  for f in "$state"/*.pid; do
    [ -f "$f" ] || continue
    local pid; pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
  done
  # Peers finish their running batches on SIGTERM; give them a moment, then make sure.
  for _ in $(seq 1 50); do
    local alive=0
    for f in "$state"/*.pid; do
      [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && alive=1
    done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for f in "$state"/*.pid; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
  done
  rm -rf "$state"
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  kill) [ -f "$state/$2.pid" ] || die "no pid for $2"; kill -9 "$(cat "$state/$2.pid")" ;;
  start) need_bins; start_peer "$2"; cat "$state/$2.pid" >>"$state/pids" ;;
  status) "$bin/planner" cluster status --cluster "$(cat "$state/cluster")" --tls-dir "$state/tls" ;;
  *) echo "usage: $0 up [N] [--executors M] | down | kill nX | start nX | status" >&2; exit 2 ;;
esac
