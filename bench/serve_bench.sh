#!/usr/bin/env bash
# meshtrain serve under load, measured as vLLM's benchmark_serving measures a server, beside what
# the book's roofline predicts for the same requests (meshtrain serve --simulate: the real batcher
# on a virtual clock, each step priced T = KV/BW + max(FLOPs/C, weight bytes/BW) with the BW and
# C the server measured at start-up). bench/serve_load.py generates the workloads (Poisson
# arrivals at a fixed seed, prompt and output lengths drawn from the corpus's speeches, and a
# shared-prefix workload), sends them, and reports TTFT, TPOT, ITL and end-to-end latency (mean,
# p50, p90, p99), request and token throughput, and goodput under a latency target.
#
# Three comparisons, each variant alternating with the other ROUNDS times:
#   batching   the Poisson workload on continuous batching and on the two static baselines of
#              the same size (--max-seqs B): `static` (ours: a batch admitted together, its
#              finished rows dropped from the steps, so it pays for no padding) and
#              `static-padded` (generate's batch, the conventional baseline: prompts padded to
#              the batch's longest, every row computed every step until the longest output
#              ends): throughput and p99 TTFT (target: continuous >= 2x the throughput at a
#              lower p99 TTFT; the table says it against each baseline);
#   prefix     the shared-prefix workload at PREFIX_RATE with the prefix cache on and off: median
#              TTFT (target: on cuts it by at least the prefix's share of the prompt); and 20 of
#              its prompts one at a time for one token each (prefix1), the cut without queueing;
#   batch1     requests one at a time: the server's median TPOT against `meshtrain generate`'s
#              median decode step on the same model (target: within 10%).
# The targets end the results, each figure beside its target and the virtual clock's, then what
# the roofline says the batching ratio can be on the workload (serve_load.py model).
# Results: OUT/*.jsonl (every request), OUT/results.md (the tables), OUT/serve_ttft_*.svg and
# OUT/serve_e2e_*.svg (CDFs of each pair, measured and predicted; gnuplot-nox), the CPU named in
# the header.
#
# usage: bench/serve_bench.sh [BUILD_DIR]
# env:   ROUNDS=1 N=80 RATE=8 PREFIX_RATE=$RATE B=8 NP=1 MESH="" SEED=1 OUT=bench/serve_out
#        SLO_TTFT=1 SLO_TPOT=0.05
#        MODEL="--layers 8 --d-model 512 --heads 8 --kv-heads 8 --d-ff 1408 --seq-len 256"
# The default model is bench/infer_bench.sh's (103 MB of fp32 weights, beyond the caches): its
# decode step is bound by memory bandwidth up to B_crit (5-9 sequences on these cores), where a
# static batch that has shrunk costs as much per step as a full one, which is the waste
# continuous batching removes; past B_crit a CPU's step grows with the batch and both schemes
# converge. RATE must exceed what static batches can serve (the table shows both).
# A quick check that the script works: N=16 RATE=4 MODEL="--layers 4 --d-model 256 --heads 8
# --kv-heads 4 --d-ff 704 --seq-len 256" bench/serve_bench.sh build (about 2 minutes on the
# loaded 2-vCPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
. bench/lib.sh serve_bench
ROUNDS=${ROUNDS:-1} N=${N:-80} RATE=${RATE:-8} B=${B:-8} NP=${NP:-1} SEED=${SEED:-1}
PREFIX_RATE=${PREFIX_RATE:-$RATE}
OUT=${OUT:-bench/serve_out} SLO_TTFT=${SLO_TTFT:-1} SLO_TPOT=${SLO_TPOT:-0.05}
MESH=${MESH:-}
read -r -a MODEL <<<"${MODEL:---layers 8 --d-model 512 --heads 8 --kv-heads 8 --d-ff 1408 --seq-len 256}"
read -r -a MESHA <<<"$MESH"
. bench/lib_serve.sh
LOAD="$PY bench/serve_load.py"

# serve TAG FLAGS...: starts the server (a free loopback port), sets URL and MACHINE (its BW,C).
serve() {
  local tag=$1
  shift
  server_start "$tag" "${MESHA[@]}" "$@"
  MACHINE=$(sed -n 's|.*measured BW \([0-9.]*\) GB/s, C \([0-9.]*\) GFLOP/s.*|\1,\2|p' "$OUT/$tag.log")
}

# one TAG WORKLOAD [--sequential] -- SERVER FLAGS...: measured and predicted runs of a workload.
one() {
  local tag=$1 work=$2 seq=
  shift 2
  [ "$1" = --sequential ] && seq=--sequential && shift
  shift # --
  serve "$tag" "$@"
  $LOAD run "$URL" "$work" "$OUT/$tag.measured.jsonl" $seq
  $PY -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
    "$URL/metrics" >"$OUT/$tag.metrics"
  server_stop
  mpirun --oversubscribe -np "$NP" "$MT" serve "${MODEL[@]}" --seed 1 "${MESHA[@]}" "$@" \
    --simulate "$work" --sim-out "$OUT/$tag.predicted.jsonl" --sim-machine "$MACHINE" 2>&1 |
    grep 'serve simulate' | tee "$OUT/$tag.sim" || true
  $LOAD report "$OUT/$tag.measured.jsonl" "$OUT/$tag.predicted.jsonl" --slo-ttft "$SLO_TTFT" \
    --slo-tpot "$SLO_TPOT" --csv "$OUT/$tag" --metrics "$OUT/$tag.metrics" \
    --sim-log "$OUT/$tag.sim" >"$OUT/$tag.report"
  echo "== $tag (server at BW,C = $MACHINE GB/s,GFLOP/s)"
  cat "$OUT/$tag.report"
}

tv() { awk -F, -v m="$2" -v c="$3" '$1 == m {print $c}' "$OUT/$1_table.csv"; }

$LOAD gen poisson "$OUT/poisson.jsonl" --corpus data/tinyshakespeare.txt --n "$N" --rate "$RATE" \
  --seed "$SEED" --context "$CTX"
$LOAD gen shared "$OUT/shared.jsonl" --corpus data/tinyshakespeare.txt --n "$N" \
  --rate "$PREFIX_RATE" --seed "$SEED" --context "$CTX" --prefix $((CTX * 3 / 8))
$LOAD gen shared "$OUT/shared1.jsonl" --corpus data/tinyshakespeare.txt --n 20 --rate 1 \
  --seed "$SEED" --context "$CTX" --prefix $((CTX * 3 / 8)) --max-out 1
$LOAD gen poisson "$OUT/batch1.jsonl" --corpus data/tinyshakespeare.txt --n 6 --rate 1 \
  --seed "$SEED" --context "$CTX"

# the prefix's share of the prompt, from the workload itself: the median over its requests of
# prefix / prompt tokens (bytes: the model's tokens). Not prefix / (CTX / 2): a speech shorter than
# the room left after the prefix makes a shorter prompt, so at context 1024 the median share is
# 0.84-0.87, not 0.75.
share_of() {
  "$PY" - "$1" $((CTX * 3 / 8)) <<'PY'
import json, statistics, sys
p = int(sys.argv[2])
print("%.3f" % statistics.median(p / len(json.loads(l)["prompt"].encode()) for l in open(sys.argv[1])))
PY
}
# PREFIX_RATES="1 2 4 8": instead of the three comparisons, the prefix cache's median TTFT cut
# against the offered load: the shared-prefix workload (N requests) at each rate and 20 of its
# prompts one at a time, the cache on and off alternating in each of ROUNDS rounds; measured and
# on the virtual clock, beside the prefix's share. Writes OUT/prefix_sweep.md.
prefix_sweep() {
  local rate r w v cuts clocks
  {
    echo "# The prefix cache's median TTFT cut against the offered load ($(date -u +%Y-%m-%d), $CPU, $(nproc --all) vCPUs)"
    echo
    echo "\`PREFIX_RATES=\"$PREFIX_RATES\" ROUNDS=$ROUNDS N=$N B=$B bench/serve_bench.sh\`; model: ${MODEL[*]} (fp32), $NP rank(s) ${MESH:-(one replica)}, --max-seqs $B; shared-prefix workload (prefix $((CTX * 3 / 8)) tokens, seed $SEED); load average $(cut -d' ' -f1-3 /proc/loadavg) at the start."
    echo "Each cut is 1 - TTFT p50 (cache on) / TTFT p50 (cache off): the median over the rounds (min in brackets), measured and on the virtual clock."
    echo
    echo "| offered load | prefix's share | TTFT p50 on / off, ms (round 1) | cut, measured | cut, virtual clock | cut >= share |"
    echo "|---|---|---|---|---|---|"
  } >"$OUT/prefix_sweep.md"
  for rate in one $PREFIX_RATES; do
    w="$OUT/shared_$rate.jsonl"
    if [ "$rate" = one ]; then
      $LOAD gen shared "$w" --corpus data/tinyshakespeare.txt --n 20 --rate 1 --seed "$SEED" \
        --context "$CTX" --prefix $((CTX * 3 / 8)) --max-out 1
    else
      $LOAD gen shared "$w" --corpus data/tinyshakespeare.txt --n "$N" --rate "$rate" \
        --seed "$SEED" --context "$CTX" --prefix $((CTX * 3 / 8))
    fi
    local seq=()
    [ "$rate" = one ] && seq=(--sequential)
    for r in $(seq "$ROUNDS"); do
      for c in on off; do
        one "sweep_${rate}_${c}_$r" "$w" "${seq[@]}" -- --max-seqs "$B" --prefix-cache "$c"
      done
    done
    cuts="" clocks=""
    for r in $(seq "$ROUNDS"); do
      for c in 2 3; do
        v=$(awk -v a="$(tv "sweep_${rate}_on_$r" 'TTFT p50' $c)" -v b="$(tv "sweep_${rate}_off_$r" 'TTFT p50' $c)" \
          'BEGIN {printf "%.3f", 1 - a / b}')
        if [ $c = 2 ]; then cuts+="$v "; else clocks+="$v "; fi
      done
    done
    local share m
    share=$(share_of "$w")
    m=$(tr ' ' '\n' <<<"$cuts" | grep . | median)
    printf '| %s | %s | %.1f / %.1f | %.3f (%.3f) | %.3f | %s |\n' \
      "$([ "$rate" = one ] && echo "one request at a time" || echo "$rate requests/s")" "$share" \
      "$(tv "sweep_${rate}_on_1" 'TTFT p50' 2)" "$(tv "sweep_${rate}_off_1" 'TTFT p50' 2)" "$m" \
      "$(tr ' ' '\n' <<<"$cuts" | grep . | minimum)" "$(tr ' ' '\n' <<<"$clocks" | grep . | median)" \
      "$(awk -v v="$m" -v t="$share" 'BEGIN {print (v >= t ? "met" : "**not met**")}')" >>"$OUT/prefix_sweep.md"
  done
  cat "$OUT/prefix_sweep.md"
  echo "wrote $OUT/prefix_sweep.md"
}
if [ -n "${PREFIX_RATES:-}" ]; then
  prefix_sweep
  exit 0
fi

# batch1_round R: the batch-1 workload on the server one request at a time, then generate's decode
# step on the same requests (each prompt, its max_tokens), so that both attend over the same
# positions: OUT/gen_R.ms holds each run's median step.
batch1_round() {
  local r=$1 prompt toks gen
  one "batch1_$r" "$OUT/batch1.jsonl" --sequential -- --max-seqs 1
  : >"$OUT/gen_$r.ms"
  while IFS=$'\t' read -r prompt toks; do
    gen=$(mpirun --oversubscribe -np "$NP" "$MT" generate "${MODEL[@]}" --seed 1 "${MESHA[@]}" \
      --prompt "$prompt" --tokens "$toks" --temperature 0 --quiet 2>&1 >/dev/null </dev/null | grep 'decode summary')
    echo "$gen" | sed -n 's/.*median \([0-9.]*\) ms\/token.*/\1/p' >>"$OUT/gen_$r.ms"
    echo "== generate ($toks tokens): $gen"
  done < <("$PY" -c 'import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["prompt"].replace("\n", " ").replace("\t", " ") + "\t" + str(r["max_tokens"]))' "$OUT/batch1.jsonl")
}

# BATCH1_ONLY=1: only the batch-1 comparison, ROUNDS rounds (the server's median TPOT, then
# generate's median step, alternating): each round's ratio and their median. Writes OUT/batch1.md.
if [ "${BATCH1_ONLY:-0}" = 1 ]; then
  for r in $(seq "$ROUNDS"); do batch1_round "$r"; done
  {
    echo "# Batch-1 TPOT against generate's decode step ($(date -u +%Y-%m-%d), $CPU, $(nproc --all) vCPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
    echo
    echo "\`BATCH1_ONLY=1 ROUNDS=$ROUNDS bench/serve_bench.sh\`; model: ${MODEL[*]} (fp32), $NP rank(s); the 6 requests of the batch-1 workload one at a time, then generate on each."
    echo
    echo "| round | server TPOT p50 (ms) | generate's step, median of the runs' medians (ms) | ratio |"
    echo "|---|---|---|---|"
    rs="" # each round's ratio, one a line
    for r in $(seq "$ROUNDS"); do
      t=$(tv "batch1_$r" 'TPOT p50' 2) g=$(median <"$OUT/gen_$r.ms")
      awk -v r="$r" -v t="$t" -v g="$g" 'BEGIN {printf "| %s | %.2f | %.2f | %.2fx |\n", r, t, g, t / g}'
      rs+="$(awk -v t="$t" -v g="$g" 'BEGIN {print t / g}')"$'\n'
    done
    rs=${rs%$'\n'}
    m=$(median <<<"$rs")
    awk -v m="$m" -v lo="$(minimum <<<"$rs")" -v hi="$(sort -g <<<"$rs" | tail -1)" 'BEGIN {
      printf "\nmedian %.2fx (%.2f-%.2f): target 0.90-1.10x (within 10%%): %s\n", m, lo, hi,
        (m >= 0.9 && m <= 1.1 ? "met" : "**NOT met**") }'
  } | tee "$OUT/batch1.md"
  exit 0
fi

for r in $(seq "$ROUNDS"); do
  one "cont_$r" "$OUT/poisson.jsonl" -- --max-seqs "$B" --batching continuous
  MACHINE1=${MACHINE1:-$MACHINE}
  one "static_$r" "$OUT/poisson.jsonl" -- --max-seqs "$B" --batching static
  one "padded_$r" "$OUT/poisson.jsonl" -- --max-seqs "$B" --batching static-padded
  one "prefix_on_$r" "$OUT/shared.jsonl" -- --max-seqs "$B" --prefix-cache on
  one "prefix_off_$r" "$OUT/shared.jsonl" -- --max-seqs "$B" --prefix-cache off
  one "prefix1_on_$r" "$OUT/shared1.jsonl" --sequential -- --max-seqs "$B" --prefix-cache on
  one "prefix1_off_$r" "$OUT/shared1.jsonl" --sequential -- --max-seqs "$B" --prefix-cache off
  batch1_round "$r"
done

# the targets over the rounds: median (min) of each round's ratio
ratios() { # ratios EXPR: one value per round from the tables
  for r in $(seq "$ROUNDS"); do eval "$1"; done | grep . | median | awk '{printf "%.3g", $1}'
}
share=$(share_of "$OUT/shared.jsonl")
share1=$(share_of "$OUT/shared1.jsonl")
{
  echo "# meshtrain serve under load ($(date -u +%Y-%m-%d), $CPU, $(nproc --all) vCPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  echo "Model: ${MODEL[*]} (fp32, fresh init), $NP rank(s) ${MESH:-(one replica)}; $N requests at $RATE/s (Poisson, seed $SEED); --max-seqs $B; $ROUNDS round(s) alternating; SLO TTFT <= ${SLO_TTFT}s, TPOT <= ${SLO_TPOT}s."
  for t in cont static padded prefix_on prefix_off prefix1_on prefix1_off batch1; do
    echo
    echo "## $t (round 1; measured beside the virtual clock)"
    echo '```'
    cat "$OUT/${t}_1.report"
    echo '```'
  done
  echo
  echo "## Targets (median over the rounds, min in brackets; noisy unless the machine is quiet)"
  echo
  echo "| figure | measured | virtual clock | formula (saturated) | target | |"
  echo "|---|---|---|---|---|---|"
  declare -A thr thrmin p99b # by baseline and column: static2, padded3, ...
  for c in 2 3; do # the measured column, then the virtual clock's
    for base in static padded; do
      thr[$base$c]=$(ratios "awk -v a=\$(tv cont_\$r 'output tokens/s' $c) -v b=\$(tv ${base}_\$r 'output tokens/s' $c) 'BEGIN {print a / b}'")
      thrmin[$base$c]=$(for r in $(seq "$ROUNDS"); do awk -v a="$(tv "cont_$r" 'output tokens/s' $c)" -v b="$(tv "${base}_$r" 'output tokens/s' $c)" 'BEGIN {printf "%.3g\n", a / b}'; done | minimum)
      p99b[$base$c]=$(ratios "tv ${base}_\$r 'TTFT p99' $c")
    done
    p99c[c]=$(ratios "tv cont_\$r 'TTFT p99' $c")
    cut[c]=$(ratios "awk -v a=\$(tv prefix_on_\$r 'TTFT p50' $c) -v b=\$(tv prefix_off_\$r 'TTFT p50' $c) 'BEGIN {print 1 - a / b}'")
    cut1[c]=$(ratios "awk -v a=\$(tv prefix1_on_\$r 'TTFT p50' $c) -v b=\$(tv prefix1_off_\$r 'TTFT p50' $c) 'BEGIN {print 1 - a / b}'")
  done
  met() { awk -v v="$1" -v t="$2" -v op="$3" 'BEGIN {print (op == ">=" ? v >= t : v <= t) ? "met" : "**NOT met**"}'; }
  $LOAD model "$OUT/poisson.jsonl" --shape "${MODEL[*]}" --machine "$MACHINE1" --batch "$B" >"$OUT/model.txt"
  fs=$(awk '$1 == "'"$B"'" {sub("x", "", $5); print $5}' "$OUT/model.txt")
  fp=$(awk '$1 == "'"$B"'" {sub("x", "", $7); print $7}' "$OUT/model.txt")
  for base in padded static; do
    name=$([ $base = padded ] && echo "static-padded (generate's batch: the issue's baseline)" || echo "static (ours: finished rows dropped)")
    f=$([ $base = padded ] && echo "$fp" || echo "$fs")
    echo "| continuous / $name output tokens/s | ${thr[${base}2]}x (${thrmin[${base}2]}x) | ${thr[${base}3]}x | ${f}x | >= 2x | $(met "${thr[${base}2]}" 2 ">=") |"
    echo "| p99 TTFT continuous vs $name (ms) | ${p99c[2]} vs ${p99b[${base}2]} | ${p99c[3]} vs ${p99b[${base}3]} | | lower | $(met "${p99c[2]}" "${p99b[${base}2]}" "<=") |"
  done
  echo "| prefix cache: median TTFT cut at $PREFIX_RATE requests/s | ${cut[2]} | ${cut[3]} | | >= ${share} (the prefix's median share of a prompt) | $(met "${cut[2]}" "$share" ">=") |"
  echo "| ... one request at a time (no queueing: the step's own cut) | ${cut1[2]} | ${cut1[3]} | | >= ${share1} (its prompts' share) | $(met "${cut1[2]}" "$share1" ">=") |"
  tpot=$(ratios 'tv batch1_$r "TPOT p50" 2')
  gms=$(cat "$OUT"/gen_*.ms | median)
  b1=$(awk -v a="$tpot" -v b="$gms" 'BEGIN {printf "%.2f", a / b}')
  echo "| batch-1 TPOT / generate's decode step | ${b1}x (${tpot} vs ${gms} ms) | | | 0.90-1.10x (within 10%) | $(awk -v v="$b1" 'BEGIN {print (v >= 0.9 && v <= 1.1 ? "met" : "**NOT met**")}') |"
  echo
  echo "The issue's static baseline is \`generate\`'s batch (every prompt starts together, the batch ends when its longest sequence ends): \`static-padded\`. \`static\` is our stronger one (its finished rows leave the steps; docs/serving.md). The formula column: what the roofline says the ratio can be on this workload, saturated (serve_load.py model, priced at the first round's BW,C):"
  echo '```'
  cat "$OUT/model.txt"
  echo '```'
} | tee "$OUT/results.md"

if command -v gnuplot >/dev/null; then
  for key in ttft e2e; do
    for pair in "cont static" "cont padded" "prefix_on prefix_off"; do
      read -r a b <<<"$pair"
      gnuplot <<GP
set terminal svg size 760,460 font "sans,12"
set output "$OUT/serve_${key}_${a}_${b}.svg"
set key bottom right
set logscale x
set xlabel "${key^^} (s)"
set ylabel "fraction of requests"
set title "${key^^}: $a vs $b, measured and the book's virtual clock ($CPU)"
plot "$OUT/${a}_1_${key}.csv" using 1:2 with steps lw 2 title "$a measured", \
     "" using 1:3 with steps lw 1 dt 2 title "$a predicted", \
     "$OUT/${b}_1_${key}.csv" using 1:2 with steps lw 2 title "$b measured", \
     "" using 1:3 with steps lw 1 dt 2 title "$b predicted"
GP
    done
  done
  echo "wrote $OUT/serve_{ttft,e2e}_{cont_static,cont_padded,prefix_on_prefix_off}.svg"
else
  echo "gnuplot not found (apt-get install gnuplot-nox): no SVG" >&2
fi
