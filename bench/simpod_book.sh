#!/usr/bin/env bash
# simpod_book: the book's collective problems on a v4p 4x4x4 slice (W = 4.5e10 B/s one way, 9e10
# both ways; T_min = 1 µs), for the array bf16[B_X, D_Y] with B = 1024, D = 4096, measured on the
# simulated slice (bench/simpod) beside mesh/cost.h's prediction (meshbench --chip):
#   AllGather_X  [B_X, D_Y] -> [B, D_Y]       V = 2·B·D/|Y|  = 2 MiB    book: V/W
#   AllGather_XY [B_XY, D]  -> [B, D]         V = 2·B·D      = 8 MiB    book: V/(2W)
#   AllReduce_Z  [B_X, D_Y]{U_Z} -> [B_X, D_Y] V = 2·B·D/16  = 512 KiB  book: 2V/W ≈ 11.6 µs
# with the default algorithm (bidir on one axis, multi on several) and the others for comparison.
#   bench/simpod_book.sh [OUT.csv]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/simpod/book_v4p_4x4x4.csv}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
run() { # AXES OP BYTES
  bench/simpod --chip v4p --topology 4x4x4 build-smpi/meshbench --chip v4p --axes "$1" --op "$2" \
    --alg default,ring,bidir,seq,multi,direct -b "$3" -e "$3" -w 0 -n 4 -c 1 --csv "$tmp/$1.csv" \
    >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
}
run x ag 2097152
run xy ag 8388608
run z ar 524288
{ head -1 "$tmp/x.csv"; for f in x xy z; do tail -n +2 "$tmp/$f.csv"; done; } >"$out"
echo "wrote $out" >&2
