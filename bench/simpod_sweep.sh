#!/usr/bin/env bash
# simpod_sweep: meshbench on simulated v5p slices (bench/simpod), every collective and algorithm
# over one, two and three axes, at a latency-bound and a bandwidth-bound size; writes the CSVs,
# a markdown table (simulated vs the cost model's prediction) and an SVG plot (gnuplot-nox).
#
#   bench/simpod_sweep.sh [-o OUTDIR] [-s "SIZE:ITERS ..."] [-a "MESHBENCH ARGS"] [TOPOLOGY ...]
#   (default topologies: 4x4x4 8x8x8)
#
# Sizes (default "64K:4 16M:1": 64 KiB arrays timed over 4 back-to-back calls, so that the skew of
# the ranks' exits from the barrier before them, ~1-2 µs in SMPI, does not dominate a
# latency-bound time; 16 MiB arrays over 1 call). -a adds meshbench flags to every run, e.g.
# "--chunk 0" (no lanes: 16x fewer messages to simulate for 16 MiB arrays).
# Needs build-smpi (cmake -S . -B build-smpi -DMESHTRAIN_SMPI=ON && cmake --build build-smpi).
# Buffers are shared between simulated ranks (simpod --shared 1M): results are not checked here,
# tests/smpi checks them bit-exactly. Simulated times do not depend on the machine's load; the
# wall time of each run is printed (it does).
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/simpod sizes="64K:4 16M:1" extra=""
while getopts "o:s:a:" o; do
  case "$o" in
    o) out="$OPTARG" ;;
    s) sizes="$OPTARG" ;;
    a) extra="$OPTARG" ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
topos=("$@")
[ ${#topos[@]} -gt 0 ] || topos=(4x4x4 8x8x8)
mkdir -p "$out"
for t in "${topos[@]}"; do
  for ax in x xy xyz; do
    for point in $sizes; do
      size="${point%%:*}" iters="${point##*:}"
      csv="$out/v5p_${t}_${ax}_${size}.csv" err="$out/v5p_${t}_${ax}_${size}.err"
      start=$(date +%s)
      bench/simpod --chip v5p --topology "$t" --shared 1M build-smpi/meshbench --chip v5p \
        --op ag,rs,ar,a2a --axes "$ax" --alg ring,bidir,seq,multi,direct,mpi \
        -b "$size" -e "$size" -w 0 -n "$iters" -c 0 $extra --csv "$csv" >/dev/null 2>"$err" ||
        { echo "simpod_sweep: v5p $t over $ax, $size failed (see $err)" >&2; exit 1; }
      rm -f "$err"
      echo "v5p $t over $ax, $size x $iters: wall $(($(date +%s) - start)) s" >&2
    done
  done
done
bench/simpod_report.sh "$out" "${topos[@]}"
