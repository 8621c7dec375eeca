#!/usr/bin/env bash
# Stops exactly what testkit/cassandra/up.sh started (Cassandra and the adapter, by the
# pids it recorded) and removes its run directory. Takes the run directory from
# $PLEXUS_CASSANDRA_RUN or the first argument; does nothing when neither is set.
set -uo pipefail
run="${1:-${PLEXUS_CASSANDRA_RUN:-}}"
log() { echo "cassandra/down.sh: $*" >&2; }
if [ -z "$run" ] || [ ! -d "$run" ]; then
  log "no run directory given or found; nothing to stop"
  exit 0
fi
case "$(basename "$run")" in
  plexus-cassandra.*) ;;
  *) log "refusing to touch $run (not made by up.sh)"; exit 1 ;;
esac
for name in adapter cassandra; do
  f="$run/$name.pid"
  [ -f "$f" ] || continue
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name (pid $pid) ignored SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$f"
done
rm -rf "$run"
log "stopped and removed $run"
