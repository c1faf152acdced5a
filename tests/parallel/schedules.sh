#!/usr/bin/env bash
# The pipeline schedules through the meshtrain CLI:
#  - 1f1b, interleaved (2 chunks per rank), zb-h1 and zb-v on 3 pipeline ranks train to the same losses
#    step for step (the same sums in the same order: test_equiv checks the parameters), and the
#    step line reports the bubble beside calc's figures for the schedule's table (simulated with
#    the costs measured at start-up, and with unit costs);
#  - bad input ends with one message and status 2: layers not divisible into |Z|·v chunks,
#    micro-batches not a multiple of |Z| under interleaved, --virtual-stages without a pipeline
#    axis or with 1f1b, zb-v with other than 2 virtual stages,
#    interleaved over an open axis of 3.
# The runs are independent: two at a time (launch.sh), the schedules' first, then the bad input.
# usage: schedules.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
MPI=$1 MT=$2 TXT=$3 WORK=$4
. "$(dirname "$0")/../common/one_error.sh"
. "$(dirname "$0")/../common/launch.sh"
LAUNCH_MAX=2
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
run() { # NP LOG ARGS...: meshtrain on a 6-layer model (LAYERS), its output in LOG
  local np=$1 log=$2
  shift 2
  timeout 120 "$MPI" --oversubscribe --bind-to none -np "$np" "$MT" --layers "${LAYERS:-6}" --d-model 32 \
    --heads 2 --seq-len 16 --batch 12 --eval-every 0 --data "$TXT" "$@" >"$WORK/$log" 2>&1
}
losses() { sed -n 's/^step \([0-9]*\) | loss \([0-9.]*\) .*/\1 \2/p' "$WORK/$1"; }
schedule() { # S: the 3-stage run of schedule S, its log in S.log
  run 3 "$1.log" --steps 3 --mesh z=3 --pipeline z --microbatches 6 --schedule "$1"
  if [ $? -ne 0 ]; then fail "--schedule $1 exited non-zero"; tail -5 "$WORK/$1.log"; fi
  grep -q "| bubble [0-9.]* (sim [0-9.]*, ideal [0-9.]*)" "$WORK/$1.log" ||
    fail "$1: no bubble (measured, simulated, ideal) on the step line"
}
for s in 1f1b interleaved zb-h1 zb-v; do launch schedule "$s"; done
collect
ideal() { sed -n 's/.*| bubble [0-9.]* (sim [0-9.]*, ideal \([0-9.]*\)).*/\1/p' "$WORK/$1" | head -1; }
for s in interleaved zb-h1 zb-v; do
  if [ "$(losses 1f1b.log)" = "$(losses $s.log)" ] && [ -n "$(losses $s.log)" ]; then
    echo "ok   $s: the losses of 1f1b, step for step: $(losses $s.log | tr '\n' ' ')"
  else
    fail "$s: losses $(losses $s.log | tr '\n' ' ') differ from 1f1b's $(losses 1f1b.log | tr '\n' ' ')"
  fi
done
# calc's unit-cost bubbles for p = 3, m = 6: 1f1b (p-1)/(m+p-1) = 0.25, interleaved 2 chunks
# (p-1)/(2m+p-1)... as the simulator counts it (F = I = W = 1), zb-h1 below 1f1b's
awk -v a="$(ideal 1f1b.log)" -v b="$(ideal interleaved.log)" -v c="$(ideal zb-h1.log)" 'BEGIN {
  printf "ideal bubbles: 1f1b %s, interleaved %s, zb-h1 %s\n", a, b, c
  exit !(a == 0.25 && b < a && c < a) }' || fail "the ideal bubbles are not calc's ordering"

# bad input: one message, status 2
bad_case() { # FRAGMENT NP ARGS...: status 2, one message holding FRAGMENT
  local want=$1 np=$2
  shift 2
  run "$np" "bad$CASE.log" --steps 1 "$@"
  if one_error 2 $? "$WORK/bad$CASE.log" "$want"; then
    echo "ok   $*: $ERR_LINE"
  else
    fail "$* ($ERR_N messages): $(head -3 "$WORK/bad$CASE.log")"
  fi
}
bad() { launch bad_case "$@"; }
bad "6 layers do not divide into 2 pipeline ranks x 4 virtual stages" 2 --mesh z=2 --pipeline z \
  --schedule interleaved --virtual-stages 4 --microbatches 2
bad "--microbatches 4 is not a multiple of 3" 3 --mesh z=3 --pipeline z --schedule interleaved \
  --microbatches 4
bad "--virtual-stages 2 needs a pipeline axis" 2 --mesh x=2 --dp x --virtual-stages 2
bad "--schedule 1f1b runs one stage per rank" 2 --mesh z=2 --pipeline z --schedule 1f1b \
  --virtual-stages 2
bad "--schedule zb-v places exactly 2 stages per rank in a V: --virtual-stages 3" 2 --mesh z=2 \
  --pipeline z --schedule zb-v --virtual-stages 3
bad "must wrap" 3 --mesh z=3 --open z --pipeline z --schedule interleaved --microbatches 3
# the emulated chip's wraparound opens an axis of 3 (v5p wraps whole 4x4x4 cubes only)
bad "the chip's own wraparound" 3 --mesh z=3 --pipeline z --schedule interleaved --microbatches 3 \
  --emulate v5p
collect
[ $fails -eq 0 ] && echo "PASS schedules"
[ $fails -eq 0 ]
