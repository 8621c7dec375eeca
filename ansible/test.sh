#!/usr/bin/env bash
# The Ansible deployment test (run by .ci/test): three network namespaces joined by a bridge,
# each with its own sshd on its own address, are the "hosts"; site.yml deploys Plexus on them
# over real ssh (a CQL double on the bridge's host-side address is the store): n1..n3 are the
# Raft voters, n4 an executor peer (plexus_node_role: executor, recorded with planner cluster
# add --executor). Then:
#   1. planner submit --wait of the lookup conformance run gives the baseline's files;
#   2. rolling_restart.yml during a second run leaves that run complete with the same files;
#   3. a second site.yml reports changed=0;
#   4. teardown.yml removes the services and files.
# Installs what it needs when missing (ansible-core and ansible-lint in a venv under
# ${PLEXUS_TOOLS_DIR:-$HOME/.cache/plexus}; iproute2 and openssh-server with apt). Binaries come
# from PLEXUS_BIN_DIR (default: target/debug; built in the dev profile when missing). Every
# namespace, process and file it made is removed on exit, failure included. Traffic stays on the
# bridge between its namespaces and on loopback. Skips with a notice where namespaces cannot be
# made (not root). PLEXUS_ANSIBLE_KEEP=1 keeps the temp dir for a look after a failure.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${PLEXUS_BIN_DIR:-$root/target/debug}
tools=${PLEXUS_TOOLS_DIR:-$HOME/.cache/plexus}
venv=$tools/ansible-venv
start_all=$SECONDS
phase_start=$SECONDS

say() { echo "ansible/test.sh: $*"; }
die() { echo "ansible/test.sh: FAILED: $*" >&2; exit 1; }
phase() {
  say "$1 took $((SECONDS - phase_start))s"
  phase_start=$SECONDS
}
passed=0
skipped=0

# --- can this machine make namespaces? -----------------------------------------------------
if [ "$(id -u)" != 0 ]; then
  say "skipped: not root, so no network namespaces can be made"
  exit 0
fi

# --- tools -----------------------------------------------------------------------------------
missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt-get update -qq >/dev/null || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ! -x "$venv/bin/ansible-playbook" ] || [ ! -x "$venv/bin/ansible-lint" ]; then
  say "installing ansible-core and ansible-lint into $venv"
  mkdir -p "$tools"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'ansible-core<2.20' ansible-lint
fi
export PATH="$venv/bin:$PATH"

probe_ns="plxprobe$$"
if ! ip netns add "$probe_ns" 2>/dev/null; then
  say "skipped: network namespaces cannot be made here (ip netns add failed)"
  exit 0
fi
ip netns delete "$probe_ns"

for b in plexus-node planner cql-double; do
  if [ ! -x "$bin/$b" ]; then
    say "$bin/$b missing: building the dev binaries"
    (cd "$root" && cargo build -p plexus-node -p planner -p plexus-testkit)
    bin=${CARGO_TARGET_DIR:-$root/target}/debug
    break
  fi
done
phase "installing tools"

# --- lint --------------------------------------------------------------------------------------
(cd "$here" && ansible-lint --offline --nocolor -q) || die "ansible-lint (production profile) is not clean"
passed=$((passed + 1))
phase "ansible-lint (production profile)"

# --- state and clean-up ------------------------------------------------------------------------
tmp=$(mktemp -d /tmp/plexus-ansible.XXXXXX)
chmod 0755 "$tmp" # the peers run as their own user and read and write under it
id=$(($$ % 10000))
nss=("plx$id-1" "plx$id-2" "plx$id-3" "plx$id-4")
# n1..n3 vote; n4 is an executor peer.
hosts="1 2 3 4"
bridge="plxbr$id"
pids=()
test_user=plexustest$id
user_existed=0
getent passwd "$test_user" >/dev/null && user_existed=1

# A pid and its descendants (the rolling restart runs ansible-playbook under a subshell).
tree() {
  local c
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do tree "$c"; done
  echo "$1"
}

cleanup() {
  local rc=$?
  set +e
  for ns in "${nss[@]}"; do
    # Everything in these namespaces was started by this test (sshd, its sessions, the peers).
    local in_ns
    in_ns=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$in_ns" ] && kill $in_ns 2>/dev/null
  done
  local all=()
  for p in "${pids[@]}"; do all+=($(tree "$p")); done
  for p in "${all[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.5
  for ns in "${nss[@]}"; do
    local in_ns
    in_ns=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$in_ns" ] && kill -9 $in_ns 2>/dev/null
  done
  for p in "${all[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  for ns in "${nss[@]}"; do ip netns delete "$ns" 2>/dev/null; done
  ip link delete "$bridge" 2>/dev/null
  if [ "$user_existed" = 0 ]; then
    getent passwd "$test_user" >/dev/null && userdel "$test_user" 2>/dev/null
    getent group "$test_user" >/dev/null && groupdel "$test_user" 2>/dev/null
  fi
  if [ "$rc" != 0 ]; then
    for f in "$tmp"/hosts/*/var/log/plexus/node.log "$tmp"/hosts/*/var/log/plexus/stdout.log; do
      [ -f "$f" ] && { echo "--- last lines of $f"; tail -n 15 "$f"; }
    done
  fi
  if [ "${PLEXUS_ANSIBLE_KEEP:-0}" = 1 ]; then
    say "kept $tmp"
  else
    rm -rf "$tmp"
  fi
  say "cleaned up (namespaces, bridge, processes$([ "$user_existed" = 0 ] && echo ", user $test_user"))"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the systemd unit (no systemd runs here: the test peers are supervised) ----------------
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$tmp/unit"
  cat >"$tmp/unit/render.yml" <<EOF
# Renders roles/plexus_node's systemd unit with the role's defaults (test only).
- name: Render the systemd unit
  hosts: localhost
  connection: local
  gather_facts: false
  vars_files:
    - $here/roles/plexus_node/defaults/main.yml
  tasks:
    - name: Render it
      ansible.builtin.template:
        src: $here/roles/plexus_node/templates/plexus-node.service.j2
        dest: $tmp/unit/plexus-node.service
        mode: "0644"
EOF
  ansible-playbook "$tmp/unit/render.yml" -e plexus_node_id=n1 \
    -e "plexus_node_install_dir=$bin" -e ansible_python_interpreter=/usr/bin/python3 \
    >"$tmp/unit/render.log" 2>&1 || { cat "$tmp/unit/render.log"; die "cannot render the unit"; }
  systemd-analyze verify "$tmp/unit/plexus-node.service" ||
    die "systemd-analyze verify rejects roles/plexus_node/templates/plexus-node.service.j2"
  passed=$((passed + 1))
  phase "systemd-analyze verify of the unit"
else
  say "systemd-analyze is missing: the unit template is not verified"
  skipped=$((skipped + 1))
fi

# --- namespaces and a bridge -------------------------------------------------------------------
# A /24 of 10.0.0.0/8 that no route of this machine uses.
subnet=""
for third in $(seq $((id % 200 + 20)) 254) $(seq 20 $((id % 200 + 19))); do
  cand="10.211.$third"
  if ! ip -4 route show | grep -q "^$cand\."; then
    subnet=$cand
    break
  fi
done
[ -n "$subnet" ] || die "no free 10.211.x.0/24"
ip link add "$bridge" type bridge
ip addr add "$subnet.254/24" dev "$bridge"
ip link set "$bridge" up
for i in $hosts; do
  ns=${nss[$((i - 1))]}
  ip netns add "$ns"
  ip link add "plxv$id-$i" type veth peer name "plxp$id-$i"
  ip link set "plxv$id-$i" master "$bridge" up
  ip link set "plxp$id-$i" netns "$ns"
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$subnet.$i/24" dev "plxp$id-$i"
  ip -n "$ns" link set "plxp$id-$i" up
done
say "hosts n1..n4 at $subnet.1-4 (namespaces ${nss[*]}, bridge $bridge at $subnet.254)"

# --- sshd in each namespace, with keys made for this test --------------------------------------
mkdir -p "$tmp/ssh" /run/sshd
ssh-keygen -q -t ed25519 -N '' -C plexus-ansible-test -f "$tmp/ssh/id_ed25519"
cp "$tmp/ssh/id_ed25519.pub" "$tmp/ssh/authorized_keys"
: >"$tmp/ssh/known_hosts"
for i in $hosts; do
  ssh-keygen -q -t ed25519 -N '' -f "$tmp/ssh/host_$i"
  echo "$subnet.$i $(cut -d' ' -f1,2 "$tmp/ssh/host_$i.pub")" >>"$tmp/ssh/known_hosts"
  cat >"$tmp/ssh/sshd_$i.conf" <<EOF
ListenAddress $subnet.$i:22
HostKey $tmp/ssh/host_$i
AuthorizedKeysFile $tmp/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile $tmp/ssh/sshd_$i.pid
Subsystem sftp internal-sftp
LogLevel ERROR
EOF
  ip netns exec "${nss[$((i - 1))]}" /usr/sbin/sshd -D -e -f "$tmp/ssh/sshd_$i.conf" \
    2>>"$tmp/ssh/sshd_$i.log" &
  pids+=($!)
done
ssh_opts=(-o UserKnownHostsFile="$tmp/ssh/known_hosts" -o StrictHostKeyChecking=yes
  -o IdentitiesOnly=yes -o BatchMode=yes -i "$tmp/ssh/id_ed25519")
for i in $hosts; do
  ok=0
  for _ in $(seq 1 50); do
    if ssh "${ssh_opts[@]}" "root@$subnet.$i" true 2>/dev/null; then ok=1; break; fi
    sleep 0.1
  done
  [ $ok = 1 ] || die "sshd on $subnet.$i does not answer; $(cat "$tmp/ssh/sshd_$i.log")"
done
phase "namespaces and sshd"

# --- the store: a CQL double on the bridge ---------------------------------------------------
: >"$tmp/cql.out"
"$bin/cql-double" --listen "$subnet.254:0" >"$tmp/cql.out" 2>"$tmp/cql.log" &
pids+=($!)
cql=""
for _ in $(seq 1 100); do
  cql=$(sed -n 's/^listening on //p' "$tmp/cql.out")
  [ -n "$cql" ] && break
  sleep 0.1
done
[ -n "$cql" ] || die "the CQL double did not start: $(cat "$tmp/cql.log")"

# --- the binary the playbooks install: without symbols when strip is there (cargo test's
# target/debug one is ~150 MB, ~80 MB stripped; each host holds a copy and, during the transfer,
# a second one) ----------------------------------------------------------------------------------
node_bin=$bin/plexus-node
if command -v strip >/dev/null 2>&1; then
  mkdir -p "$tmp/bin"
  strip --strip-all -o "$tmp/bin/plexus-node" "$bin/plexus-node"
  node_bin=$tmp/bin/plexus-node
fi
# A full disk otherwise surfaces as a failed file transfer deep in site.yml.
need_kib=$(($(stat -c %s "$node_bin") * 3 * 4 / 1024 + 256 * 1024))
free_kib=$(df -Pk "$tmp" | awk 'NR == 2 { print $4 }')
[ "$free_kib" -ge "$need_kib" ] ||
  die "$tmp has $((free_kib / 1024)) MiB free; four hosts need about $((need_kib / 1024)) MiB"

# --- the inventory: every path of every host under its own root ------------------------------
mkdir -p "$tmp/inventory/group_vars" "$tmp/secrets" "$tmp/ansible-local" "$tmp/cp"
head -c 32 /dev/urandom | base64 >"$tmp/secrets/vault-pass"
chmod 0600 "$tmp/secrets/vault-pass"
{
  echo "# Generated by ansible/test.sh: three namespaces on one filesystem."
  echo "plexus_nodes:"
  echo "  hosts:"
  for i in $hosts; do
    h=$tmp/hosts/n$i
    cat <<EOF
    n$i:
      ansible_host: $subnet.$i
      plexus_node_id: n$i
      plexus_node_install_dir: $h/opt/plexus/bin
      plexus_node_config_dir: $h/etc/plexus
      plexus_node_data_dir: $h/var/lib/plexus
      plexus_node_log_dir: $h/var/log/plexus
      plexus_node_run_dir: $h/run/plexus
      plexus_node_systemd_unit_dir: $h/etc/systemd/system
EOF
    if [ "$i" = 4 ]; then echo "      plexus_node_role: executor"; fi
  done
} >"$tmp/inventory/hosts.yml"
cat >"$tmp/inventory/group_vars/all.yml" <<EOF
# Generated by ansible/test.sh.
plexus_ca_dir: $tmp/secrets/tls
plexus_ca_vault_password_file: $tmp/secrets/vault-pass
plexus_bin_dir: $bin
EOF
cat >"$tmp/inventory/group_vars/plexus_nodes.yml" <<EOF
# Generated by ansible/test.sh: real ssh as root into the namespaces.
ansible_connection: ansible.builtin.ssh
ansible_user: root
ansible_become: false
ansible_python_interpreter: /usr/bin/python3
ansible_ssh_private_key_file: $tmp/ssh/id_ed25519
ansible_ssh_common_args: -o UserKnownHostsFile=$tmp/ssh/known_hosts -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes
plexus_node_binary_src: $node_bin
plexus_node_certs_src: $tmp/secrets/tls
plexus_node_user: $test_user
plexus_node_group: $test_user
plexus_node_service_mode: supervised
plexus_node_threads: 2
plexus_node_cql_contact_points: ["$cql"]
plexus_node_cql_settings:
  request-timeout-ms: 5000
  replication: { class: SimpleStrategy, replication-factor: 1 }
plexus_node_raft:
  heartbeat-ms: 150
  election-min-ms: 600
  election-max-ms: 1200
  lease-ms: 2000
  lease-renew-ms: 400
plexus_node_metrics_listen: 127.0.0.1:9400
plexus_node_stop_timeout: 60
plexus_bootstrap_planner_bin: $bin/planner
plexus_bootstrap_tls_dir: $tmp/secrets/tls
EOF
export ANSIBLE_CONFIG="$here/ansible.cfg"
export ANSIBLE_INVENTORY="$tmp/inventory/hosts.yml"
export ANSIBLE_VAULT_PASSWORD_FILE="$tmp/secrets/vault-pass"
export ANSIBLE_LOCAL_TEMP="$tmp/ansible-local"
export ANSIBLE_REMOTE_TEMP="$tmp/ansible-remote"
export ANSIBLE_SSH_CONTROL_PATH_DIR="$tmp/cp"
export ANSIBLE_NOCOLOR=1
export ANSIBLE_FORCE_COLOR=0

# Runs a playbook with its output in $tmp/<log>; prints its recap; fails on a failed host.
playbook() {
  local log=$1
  shift
  if ! (cd "$here" && ansible-playbook "$@") >"$tmp/$log" 2>&1; then
    tail -n 60 "$tmp/$log" >&2
    die "ansible-playbook $* failed (log above)"
  fi
  sed -n '/^PLAY RECAP/,$p' "$tmp/$log" | sed '/^$/d'
}

# --- 1. site.yml ----------------------------------------------------------------------------
playbook site-1.log site.yml
for i in $hosts; do
  [ -s "$tmp/hosts/n$i/run/plexus/plexus-node.pid" ] || die "n$i has no pid file"
  owner=$(ps -o user= -p "$(cat "$tmp/hosts/n$i/run/plexus/plexus-node.pid")" | tr -d ' ')
  [ "$owner" = "$test_user" ] || die "n$i runs as ${owner:-nobody}, not $test_user"
  key_mode=$(stat -c '%a %U' "$tmp/hosts/n$i/etc/plexus/tls/n$i.key" "$tmp/hosts/n$i/etc/plexus/tls/cluster.key" | sort -u)
  [ "$key_mode" = "600 $test_user" ] || die "n$i's keys are $key_mode, not 600 $test_user"
done
[ ! -e "$tmp/secrets/tls/cluster.key" ] && head -n 1 "$tmp/secrets/tls/cluster.key.vault" | grep -q '^\$ANSIBLE_VAULT' ||
  die "the control node's cluster key is not vaulted"
say "peers run as $test_user; keys 0600; the control node's cluster key is vaulted"
cluster="$subnet.1:7400,$subnet.2:7400,$subnet.3:7400"
status=$("$bin/planner" cluster status --cluster "$cluster" --tls-dir "$tmp/secrets/tls")
echo "$status"
[ "$(grep -cE '^n[123],(leader|voter),' <<<"$status")" = 3 ] || die "not three voters after site.yml"
grep -qE "^n4,executor,$subnet.4:7400,yes," <<<"$status" || die "n4 is not a reachable executor peer after site.yml"
passed=$((passed + 1))
phase "site.yml (first run)"

# --- the conformance data: the lookup test -------------------------------------------------
conf=""
if [ -n "${PLEXUS_CONFORMANCE_DIR:-}" ]; then
  conf_cfg=$PLEXUS_CONFORMANCE_DIR/lookup/cfg conf_in=$PLEXUS_CONFORMANCE_DIR/lookup/in
  conf_out=$PLEXUS_CONFORMANCE_DIR/lookup/out
  conf=$PLEXUS_CONFORMANCE_DIR
elif [ -n "${PLEXUS_CAPILLARIES_DIR:-}" ]; then
  conf_cfg=$PLEXUS_CAPILLARIES_DIR/test/data/cfg/lookup conf_in=$PLEXUS_CAPILLARIES_DIR/test/data/in/lookup
  conf_out=$PLEXUS_CAPILLARIES_DIR/test/data/out/lookup
  conf=$PLEXUS_CAPILLARIES_DIR
elif [ -d "$root/../shared/conformance/lookup" ]; then
  conf=$root/../shared/conformance
  conf_cfg=$conf/lookup/cfg conf_in=$conf/lookup/in conf_out=$conf/lookup/out
fi
outputs=(order_item_date_inner order_item_date_left_outer order_date_value_grouped_inner
  order_date_value_grouped_left_outer)

# Copies the inputs for run $1 and writes its params (batches of the lookup nodes: $2).
prepare_run() {
  local d=$tmp/data/run$1
  mkdir -p "$d/in" "$d/out"
  cp "$conf_in"/* "$d/in/"
  chmod -R a+rX "$tmp/data"
  chmod 1777 "$d/out"
  python3 - "$conf_cfg/script_params_quick_fs_one.yaml" "$d" "$2" >"$d/params.json" <<'EOF'
import json, sys
# The params file is flat "key: value" YAML; read it without a YAML library.
params = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if not line or line.startswith(("#", "---")) or ":" not in line:
        continue
    key, value = line.split(":", 1)
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    elif value.isdigit():
        value = int(value)
    params[key.strip()] = value
params["dir_in"] = sys.argv[2] + "/in"
params["dir_out"] = sys.argv[2] + "/out"
params["lookup_node_batches_total"] = int(sys.argv[3])
json.dump(params, sys.stdout, indent=2)
EOF
}

submit() {
  "$bin/planner" submit "$conf_cfg/script_quick.yaml" --params "$tmp/data/run$1/params.json" \
    --keyspace "ansible_lookup_$1" --start-nodes read_orders,read_order_items --wait \
    --cluster "$cluster" --tls-dir "$tmp/secrets/tls"
}

check_outputs() {
  for name in "${outputs[@]}"; do
    local got=$tmp/data/run$1/out/$name.csv
    [ -f "$got" ] || die "run $1: $name.csv missing"
    # Compared as t50_conformance does: like diff -b (runs of blanks, trailing blanks and CRs).
    diff -b --strip-trailing-cr -q "$got" "$conf_out/${name}_baseline.csv" >/dev/null ||
      die "run $1: $name.csv differs from the baseline"
  done
  say "run $1: the ${#outputs[@]} output files match the baseline"
}

if [ -n "$conf" ]; then
  # --- 2. a conformance run ------------------------------------------------------------------
  prepare_run 1 10
  submit 1 >"$tmp/run1.log" 2>&1 || { cat "$tmp/run1.log"; die "run 1 failed"; }
  tail -n 2 "$tmp/run1.log"
  check_outputs 1
  passed=$((passed + 1))
  phase "conformance run 1 (planner submit --wait)"

  # --- 3. a rolling restart during a second run ----------------------------------------------
  prepare_run 2 60
  # The roll goes first; run 2 is submitted as soon as n1 (the leader) begins to drain, so the
  # run meets a leader change and at least one restart.
  n1_log=$tmp/hosts/n1/var/log/plexus/node.log
  stops=$(grep -c 'stopping: no new claims' "$n1_log" || true)
  playbook rolling.log rolling_restart.yml &
  roll=$!
  pids+=($roll)
  for _ in $(seq 1 600); do
    [ "$(grep -c 'stopping: no new claims' "$n1_log" || true)" -gt "$stops" ] && break
    kill -0 "$roll" 2>/dev/null || break
    sleep 0.1
  done
  run2_start=$(date +%s.%N)
  submit 2 >"$tmp/run2.log" 2>&1 || { cat "$tmp/run2.log"; die "run 2 failed across the rolling restart"; }
  run2_end=$(date +%s.%N)
  wait "$roll" || die "rolling_restart.yml failed"
  grep 'complete in' "$tmp/run2.log" || true
  check_outputs 2
  restarts=$(grep -c 'Drain and stop the peer' "$tmp/rolling.log" || true)
  [ "$restarts" -ge 4 ] || die "rolling_restart.yml restarted $restarts peers, not 4 (3 voters, 1 executor peer)"
  # The voters first, one at a time, then the executor peer.
  last=$(grep -A1 '^TASK \[plexus_node : Drain and stop the peer\]' "$tmp/rolling.log" |
    grep -oE '^(changed|ok): \[n[0-9]\]' | tail -n 1 | grep -oE 'n[0-9]')
  [ "$last" = n4 ] || die "rolling_restart.yml did not restart the executor peer n4 last (last: ${last:-none})"
  # What the peers' logs say happened while run 2 ran.
  during=$(python3 - "$run2_start" "$run2_end" "$tmp"/hosts/n*/var/log/plexus/node.log <<'EOF'
import datetime, sys
start, end = float(sys.argv[1]), float(sys.argv[2])
events = []
for path in sys.argv[3:]:
    peer = path.split("/hosts/")[1].split("/")[0]
    for line in open(path, errors="replace"):
        what = "drained" if "stopping: no new claims" in line else "started" if "peer started" in line else None
        if what:
            t = datetime.datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")).timestamp()
            if start <= t <= end:
                events.append(f"{peer} {what}")
print(", ".join(events))
EOF
)
  say "run 2 ($(awk -v a="$run2_start" -v b="$run2_end" 'BEGIN { printf "%.1f", b - a }')s) saw: ${during:-nothing}"
  [ -n "$during" ] || die "no peer was drained or restarted while run 2 ran: nothing was tested"
  passed=$((passed + 1))
  phase "conformance run 2 with rolling_restart.yml"
else
  [ "${CI:-}" = true ] && die "CI=true but no conformance data (PLEXUS_CONFORMANCE_DIR, PLEXUS_CAPILLARIES_DIR, ../shared/conformance)"
  say "skipped the conformance runs: no conformance data"
  playbook rolling.log rolling_restart.yml
  skipped=$((skipped + 2))
  phase "rolling_restart.yml"
fi

# --- 4. site.yml again: nothing changes -------------------------------------------------------
peer_pids() { for i in $hosts; do printf '%s ' "$(cat "$tmp/hosts/n$i/run/plexus/plexus-node.pid")"; done; }
before=$(peer_pids)
playbook site-2.log site.yml
recap=$(sed -n '/^PLAY RECAP/,$p' "$tmp/site-2.log" | grep -E 'ok=')
[ "$(grep -c . <<<"$recap")" = 5 ] || die "the recap of the second site.yml lacks hosts"
if grep -vqE 'changed=0 ' <<<"$recap"; then
  grep -B3 -E '^changed:' "$tmp/site-2.log" >&2 || true
  die "the second site.yml changed something"
fi
[ "$(peer_pids)" = "$before" ] || die "the second site.yml restarted a peer"
say "second site.yml: changed=0 on every host, no peer restarted"
passed=$((passed + 1))
phase "site.yml (second run)"

# --- 5. a config change on one peer restarts that peer only ----------------------------------
playbook site-3.log site.yml --limit n2 -e plexus_node_threads=1
read -r p1 p2 p3 p4 <<<"$before"
read -r q1 q2 q3 q4 <<<"$(peer_pids)"
[ "$p1 $p3 $p4" = "$q1 $q3 $q4" ] && [ "$p2" != "$q2" ] ||
  die "a config change on n2 restarted: n1 $p1->$q1, n2 $p2->$q2, n3 $p3->$q3, n4 $p4->$q4"
grep -q '^threads = 1$' "$tmp/hosts/n2/etc/plexus/node.toml" || die "n2's node.toml lacks threads = 1"
say "a config change on n2 restarted n2 only"
passed=$((passed + 1))
phase "site.yml --limit n2 with a changed config"

# --- 6. teardown.yml --------------------------------------------------------------------------
playbook teardown.log teardown.yml
for i in $hosts; do
  [ -z "$(ip netns pids "${nss[$((i - 1))]}" | xargs -r -n1 ps -o comm= -p | grep plexus-node)" ] ||
    die "a plexus-node still runs in ${nss[$((i - 1))]}"
  left=$(find "$tmp/hosts/n$i" -type f 2>/dev/null | head -n 3)
  [ -z "$left" ] || die "teardown left files on n$i: $left"
done
getent passwd "$test_user" >/dev/null && die "teardown left the user $test_user"
say "teardown.yml: no peer runs, no files, no user left"
passed=$((passed + 1))
phase "teardown.yml"

say "passed in $((SECONDS - start_all))s"
echo "ansible: $passed passed, 0 failed, $skipped skipped"
