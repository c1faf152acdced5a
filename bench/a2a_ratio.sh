#!/usr/bin/env bash
# The AllToAll on a ring against a switch, measured. The book prices an AllToAll on a
# bidirectional ring at 1/4 of a comparable AllGather along the same axis; on a fully connected
# switch each rank sends only (n-1)/n of its array once, 1/n of what it receives in an AllGather.
# For each fabric (FABRICS: "real", this machine's shared memory, every pair of ranks directly
# connected, a switch; "v5p", links emulated at a v5p torus's C/W, a ring) and NP ranks, meshbench
# times AllToAll, AllToAllv and AllGather with each of our algorithms (ALGS) and MPI's, and per
# size this prints
#  - each algorithm's AllToAll over MPI_Alltoall's and AllToAllv over MPI_Alltoallv's time, the
#    two timed in the same meshbench run, their repetitions interleaved (meshbench -r); on the
#    real fabric only (MPI's own calls do not go through the emulated links);
#  - each algorithm's AllToAll over its own AllGather at the same meshbench size S (each rank's
#    AllToAll input, the AllGather's output: the AllToAll's global array is n·S), beside the cost
#    model's ratio of the two predictions (meshbench's predicted_s: the ping-pong fit of the
#    links, or the emulated chip's);
#  - the book's comparison, the AllToAll over the AllGather of the same global array V (the
#    AllToAll at S beside the AllGather at n·S, when the sweep has both): 1/4 on a bidirectional
#    ring for large n, n/(4(n−1)) for our BIDIR at even n (1/3 at n = 4), 1/2 one way round
#    (RING), 1/n on a switch (docs/moe.md, "Why not the book's 1/4");
# each the min and median over ROUNDS rounds; a round runs the algorithms in a rotated order, so
# that none always runs first. Writes OUT (markdown) and OUT_DIR/a2a_ratio.csv (every round's
# rows; REPORT_ONLY=1 prints the table of an existing one). Figures taken on a loaded machine are
# noise: take them idle. On an emulated fabric meshbench is given EMU_FLOPS (its time scale: the
# links at the chip's C/W for a CPU of that many FLOP/s; the default, ~10x this CPU's sgemm, makes
# the links ~45 MB/s and 2 ms a hop, still far below shared memory) and --chip (the predictions
# from the chip's links scaled alike, no ping-pong fit: through emulated links that fit alone
# took ~90 s a run), sizes EMU_BEGIN..EMU_END (the book's ratios are bandwidth ratios: at 4
# ranks an AllToAll's hop latencies match its bandwidth term near 1.4 MB of global array on
# v5p) and fewer repetitions; MPI's calls are left out there (they bypass the emulated links).
#
# usage: bench/a2a_ratio.sh [BUILD_DIR]  (default build; meshbench built there)
# env:   NP=4 ROUNDS=5 ALGS="ring bidir direct" FABRICS="real v5p" BEGIN=64K END=4M
#        EMU_BEGIN=1M EMU_END=16M EMU_FLOPS=2.3e11 OUT=/dev/stdout OUT_DIR=bench
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
. bench/lib.sh a2a_ratio
defaults NP=4 ROUNDS=5 "ALGS=ring bidir direct" "FABRICS=real v5p" BEGIN=64K END=4M \
  EMU_BEGIN=1M EMU_END=16M EMU_FLOPS=2.3e11 OUT=/dev/stdout OUT_DIR=bench
MB="$BUILD/meshbench"
[ -x "$MB" ] || { echo "a2a_ratio: $MB not found; build first" >&2; exit 2; }
CSV="$OUT_DIR/a2a_ratio.csv"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
read -r -a algs <<<"$ALGS"
[ -n "${REPORT_ONLY:-}" ] || echo "fabric,round,size_bytes,op,alg,time_s,time_over_mpi,predicted_s" >"$CSV"
for fab in $FABRICS; do
  [ -z "${REPORT_ONLY:-}" ] || break
  emu=() mpi=(mpi) sizes=(-b "$BEGIN" -e "$END") reps=(-w 3 -n 10 -r 3)
  if [ "$fab" != real ]; then
    emu=(--emulate "$fab" --flops "$EMU_FLOPS" --chip "$fab") mpi=()
    sizes=(-b "$EMU_BEGIN" -e "$EMU_END") reps=(-w 1 -n 3 -r 1)
  fi
  for r in $(seq "$ROUNDS"); do
    k=$(((r - 1) % ${#algs[@]}))
    order=("${algs[@]:k}" "${algs[@]:0:k}" "${mpi[@]}") # rotated, MPI last: meshbench's reference
    list=$(IFS=,; echo "${order[*]}")
    echo "== $fab, round $r/$ROUNDS: --alg $list" >&2
    mpirun --oversubscribe --bind-to none -np "$NP" "$MB" --op a2a,a2av,ag --alg "$list" \
      "${sizes[@]}" -f 4 "${reps[@]}" -c 0 "${emu[@]}" --csv "$TMP/r.csv" >/dev/null
    # size_bytes,count,op,axes,alg,time_s,...,predicted_s(13),...,time_over_mpi(16)
    awk -F, -v f="$fab" -v r="$r" 'NR > 1 { print f "," r "," $1 "," $3 "," $5 "," $6 "," $16 "," $13 }' \
      "$TMP/r.csv" >>"$CSV"
  done
done
# min and median of a column of numbers (one per line)
stats() { local v; v=$(cat); printf '%s / %s' "$(minimum <<<"$v")" "$(median <<<"$v")"; }
{
  echo "AllToAll on a ring (emulated v5p links) and on a switch (this machine's shared memory),"
  echo "$NP ranks; min / median over $ROUNDS rounds; CPU: $CPU"
  echo
  echo "| fabric | size S | alg | AllToAll / MPI_Alltoall | AllToAllv / MPI_Alltoallv | AllToAll / AllGather (same S) | predicted | AllToAll(S) / AllGather($NP·S) (same V) | predicted |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for fab in $FABRICS; do
    for size in $(awk -F, -v f="$fab" 'NR > 1 && $1 == f { print $3 }' "$CSV" | sort -gu); do
      alg_list=("${algs[@]}")
      [ "$fab" != real ] || alg_list+=(mpi) # (MPI's calls bypass the emulated links)
      for alg in "${alg_list[@]}"; do
        sel() { awk -F, -v f="$fab" -v s="$size" -v a="$alg" -v o="$1" \
                  'NR > 1 && $1 == f && $3 == s && $5 == a && $4 == o' "$CSV"; }
        vs_mpi="—" vs_mpiv="—" # (MPI's calls do not go through the emulated links)
        if [ "$fab" = real ]; then
          vs_mpi=$(sel all_to_all | cut -d, -f7 | stats)
          vs_mpiv=$(sel a2av | cut -d, -f7 | stats)
        fi
        # this algorithm's AllToAll over its AllGather, round by round
        ratio=$(join -t, <(sel all_to_all | cut -d, -f2,6 | sort) \
                         <(sel all_gather | cut -d, -f2,6 | sort) |
                awk -F, '$3 > 0 { printf "%.4g\n", $2 / $3 }' | stats)
        pred=$(join -t, <(sel all_to_all | cut -d, -f2,8 | sort | head -1) \
                        <(sel all_gather | cut -d, -f2,8 | sort | head -1) |
               awk -F, '$3 > 0 { printf "%.3g", $2 / $3 }')
        # the book's: this size's AllToAll over the AllGather of NP times it (the same global V)
        selv() { awk -F, -v f="$fab" -v s="$2" -v a="$alg" -v o="$1" \
                   'NR > 1 && $1 == f && $3 == s && $5 == a && $4 == o' "$CSV"; }
        big=$((size * NP))
        ratio_v=$(join -t, <(sel all_to_all | cut -d, -f2,6 | sort) \
                           <(selv all_gather "$big" | cut -d, -f2,6 | sort) |
                  awk -F, '$3 > 0 { printf "%.4g\n", $2 / $3 }')
        [ -z "$ratio_v" ] || ratio_v=$(stats <<<"$ratio_v")
        pred_v=$(join -t, <(sel all_to_all | cut -d, -f2,8 | sort | head -1) \
                          <(selv all_gather "$big" | cut -d, -f2,8 | sort | head -1) |
                 awk -F, '$3 > 0 { printf "%.3g", $2 / $3 }')
        echo "| $fab | $size | $alg | $vs_mpi | $vs_mpiv | $ratio | $pred | ${ratio_v:-—} | ${pred_v:-—} |"
      done
    done
  done
  echo
  echo "The book: AllToAll / AllGather of the same array = 1/4 on a bidirectional ring (large n;"
  echo "BIDIR at even n: n/(4(n-1))), 1/2 one way round, 1/n = 1/$NP on a switch. Command:"
  echo "NP=$NP ROUNDS=$ROUNDS ALGS=\"$ALGS\" FABRICS=\"$FABRICS\" BEGIN=$BEGIN END=$END EMU_BEGIN=$EMU_BEGIN EMU_END=$EMU_END EMU_FLOPS=$EMU_FLOPS bench/a2a_ratio.sh $BUILD"
} >"$OUT"
