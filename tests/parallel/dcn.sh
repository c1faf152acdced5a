#!/usr/bin/env bash
# --dcn through the meshtrain CLI:
#  - DCN carries 1/|ICI| of the gradient: on x=2 (DCN) × y=3 (ICI), --zero 0, the bytes this rank
#    sent over collectives with the DCN axis (the summary's split) are, per step, those of an
#    AllReduce over x of ceil(P/3) floats: 2·(|x|−1)/|x| · 4 · ceil(P/3) bytes (P = 139584
#    parameters of the model below), within 1% (the loss mean's small gathers also cross x);
#  - with FSDP over y the same holds for the ZeRO shard (P/|y| elements; D divisible);
#  - bad input ends with one message and status 2: --dcn on the tensor axis, a --dcn axis that
#    is not among --dp, --zero 3 with no ICI data axis left.
# usage: dcn.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
MPI=$1 MT=$2 TXT=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
MODEL=(--layers 2 --d-model 64 --heads 4 --seq-len 32 --batch 12 --eval-every 0 --data "$TXT")
P=139584 # L·(4·D·N·H + 3·D·F + 2·D) + D + 2·V·D for the model above
fails=0
fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}
run() {
  local np=$1 log=$2
  shift 2
  timeout 120 "$MPI" --oversubscribe --bind-to none -np "$np" "$MT" "${MODEL[@]}" "$@" \
    >"$WORK/$log" 2>&1
}
# dcn_bytes LOG ICI_SIZE DCN_SIZE STEPS NAME: the DCN bytes against the AllReduce of the shard
dcn_bytes() {
  local got
  got=$(sed -n 's/.*| DCN (axis x): [0-9]* calls, \([0-9.]*\) MB sent.*/\1/p' "$WORK/$1")
  awk -v got="$got" -v p=$P -v ici="$2" -v n="$3" -v s="$4" -v name="$5" 'BEGIN {
    c = int((p + ici - 1) / ici); want = s * 2 * (n - 1) / n * 4 * c / 1e6; full = want * ici
    printf "%s: DCN %.3f MB sent over %d steps; the 1/|ICI| shard predicts %.3f MB (the whole "\
           "gradient would be %.3f MB)\n", name, got, s, want, full
    exit !(got != "" && got >= 0.999 * want && got <= 1.01 * want) }'
}
run 6 dp.log --steps 2 --mesh x=2,y=3 --dp xy --dcn x
if [ $? -ne 0 ]; then fail "DP with --dcn x exited non-zero"; tail -5 "$WORK/dp.log"; fi
dcn_bytes dp.log 3 2 2 "DP over y (ICI) + x (DCN)" || fail "DCN bytes of DP are not 1/|ICI| of the gradient"
grep -q "^== summary: DP over Y + DP over X (DCN)" "$WORK/dp.log" || fail "summary's scheme name"
run 4 fsdp.log --steps 2 --mesh x=2,y=2 --dp xy --zero 3 --dcn x
if [ $? -ne 0 ]; then fail "FSDP with --dcn x exited non-zero"; tail -5 "$WORK/fsdp.log"; fi
dcn_bytes fsdp.log 2 2 2 "FSDP over y (ICI) + DP over x (DCN)" || fail "DCN bytes of FSDP are not the shard's"

# bad input: one message, status 2
bad() {
  local want=$1 np=$2
  shift 2
  run "$np" bad.log --steps 1 "$@"
  local rc=$? n
  n=$(grep -c "^meshtrain: error: " "$WORK/bad.log")
  if [ $rc -eq 2 ] && [ "$n" -eq 1 ] && grep -q "^meshtrain: error: .*$want" "$WORK/bad.log"; then
    echo "ok   $*: $(grep '^meshtrain: error' "$WORK/bad.log")"
  else
    fail "$* (status $rc, $n messages): $(head -3 "$WORK/bad.log")"
  fi
}
bad "only data parallelism runs across the data-center network" 4 --mesh x=2,y=2 --dp x --tensor y --dcn y
bad "is not among --dp xy" 4 --mesh x=2,y=2 --dp xy --dcn z
bad "leaves none" 2 --mesh x=2 --dp x --zero 3 --dcn x
[ $fails -eq 0 ] && echo "PASS --dcn"
[ $fails -eq 0 ]
