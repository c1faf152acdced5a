#!/usr/bin/env bash
# The prediction on a shared host (train/observe/share.h) through the meshtrain command, on
# placements the test makes with taskset:
#  - 2 ranks on 2 CPUs: the start-up says no CPU is shared, and every --metrics line's pred_ms is
#    its pred_dedicated_ms (the prediction on a CPU per rank), digit for digit; no step line
#    shows a dedicated column;
#  - 2 ranks on 1 CPU: the start-up says 2 threads per CPU and that pred includes it; every step
#    line shows the dedicated column, every pred_ms exceeds its pred_dedicated_ms; the --bench
#    summary's predicted step is the dedicated one plus (share − 1) × the predicted compute (DP
#    without --overlap: every collective blocks, so the replay adds the compute's growth whole);
#  - the "waits:" line: on 1 CPU the waits nap after 0.05 ms; on 2 CPUs they poll 20 ms where
#    rank 0's core share at start-up was at least 0.9, else 0.05 (mesh_spin_auto).
# Nothing is timed: the checks are of what the run predicted from its own events.
# usage: shared_host.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
MPI=$1 MT=$2 TXT=$3 WORK=$4
command -v taskset >/dev/null || { echo "skip: no taskset"; exit 77; }
mkdir -p "$WORK"
cpus=($(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' |
        awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) print i; else print $1 }'))
model=(--layers 2 --d-model 64 --heads 4 --d-ff 128 --seq-len 16 --batch 8 --mesh x=2 --dp x)
train=(--eval-every 0 --data "$TXT") # training's flags (--bench refuses them)
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
run() { # run CPUS LOG ARGS...: 2 ranks on the CPUs listed (taskset -c)
  local on=$1 log=$2
  shift 2
  taskset -c "$on" "$MPI" --oversubscribe --bind-to none -np 2 "$MT" "${model[@]}" "$@" \
    >"$log" 2>&1 || { echo "FAIL: taskset -c $on: meshtrain exited $?"; cat "$log"; exit 1; }
}

# rows JSONL CONDITION: how many --metrics lines meet the awk CONDITION on $1 = pred_ms and
# $2 = pred_dedicated_ms
rows() {
  sed -n 's/.*"pred_ms":\([0-9.]*\),.*"pred_dedicated_ms":\([0-9.]*\),.*/\1 \2/p' "$1" |
    awk "$2" | wc -l
}
# cores WHAT LOG REGEX: the start-up's "cores:" line matches REGEX
cores() {
  grep -qE "^cores: $3" "$2" && echo "ok   $1" || { fail "$1: the 'cores:' line:"; grep '^cores' "$2"; }
}
# all3 WHAT COUNT FILE: COUNT is 3 (of 3 steps), else FILE is shown
all3() {
  [ "$2" -eq 3 ] && echo "ok   $1 in 3 of 3" || { fail "$1 in $2 of 3:"; cat "$3"; }
}
# placed TAG CPUS WHAT REGEX PRED_WHAT CONDITION: 3 steps of 2 ranks on CPUS (WORK/TAG.log and
# .jsonl), the start-up's "cores:" line matching REGEX (cores WHAT) and every --metrics line
# meeting CONDITION (rows, all3 PRED_WHAT)
placed() {
  rm -f "$WORK/$1.jsonl"
  run "$2" "$WORK/$1.log" "${train[@]}" --steps 3 --metrics "$WORK/$1.jsonl"
  cores "$3" "$WORK/$1.log" "$4"
  all3 "$5" "$(rows "$WORK/$1.jsonl" "$6")" "$WORK/$1.jsonl"
}

# waits WHAT LOG ONE_CPU: the "waits:" line's spin agrees with its core share (ONE_CPU: 0.05 ms)
waits() {
  local l ms share
  l=$(grep '^waits: ' "$2")
  read -r ms share <<<"$(sed -n 's/.*polls a late peer \([0-9.e-]*\) ms .*core share at start-up \([0-9.]*\);.*/\1 \2/p' <<<"$l")"
  if [ -n "${ms:-}" ] && awk -v m="$ms" -v s="$share" -v one="$3" \
       'BEGIN { want = (one == 0 && s >= 0.9) ? 20 : 0.05; exit !(m == want) }'; then
    echo "ok   $1: waits poll $ms ms (core share $share)"
  else
    fail "$1: the 'waits:' line (want 20 ms at a core share >= 0.9 on 2 CPUs, else 0.05):"
    echo "${l:-none}"
  fi
}

if [ "${#cpus[@]}" -ge 2 ]; then
  placed own "${cpus[0]},${cpus[1]}" "2 ranks on 2 CPUs: the start-up says no CPU is shared" \
    '2 ranks x 1 BLAS thread on 2 CPUs: 1 thread per CPU \(no CPU shared' \
    "2 ranks on 2 CPUs: pred_ms = pred_dedicated_ms" '$1 == $2 && $1 > 0'
  grep -q '^step .*| dedicated' "$WORK/own.log" &&
    fail "2 ranks on 2 CPUs: a step line with a dedicated column"
  waits "2 ranks on 2 CPUs" "$WORK/own.log" 0
else
  echo "ok   (one CPU only: no run on a CPU per rank)"
fi

placed one "${cpus[0]}" "2 ranks on 1 CPU: the start-up says 2 threads per CPU, in pred" \
  '2 ranks x 1 BLAS thread on 1 CPU \(the most shared host\): 2 threads per CPU;.*pred serves each host.s compute by its CPUs \(x2\)' \
  "2 ranks on 1 CPU: pred_ms > pred_dedicated_ms" '$1 > $2 && $2 > 0'
n=$(grep -cE '^step .*\| pred [0-9]+ ms .*\| book [0-9]+ ms \| dedicated [0-9]+ ms \([0-9.]+x\)' \
    "$WORK/one.log")
all3 "2 ranks on 1 CPU: step lines with pred, book and dedicated" "$n" "$WORK/one.log"
waits "2 ranks on 1 CPU" "$WORK/one.log" 1
grep -q '^  shared host: 2 ranks x 1 BLAS thread on 1 CPU' "$WORK/one.log" &&
  grep -q '^  on a CPU per rank (pred_dedicated) the steps were predicted' "$WORK/one.log" &&
  echo "ok   2 ranks on 1 CPU: the summary says so" || fail "2 ranks on 1 CPU: no summary lines"

run "${cpus[0]}" "$WORK/bench.log" --steps 2 --bench --quiet --no-matmul-bound
p=$(grep '^bench predict' "$WORK/bench.log")
read -r step comp ded share <<<"$(sed -n 's/.*| step \([0-9.]*\) ms | compute \([0-9.]*\) ms .*| dedicated \([0-9.]*\) ms | share \([0-9.]*\) .*/\1 \2 \3 \4/p' <<<"$p")"
# the ms are printed to 0.1: the identity holds to their rounding (0.05 each, share × 0.05 more)
if [ -n "${step:-}" ] && awk -v s="$step" -v c="$comp" -v d="$ded" -v k="$share" \
     'BEGIN { e = s - (d + (k - 1) * c); exit !(k == 2 && e < 0.25 && e > -0.25) }'; then
  echo "ok   2 ranks on 1 CPU, --bench: step $step ms = dedicated $ded + ($share - 1) x compute $comp"
else
  fail "2 ranks on 1 CPU, --bench: step ${step:-?} ms, dedicated ${ded:-?}, share ${share:-?}," \
    "compute ${comp:-?}: want step = dedicated + (share - 1) x compute, share 2:"
  echo "$p"
fi
echo "shared_host: $fails failure(s)"
[ "$fails" -eq 0 ]
