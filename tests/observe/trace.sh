#!/bin/bash
# trace.sh CASE MPIEXEC MESHTRAIN TEXT OUTDIR: meshtrain --trace end to end, checked by
# check_trace.py (next to this script; needs python3, else exit 77 = skipped).
#   fsdp_tp   4 ranks, x=2,y=2: ZeRO-3 over x + Megatron over y, --overlap, 2 micro-batches,
#             --debug-collectives and --timeout on (they must stay silent on a correct run): the
#             trace is valid and consistent; the output has the FLOP formula, both MFU peaks, the
#             per-step overlap and the summary's overlap columns
#   pipe      4 ranks, x=2,z=2: ZeRO-1 over x + 1F1B pipeline over z, evaluation and sampling
#             (spans outside steps): valid and consistent, sends match receives
#   checker   the checker is not a rubber stamp: a trace with one collective removed from one
#             rank, one with a layer span stretched past its step, and a truncated file must
#             each fail it
#   badflags  --trace into a missing directory and --timeout -1 end with exit 2 and one message
set -u
case_=$1 mpiexec=$2 meshtrain=$3 text=$4 dir=$5
here=$(cd "$(dirname "$0")" && pwd)
check=$here/check_trace.py
command -v python3 >/dev/null || { echo "trace.sh: python3 not found: skipped"; exit 77; }
mkdir -p "$dir"
run=("$mpiexec" --oversubscribe --bind-to none)
small=(--data "$text" --layers 2 --d-model 64 --heads 4 --seq-len 32 --batch 8)
fail() { echo "trace.sh $case_: FAIL: $*"; exit 1; }
has() { printf '%s\n' "$out" | grep -qE -- "$1" || fail "output lacks '$1'"; }

case $case_ in
fsdp_tp)
    out=$(timeout 120 "${run[@]}" -np 4 "$meshtrain" "${small[@]}" --eval-every 0 --micro-batch 4 --steps 3 \
        --mesh x=2,y=2 --dp x --zero 3 --tensor y --overlap --debug-collectives --timeout 60 \
        --trace "$dir/fsdp_tp.json" 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 0 ] || fail "meshtrain exit $rc"
    python3 "$check" "$dir/fsdp_tp.json" 3 || fail "check_trace"
    has "^FLOPs per token = 6·P \+ 6·L·T·N·H = "
    has "^MFU peaks: measured sgemm [0-9.e+]+ GFLOP/s \(4 ranks together\); CPU nominal "
    has "^step 1 \|.* \| overlap [0-9]+% \(pred [0-9]+%\)$"
    has "^done: .*MFU [0-9]+% of the measured sgemm peak, ([0-9.]+%|unknown) of the CPU's nominal peak$"
    has "^  collective +calls +async .* overlap +pred +regime"
    has "^  reduce_scatter +[0-9]+ +[1-9][0-9]* .* [0-9]+% +[0-9]+%  "
    has "^wrote the timeline to $dir/fsdp_tp.json"
    ls "$dir"/fsdp_tp.json.rank* >/dev/null 2>&1 && fail "the per-rank parts were left behind"
    ;;
pipe)
    out=$(timeout 120 "${run[@]}" -np 4 "$meshtrain" "${small[@]}" --steps 2 --eval-every 2 \
        --eval-batches 1 --sample 8 --mesh x=2,z=2 --dp x --zero 1 --overlap --pipeline z \
        --microbatches 2 --schedule 1f1b --debug-collectives --trace "$dir/pipe.json" 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 0 ] || fail "meshtrain exit $rc"
    python3 "$check" "$dir/pipe.json" 2 --pipeline z || fail "check_trace"
    ;;
checker)
    out=$(timeout 120 "${run[@]}" -np 2 "$meshtrain" "${small[@]}" --eval-every 0 --steps 1 --mesh x=2 \
        --trace "$dir/c.json" 2>&1) || { echo "$out"; fail "meshtrain failed"; }
    python3 "$check" "$dir/c.json" 1 || fail "the unmodified trace fails"
    python3 - "$dir/c.json" "$dir" <<'EOF'
import json, sys
src, d = sys.argv[1], sys.argv[2]
doc = json.load(open(src))
ev = doc["traceEvents"]
# one collective call of rank 1 disappears
i = next(k for k, e in enumerate(ev) if e.get("pid") == 1 and e.get("cat") == "collective"
         and not e["args"]["wait"] and e["args"]["step"] == 0)
json.dump(dict(doc, traceEvents=ev[:i] + ev[i + 1:]), open(d + "/c_missing.json", "w"))
# a layer span of rank 0 runs past the end of its step
ev2 = [dict(e) for e in ev]
st = next(e for e in ev2 if e.get("pid") == 0 and e["name"] == "step 0")
ly = next(e for e in ev2 if e.get("pid") == 0 and e["name"].startswith("bwd L"))
ly["dur"] = st["ts"] + st["dur"] - ly["ts"] + 5.0
json.dump(dict(doc, traceEvents=ev2), open(d + "/c_stretched.json", "w"))
# a file cut short
text = open(src).read()
open(d + "/c_truncated.json", "w").write(text[: len(text) // 2])
EOF
    for bad in missing stretched truncated; do
        if python3 "$check" "$dir/c_$bad.json" 1 >"$dir/c_$bad.log" 2>&1; then
            cat "$dir/c_$bad.log"
            fail "check_trace accepted the $bad trace"
        fi
        echo "check_trace rejects the $bad trace: $(grep -m1 -E 'check_trace: [^o]|Error' "$dir/c_$bad.log")"
    done
    ;;
badflags)
    out=$(timeout 60 "${run[@]}" -np 2 "$meshtrain" "${small[@]}" --eval-every 0 --steps 1 \
        --trace "$dir/no/such/dir/t.json" 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 2 ] || fail "--trace into a missing directory: exit $rc, wanted 2"
    [ "$(printf '%s\n' "$out" | grep -c '^meshtrain: error: --trace .*no/such/dir/t.json: cannot create it')" = 1 ] ||
        fail "--trace: wanted one error message"
    out=$(timeout 60 "${run[@]}" -np 2 "$meshtrain" "${small[@]}" --eval-every 0 --steps 1 --timeout -1 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 2 ] || fail "--timeout -1: exit $rc, wanted 2"
    [ "$(printf '%s\n' "$out" | grep -c '^meshtrain: error: --timeout -1: must be >= 0')" = 1 ] ||
        fail "--timeout -1: wanted one error message"
    ;;
*)
    fail "unknown case"
    ;;
esac
echo "trace.sh $case_: ok"
