#!/usr/bin/env bash
# What sharing a CPU costs a step of compute and a ring step (build/timeshare, bench/timeshare.c):
# the measurement behind the prediction on a shared host (train/observe/share.h,
# docs/fidelity.md "On a shared host"). For each compute time C between exchanges and each
# message size, the mean iteration (C µs of compute, one MPI_Sendrecv with a peer) of:
#   1/CPU       2 ranks on 2 CPUs (taskset): a CPU per rank
#   2/CPU       4 ranks on the same 2 CPUs, the demo's pattern (r^1 and r^2 in turn); Open MPI
#               yields (mpirun --oversubscribe: ranks outnumber its slots)
#   1 CPU spin  2 ranks on 1 CPU (taskset): Open MPI counts the machine's cores as slots, so its
#               waits spin
#   1 CPU yield the same with --mca mpi_yield_when_idle 1
# The model (share.h) says: with yielding waits a step takes k = 2 times as long as on a CPU per
# rank (the ratio columns); with spinning waits each exchange waits for time slices.
# Needs 2 CPUs. Prints a Markdown table (and the CPU). usage: bench/timeshare.sh [BUILD_DIR]
# env: COMPUTE="0 300 1000 3000" (µs) BYTES="4 262144" SECONDS_PER_RUN=1
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
TS="$BUILD/timeshare"
[ -x "$TS" ] || { echo "timeshare: $TS not found; build first" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cpus=($(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' |
        awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) print i; else print $1 }'))
[ "${#cpus[@]}" -ge 2 ] || { echo "timeshare: needs 2 CPUs" >&2; exit 2; }
two="${cpus[0]},${cpus[1]}" one="${cpus[0]}"
COMPUTE=${COMPUTE:-0 300 1000 3000}
BYTES=${BYTES:-4 262144}
SPR=${SECONDS_PER_RUN:-1}
# iteration TASKSET NP PATTERN C BYTES [MPIRUN FLAGS]: the mean iteration in µs
iteration() {
  local on=$1 np=$2 pat=$3 c=$4 b=$5
  shift 5
  taskset -c "$on" mpirun --oversubscribe --bind-to none "$@" -np "$np" "$TS" "$c" "$SPR" "$b" "$pat" |
    sed -n 's/.*| iteration \([0-9.]*\) us.*/\1/p'
}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| compute µs | bytes | 1/CPU µs | 2/CPU µs | 2/CPU ÷ 1/CPU | 1 CPU spin µs | 1 CPU yield µs | yield ÷ 1/CPU |"
echo "|---|---|---|---|---|---|---|---|"
for c in $COMPUTE; do
  for b in $BYTES; do
    a=$(iteration "$two" 2 pairs "$c" "$b")
    s=$(iteration "$two" 4 alternate "$c" "$b")
    p=$(iteration "$one" 2 pairs "$c" "$b")
    y=$(iteration "$one" 2 pairs "$c" "$b" --mca mpi_yield_when_idle 1)
    awk -v c="$c" -v b="$b" -v a="$a" -v s="$s" -v p="$p" -v y="$y" 'BEGIN{
      printf "| %s | %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", c, b, a, s, s / a, p, y, y / a}'
  done
done
