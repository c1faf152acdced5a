#!/usr/bin/env bash
# The mixture-of-experts model through the meshtrain command, on one rank:
#  - bad input (k > E, a capacity factor <= 0, an MoE flag without --experts, --moe-every past
#    the layers) ends with status 2 and one message, at 2 ranks (expert parallelism: moe_ep.sh);
#  - the same seed twice gives bit-identical runs: every step's loss, gradient norm, balance
#    loss and per-expert counts (--metrics), and every final parameter (h5diff, exact);
#  - the counts add up: dropless, each step's expert_tokens sum to batch·T·k·(MoE blocks); with a
#    capacity factor they sum to that minus the dropped slots, and some are dropped;
#  - the step line shows the experts' counts and the dropped share;
#  - checkpoints hold the experts with global shapes [Lm, E, D, F_e], and a dense checkpoint
#    resumed with --experts (or a MoE one without, or with another E) is refused clearly;
#  - `generate` runs the MoE checkpoint (decode and prefill) on one rank.
# The runs are independent but for those that read another's checkpoint: two at a time
# (launch.sh), in two rounds.
# usage: moe.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
. "$(dirname "$0")/../common/cli_case.sh" "$@"
. "$(dirname "$0")/../common/launch.sh"
LAUNCH_MAX=2
rm -f "$WORK"/*.h5 "$WORK"/*.jsonl
case_() { launch one_error_case "$@"; }

base=(--data "$TXT" --layers 3 --d-model 32 --heads 4 --kv-heads 2 --seq-len 32 --batch 4
      --eval-every 0)
small=("${base[@]}" --micro-batch 2 --quiet)
case_ 2 2 "--moe-top-k 5 is more than --experts 4" --experts 4 --moe-top-k 5
case_ 2 2 "--capacity-factor 0: must be > 0" --experts 4 --capacity-factor 0
case_ 2 2 "--capacity-factor -1: must be > 0" --experts 4 --capacity-factor -1
case_ 2 2 "--moe-top-k configures the mixture-of-experts layers: give --experts E" --moe-top-k 2
case_ 2 2 "--moe-every 9: must be from 1 to --layers 4" --experts 4 --moe-every 9
case_ 2 2 "--experts -1: must be between 0 and 4096" --experts -1

run1() { timeout 120 "$MPI" --oversubscribe --bind-to none -np 1 "$MT" "${small[@]}" "$@"; }
moe_shape=(--moe-top-k 2 --moe-every 2 --shared-experts 1 --expert-d-ff 48)
moe=(--experts 4 "${moe_shape[@]}" --router-z-loss-coef 0.001)
run_ab() { # R: the MoE run R (a, b: the same seed)
  run1 "${moe[@]}" --steps 3 --metrics "$WORK/$1.jsonl" --save-final "$WORK/$1.h5" >"$WORK/$1.out" 2>&1 ||
    bad "MoE run $1 exited $?"
}
launch run_ab a
launch run_ab b
# The balance and z-losses are means over whole sequences: one micro-batch of 4 sequences or four
# of 1 give the same losses, gradient norms and counts (to rounding: 2e-5 relative, the metrics'
# printed digits), the losses' weights high and slots dropped so that they count.
mb=(--aux-loss-coef 0.5 --capacity-factor 0.75 --steps 2)
run_mb() { # M: micro-batches of M sequences
  timeout 120 "$MPI" -np 1 "$MT" "${base[@]}" --quiet "${moe[@]}" "${mb[@]}" --micro-batch $1 \
    --metrics "$WORK/mb$1.jsonl" >/dev/null 2>&1 || bad "micro-batch $1 run exited $?"
}
launch run_mb 4
launch run_mb 1
run_c() {
  run1 "${moe[@]}" --steps 3 --capacity-factor 0.5 --metrics "$WORK/c.jsonl" >"$WORK/c.out" 2>&1 ||
    bad "capacity run exited $?"
}
launch run_c
run_full() { timeout 120 "$MPI" -np 1 "$MT" "${base[@]}" "${moe[@]}" --steps 1 >"$WORK/full.out" 2>&1; }
launch run_full
run_dense() { run1 --steps 1 --save-final "$WORK/dense.h5" >/dev/null 2>&1 || bad "dense run exited $?"; }
launch run_dense
collect
strip() { sed -E 's/"(ms|tok_s|gflops|mfu)":[^,]*,//g' "$1"; }
if [ -s "$WORK/a.jsonl" ] && [ "$(strip "$WORK/a.jsonl")" = "$(strip "$WORK/b.jsonl")" ]; then
  ok "same seed twice: every step's loss, gnorm, balance loss and expert counts identical"
else
  bad "same seed twice: the metrics differ"; diff <(strip "$WORK/a.jsonl") <(strip "$WORK/b.jsonl")
fi
same_h5 "$WORK/a.h5" "$WORK/b.h5" params router expert_gate expert_up expert_down shared_gate \
  shared_down w_gate embed && ok "same seed twice: final parameters bit-identical (h5diff)" ||
  bad "same seed twice: final parameters differ"

nums() { sed -E 's/"(ms|tok_s|gflops|mfu)":[^,]*,//g; s/[^0-9.e+-]+/ /g' "$1"; }
if paste <(nums "$WORK/mb4.jsonl" | tr ' ' '\n' | grep .) <(nums "$WORK/mb1.jsonl" | tr ' ' '\n' | grep .) |
   awk '{ d = $1 - $2; if (d < 0) d = -d; s = ($1 < 0 ? -$1 : $1) + ($2 < 0 ? -$2 : $2)
          if (d > 2e-5 * s + 1e-12) bad = 1; n++ } END { exit bad || n < 20 }'; then
  ok "micro-batches 4 x 1 = 1 x 4: losses, gnorm, balance and z-losses, counts"
else
  bad "micro-batching changed the MoE losses or gradients"; paste -d'\n' "$WORK/mb4.jsonl" "$WORK/mb1.jsonl"
fi

slots=$((4 * 32 * 2 * 1)) # batch · T · k · one MoE block (block 1 of 3)
if moe_counts "$WORK/a.jsonl" | awk -v want=$slots '$1 != want || $2 != 0 { bad = 1 } END { exit bad || NR != 3 }'; then
  ok "dropless: each step's expert_tokens sum to batch·T·k·blocks = $slots, none dropped"
else
  bad "dropless counts: $(moe_counts "$WORK/a.jsonl" | tr '\n' ';') (want $slots 0)"
fi
if moe_some_dropped "$WORK/c.jsonl" $slots 3; then
  ok "capacity factor 0.5: kept + dropped = $slots every step, some dropped ($(moe_counts "$WORK/c.jsonl" | head -1))"
else
  bad "capacity counts: $(moe_counts "$WORK/c.jsonl" | tr '\n' ';') (want kept + dropped·$slots = $slots)"
fi
full=$(cat "$WORK/full.out")
line=$(grep '^step' <<<"$full")
params=$(sed -n 's/.* | \([0-9.]*\)k params | .*/\1/p' <<<"$full")
mem=$(sed -n 's/^memory per rank (MB): params \([0-9.]*\) .*/\1/p' <<<"$full")
if awk -v p="$params" -v m="$mem" 'BEGIN { d = m - 4e-3 * p; t = 0.006 + 0.01 * m; exit !(p > 0 && d < t && -d < t) }'; then
  ok "memory line: params $mem MB = 4 B x ${params}k parameters (the experts' and the dense blocks' only)"
else
  bad "memory line: params $mem MB, the header says ${params}k parameters"
fi
if grep -qE '\| aux [0-9.]+ z [0-9.e+-]+ \| dropped 0.0% \| experts [0-9]+/[0-9]+/[0-9]+/[0-9]+$' <<<"$line"; then
  ok "step line: $line"
else
  bad "step line without the experts' counts: $line"
fi

info=$("$MT" ckpt info "$WORK/a.h5")
if grep -q 'params/expert_gate *\[1, 4, 32, 48\]' <<<"$info" && grep -q 'params/router *\[1, 32, 4\]' <<<"$info" &&
   grep -q 'params/shared_down *\[1, 1, 48, 32\]' <<<"$info" && grep -q 'params/w_gate *\[2, 32, 128\]' <<<"$info"; then
  ok "checkpoint shapes: router [Lm, D, E], experts [Lm, E, D, F_e], dense MLPs [L - Lm, D, F]"
else
  bad "checkpoint shapes"; echo "$info" | sed 's/^/     | /'
fi
case_ 2 1 "checkpoint holds a dense model (no --experts), flags say --experts" "${small[@]}" \
  "${moe[@]}" --steps 4 --resume "$WORK/dense.h5"
case_ 2 1 "checkpoint holds a mixture-of-experts model, flags say dense" "${small[@]}" --steps 4 \
  --resume "$WORK/a.h5"
case_ 2 1 "checkpoint has --experts 4, flags say 8" "${small[@]}" --experts 8 "${moe_shape[@]}" \
  --steps 4 --resume "$WORK/a.h5"

gen() {
  local out rc
  out=$(timeout 120 "$MPI" -np 1 "$MT" generate --ckpt "$WORK/a.h5" --prompt "ROMEO:" \
    --prompt "x" --tokens 6 --temperature 0 2>"$WORK/gen.err")
  rc=$?
  if [ $rc -eq 0 ] && [ "$(grep -c . <<<"$out")" -eq 2 ] && grep -q '^decode 5 ' "$WORK/gen.err"; then
    ok "generate runs the MoE checkpoint: prefill and 5 decode steps"
  else
    bad "generate on the MoE checkpoint: status $rc"; sed 's/^/     | /' "$WORK/gen.err" | head
  fi
}
launch gen
collect
echo "moe: $fails failure(s)"
[ "$fails" -eq 0 ]
