#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A rig of simulated hosts on this machine (docs/multihost.md): one network namespace per host,
# each entered with its own host name (unshare --uts) and hosts file (/etc/netns/NS/hosts), joined
# by links shaped with tc (rate and one-way delay per direction), addresses from 198.18.0.0/15
# only. Two hosts share one veth pair; more hosts each have a veth pair to a bridge in a namespace
# of its own (a switch: every host's link has the rate, the switch is not a bottleneck).
#
#   multihost.sh [--id N|auto] up [--hosts N] [--rate R] [--delay D]     (auto: a free id, printed)
#   multihost.sh [--id N] run [--ranks 4,4] [--map blocks|node] [--timeout S] [--mca K V]... [-x VAR]...
#                             [--rate R] [--delay D] -- COMMAND...
#   multihost.sh [--id N] run --torchrun [--ranks 2,2] [--python PY] [--timeout S] -- SCRIPT ARGS...
#   multihost.sh [--id N] exec HOST -- COMMAND...
#   multihost.sh [--id N] status
#   multihost.sh [--id N] down
#
# Exit status: the command's for `run` (124 when --timeout ran out), 2 for a usage error, and
# 77 (kRigUnavailable) where the rig cannot be made here (not root, no ip/tc/unshare, namespaces or
# qdiscs refused), which the test tier reports as skipped.
set -euo pipefail

readonly kRigUnavailable=77
readonly kUsage=2
readonly kPrefix=chimera-rig
readonly kStateRoot=/run/chimera-rig
readonly kRdzvPort=29400
readonly kScriptDir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly kAgent="$kScriptDir/multihost-agent.sh"

# Defaults: a 2 Gbit/s link, about 15x slower than shared memory inside a host on the machine this
# was measured on, with no delay added to TCP's own (docs/multihost.md, "What it simulates").
rate="${CHIMERA_RIG_RATE:-2gbit}"
delay="${CHIMERA_RIG_DELAY:-0}"
id="${CHIMERA_RIG_ID:-}"

die() {
  local code="$1"
  shift
  printf 'multihost.sh: %s\n' "$*" >&2
  exit "$code"
}
log() { printf '==> rig %s: %s\n' "$id" "$*" >&2; }

# ---- names and addresses of rig $id ---------------------------------------------------------

host_ns() { printf '%s%s-h%s' "$kPrefix" "$id" "$1"; }
switch_ns() { printf '%s%s-sw' "$kPrefix" "$id"; }
# The rig's /24: 198.18.0.0/24 for rig 0 ... 198.19.255.0/24 for rig 511.
subnet() { printf '198.%d.%d' $((18 + id / 256)) $((id % 256)); }
cidr() { printf '%s.0/24' "$(subnet)"; }
host_addr() { printf '%s.%d' "$(subnet)" $(($1 + 1)); }
state_dir() { printf '%s/%s' "$kStateRoot" "$id"; }

# Every namespace of rig $id that exists (also a half-made rig's).
rig_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${kPrefix}${id}-(h[0-9]+|sw)\$" || true
}
rig_is_up() { [ -f "$(state_dir)/config" ] && ip netns list 2>/dev/null | grep -qE "^$(host_ns 0)( |\$)"; }
config_value() { sed -n "s/^$1=//p" "$(state_dir)/config"; }

# Host index of a host name (h3 or 3).
host_index() {
  local name="$1"
  name="${name#h}"
  [[ "$name" =~ ^[0-9]+$ ]] || return 1
  printf '%d' "$name"
}

# ---- preconditions ----------------------------------------------------------------------------

check_id() {
  [[ "$id" =~ ^[0-9]+$ ]] && [ "$id" -le 511 ] || die $kUsage "--id: expected 0..511, got '$id'"
}

# Refuses (exit 77) where this machine cannot host a rig.
require_rig_tools() {
  [ "$(id -u)" -eq 0 ] || die $kRigUnavailable "needs root to make network namespaces (running as uid $(id -u))"
  local tool
  for tool in ip tc unshare hostname; do
    command -v "$tool" >/dev/null 2>&1 || die $kRigUnavailable "needs '$tool' (iproute2 / util-linux), not found"
  done
}

# ---- up / down --------------------------------------------------------------------------------

# Shapes the egress of DEV in NS (each direction of a link is shaped once, by its sender): tbf at
# the rate, behind netem's one-way delay where one is asked for.
shape() {
  local ns="$1" dev="$2" parent=root
  ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
  if [ "$delay" != 0 ]; then
    ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000 || {
      echo "multihost.sh: tc cannot add netem (the kernel lacks sch_netem?): --delay cannot be simulated here" >&2
      return 1
    }
    parent="parent 1:1"
  fi
  # shellcheck disable=SC2086
  ip netns exec "$ns" tc qdisc add dev "$dev" $parent handle 10: tbf rate "$rate" burst 256kb latency 20ms || {
    echo "multihost.sh: tc cannot shape $dev to '$rate' with tbf" >&2
    return 1
  }
}

write_hosts_file() {
  local ns="$1" hosts="$2" i
  mkdir -p "/etc/netns/$ns"
  {
    printf '127.0.0.1\tlocalhost\n'
    for ((i = 0; i < hosts; ++i)); do printf '%s\th%d\n' "$(host_addr "$i")" "$i"; done
  } >"/etc/netns/$ns/hosts"
}

# Makes rig $id with $1 hosts; returns 1 (having said why) when the kernel refuses.
build_rig() {
  local hosts="$1" i ns sw
  for ((i = 0; i < hosts; ++i)); do
    ns="$(host_ns "$i")"
    ip netns add "$ns" || { echo "multihost.sh: cannot create network namespace $ns" >&2; return 1; }
    ip netns exec "$ns" ip link set lo up
    # IPv4 only: no IPv6 neighbour discovery in the link's byte counters.
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 || true
    write_hosts_file "$ns" "$hosts"
  done
  if [ "$hosts" -eq 2 ]; then
    # Both ends are made inside their namespaces, so each is eth0 and no name meets another rig's.
    ip link add eth0 netns "$(host_ns 0)" type veth peer name eth0 netns "$(host_ns 1)" || return 1
  else
    sw="$(switch_ns)"
    ip netns add "$sw" || { echo "multihost.sh: cannot create network namespace $sw" >&2; return 1; }
    ip netns exec "$sw" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 || true
    ip netns exec "$sw" ip link add br0 type bridge
    ip netns exec "$sw" ip link set br0 up
    for ((i = 0; i < hosts; ++i)); do
      ip link add eth0 netns "$(host_ns "$i")" type veth peer name "p$i" netns "$sw" || return 1
      ip netns exec "$sw" ip link set "p$i" master br0
      ip netns exec "$sw" ip link set "p$i" up
      shape "$sw" "p$i" || return 1
    done
  fi
  for ((i = 0; i < hosts; ++i)); do
    ns="$(host_ns "$i")"
    ip netns exec "$ns" ip addr add "$(host_addr "$i")/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    shape "$ns" eth0 || return 1
  done
}

# Kills what still runs in the rig's namespaces (what the rig started), then removes the
# namespaces (their links and qdiscs go with them), the hosts files and the state.
teardown() {
  local ns pids round
  for round in TERM KILL; do
    pids=""
    for ns in $(rig_namespaces); do pids+=" $(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"; done
    pids="$(echo "$pids" | xargs -n1 2>/dev/null | grep -vx "$$" || true)"
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill -s "$round" $pids 2>/dev/null || true
    [ "$round" = KILL ] || sleep 1
  done
  for ns in $(rig_namespaces); do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf /etc/netns/"${kPrefix}${id}"-h* /etc/netns/"${kPrefix}${id}"-sw "$(state_dir)"
  rmdir "$kStateRoot" 2>/dev/null || true
}

# Claims rig $id (mkdir is atomic); 1 when someone holds it. Tries again where another rig's
# teardown removed the empty state root in between.
claim_rig() {
  local try
  for try in 1 2 3; do
    mkdir -p "$kStateRoot" 2>/dev/null || true
    if mkdir "$(state_dir)" 2>/dev/null; then break; fi
    if [ -d "$(state_dir)" ] || [ "$try" = 3 ]; then return 1; fi
  done
  if [ -n "$(rig_namespaces)" ]; then rmdir "$(state_dir)"; return 1; fi
}

# The first free rig id from 1 (0 is the default of a hand-made rig).
claim_free_id() {
  local candidate
  for ((candidate = 1; candidate <= 511; ++candidate)); do
    id="$candidate"
    if claim_rig; then return 0; fi
  done
  die $kRigUnavailable "every rig id 1..511 is taken"
}

# Rigs that `run` brought up and whose run died without tearing down (SIGKILL): removed.
reap_orphans() {
  local dir owner saved="$id"
  for dir in "$kStateRoot"/*/; do
    [ -f "$dir/config" ] || continue
    owner="$(sed -n 's/^owner=//p' "$dir/config")"
    if [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null; then
      id="$(basename "$dir")"
      log "removing the rig of run $owner, which ended without removing it"
      teardown
    fi
  done
  id="$saved"
}

# Brings rig $id up with $1 hosts (claimed already); owner $2 (a pid, or empty for `up`).
bring_up() {
  local hosts="$1" owner="$2"
  printf 'hosts=%s\nrate=%s\ndelay=%s\nowner=%s\n' "$hosts" "$rate" "$delay" "$owner" >"$(state_dir)/config"
  if ! build_rig "$hosts"; then
    teardown
    die $kRigUnavailable "cannot make the rig's namespaces or links here (see above); nothing left behind"
  fi
  log "$hosts hosts h0..h$((hosts - 1)) on $(cidr), links $rate, $delay one way"
}

cmd_up() {
  local hosts=2
  while [ $# -gt 0 ]; do
    case "$1" in
      --hosts) hosts="${2:?--hosts needs a value}"; shift 2 ;;
      --rate) rate="${2:?--rate needs a value}"; shift 2 ;;
      --delay) delay="${2:?--delay needs a value}"; shift 2 ;;
      *) die $kUsage "up: unknown option '$1'" ;;
    esac
  done
  [[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 2 ] && [ "$hosts" -le 254 ] ||
    die $kUsage "--hosts: expected 2..254, got '$hosts'"
  require_rig_tools
  id="${id:-0}"
  if [ "$id" = auto ]; then
    claim_free_id
    bring_up "$hosts" ""
    echo "$id"
    return 0
  fi
  check_id
  if rig_is_up; then
    [ "$(config_value hosts)" = "$hosts" ] ||
      die $kUsage "rig $id is up with $(config_value hosts) hosts, not $hosts: run 'down' first"
    restyle_links
    return 0
  fi
  claim_rig || { teardown; claim_rig; } || die $kUsage "cannot claim rig $id"
  bring_up "$hosts" ""
}

# `up` of a rig that is up: the links take the rate and delay given now.
restyle_links() {
  local hosts i
  hosts="$(config_value hosts)"
  for ((i = 0; i < hosts; ++i)); do shape "$(host_ns "$i")" eth0; done
  if [ "$hosts" -gt 2 ]; then
    for ((i = 0; i < hosts; ++i)); do shape "$(switch_ns)" "p$i"; done
  fi
  sed -i "s/^rate=.*/rate=$rate/; s/^delay=.*/delay=$delay/" "$(state_dir)/config"
  log "already up ($hosts hosts); links $rate, $delay one way"
}

cmd_down() {
  [ $# -eq 0 ] || die $kUsage "down: unknown option '$1'"
  require_rig_tools
  id="${id:-0}"
  check_id
  teardown
  log "down"
}

cmd_status() {
  [ $# -eq 0 ] || die $kUsage "status: unknown option '$1'"
  require_rig_tools
  local ids dir i hosts
  if [ -n "$id" ]; then ids="$id"; else ids="$(ls "$kStateRoot" 2>/dev/null || true)"; fi
  [ -n "$ids" ] || { echo "no rig is up"; return 0; }
  for id in $ids; do
    dir="$(state_dir)"
    if ! rig_is_up; then echo "rig $id: down"; continue; fi
    hosts="$(config_value hosts)"
    echo "rig $id: $hosts hosts on $(cidr), links $(config_value rate), $(config_value delay) one way$(
      [ -n "$(config_value owner)" ] && echo ", brought up by run $(config_value owner)")"
    for ((i = 0; i < hosts; ++i)); do
      printf '  h%d  %-15s  ns %-22s tx %s B  rx %s B\n' "$i" "$(host_addr "$i")" "$(host_ns "$i")" \
        "$(ip netns exec "$(host_ns "$i")" cat /sys/class/net/eth0/statistics/tx_bytes)" \
        "$(ip netns exec "$(host_ns "$i")" cat /sys/class/net/eth0/statistics/rx_bytes)"
    done
  done
}

# ---- entering a host --------------------------------------------------------------------------

# Runs COMMAND... in host $1's namespace with its host name (the agent's and run's way in).
exec_in_host() {
  local i="$1"
  shift
  ip netns exec "$(host_ns "$i")" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "h$i" "$@"
}

cmd_exec() {
  [ $# -ge 1 ] || die $kUsage "exec: expected HOST -- COMMAND..."
  local host="$1" i
  shift
  [ "${1:-}" = -- ] && shift
  [ $# -ge 1 ] || die $kUsage "exec: no command given"
  id="${id:-0}"
  check_id
  rig_is_up || die $kUsage "rig $id is not up"
  i="$(host_index "$host")" && [ "$i" -lt "$(config_value hosts)" ] ||
    die $kUsage "exec: '$host' is not a host of rig $id (h0..h$(($(config_value hosts) - 1)))"
  exec_in_host "$i" "$@"
}

# ---- run --------------------------------------------------------------------------------------

child=""
owned=0
# On exit, Ctrl-C or a signal: stop the command (by its pid), and remove the rig if run made it.
finish() {
  local status=$?
  trap - EXIT INT TERM HUP
  # shellcheck disable=SC2086
  if [ -n "$child" ]; then kill -TERM $child 2>/dev/null || true; fi
  if [ "$owned" = 1 ]; then teardown; fi
  exit "$status"
}

# The environment the ranks need, as -x flags: what is set of the usual variables, and CHIMERA_*.
forwarded_env() {
  local name
  for name in PATH LD_LIBRARY_PATH PYTHONPATH VIRTUAL_ENV CUDA_VISIBLE_DEVICES; do
    if [ -n "${!name+x}" ]; then printf '%s\n' -x "$name"; fi
  done
  for name in $(compgen -e | grep '^CHIMERA_' || true); do printf '%s\n' -x "$name"; done
}

cmd_run() {
  local ranks="4,4" map=blocks timeout_s="" torchrun=0 python="python3" extra=() counts=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --ranks) ranks="${2:?--ranks needs a value}"; shift 2 ;;
      --map) map="${2:?--map needs a value}"; shift 2 ;;
      --timeout) timeout_s="${2:?--timeout needs a value}"; shift 2 ;;
      --rate) rate="${2:?--rate needs a value}"; shift 2 ;;
      --delay) delay="${2:?--delay needs a value}"; shift 2 ;;
      --mca) extra+=(--mca "${2:?--mca needs KEY VALUE}" "${3:?--mca needs KEY VALUE}"); shift 3 ;;
      -x) extra+=(-x "${2:?-x needs a variable}"); shift 2 ;;
      --torchrun) torchrun=1; shift ;;
      --python) python="${2:?--python needs a value}"; shift 2 ;;
      --) shift; break ;;
      *) die $kUsage "run: unknown option '$1' (the command follows --)" ;;
    esac
  done
  [ $# -ge 1 ] || die $kUsage "run: no command given (after --)"
  [[ "$ranks" =~ ^[0-9]+(,[0-9]+)+$ ]] || die $kUsage "--ranks: expected counts per host such as 4,4 or 3,5, got '$ranks'"
  IFS=, read -r -a counts <<<"$ranks"
  local count
  for count in "${counts[@]}"; do [ "$count" -ge 1 ] || die $kUsage "--ranks: every host needs a rank ('$ranks')"; done
  case "$map" in blocks | node) ;; *) die $kUsage "--map: expected blocks or node, got '$map'" ;; esac
  [ -z "$timeout_s" ] || [[ "$timeout_s" =~ ^[0-9]+$ ]] || die $kUsage "--timeout: expected seconds, got '$timeout_s'"
  if [ "$torchrun" = 1 ] && [ "$map" != blocks ]; then die $kUsage "--map applies to mpirun launches"; fi
  [ "$torchrun" = 1 ] || command -v mpirun >/dev/null 2>&1 || die $kRigUnavailable "needs 'mpirun', not found"
  require_rig_tools

  local hosts=${#counts[@]}
  trap finish EXIT INT TERM HUP
  if [ -n "$id" ]; then
    check_id
  fi
  if [ -n "$id" ] && rig_is_up; then
    [ "$(config_value hosts)" -ge "$hosts" ] ||
      die $kUsage "rig $id has $(config_value hosts) hosts, --ranks names $hosts"
  else
    reap_orphans
    if [ -n "$id" ]; then
      claim_rig || die $kUsage "rig $id is being made or removed by someone else"
    else
      claim_free_id
    fi
    owned=1
    bring_up "$hosts" "$$"
  fi
  export CHIMERA_RIG_ID="$id"

  local launch=()
  if [ -n "$timeout_s" ]; then launch=(timeout --kill-after=10 "$timeout_s"); fi
  if [ "$torchrun" = 1 ]; then
    run_torchrun "$python" "${launch[@]}" -- "${counts[@]}" -- "$@"
    return
  fi
  local host_list="" i total=0
  for ((i = 0; i < hosts; ++i)); do
    host_list+="${host_list:+,}h$i:${counts[$i]}"
    total=$((total + counts[i]))
  done
  local mapping=()
  if [ "$map" = node ]; then mapping=(--map-by node); fi
  local env_flags=()
  mapfile -t env_flags < <(forwarded_env)
  local root_flags=(--oversubscribe)
  if [ "$(id -u)" -eq 0 ]; then root_flags+=(--allow-run-as-root); fi
  # The rig's hosts share this machine's cores. Open MPI yields the core while it waits only when
  # it sees more ranks than slots, and the slots it sees are the ones the rig declares per host:
  # with more ranks than cores, ranks that spin while waiting hold the cores their peers need,
  # and every blocking call pays scheduler time slices (milliseconds) instead of the link.
  local yield_flags=()
  if [ "$total" -gt "$(nproc)" ] && [[ " ${extra[*]} " != *" mpi_yield_when_idle "* ]]; then
    yield_flags=(--mca mpi_yield_when_idle 1)
  fi
  # pml ob1 over self/vader/tcp: shared memory inside a host, TCP (through the rig's CIDR) across.
  local mpirun_args=(mpirun --host "$host_list" -np "$total" "${mapping[@]}" "${root_flags[@]}"
    --mca plm_rsh_agent "$kAgent" --mca pml ob1 --mca btl self,vader,tcp
    --mca btl_tcp_if_include "$(cidr)" --mca oob_tcp_if_include "$(cidr)" "${yield_flags[@]}"
    "${env_flags[@]}" "${extra[@]}" "$@")
  log "mpirun --host $host_list -np $total${mapping:+ --map-by node} -- $*"
  local status=0
  exec_in_host 0 "${launch[@]}" "${mpirun_args[@]}" &
  child=$!
  wait "$child" || status=$?
  child=""
  return "$status"
}

# torchrun on every host (c10d rendezvous at h0's address), waited for; the first failure stops
# the others.
run_torchrun() {
  local python="$1" launch=() counts=() i status=0 pids=() pid
  shift
  while [ "$1" != -- ]; do launch+=("$1"); shift; done
  shift
  while [ "$1" != -- ]; do counts+=("$1"); shift; done
  shift
  local hosts=${#counts[@]} endpoint
  endpoint="$(host_addr 0):$kRdzvPort"
  log "torchrun --nnodes $hosts --nproc-per-node ${counts[*]} --rdzv-endpoint $endpoint -- $*"
  for ((i = 0; i < hosts; ++i)); do
    exec_in_host "$i" "${launch[@]}" "$python" -m torch.distributed.run --nnodes "$hosts" \
      --nproc-per-node "${counts[$i]}" --rdzv-backend c10d --rdzv-endpoint "$endpoint" \
      --rdzv-id "rig$id-$$" "$@" &
    pids+=($!)
  done
  child="${pids[*]}"
  local running=("${pids[@]}") one
  while [ ${#running[@]} -gt 0 ]; do
    one=0
    wait -n -p pid "${running[@]}" || one=$?
    running=($(printf '%s\n' "${running[@]}" | grep -vx "$pid" || true))
    if [ "$one" -ne 0 ] && [ "$status" -eq 0 ]; then
      status=$one
      log "a host's torchrun exited with $one: stopping the others"
      kill -TERM "${running[@]}" 2>/dev/null || true
    fi
  done
  child=""
  return "$status"
}

# ---- main -------------------------------------------------------------------------------------

usage() { sed -n '3,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

main() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --id) id="${2:?--id needs a value}"; shift 2 ;;
      -h | --help) usage; exit 0 ;;
      *) break ;;
    esac
  done
  [ $# -ge 1 ] || { usage >&2; exit $kUsage; }
  local subcommand="$1"
  shift
  case "$subcommand" in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    exec) cmd_exec "$@" ;;
    run) cmd_run "$@" ;;
    *) die $kUsage "unknown subcommand '$subcommand' (up, run, exec, status, down)" ;;
  esac
}

# One line, so that bash has read all of it before it runs (an edit of this file while a run
# goes on does not reach the run).
main "$@"; exit $?
