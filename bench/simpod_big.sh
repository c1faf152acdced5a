#!/usr/bin/env bash
# simpod_big: meshbench on a simulated v5p 8x8x8 (512 chips) with the settings that keep it
# tractable on a small machine (docs/simpod_big.md): shared buffers (--shared 1M), SMPI's
# tree-based built-in collectives for meshbench's own barrier and reductions and mesh/'s start-up
# (smpi/coll-selector:ompi), a binomial-tree broadcast (smpi/bcast:binomial_tree: the ompi
# selector's knomial broadcast, which SMPI runs in every new communicator, first runs a ring
# AllGather over the whole communicator, 512 x 511 messages for each of mesh/'s 3-axis
# communicators), shared blocks of the run's smallest size, at least 1 MiB
# (smpi/shared-malloc-blocksize: every shared block is one memory mapping, and 512 ranks' 16 MiB
# buffers in 1 MiB blocks pass Linux's 65,530 per process; an allocation smaller than a block is
# shared too, in one mapping), no lanes (--chunk 0: one
# message per ring step), no warm-up, results not checked (-c 0), and no work on the data
# (--no-data: the collectives' additions and copies and the inputs' fill are skipped, every
# message keeps its size; the simulated times are the same). Writes OUTDIR/v5p_<topology>_<run>.csv
# and the wall and CPU time and peak memory of each run to OUTDIR/v5p_<topology>_<run>.time.
#   bench/simpod_big.sh [OUTDIR] [TOPOLOGY] [RUN ...]
#   (default: docs/simpod 8x8x8 x x-seq-multi-direct xy xy-ring xy-bidir xy-direct z xyz xyz-1M
#   xyz-ring xyz-bidir)
# The runs (every op: AllGather, ReduceScatter, AllReduce, AllToAll, unless they say):
#   x          ring, bidir at 1 MiB (the book's AllGather_X of bf16[B_X, D_Y], B = 1024, D = 4096,
#              |Y| = 8) and 16 MiB;
#   x-seq-multi-direct  the same sizes with seq and multi (bidir on one axis) and direct;
#   xy         seq and multi at 8 MiB (the book's AllGather_XY) and 16 MiB;
#   xy-ring, xy-bidir, xy-direct  the same with one algorithm each (a ring over xy has 63 steps;
#              direct sends one message per pair of the 64 ranks of each xy plane);
#   z          the book's AllReduce_Z (128 KiB, 4 calls in a row), ring and bidir;
#   xyz, xyz-1M  seq and multi at 16 MiB, and at 1 MiB;
#   xyz-ring, xyz-bidir, xyz-direct  every op at 16 MiB with one algorithm each (a ring over xyz
#              has 511 steps, about a minute each on an idle core; direct sends 512 x 511
#              messages at once and did not finish its first call in 12 minutes);
#   xyz-direct-64K, xyz-direct-1M  direct over xyz at 64 KiB and 1 MiB with rendezvous sends
#              (smpi/send-is-detached-thresh:0: a send completes when its data has arrived, so
#              no rank leaves the timing barrier early and the 512 ranks' flows start together;
#              docs/simpod_big.md, "Direct over xyz on 8x8x8"); xyz-direct-64K-OP (OP: ag, rs, ar,
#              a2a) runs one op of them, minutes to a quarter of an hour each;
#   x-mpi, xy-mpi  MPI's built-ins (SMPI's implementations, chosen by the ompi selector) at 1 MiB;
#   xyz-mpi-ag, xyz-mpi-rs, xyz-mpi-ar, xyz-mpi-a2a  the same over xyz, one op each. At 16 MiB
#              SMPI's built-ins allocate private temporaries per rank (not shared): 512 ranks
#              passed 8 GB within 25 s over x;
#   xyz-mpi-64K-OP  one built-in over xyz at 64 KiB with rendezvous sends, as xyz-direct-64K-OP
#              (the AllToAll's block is then 128 B, and the selector picks Bruck's algorithm);
#   ag-x-bidir, ag-xy-multi, ag-xyz-multi  one AllGather of 16 MiB, bidir over x, multi over xy
#              and xyz: the runs of the 16x16x16 slice (4096 chips, 10-20 minutes each).
#   rs-ar-a2a-x-bidir  the other ops, bidir over x at 16 MiB (for the 16x16x16 slice).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/simpod}" topo="${2:-8x8x8}"
shift $(($# < 2 ? $# : 2))
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(x x-seq-multi-direct xy xy-ring xy-bidir xy-direct z xyz xyz-1M xyz-ring xyz-bidir)
mkdir -p "$out"
run() { # NAME AXES OPS ALGS MIN MAX FACTOR ITERS [SIMPOD OPTIONS...]
  local csv="$out/v5p_${topo}_$1.csv" block extra=("${@:9}")
  block="$(numfmt --from=iec "$5")"
  [ "$block" -ge 1048576 ] || block=1048576
  /usr/bin/time -f "wall %e s, cpu %U+%S s, max RSS %M KB" -o "$out/v5p_${topo}_$1.time" \
    bench/simpod --chip v5p --topology "$topo" --shared 1M --cfg smpi/coll-selector:ompi \
    --cfg smpi/bcast:binomial_tree --cfg smpi/shared-malloc-blocksize:"$block" "${extra[@]}" \
    build-smpi/meshbench --chip v5p --axes "$2" --op "$3" --alg "$4" --chunk 0 \
    -b "$5" -e "$6" -f "$7" -w 0 -n "$8" -c 0 --no-data --csv "$csv" >/dev/null
  echo "$topo $1: $(cat "$out/v5p_${topo}_$1.time")" >&2
}
for set in "${sets[@]}"; do
  case "$set" in
    x) run x x ag,rs,ar,a2a ring,bidir 1M 16M 16 1 ;;
    x-seq-multi-direct) run "$set" x ag,rs,ar,a2a seq,multi,direct 1M 16M 16 1 ;;
    xy) run xy xy ag,rs,ar,a2a seq,multi 8M 16M 2 1 ;;
    xy-ring | xy-bidir | xy-direct) run "$set" xy ag,rs,ar,a2a "${set#xy-}" 8M 16M 2 1 ;;
    z) run z z ar ring,bidir 128K 128K 2 4 ;;
    xyz) run xyz xyz ag,rs,ar,a2a seq,multi 16M 16M 2 1 ;;
    xyz-1M) run xyz-1M xyz ag,rs,ar,a2a seq,multi 1M 1M 2 1 ;;
    xyz-ring | xyz-bidir | xyz-direct) run "$set" xyz ag,rs,ar,a2a "${set#xyz-}" 16M 16M 2 1 ;;
    x-mpi | xy-mpi) run "$set" "${set%-mpi}" ag,rs,ar,a2a mpi 1M 1M 2 1 ;;
    xyz-mpi-ag | xyz-mpi-rs | xyz-mpi-ar | xyz-mpi-a2a) run "$set" xyz "${set#xyz-mpi-}" mpi 1M 1M 2 1 ;;
    xyz-mpi-64K-*) run "$set" xyz "${set##*-}" mpi 64K 64K 2 1 --cfg smpi/send-is-detached-thresh:0 ;;
    xyz-direct-64K | xyz-direct-1M)
      run "$set" xyz ag,rs,ar,a2a direct "${set#xyz-direct-}" "${set#xyz-direct-}" 2 1 \
        --cfg smpi/send-is-detached-thresh:0 ;;
    xyz-direct-64K-* | xyz-direct-1M-*) # one op: xyz-direct-64K-rs
      size="${set#xyz-direct-}" size="${size%%-*}"
      run "$set" xyz "${set##*-}" direct "$size" "$size" 2 1 --cfg smpi/send-is-detached-thresh:0 ;;
    rs-ar-a2a-x-bidir) run "$set" x rs,ar,a2a bidir 16M 16M 2 1 ;;
    ag-x-bidir | ag-xy-multi | ag-xyz-multi)
      axes="${set#ag-}"
      run "$set" "${axes%-*}" ag "${axes#*-}" 16M 16M 2 1 ;;
    *) echo "simpod_big: unknown run '$set' (x x-seq-multi-direct xy xy-ring xy-bidir xy-direct z xyz xyz-1M xyz-ring xyz-bidir xyz-direct x-mpi xy-mpi xyz-mpi-{ag,rs,ar,a2a} xyz-mpi-64K-OP xyz-direct-{64K,1M}[-OP] ag-x-bidir ag-xy-multi ag-xyz-multi rs-ar-a2a-x-bidir)" >&2
       exit 2 ;;
  esac
done
