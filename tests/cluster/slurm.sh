#!/usr/bin/env bash
# A one-node Slurm on this machine runs scripts/meshtrain.sbatch. munged, slurmctld and slurmd
# are configured in a temp dir and run in their own network namespace (a loopback only: their
# ports clash with nothing) and UTS namespace (hostname node0, the node's name). The test submits
# the sbatch script with `sbatch --wait` for 4 tasks (a 2x2 FSDP+TP run of a small model), and
# checks the job's status and output: the job header, every step's line, the end-of-run summary,
# and the final loss below the first. Every daemon is stopped on every exit path; the test is
# skipped (77) where the daemons cannot start.
# usage: slurm.sh SBATCH_SCRIPT MESHTRAIN TEXT_FILE WORK_DIR
set -u
SCRIPT=$1 MT=$2 TXT=$3 WORK=$4
skip() {
  echo "SKIP: $*"
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "the Slurm daemons need root"
for t in ip nsenter unshare munged slurmctld slurmd sbatch sinfo scontrol mpirun; do
  command -v "$t" >/dev/null 2>&1 ||
    skip "$t not found (Debian: munge, slurmctld, slurmd, slurm-client, openmpi-bin)"
done
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
D=$(mktemp -d /tmp/mt-slurm.XXXXXX) || skip "cannot make a temp dir"
NS=mt$$slurm
PIDS=()
# stop: every process in the namespace (daemons, the job's steps), the namespace, the temp dir.
stop() {
  local p sig
  for sig in TERM KILL; do
    for p in $(ip netns pids "$NS" 2>/dev/null); do kill -"$sig" "$p" 2>/dev/null; done
    for _ in $(seq 20); do [ -z "$(ip netns pids "$NS" 2>/dev/null)" ] && break; sleep 0.1; done
  done
  wait 2>/dev/null
  ip netns del "$NS" 2>/dev/null
  rm -rf "$D"
}
trap stop EXIT
trap 'exit 130' INT TERM HUP
ip netns add "$NS" 2>"$D/err" || skip "cannot create a network namespace: $(cat "$D/err")"
# Slurm resolves its listening address with AI_ADDRCONFIG, which needs a configured address
# besides loopback: a veth pair with both ends inside the namespace gives it one
ip -n "$NS" link set lo up && ip -n "$NS" link add s0 type veth peer name s1 &&
  ip -n "$NS" addr add 10.202.0.1/24 dev s0 && ip -n "$NS" link set s0 up &&
  ip -n "$NS" link set s1 up || skip "cannot configure the namespace's links"
# on NS (network only: /sys keeps its cgroup mounts, which slurmd needs), hostname node0: CMD...
on() { nsenter --net=/run/netns/"$NS" unshare --uts sh -c 'hostname node0 && exec "$@"' sh "$@"; }

mkdir -p "$D/state" "$D/spool" && chmod 711 "$D"
dd if=/dev/urandom of="$D/munge.key" bs=1024 count=1 status=none && chmod 400 "$D/munge.key"
on munged -F --force --socket="$D/munge.sock" --key-file="$D/munge.key" \
  --pid-file="$D/munged.pid" --log-file="$D/munged.log" --seed-file="$D/munged.seed" \
  >"$D/munged.out" 2>&1 &
PIDS+=($!)
cat >"$D/slurm.conf" <<CFG
ClusterName=meshtrain
SlurmctldHost=node0(10.202.0.1)
AuthType=auth/munge
AuthInfo=socket=$D/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=node0 NodeAddr=10.202.0.1 CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=node0 Default=YES MaxTime=10 State=UP
CFG
export SLURM_CONF=$D/slurm.conf
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # the job runs as root here
# the node claims 4 CPUs on this machine's 2 cores: idle ranks must yield (sbatch exports this)
export OMPI_MCA_mpi_yield_when_idle=1
for _ in $(seq 50); do [ -S "$D/munge.sock" ] && break; sleep 0.1; done
[ -S "$D/munge.sock" ] || { cat "$D/munged.out" "$D/munged.log" 2>/dev/null; skip "munged did not start"; }
on slurmctld -D -i -f "$D/slurm.conf" >"$D/slurmctld.out" 2>&1 &
PIDS+=($!)
on slurmd -D -N node0 -f "$D/slurm.conf" >"$D/slurmd.out" 2>&1 &
PIDS+=($!)
state= t0=$SECONDS
while [ $((SECONDS - t0)) -lt 60 ]; do # a loaded machine can take a while to bring Slurm up
  state=$(on timeout 5 sinfo -h -N -o %t 2>/dev/null)
  [ "$state" = idle ] && break
  for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || break 2; done
  sleep 0.3
done
if [ "$state" != idle ]; then
  tail -n 5 "$D/slurmctld.log" "$D/slurmd.log" "$D/slurmctld.out" "$D/slurmd.out" 2>/dev/null
  skip "the one-node Slurm did not come up (node state '${state}')"
fi
echo "Slurm up: $(on sinfo -h -o '%P %D %t %C')"

# the job: 4 tasks on the one node, FSDP over x and TP over y (both inside the node here). sbatch
# --wait gets 180 s, cut to what is left before CL_DEADLINE (seconds since the start; CMake sets
# it 30 s below the test's TIMEOUT, room for stop), so this guard, not CTest, ends a hung job.
guard=180
[ -n "${CL_DEADLINE:-}" ] && [ $((CL_DEADLINE - SECONDS)) -lt $guard ] && guard=$((CL_DEADLINE - SECONDS))
[ $guard -ge 1 ] || guard=1
on timeout $guard sbatch --wait --time=5 --nodes=1 --ntasks-per-node=4 --chdir="$WORK" \
  --output="$WORK/job-%j.out" --export=ALL,MESHTRAIN="$MT" "$SCRIPT" \
  --layers 2 --d-model 32 --heads 4 --kv-heads 2 --seq-len 16 --batch 8 --steps 6 \
  --eval-every 0 --data "$TXT" --mesh x=2,y=2 --dp x --zero 3 --tensor y >"$WORK/sbatch.out" 2>&1 &
wait $!
rc=$?
cat "$WORK/sbatch.out"
out=$(ls "$WORK"/job-*.out 2>/dev/null | head -1)
[ -n "$out" ] && sed 's/^/  | /' "$out"
fails=0
fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}
[ $rc -eq 0 ] || fail "sbatch --wait exited $rc$([ $rc -eq 124 ] && echo " (timed out after $guard s)")"
if [ -n "$out" ]; then
  grep -q "^meshtrain.sbatch: job [0-9]* on 1 node(s) (node0), 4 tasks" "$out" ||
    fail "no job header naming 1 node and 4 tasks"
  [ "$(grep -c '^step [1-6] | loss' "$out")" -eq 6 ] || fail "not 6 step lines"
  grep -q "^== summary: FSDP (ZeRO-3) over X + TP over Y, 6 steps" "$out" || fail "no summary"
  awk '/^step 1 \|/ { a = $5 } /^step 6 \|/ { b = $5 } END { exit !(a > 0 && b > 0 && b < a) }' \
    "$out" || fail "the loss did not go down from step 1 to step 6"
else
  fail "no job output"
fi
on scontrol show job 2>/dev/null | grep -q "JobState=COMPLETED" || fail "the job is not COMPLETED"
if [ $fails -ne 0 ]; then
  on scontrol show job 2>&1 | grep -E "JobState|Reason|ExitCode" | sed 's/^/  job: /'
  tail -n 15 "$D/slurmctld.log" "$D/slurmd.log" 2>/dev/null | sed 's/^/  /'
fi
[ $fails -eq 0 ] && echo "PASS scripts/meshtrain.sbatch under a one-node Slurm"
[ $fails -eq 0 ]
