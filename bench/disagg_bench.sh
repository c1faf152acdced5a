#!/usr/bin/env bash
# Disaggregated against interleaved serving on the same ranks, on the serving benchmark's Poisson
# workload (bench/serve_load.py: arrivals at a fixed seed, prompts and output lengths from the
# corpus's speeches). Both run `meshtrain serve` on NP ranks, one replica per rank (--mesh x=NP
# --dp x), continuous batching:
#   interleaved    every replica admits requests and runs their prefill chunks in the same steps
#                  as its decodes (the book's interleaved engine: good throughput, but a step that
#                  carries a prefill chunk is longer, so the decodes in it jitter);
#   disaggregated  --prefill-ranks PREFILL: those replicas only prefill and ship each request's
#                  KV blocks to the others, which only decode (steady decode steps, but the
#                  prefill ranks sit idle between prompts and fewer ranks decode).
# The variants alternate ROUNDS times. From each run: TTFT and TPOT (p50, p99), output tokens/s
# and requests/s; the table gives the median and min over the rounds of each, and the KV shipped
# (from the disaggregated server's /metrics). The book's argument: disaggregation wins p99 TPOT
# (no prefill in a decode step) and lets each side scale; interleaving wins throughput when the
# prefill load is too small to keep dedicated prefill chips busy.
# PREFILL_TENSOR=Yp puts each side on a mesh of its own (--prefill-tensor): the PREFILL ranks
# prefill as PREFILL/Yp replicas of Yp tensor ranks, the other NP − PREFILL decode as replicas of
# DECODE_TENSOR tensor ranks (the book's split: the prefill side sharded for compute, the decode
# side for memory), the KV moved by kv head between the two.
#
# usage: bench/disagg_bench.sh [BUILD_DIR]
# env:   ROUNDS=3 N=60 RATE=6 NP=3 PREFILL=1 B=8 SEED=1 OUT=bench/disagg_out
#        PREFILL_TENSOR= (one mesh) DECODE_TENSOR=1
#        MODEL="--layers 8 --d-model 512 --heads 8 --kv-heads 8 --d-ff 1408 --seq-len 256"
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
. bench/lib.sh disagg_bench
ROUNDS=${ROUNDS:-3} N=${N:-60} RATE=${RATE:-6} NP=${NP:-3} PREFILL=${PREFILL:-1} B=${B:-8}
SEED=${SEED:-1} OUT=${OUT:-bench/disagg_out}
PREFILL_TENSOR=${PREFILL_TENSOR:-} DECODE_TENSOR=${DECODE_TENSOR:-1}
DEF_MODEL="--layers 8 --d-model 512 --heads 8 --kv-heads 8 --d-ff 1408 --seq-len 256"
read -r -a MODEL <<<"${MODEL:-$DEF_MODEL}"
. bench/lib_serve.sh

INTER=(--mesh "x=$NP" --dp x)
if [ -z "$PREFILL_TENSOR" ]; then
  DISAGG=("${INTER[@]}" --prefill-ranks "$PREFILL")
else # the decode side: (NP − PREFILL) / DECODE_TENSOR replicas of DECODE_TENSOR ranks
  nd=$(((NP - PREFILL) / DECODE_TENSOR))
  if [ "$DECODE_TENSOR" = 1 ]; then dmesh=(--mesh "x=$nd" --dp x)
  elif [ "$nd" = 1 ]; then dmesh=(--mesh "y=$DECODE_TENSOR" --tensor y)
  else dmesh=(--mesh "x=$nd,y=$DECODE_TENSOR" --dp x --tensor y); fi
  DISAGG=(--prefill-ranks "$PREFILL" --prefill-tensor "$PREFILL_TENSOR" "${dmesh[@]}")
fi

# run TAG FLAGS...: a server on a free port, the workload against it, its /metrics, stopped.
run() {
  local tag=$1
  shift
  server_start "$tag" --max-seqs "$B" "$@"
  $PY bench/serve_load.py run "$URL" "$OUT/poisson.jsonl" "$OUT/$tag.jsonl"
  "$PY" -c 'import sys, urllib.request as u; print(u.urlopen(sys.argv[1]).read().decode())' \
    "$URL/metrics" >"$OUT/$tag.metrics"
  server_stop
}

# stats TAG: "ttft50 ttft99 tpot50 tpot99 tok_s req_s" (ms, ms, ms, ms, 1/s, 1/s)
stats() {
  "$PY" - "$OUT/$1.jsonl" <<'PY'
import sys
sys.path.insert(0, "bench")
import serve_load as s
st = s.stats(sys.argv[1], 1.0, 0.05)
print("%.2f %.2f %.2f %.2f %.2f %.3f" % (1e3 * s.pct(st["ttft"], 50), 1e3 * s.pct(st["ttft"], 99),
      1e3 * s.pct(st["tpot"], 50), 1e3 * s.pct(st["tpot"], 99), st["tok_s"], st["req_s"]))
PY
}

$PY bench/serve_load.py gen poisson "$OUT/poisson.jsonl" --corpus data/tinyshakespeare.txt \
  --n "$N" --rate "$RATE" --seed "$SEED" --context "$CTX"
declare -A val
add() { val[$1]="${val[$1]:-} $2"; }
keys=(ttft50 ttft99 tpot50 tpot99 tok_s req_s)
for r in $(seq "$ROUNDS"); do
  for v in inter disagg; do
    if [ "$v" = inter ]; then run "${v}_$r" "${INTER[@]}"; else run "${v}_$r" "${DISAGG[@]}"; fi
    read -r -a got <<<"$(stats "${v}_$r")"
    for i in "${!keys[@]}"; do add "${v}_${keys[$i]}" "${got[$i]}"; done
    echo "round $r $v: TTFT p50/p99 ${got[0]}/${got[1]} ms, TPOT p50/p99 ${got[2]}/${got[3]} ms," \
      "${got[4]} tok/s, ${got[5]} req/s"
  done
done

stat() { # stat KEY: "median / min"
  printf '%s / %s' "$(tr ' ' '\n' <<<"${val[$1]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${val[$1]}" | grep . | minimum)"
}
xfer=$(awk '$1 == "meshtrain_kv_transfers_total" {t = $2}
  $1 == "meshtrain_kv_transfer_bytes_total" {b = $2}
  $1 == "meshtrain_kv_transfer_seconds_total" {s = $2}
  END {if (t) printf "%d requests, %.3f MB, %.3f ms each (rank 0)", t, b / 1e6, 1e3 * s / t}' \
  "$OUT/disagg_1.metrics")
load=$(cut -d' ' -f1-3 /proc/loadavg)
{
  echo "# Disaggregated vs interleaved serving ($(date -u +%Y-%m-%d), $CPU,"
  echo "$(getconf _NPROCESSORS_ONLN) vCPUs, load $load)"
  echo
  echo "Model: ${MODEL[*]} (fp32, fresh init); $NP ranks, one replica each (--mesh x=$NP --dp x),"
  echo "--max-seqs $B; $N requests at $RATE/s (Poisson, seed $SEED); $ROUNDS alternating rounds,"
  echo "median / min over the rounds. Disaggregated: ${DISAGG[*]}"
  echo "($PREFILL prefill ranks, $((NP - PREFILL)) decode ranks); KV shipped in round 1: $xfer."
  cores=$(getconf _NPROCESSORS_ONLN)
  [ "$NP" -le "$cores" ] || echo "$NP ranks on $cores vCPUs: ranks share cores (a waiting rank naps), not the book's separate chips."
  echo
  printf '| | TTFT p50 (ms) | TTFT p99 (ms) | TPOT p50 (ms) | TPOT p99 (ms) |'
  echo ' output tokens/s | requests/s |'
  echo "|---|---|---|---|---|---|---|"
  for v in inter disagg; do
    printf '| %s |' "$([ "$v" = inter ] && echo interleaved || echo disaggregated)"
    for k in "${keys[@]}"; do printf ' %s |' "$(stat "${v}_$k")"; done
    echo
  done
} | tee "$OUT/results.md"
