#!/usr/bin/env bash
# latency_ab.sh BUILD_A BUILD_B [ROUNDS] [NP]: the small-message latency of two builds' collectives,
# alternated: each round runs meshbench of A, then of B, on NP ranks (default 2) with an 8-byte
# AllReduce (BIDIR: the engine's blocking path; 2000 timed calls after 200 warm-up ones) and a
# 64 KiB one; prints each round's times and then min and median per build and size (µs, the
# per-rank mean over the timed calls, meshbench's `time` column). Used to check that a blocked
# rank's naps (mesh/nap.h) leave the fast path as fast: alternating cancels slow drifts in a shared
# machine's load. Names the CPU.
set -u
if [ $# -lt 2 ]; then
    echo "usage: $0 BUILD_A BUILD_B [ROUNDS] [NP]" >&2
    exit 2
fi
a=$(cd "$1" && pwd) b=$(cd "$2" && pwd) rounds=${3:-10} np=${4:-2}
for d in "$a" "$b"; do
    [ -x "$d/meshbench" ] || { echo "latency_ab: no meshbench in $d" >&2; exit 2; }
done
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
median() { sort -g | awk '{v[NR] = $1} END {if (NR) printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# one BUILD SIZE: meshbench's time (µs) for one size
one() {
    mpirun --oversubscribe --bind-to none -np "$np" "$1/meshbench" --op ar --alg bidir -b "$2" \
        -e "$2" -w 200 -n 2000 -c 0 | awk '$1 ~ /^[0-9]+$/ {print $5}'
}
echo "latency_ab: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores, $np ranks"
echo "A = $a"
echo "B = $b"
printf '%5s %8s %10s %10s\n' round size 'A(us)' 'B(us)'
for r in $(seq "$rounds"); do
    for size in 8 64K; do
        ta=$(one "$a" $size) tb=$(one "$b" $size)
        echo "$ta" >>"$tmp/a.$size"
        echo "$tb" >>"$tmp/b.$size"
        printf '%5s %8s %10s %10s\n' "$r" $size "$ta" "$tb"
    done
done
for size in 8 64K; do
    printf 'size %-4s A: min %s median %s   B: min %s median %s  (us)\n' $size \
        "$(sort -g "$tmp/a.$size" | head -1)" "$(median <"$tmp/a.$size")" \
        "$(sort -g "$tmp/b.$size" | head -1)" "$(median <"$tmp/b.$size")"
done
