#!/usr/bin/env bash
# Speculative decoding against plain decoding, beside the book's formula: the demo's target
# (--demo: L=4 D=128 N=4 K=2 T=128, trained STEPS steps on the corpus) and a 1-layer drafter of
# the same width (trained DSTEPS steps), one rank, one BLAS thread, batch 1, greedy by default.
# Each round runs `meshtrain generate` plainly and with `--draft --draft-tokens k` for every k in
# KS, in turn, so that every variant sees the same machine. From each run:
#   plain: the median decode step t and the decode's time per token w (ms);
#   speculative: alpha, the measured tokens per target step, the drafter's mean step t_d, the
#   verify step's mean t_v (k + 1 rows), and the decode's wall time per token.
# The formula: speed-up = E / (k·t_d/w + t_v/w) with E = (1 - alpha^(k+1))/(1 - alpha), from the
# run's alpha and its two step times against the plain decode's mean step w of the same round;
# the measured speed-up = w / (speculative ms/token). Means, not medians, on both sides: a
# decode's time is the sum of its steps, and on a loaded machine the steps' tails are heavy
# (generate's draft summary prints the medians too). The table gives median and min over the
# rounds, and measured/formula (the goal: within 0.8-1.2).
# Where the time goes: generate's 'speculative phases' line splits a round (per round, ms) into
# the drafter's steps (s of them: s = drafter steps / verify steps, measured; at most k, fewer in
# the last rounds, which draft only what is left; a round's first drafter step also takes the
# token the verify step added, as a second row, not as an extra step), the drafter's token picks,
# the verify step, the acceptance rule with the caches' rollback, and the rest of the loop. The
# second table gives them and measured/formula as the product of three measured factors (exact
# up to the rounding of the printed figures and the decode's set-up outside the rounds, a few µs):
#   (tokens per target step measured / E)  the run's rounds against the steady state of E: the
#                                          last rounds draft fewer than k and keep fewer;
#   (k·t_d + t_v) / (s·t_d + t_v)          the formula's drafter steps against the run's;
#   (s·t_d + t_v) / (round's time)         the steps' share of a round: picks, rule, loop.
# These are ratios of times taken in one run, so they hold on a loaded machine too.
# The checkpoints are trained once into WORK (about a minute each on the loaded 2-vCPU machine);
# a round takes a few seconds.
#
# usage: bench/spec_bench.sh [BUILD_DIR]
# env:   ROUNDS=5 KS="1 2 3 4 6" TOKENS=96 TEMP=0 STEPS=300 DSTEPS=300 WORK=/tmp/spec_bench
#        OUT=bench/spec_results.md PROMPT="First Citizen:"
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${ROUNDS:-5}
KS=${KS:-1 2 3 4 6}
TOKENS=${TOKENS:-96}
TEMP=${TEMP:-0}
STEPS=${STEPS:-300}
DSTEPS=${DSTEPS:-300}
WORK=${WORK:-/tmp/spec_bench}
OUT=${OUT:-bench/spec_results.md}
PROMPT=${PROMPT:-First Citizen:}
. bench/lib.sh spec_bench
mkdir -p "$WORK"
ncpu=$(getconf _NPROCESSORS_ONLN)
MPI=(mpirun --oversubscribe --bind-to none -np 1)

train() { # train FILE STEPS ARGS...: a checkpoint, once
  local f=$1 n=$2
  shift 2
  [ -f "$f" ] && return
  echo "spec_bench: training $f ($n steps)" >&2
  "${MPI[@]}" "$MT" --demo --steps "$n" --sample 0 --quiet --data data/tinyshakespeare.txt \
    "$@" --save-final "$f.tmp" >"$f.log" 2>&1 || { cat "$f.log" >&2; exit 1; }
  mv "$f.tmp" "$f"
}
train "$WORK/target.h5" "$STEPS"
train "$WORK/draft.h5" "$DSTEPS" --layers 1

GEN=(generate --ckpt "$WORK/target.h5" --prompt "$PROMPT" --tokens "$TOKENS" --temperature
  "$TEMP" --seed 5 --quiet)
declare -A val
add() { val[$1]="${val[$1]:-} $2"; }
for r in $(seq "$ROUNDS"); do
  out=$("${MPI[@]}" "$MT" "${GEN[@]}" 2>&1 >/dev/null)
  t=$(sed -n 's/^decode summary .*median \([0-9.]*\) ms\/token.*/\1/p' <<<"$out")
  [ -n "$t" ] || { echo "spec_bench: no decode summary:" >&2; echo "$out" >&2; exit 1; }
  w=$(sed -n 's/^decode summary .*in all, \([0-9.]*\) ms\/token.*/\1/p' <<<"$out")
  add plain "$t"
  add plainw "$w"
  line="round $r: plain $t ms/step, $w ms/token"
  for k in $KS; do
    out=$("${MPI[@]}" "$MT" "${GEN[@]}" --draft "$WORK/draft.h5" --draft-tokens "$k" \
      2>&1 >/dev/null)
    s=$(grep '^speculative summary' <<<"$out") || { echo "$out" >&2; exit 1; }
    d=$(grep '^draft summary' <<<"$out")
    ph=$(grep '^speculative phases' <<<"$out")
    a=$(field "$s" alpha) per=$(field "$s" "tokens per target step") ms=$(sed -n \
      's/.* \([0-9.]*\) ms\/token.*/\1/p' <<<"$s")
    mean='median [0-9.]* ms, min [0-9.]*, mean \([0-9.]*\)'
    td=$(sed -n "s/.*drafter steps | $mean .*/\\1/p" <<<"$d")
    tv=$(sed -n "s/.*rows | $mean.*/\\1/p" <<<"$d")
    form=$(awk -v a="$a" -v k="$k" \
      'BEGIN {printf "%.4f", a < 1 ? (1 - a ^ (k + 1)) / (1 - a) : k + 1}')
    pred=$(awk -v e="$form" -v k="$k" -v t="$w" -v td="$td" -v tv="$tv" \
      'BEGIN {printf "%.4f", e / (k * td / t + tv / t)}')
    meas=$(awk -v w="$w" -v ms="$ms" 'BEGIN {printf "%.4f", w / ms}')
    # the phases, per round (ms): drafter steps, their count, picks, verify, rule, other
    ns=$(sed -n 's/.*per round: \([0-9.]*\) drafter steps.*/\1/p' <<<"$ph")
    pd=$(field "$ph" "drafter steps") pp=$(field "$ph" "drafter picks")
    pv=$(field "$ph" "verify step") pr=$(field "$ph" acceptance) po=$(field "$ph" other)
    round=$(awk -v a="$pd" -v b="$pp" -v c="$pv" -v d="$pr" -v e="$po" \
      'BEGIN {printf "%.4f", a + b + c + d + e}')
    add "s_$k" "$ns"
    add "pd_$k" "$pd"
    add "pv_$k" "$pv"
    add "pout_$k" "$(awk -v b="$pp" -v d="$pr" -v e="$po" -v r="$round" \
      'BEGIN {printf "%.2f", 100 * (b + d + e) / r}')"
    add "fe_$k" "$(awk -v p="$per" -v e="$form" 'BEGIN {printf "%.4f", p / e}')"
    add "fs_$k" "$(awk -v k="$k" -v s="$ns" -v td="$td" -v tv="$tv" \
      'BEGIN {printf "%.4f", (k * td + tv) / (s * td + tv)}')"
    add "fl_$k" "$(awk -v s="$ns" -v td="$td" -v tv="$tv" -v r="$round" \
      'BEGIN {printf "%.4f", (s * td + tv) / r}')"
    add "a_$k" "$a"
    add "per_$k" "$per"
    add "form_$k" "$form"
    add "c_$k" "$(awk -v t="$w" -v td="$td" 'BEGIN {printf "%.4f", td / t}')"
    add "v_$k" "$(awk -v t="$w" -v tv="$tv" 'BEGIN {printf "%.4f", tv / t}')"
    add "pred_$k" "$pred"
    add "meas_$k" "$meas"
    add "ratio_$k" "$(awk -v m="$meas" -v p="$pred" 'BEGIN {printf "%.4f", m / p}')"
    line="$line | k $k: alpha $a, ${ms} ms/token, ${meas}x (formula ${pred}x)"
  done
  echo "$line"
done

stat() { # stat KEY: "median / min"
  printf '%s / %s' "$(tr ' ' '\n' <<<"${val[$1]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${val[$1]}" | grep . | minimum)"
}
rows() { # rows K KEY...: the table's row of k = K, "median / min" of each KEY_K
  local k=$1 line="| $1 |" key
  shift
  for key; do line="$line $(stat "${key}_$k") |"; done
  echo "$line"
}
{
  echo "Speculative decoding, $(date -u +%Y-%m-%d), $CPU, $ncpu CPUs (load $(cut -d' ' -f1 \
    /proc/loadavg)), 1 rank, 1 BLAS thread; target: the demo's model ($STEPS steps), drafter:"
  echo "1 layer, same width ($DSTEPS steps); batch 1, prompt \"$PROMPT\", $TOKENS tokens,"
  echo "temperature $TEMP; $ROUNDS alternating rounds, median / min over the rounds; plain decode"
  echo "step $(stat plain) ms (median), $(stat plainw) ms (mean: its decode's time per token)."
  echo "c = drafter step / plain step, v = verify step / plain step (means); formula speed-up ="
  echo "(1 - a^(k+1))/(1 - a) / (k c + v); measured = plain / speculative decode time per token."
  echo
  printf '| k | alpha | tokens/target step (measured) | (1-a^(k+1))/(1-a) | c | v |'
  echo ' speed-up measured | formula | measured/formula |'
  echo "|---|---|---|---|---|---|---|---|---|"
  for k in $KS; do rows "$k" a per form c v meas pred ratio; done
  echo
  echo "Where a round's time goes (generate's 'speculative phases', ms a round; picks + rule +"
  echo "loop: outside the model steps), and measured/formula as the product of three factors:"
  echo "tokens per target step / E, (k t_d + t_v)/(s t_d + t_v) with s the measured drafter steps"
  echo "per verify step, and the steps' share (s t_d + t_v) / round."
  echo
  printf '| k | s | drafter steps | verify step | outside the steps (%% of a round) |'
  echo ' tokens per step / E | (k t_d + t_v)/(s t_d + t_v) | steps / round |'
  echo "|---|---|---|---|---|---|---|---|"
  for k in $KS; do rows "$k" s pd pv pout fe fs fl; done
} | tee "$OUT"
