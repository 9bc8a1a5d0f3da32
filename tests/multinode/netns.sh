# Sourced by the two-"machine" tests and benchmarks: make_two_nodes <name> makes two network
# namespaces joined by a veth pair ($NS_A at $ADDR_A, $NS_B at $ADDR_B; the caller sets both
# addresses first), a scratch folder $WORK, and a trap that kills what in_ns started and deletes
# the namespaces on exit. Without root, or where namespaces cannot be made, it says why and the
# script exits 0. Expects $MAIN (//trainer:main) to be set before in_ns runs.

CHILDREN=()

say() { echo "${SCRIPT_NAME:-netns}: $*"; }
fail() {
  say "FAIL: $*"
  exit 1
}
skip() {
  say "SKIPPED: $*"
  exit 0
}

cleanup() {
  local pid ns
  for pid in "${CHILDREN[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for ns in "$NS_A" "$NS_B"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
}

make_two_nodes() {
  SCRIPT_NAME=${SCRIPT_NAME:-$1_test}
  WORK=$(mktemp -d "${TEST_TMPDIR:-/tmp}/$1.XXXXXX")
  local id="$$$((RANDOM % 100))" # unique per run: namespace and interface names (<= 15 chars)
  NS_A="ztmn${id}a" NS_B="ztmn${id}b" VETH_A="ztv${id}a" VETH_B="ztv${id}b"
  trap cleanup EXIT
  [ "$(id -u)" -eq 0 ] || skip "needs root to make network namespaces (ip netns add)"
  command -v ip >/dev/null || skip "no 'ip' command (Debian package iproute2; tools/setup.sh)"
  ip netns add "$NS_A" 2>"$WORK/netns.err" ||
    skip "ip netns add failed: $(head -n 1 "$WORK/netns.err")"
  ip netns add "$NS_B"
  ip link add "$VETH_A" type veth peer name "$VETH_B"
  ip link set "$VETH_A" netns "$NS_A"
  ip link set "$VETH_B" netns "$NS_B"
  ip -n "$NS_A" addr add "$ADDR_A/24" dev "$VETH_A"
  ip -n "$NS_B" addr add "$ADDR_B/24" dev "$VETH_B"
  for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
  ip -n "$NS_A" link set "$VETH_A" up
  ip -n "$NS_B" link set "$VETH_B" up
}

# "step loss" lines of a run's metrics.csv, in step order.
losses() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "loss") c = i; next }
           c && $c != "" { print $1, $c }' "$WORK/$1/t/metrics.csv" 2>/dev/null
}

# in_ns <ns> <log> <env...> -- <args...>: //trainer:main in the namespace, in the background.
in_ns() {
  local ns=$1 log=$2
  shift 2
  local env=()
  while [ "$1" != "--" ]; do
    env+=("$1")
    shift
  done
  shift
  ip netns exec "$ns" env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u SLURM_PROCID \
    -u GLOO_SOCKET_IFNAME "${env[@]}" ${PROGRAM:-"$MAIN"} "$@" >"$log" 2>&1 &
  CHILDREN+=($!)
  LAST=$!
}

wait_all() {  # wait_all <what> <pids...>: every one must exit 0
  local what=$1 pid rc
  shift
  for pid in "$@"; do
    rc=0
    wait "$pid" || rc=$?
    [ "$rc" -eq 0 ] || fail "$what: a process exited $rc; logs: $(tail -n 3 "$WORK"/*.log)"
  done
}

