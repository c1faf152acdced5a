#!/usr/bin/env bash
# decode_ab.sh BUILD_A BUILD_B [ROUNDS]: bf16 decode at batch 1 of two builds, alternated: each
# round runs `meshtrain generate --bench` of A, then of B, on infer_bench.sh's model (L=8 D=512
# N=K=8 H=64 F=1408 V=256: 51.7 MB of bf16 weights, beyond a 32 MiB last-level cache), a prompt of
# 64 and 32 decode steps, one rank and one thread, --compute-dtype bf16 (the KV cache bf16 too).
# Prints each round's fastest and median step and its % of the memory-bandwidth bound (the run's
# own BW, read at start-up by one thread, as the step runs, from a buffer of at least 4x the
# last-level cache), then per build the min and median over the rounds of both, and B's speed-up
# (A's median / B's, the median over the rounds). Alternating cancels slow drifts in a shared
# machine's load. Names the CPU. MODEL= other shape flags; DTYPE=fp32 the fp32 runs.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_A BUILD_B [ROUNDS]" >&2
  exit 2
fi
a=$(cd "$1" && pwd) b=$(cd "$2" && pwd) rounds=${3:-8}
BUILD=$a
. bench/lib.sh decode_ab
for d in "$a" "$b"; do
  [ -x "$d/meshtrain" ] || { echo "decode_ab: no meshtrain in $d" >&2; exit 2; }
done
MODEL=${MODEL:-"--layers 8 --d-model 512 --heads 8 --kv-heads 8 --d-ff 1408 --vocab 256"}
DTYPE=${DTYPE:-bf16}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# one BUILD: "fastest median %bound" of the batch-1 decode step (ms)
one() {
  "$1/meshtrain" generate --bench $MODEL --seq-len 97 --bench-prompt 64 --tokens 33 \
    --bench-batches 1 --compute-dtype "$DTYPE" 2>&1 | awk '$4 == "decode:" {print $5, $6, $11}'
}
echo "decode_ab: $CPU, $(nproc --all) vCPUs, $DTYPE decode at batch 1, $rounds rounds"
echo "A = $a"
echo "B = $b"
printf '%5s %22s %22s\n' round 'A min/median (%bound)' 'B min/median (%bound)'
for r in $(seq "$rounds"); do
  read -r amin amed abw <<<"$(one "$a")"
  read -r bmin bmed bbw <<<"$(one "$b")"
  echo "$amin $amed ${abw%\%}" >>"$tmp/a"
  echo "$bmin $bmed ${bbw%\%}" >>"$tmp/b"
  awk -v x="$amed" -v y="$bmed" 'BEGIN {printf "%.3f\n", x / y}' >>"$tmp/ratio"
  printf '%5s %22s %22s\n' "$r" "$amin/$amed ($abw)" "$bmin/$bmed ($bbw)"
done
for k in a b; do
  printf '%s: fastest step min %s median %s | median step min %s median %s ms | %% of the bound at the median step: median %s, best %s\n' \
    "$(tr ab AB <<<$k)" "$(cut -d' ' -f1 "$tmp/$k" | minimum)" "$(cut -d' ' -f1 "$tmp/$k" | median)" \
    "$(cut -d' ' -f2 "$tmp/$k" | minimum)" "$(cut -d' ' -f2 "$tmp/$k" | median)" \
    "$(cut -d' ' -f3 "$tmp/$k" | median)" "$(cut -d' ' -f3 "$tmp/$k" | sort -g | tail -1)"
done
echo "B's speed-up (A's median step / B's, per round): median $(median <"$tmp/ratio"), min $(minimum <"$tmp/ratio")"
