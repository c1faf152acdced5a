#!/usr/bin/env bash
# Generation with a KV cache: meshtrain generate --bench beside the same model in PyTorch 1.13
# (bench/torch_infer.py), one rank and one BLAS/torch thread, at batch 1 and at a batch past
# B_crit, alternating round by round so that both see the same machine; then meshtrain's decode
# batch sweep (the roofline) as CSV and a gnuplot SVG.
# meshtrain runs in fp32 and in bf16 (--compute-dtype bf16, the KV cache in bf16) each round.
# Model L=8 D=512 N=K=8 H=64 F=1408 V=256 (103 MB of weights in fp32, 51.5 MB in bf16: beyond the
# 32 MiB L3 of the AMD EPYC it was sized on; MODEL= another where the last-level cache is
# larger), prompts of 64 random tokens, 32 decode steps. Each run reports its prefill time and
# its median decode step; the table gives the minimum and the median of those over ROUNDS rounds,
# the speed-ups (PyTorch's median / meshtrain's), decode at batch 1 against the memory-bandwidth
# bound (weights + KV bytes in the run's dtype / the BW read at start-up from a buffer of at
# least 4x the last-level cache, whose size Linux gives in sysfs, by one thread: the step's own
# thread count here) and the targets (1.2x, 80%). bench/decode_ab.sh alternates two builds' bf16
# decode at batch 1 alone.
# Each run says whether its weights exceed the last-level cache (`decode bound`); where they do
# not, the bound is meaningless and the target line says so.
# About 50 s per round with fp32 alone and 30 s for the sweep (measured on the loaded 2-vCPU
# machine); the bf16 runs add about half: about 5.5 minutes in all with ROUNDS=4.
#
# usage: bench/infer_bench.sh [BUILD_DIR]
# env:   ROUNDS=5 MODEL="--layers 8 ... --vocab 256" BIG=32 SWEEP=1,2,4,8,16,32,64 OUT=bench/infer_results.md PYTHON=/usr/bin/python3
#        DOCS=docs (infer_roofline.csv / .svg written there)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${ROUNDS:-5}
BIG=${BIG:-32}
SWEEP=${SWEEP:-1,2,4,8,16,32,64}
OUT=${OUT:-bench/infer_results.md}
DOCS=${DOCS:-docs}
. bench/torch_preamble.sh infer_bench
MODEL=${MODEL:-"--layers 8 --d-model 512 --heads 8 --kv-heads 8 --d-ff 1408 --vocab 256"}
P=64 STEPS=32
declare -A val
add() { val[$1]="${val[$1]:-} $2"; }

# mt ROUND PREFIX DTYPE: meshtrain's run in --compute-dtype DTYPE (the KV cache in the same), its
# figures under PREFIX_pre_B, _dec_B, _bw_B (% of the bandwidth bound at the median step), _bwmin_B
mt() {
  local out
  out=$("$MT" generate --bench $MODEL --seq-len $((P + STEPS + 1)) --bench-prompt $P \
    --tokens $((STEPS + 1)) --bench-batches "1,$BIG" --compute-dtype "$3" 2>&1)
  while read -r b pre best med bw; do
    add "$2_pre_$b" "$pre"
    add "$2_dec_$b" "$med"
    add "$2_bw_$b" "${bw%\%}"                                        # % of the bound, median step
    add "$2_bwmin_$b" "$(awk -v p="${bw%\%}" -v a="$med" -v b="$best" 'BEGIN {print p * a / b}')"
  done < <(awk '$4 == "decode:" {print $1, $2, $5, $6, $11}' <<<"$out")
  bound[$3]=$(grep '^decode bound' <<<"$out" || true)
  if grep -q '^B_crit' <<<"$out"; then
    bcrit[$3]=$(grep '^B_crit' <<<"$out")
    echo "round $1 meshtrain $3: ${bcrit[$3]}"
  fi
}
declare -A bound bcrit
for r in $(seq "$ROUNDS"); do
  mt "$r" mt fp32
  mt "$r" bf bf16
  for b in 1 "$BIG"; do
    line=$(cd bench && "$PYTHON" torch_infer.py $MODEL --prompt $P --steps $STEPS --batch "$b")
    add "pt_pre_$b" "$(sed -n 's/.*prefill ms \([0-9.]*\).*/\1/p' <<<"$line")"
    add "pt_dec_$b" "$(sed -n 's/.*ms\/step median \([0-9.]*\).*/\1/p' <<<"$line")"
  done
  echo "round $r: meshtrain decode B=1 ${val[mt_dec_1]##* } ms (bf16 ${val[bf_dec_1]##* } ms), torch ${val[pt_dec_1]##* } ms"
done

med() { tr ' ' '\n' <<<"${val[$1]}" | grep . | median; }
stat() { # stat KEY: "median / min"
  printf '%s / %s' "$(tr ' ' '\n' <<<"${val[$1]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${val[$1]}" | grep . | minimum)"
}
ratio() { # ratio A B: median(B) / median(A) (how many times faster A is)
  awk -v a="$(tr ' ' '\n' <<<"${val[$1]}" | grep . | median)" \
    -v b="$(tr ' ' '\n' <<<"${val[$2]}" | grep . | median)" 'BEGIN {printf "%.2f", b / a}'
}
{
  echo "Generation with a KV cache, one rank, one thread, $ROUNDS alternating rounds"
  echo "(median / min over the rounds of each run's median decode step; prefill = TTFT of the batch)."
  echo "Model: $MODEL, prompt $P, $STEPS decode steps. $(date -u +%Y-%m-%d), $CPU, $(nproc --all) vCPUs, load $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "| phase | batch | meshtrain ms (median / min) | PyTorch 1.13 ms (median / min) | speed-up |"
  echo "|---|---|---|---|---|"
  for b in 1 "$BIG"; do
    echo "| prefill ($P tokens each) | $b | $(stat mt_pre_$b) | $(stat pt_pre_$b) | $(ratio mt_pre_$b pt_pre_$b)x |"
    echo "| decode step | $b | $(stat mt_dec_$b) | $(stat pt_dec_$b) | $(ratio mt_dec_$b pt_dec_$b)x |"
  done
  echo
  echo "meshtrain in bf16 (--compute-dtype bf16, the KV cache in bf16), the same rounds:"
  echo
  echo "| phase | batch | meshtrain bf16 ms (median / min) | speed-up over meshtrain fp32 (medians) | over PyTorch 1.13 fp32 |"
  echo "|---|---|---|---|---|"
  for b in 1 "$BIG"; do
    echo "| prefill ($P tokens each) | $b | $(stat bf_pre_$b) | $(ratio bf_pre_$b mt_pre_$b)x | $(ratio bf_pre_$b pt_pre_$b)x |"
    echo "| decode step | $b | $(stat bf_dec_$b) | $(ratio bf_dec_$b mt_dec_$b)x | $(ratio bf_dec_$b pt_dec_$b)x |"
  done
  echo
  echo "Last round: fp32 ${bcrit[fp32]:-no B_crit line}; bf16 ${bcrit[bf16]:-no B_crit line}"
  echo
  echo "Decode at batch 1 against the memory-bandwidth bound ((weights + KV bytes in the run's dtype)"
  echo "/ the BW read at start-up from a buffer of at least 4x the last-level cache):"
  for k in mt bf; do
    echo "  $([ $k = mt ] && echo fp32 || echo bf16): $(med ${k}_bw_1)% at the median step (median over the rounds; per round: ${val[${k}_bw_1]# }),"
    echo "    $(tr ' ' '\n' <<<"${val[${k}_bwmin_1]}" | grep . | sort -g | tail -1 | awk '{printf "%.0f", $1}')% at the fastest step of the best round"
  done
  echo "The bound's meaning (the last round's runs):"
  echo "  fp32: ${bound[fp32]:-no decode bound line}"
  echo "  bf16: ${bound[bf16]:-no decode bound line}"
  echo
  echo "Targets (speed-up = PyTorch's median / meshtrain's median; bound: median step >= 80%):"
  for k in pre dec; do
    for b in 1 "$BIG"; do
      x=$(ratio mt_${k}_$b pt_${k}_$b)
      printf '  %-7s batch %-3s %5sx  %s\n' "$([ $k = pre ] && echo prefill || echo decode)" \
        "$b" "$x" "$(awk -v x="$x" 'BEGIN {print (x >= 1.2 ? "met (>= 1.2x)" : "NOT met (< 1.2x)")}')"
    done
  done
  for k in mt bf; do
    printf '  decode  batch 1   %5s%% of the bandwidth bound in %s  %s%s\n' "$(med ${k}_bw_1)" \
      "$([ $k = mt ] && echo fp32 || echo bf16)" \
      "$(awk -v x="$(med ${k}_bw_1)" 'BEGIN {print (x >= 80 ? "met (>= 80%)" : "NOT met (< 80%)")}')" \
      "$(grep -q 'FIT in the last-level' <<<"${bound[$([ $k = mt ] && echo fp32 || echo bf16)]:-}" &&
           echo ': MEANINGLESS, the weights fit in the last-level cache' || true)"
  done
} | tee "$OUT"

# the roofline sweep: CSV + SVG
mkdir -p "$DOCS"
"$MT" generate --bench $MODEL --seq-len $((P + STEPS + 1)) --bench-prompt $P \
  --tokens $((STEPS + 1)) --bench-batches "$SWEEP" --csv "$DOCS/infer_roofline.csv" 2>&1 |
  tee -a "$OUT"
if command -v gnuplot >/dev/null; then
  gnuplot <<GP
set terminal svg size 760,460 font "sans,12"
set output "$DOCS/infer_roofline.svg"
set datafile separator ","
set key top left
set logscale xy 2
set xlabel "decode batch B (sequences)"
set ylabel "decode step (ms)"
set title "Decode on the roofline: L=8 D=512 fp32, one rank"
plot "$DOCS/infer_roofline.csv" using 1:3 skip 1 with linespoints lw 2 title "measured (min)", \
     "" using 1:4 skip 1 with linespoints lw 1 dt 2 title "measured (median)", \
     "" using 1:5 skip 1 with lines lw 2 title "book: B·KV/BW + max(2BP/C, P_bytes/BW)", \
     "" using 1:6 skip 1 with lines lw 1 dt 3 title "memory term (KV + weights)/BW", \
     "" using 1:7 skip 1 with lines lw 1 dt 4 title "FLOP term B·KV/BW + 2BP/C"
GP
  echo "wrote $DOCS/infer_roofline.svg"
else
  echo "gnuplot not found (apt-get install gnuplot-nox): no SVG" >&2
fi
