# A cluster of HOSTS "hosts" on this machine (sourced by the tests in this folder).
#
# Each host is a network namespace with its own address, its own UTS namespace (so its own
# hostname, as MPI and the placement table see it) and an sshd listening on that address only.
# The hosts' veth links meet on a bridge in a further "switch" namespace, so nothing is added to
# the machine's own network: every address used here exists only inside these namespaces. The
# file system is shared, as NFS or Lustre would be on a cluster. mpirun runs on the first host,
# as on a cluster's first node, and starts an orted on every other host over ssh; ranks on
# different hosts talk TCP over the veth links, ranks on one host use shared memory.
#
#   . netns.sh
#   cluster_up HOSTS [RATE]   # RATE (e.g. 2gbit): each host's link shaped by a token bucket
#   cluster_mpirun -np 4 --map-by ppr:2:node prog args...   # mpirun on host 0, hostfile given
#   (cluster_down runs on every exit path: trap set by cluster_up)
# Each mpirun is guarded by `timeout`, at most CL_TIMEOUT (120 s) and never past CL_DEADLINE
# (cl_guard), so that the guard fires before the test's CTest TIMEOUT.
#
# Skips (exit 77, with the reason) where the machine does not allow it: not root, no iproute2,
# openssh-server or util-linux, or namespaces not permitted. Variables after cluster_up:
#   CL_DIR (temp dir: keys, configs, logs, hostfile), CL_HOSTFILE, CL_ADDR[i], CL_NAME[i],
#   CL_NS[i] (namespace of host i), CL_IF (the hosts' interface name), CL_NET (their subnet).

CL_IF=eth0
CL_NET=10.201.0.0/24
CL_DIR=
CL_NS=() CL_ADDR=() CL_NAME=() CL_SSHD_PID=()
CL_SWITCH=

cl_skip() {
  echo "SKIP: $*"
  exit 77
}

# cluster_down: ends every process in the hosts' namespaces (sshd, its sessions, orted, ranks,
# a still running mpirun), removes the namespaces and the temp dir. Idempotent; runs on every exit
# path (trap set by cluster_up).
cluster_down() {
  local p ns left sig
  for sig in TERM KILL; do
    left=0
    for ns in "${CL_NS[@]}"; do
      for p in $(ip netns pids "$ns" 2>/dev/null); do kill -"$sig" "$p" 2>/dev/null && left=1; done
    done
    [ $left -eq 0 ] && break
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      left=0
      for ns in "${CL_NS[@]}"; do [ -n "$(ip netns pids "$ns" 2>/dev/null)" ] && left=1; done
      [ $left -eq 0 ] && break
      sleep 0.1
    done
  done
  for ns in "${CL_NS[@]}" $CL_SWITCH; do ip netns del "$ns" 2>/dev/null; done
  CL_NS=() CL_SWITCH= CL_SSHD_PID=()
  [ -n "$CL_DIR" ] && rm -rf "$CL_DIR"
  CL_DIR=
}

cl_need() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null 2>&1 || cl_skip "$t not found (Debian: iproute2, openssh-server, openssh-client, util-linux)"
  done
}

# cluster_up HOSTS [RATE]
cluster_up() {
  local hosts=$1 rate=${2:-} i tag=mt$$
  [ "$(id -u)" -eq 0 ] || cl_skip "network namespaces need root"
  cl_need ip unshare ssh ssh-keygen /usr/sbin/sshd
  [ -z "$rate" ] || cl_need tc
  trap cluster_down EXIT
  # mpirun refuses root without these; -x passes them to the ranks (cluster_mpirun)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  trap 'exit 130' INT TERM HUP
  CL_DIR=$(mktemp -d /tmp/mt-cluster.XXXXXX) || cl_skip "cannot make a temp dir"
  chmod 755 "$CL_DIR"
  CL_SWITCH=${tag}sw
  ip netns add "$CL_SWITCH" 2>"$CL_DIR/err" ||
    cl_skip "cannot create a network namespace: $(cat "$CL_DIR/err")"
  ip -n "$CL_SWITCH" link add br0 type bridge &&
    ip -n "$CL_SWITCH" link set br0 up &&
    ip -n "$CL_SWITCH" link set lo up || cl_skip "cannot make a bridge in a namespace"
  for ((i = 0; i < hosts; i++)); do
    CL_NS[i]=${tag}h$i CL_ADDR[i]=10.201.0.$((i + 1)) CL_NAME[i]=node$i
    ip netns add "${CL_NS[i]}" || cl_skip "cannot create namespace ${CL_NS[i]}"
    ip -n "$CL_SWITCH" link add "p$i" type veth peer name "$CL_IF" netns "${CL_NS[i]}" &&
      ip -n "$CL_SWITCH" link set "p$i" master br0 &&
      ip -n "$CL_SWITCH" link set "p$i" up &&
      ip -n "${CL_NS[i]}" link set lo up &&
      ip -n "${CL_NS[i]}" addr add "${CL_ADDR[i]}/24" dev "$CL_IF" &&
      ip -n "${CL_NS[i]}" link set "$CL_IF" up || cl_skip "cannot link host $i to the bridge"
    if [ -n "$rate" ]; then
      ip netns exec "${CL_NS[i]}" tc qdisc add dev "$CL_IF" root tbf rate "$rate" burst 1mb \
        latency 20ms || cl_skip "tc cannot shape the link (tbf) to $rate"
    fi
  done
  cl_keys && cl_sshd "$hosts" || exit 1
}

# Keys (host and user) and the ssh client's config, all in CL_DIR.
cl_keys() {
  ssh-keygen -q -t ed25519 -N '' -f "$CL_DIR/host_key" &&
    ssh-keygen -q -t ed25519 -N '' -f "$CL_DIR/id" &&
    cp "$CL_DIR/id.pub" "$CL_DIR/authorized_keys" || return 1
  local i
  : >"$CL_DIR/known_hosts"
  for ((i = 0; i < ${#CL_NS[@]}; i++)); do
    echo "${CL_ADDR[i]} $(cat "$CL_DIR/host_key.pub")" >>"$CL_DIR/known_hosts"
  done
  cat >"$CL_DIR/ssh_config" <<CFG
Host *
  IdentityFile $CL_DIR/id
  IdentitiesOnly yes
  UserKnownHostsFile $CL_DIR/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 10
  LogLevel ERROR
CFG
}

# One sshd per host, in its namespaces, bound to its address; then wait until each answers.
cl_sshd() {
  local hosts=$1 i
  # sshd's privilege separation directory, as the openssh-server service makes it at boot. Left
  # in place: removing it would break the sshd of a concurrent run.
  mkdir -p /run/sshd
  : >"$CL_DIR/hostfile"
  for ((i = 0; i < hosts; i++)); do
    cat >"$CL_DIR/sshd_config.$i" <<CFG
ListenAddress ${CL_ADDR[i]}
HostKey $CL_DIR/host_key
AuthorizedKeysFile $CL_DIR/authorized_keys
PidFile $CL_DIR/sshd.$i.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 64
MaxSessions 64
CFG
    ip netns exec "${CL_NS[i]}" unshare --uts \
      sh -c "hostname ${CL_NAME[i]} && exec /usr/sbin/sshd -D -e -f $CL_DIR/sshd_config.$i" \
      >"$CL_DIR/sshd.$i.log" 2>&1 &
    CL_SSHD_PID[i]=$!
    echo "${CL_ADDR[i]} slots=2" >>"$CL_DIR/hostfile"
  done
  CL_HOSTFILE=$CL_DIR/hostfile
  for ((i = 0; i < hosts; i++)); do
    local ok=0 t0=$SECONDS
    while [ $((SECONDS - t0)) -lt 60 ]; do # a loaded machine can take a while to start sshd
      if out=$(cl_exec 0 ssh -F "$CL_DIR/ssh_config" "${CL_ADDR[i]}" hostname 2>&1) &&
         [ "$out" = "${CL_NAME[i]}" ]; then ok=1; break; fi
      kill -0 "${CL_SSHD_PID[i]}" 2>/dev/null || break
      sleep 0.2
    done
    if [ $ok -eq 0 ]; then
      echo "sshd of host $i did not answer: $out"; sed 's/^/  | /' "$CL_DIR/sshd.$i.log"
      cl_skip "sshd cannot serve inside a network namespace here"
    fi
  done
}

# cl_exec HOST CMD...: CMD in host HOST's namespaces (network, and UTS with its hostname).
cl_exec() {
  local h=$1
  shift
  ip netns exec "${CL_NS[h]}" unshare --uts sh -c 'hostname "$0" && exec "$@"' "${CL_NAME[h]}" "$@"
}

# cl_guard: the seconds one command may take: CL_TIMEOUT (default 120), cut to what is left before
# CL_DEADLINE (seconds since the script started; CMake sets it 30 s below the test's TIMEOUT, room
# for cluster_down), so that a hang ends in the test's own guard, with its message and teardown,
# never in CTest's kill, which would leave the daemons running.
cl_guard() {
  local t=${CL_TIMEOUT:-120}
  [ -n "${CL_DEADLINE:-}" ] && [ $((CL_DEADLINE - SECONDS)) -lt "$t" ] && t=$((CL_DEADLINE - SECONDS))
  [ "$t" -ge 1 ] || t=1
  echo "$t"
}

# cluster_mpirun ARGS...: mpirun on host 0 with CL_HOSTFILE; remote orted over ssh; TCP between
# hosts on CL_IF only, shared memory within a host. The ranks get the run-as-root permission and
# every OPENBLAS_* variable of this environment (-x): a rank that picked another sgemm kernel
# (OPENBLAS_CORETYPE) would round differently, and runs would no longer be bit-identical across
# placements. The hosts share this machine's cores, so idle ranks yield (as --oversubscribe does).
# Guarded by cl_guard: status 124 and a line on stderr when it runs out of time.
cluster_mpirun() {
  local xs=(-x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM -x OPENBLAS_NUM_THREADS=1) v
  local t rc
  for v in $(compgen -e); do
    case $v in OPENBLAS_NUM_THREADS) ;; OPENBLAS_* | MESHTRAIN_QUICK_START) xs+=(-x "$v") ;; esac
  done
  t=$(cl_guard)
  cl_exec 0 timeout "$t" "${CL_MPIRUN:-mpirun}" --hostfile "$CL_HOSTFILE" \
    --mca plm_rsh_agent "ssh -F $CL_DIR/ssh_config" --mca mpi_yield_when_idle 1 \
    --mca btl self,vader,tcp --mca btl_tcp_if_include "$CL_NET" \
    --mca oob_tcp_if_include "$CL_NET" --bind-to none "${xs[@]}" "$@" &
  wait $! # interruptible: a signal runs the traps now, not when mpirun ends
  rc=$?
  [ $rc -eq 124 ] && echo "cluster_mpirun: mpirun timed out after $t s (killed)" >&2
  return $rc
}

# cl_tx_bytes HOST: bytes host HOST has sent on its link so far.
cl_tx_bytes() {
  ip netns exec "${CL_NS[$1]}" cat "/sys/class/net/$CL_IF/statistics/tx_bytes"
}
