#!/usr/bin/env bash
# Per-axis link constants across hosts: meshbench's ping-pong fit (alpha, beta) on a 2x2 mesh of
# 2 "hosts" x 2 ranks (tests/cluster/netns.sh: network namespaces, sshd, TCP between hosts,
# shared memory inside), with the hosts' links as they are (veth) and shaped to 1 Gb/s, the two
# alternating in each of R repetitions. Prints each run's line and min / median per axis.
# usage: bench/cluster_links.sh [BUILD_DIR] [R]   (root; as tests/cluster)
set -u
BUILD=${1:-build} R=${2:-3}
MB=$(cd "$BUILD" && pwd)/meshbench
. "$(dirname "$0")/../tests/cluster/netns.sh"
out=$(mktemp)
for ((r = 1; r <= R; r++)); do
  for rate in veth 1gbit; do
    if [ $rate = veth ]; then cluster_up 2; else cluster_up 2 $rate; fi
    line=$(cluster_mpirun -np 4 "$MB" --mesh x=2,y=2 --op ag -b 4K -e 4K -n 1 -w 0 2>/dev/null |
      grep "^# links")
    echo "$rate $line" | tee -a "$out"
    cluster_down
  done
done
echo "min / median over $R runs (alpha us, beta GB/s):"
# med FILE_OF_NUMBERS: "min median max"
med() { sort -g | awk '{ v[NR] = $1 } END { printf "%s %s %s", v[1], v[int((NR + 1) / 2)], v[NR] }'; }
for rate in veth 1gbit; do
  for ax in x y; do
    sel=$(grep "^$rate " "$out" | sed "s/.* $ax \([a-z ]*\): alpha \([0-9.]*\) us, beta \([0-9.]*\) GB.*/\1:\2:\3/")
    read -r amin amed _ <<<"$(cut -d: -f2 <<<"$sel" | med)"
    read -r _ bmed bmax <<<"$(cut -d: -f3 <<<"$sel" | med)"
    printf "  %-5s %s (%s): alpha min %s / median %s us; beta max %s / median %s GB/s\n" \
      "$rate" "$ax" "$(head -1 <<<"$sel" | cut -d: -f1)" "$amin" "$amed" "$bmax" "$bmed"
  done
done
rm -f "$out"
