#!/usr/bin/env bash
# --bucket end to end: auto (the default) prints its size, which comes from a chip's T_min and W:
# on real links the book's v5p, the same size as under --emulate v5p, so two runs with one seed
# are bit-identical (losses and gradient norms in --metrics, the final parameters by h5diff) on 3
# ranks, where DP's bucket size decides the order of the additions (a different size changes the
# bits: the comparison can fail); --bucket 0 turns buckets off; --alg mpi does not claim the
# emulated links; a size below one element on the wire is bad input (status 2, one message).
# usage: bucket.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
MPI=$1 MT=$2 TXT=$3 WORK=$4
. "$(dirname "$0")/../common/one_error.sh"
mkdir -p "$WORK"
# 1.4M and 1.2M parameters: more than one auto bucket (1M elements on 3 ranks); tiny steps
dp=(--layers 2 --d-model 256 --heads 4 --d-ff 512 --seq-len 16 --eval-every 0 --data "$TXT"
    --dp x)
zero=(--layers 3 --d-model 192 --heads 4 --d-ff 384 --seq-len 16 --batch 6 --eval-every 0
      --data "$TXT" --mesh x=3 --dp x --zero 3)
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
H5DIFF=$(command -v h5diff || true)

run() { # NAME NP ARGS...: runs meshtrain, its output in NAME.log
  local name=$1 np=$2
  shift 2
  timeout 120 "$MPI" --oversubscribe --bind-to none -np "$np" "$MT" "$@" >"$WORK/$name.log" 2>&1 ||
    { fail "$name: meshtrain exited $?"; sed 's/^/     | /' "$WORK/$name.log" | tail -20; return 1; }
}
size() { # NAME: the bucket line's elements, "" without one
  sed -n 's/^.*buckets over the data axes: \([0-9]*\) elements.*$/\1/p' "$WORK/$1.log"
}
# the steps' losses and gradient norms, as printed in --metrics
losses() { grep -o '"loss":[^,]*,"lr":[^,]*,"gnorm":[^,]*' "$WORK/$1.jsonl"; }
same_params() { # A B: 0 when the final parameters are bit-identical
  [ -z "$H5DIFF" ] && return 0
  "$H5DIFF" -q "$WORK/$1.h5" "$WORK/$2.h5" /params /params >/dev/null 2>&1
}

# two runs of one seed, and a third with another bucket size; concurrently (each mostly waits for
# its start-up), each run's status in NAME.rc
for spec in "dp_a dp auto" "dp_b dp auto" "dp_c dp 512K" "z3_a zero auto" "z3_b zero auto"; do
  read -r name model b <<<"$spec"
  rm -f "$WORK/$name.h5" "$WORK/$name.jsonl"
  flags=("${dp[@]}" --mesh x=3 --batch 6)
  [ "$model" = zero ] && flags=("${zero[@]}")
  args=(--steps 3 --metrics "$WORK/$name.jsonl" --save-final "$WORK/$name.h5")
  [ "$b" = auto ] || args+=(--bucket "$b") # auto: the default
  (run "$name" 3 "${flags[@]}" "${args[@]}" >"$WORK/$name.out"; echo $? >"$WORK/$name.rc") &
done
wait
for name in dp_a dp_b dp_c z3_a z3_b; do
  cat "$WORK/$name.out"
  [ "$(cat "$WORK/$name.rc")" = 0 ] || fails=$((fails + 1))
done
for p in dp z3; do
  a=$(size ${p}_a) b=$(size ${p}_b)
  if [ -n "$a" ] && [ "$a" = "$b" ] && grep -q -- "--bucket auto: .* on v5p's links .*the book's chip" \
       "$WORK/${p}_a.log"; then
    echo "ok   $p: the default is auto, $a elements on real links, v5p's, in both runs"
  else
    fail "$p: bucket sizes '$a' and '$b' (want one size, auto, v5p's):"
    grep 'buckets over' "$WORK/${p}_a.log" "$WORK/${p}_b.log"
  fi
  if [ -s "$WORK/${p}_a.jsonl" ] && [ "$(losses ${p}_a)" = "$(losses ${p}_b)" ] &&
     same_params ${p}_a ${p}_b; then
    echo "ok   $p: two runs of one seed bit-identical (losses, norms${H5DIFF:+, final parameters})"
  else
    fail "$p: two runs of one seed differ:"
    diff <(losses ${p}_a) <(losses ${p}_b) | head -6
  fi
  # (ZeRO's ReduceScatter adds each element in the order of its shard, whatever the bucket)
  if [ -n "$H5DIFF" ] && [ $p = dp ]; then
    if same_params ${p}_a ${p}_c; then
      fail "$p: --bucket 512K gave the same parameters as auto: the comparison cannot tell"
    else
      echo "ok   $p: another bucket size changes the bits (the comparison can fail)"
    fi
  fi
done

# under --emulate v5p: the same size as on real links (emulated bw x latency is v5p's W·T_min)
if run emu 3 "${dp[@]}" --mesh x=3 --batch 6 --steps 1 --emulate v5p; then
  e=$(size emu) r=$(size dp_a)
  if [ -n "$e" ] && [ "$e" = "$r" ] && grep -q -- "--bucket auto: .*, as emulated" "$WORK/emu.log"
  then echo "ok   --emulate v5p: auto $e elements, as on real links"
  else fail "--emulate v5p: auto '$e' elements, real links '$r':"; grep 'buckets over' "$WORK/emu.log"
  fi
fi
# --alg mpi: MPI's built-ins do not use the emulated links, and the line says so
if run mpi 2 "${dp[@]}" --mesh x=2 --batch 4 --steps 1 --emulate v5e --alg mpi; then
  grep -q -- "--bucket auto: .* on v5p's links .*do not use the emulated links" "$WORK/mpi.log" &&
    echo "ok   --alg mpi --emulate v5e: v5p's size, not the emulated links'" ||
    { fail "--alg mpi --emulate v5e:"; grep 'buckets over' "$WORK/mpi.log"; }
fi
# --bucket 0: off
if run off 2 "${dp[@]}" --mesh x=2 --batch 4 --steps 1 --bucket 0; then
  [ -z "$(size off)" ] && echo "ok   --bucket 0: no buckets" ||
    fail "--bucket 0 still has buckets of $(size off) elements"
fi

bad() { # FRAGMENT ARGS...
  local frag=$1
  shift
  timeout 60 "$MPI" --oversubscribe --bind-to none -np 2 "$MT" --data "$TXT" --mesh x=2 --dp x \
    --steps 1 "$@" >"$WORK/out" 2>"$WORK/err"
  local rc=$?
  if one_error 2 "$rc" "$WORK/err" "$frag"; then echo "ok   [$*] -> $rc: $ERR_LINE"
  else
    fail "[$*] -> status $rc (want 2), $ERR_N error lines (want 1), want \"$frag\""
    sed 's/^/     | /' "$WORK/err" | head -10
  fi
}
bad "--bucket 1: smaller than one element on the wire (fp32: 4 bytes); the minimum is 4 bytes" \
  --bucket 1
bad "--bucket 1: smaller than one element on the wire (bf16: 2 bytes); the minimum is 2 bytes" \
  --bucket 1 --comm-dtype bf16

echo "bucket: $fails failure(s)"
[ "$fails" -eq 0 ]
