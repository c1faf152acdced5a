#!/usr/bin/env bash
# meshbench across 2 hosts × 2 ranks, the hosts' links shaped to 1 Gb/s (a token bucket, tc tbf):
#  - the placement table puts ranks 0,1 on one host and 2,3 on the other, and names x as the axis
#    across hosts and y as the one inside a host; with --cross-hosts y the two swap;
#  - every collective over xy (AllGather, ReduceScatter, AllReduce; bidir, direct, MPI's) matches
#    the serial truth exactly (-c 1);
#  - the per-axis link fit (alpha, beta) is printed for both axes, and x's 2 MiB one-way ping-pong
#    time is at least 0.9 × 2 MiB / 1 Gb/s: the bytes of x went through the shaped network link,
#    however loaded the machine (a token bucket only ever delays).
# usage: meshbench.sh MESHBENCH WORK_DIR
set -u
MB=$1 WORK=$2
RATE_BPS=125000000 # 1 Gb/s
. "$(dirname "$0")/netns.sh"
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
cluster_up 2 1gbit
fails=0
fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}
cluster_mpirun -np 4 "$MB" --mesh x=2,y=2 --placement --pingpong --op ag,rs,ar --axes xy \
  --alg bidir,direct,mpi -b 4K -e 256K -f 8 -w 2 -n 5 -c 1 --json "$WORK/x.json" \
  >"$WORK/x.log" 2>&1
rc=$?
sed 's/^/  | /' "$WORK/x.log"
[ $rc -eq 0 ] || fail "meshbench exited $rc"
awk '$1 ~ /^[0-3]$/ && NF == 5 { printf "%s:%s ", $1, $5 }' "$WORK/x.log" >"$WORK/x.hosts"
[ "$(cat "$WORK/x.hosts")" = "0:node0 1:node0 2:node1 3:node1 " ] ||
  fail "placement: ranks on hosts '$(cat "$WORK/x.hosts")', expected 0,1 on node0 and 2,3 on node1"
grep -q "^2 hosts; axes across hosts: x; inside a host: y$" "$WORK/x.log" ||
  fail "placement does not name x as the axis across hosts"
grep -q "^# links (ping-pong fit), 2 hosts: x across hosts: alpha .* | y inside a host: alpha" \
  "$WORK/x.log" || fail "no per-axis link line naming x across hosts and y inside"
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ (all_gather|reduce_scatter|all_reduce) ' "$WORK/x.log")
bad=$(grep -E '^ +[0-9]+ +[0-9]+ (all_gather|reduce_scatter|all_reduce) ' "$WORK/x.log" |
  awk '$NF != 0' | wc -l)
[ "$rows" -eq 27 ] && [ "$bad" -eq 0 ] ||
  fail "$rows collective rows (expected 27: 3 sizes x 3 ops x 3 algorithms), $bad with an error"
# the ping-pong tables: "# ping-pong along axis x" then rows "bytes time_us GB/s"
t2m=$(awk '/ping-pong along axis x/ { on = 1; next } /^# fit/ { on = 0 }
           on && $1 == 2097152 { print $2 }' "$WORK/x.log")
min_us=$(awk -v r=$RATE_BPS 'BEGIN { printf "%.0f", 0.9 * 2097152 / r * 1e6 }')
if [ -z "$t2m" ] || ! awk -v t="$t2m" -v m="$min_us" 'BEGIN { exit !(t >= m) }'; then
  fail "x's 2 MiB one-way time '${t2m}' us is below ${min_us} us: it did not cross the 1 Gb/s link"
fi
echo "x (across hosts, 1 Gb/s link) 2 MiB one way: $t2m us (>= $min_us us)"
grep "^# links" "$WORK/x.log"

# --cross-hosts y: y's coordinates now vary slowest in MPI rank order, so y crosses hosts
cluster_mpirun -np 4 "$MB" --mesh x=2,y=2 --cross-hosts y --placement --op ag --axes xy \
  --alg bidir -b 4K -e 4K -w 1 -n 2 -c 1 >"$WORK/y.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { fail "meshbench --cross-hosts y exited $rc"; sed 's/^/  | /' "$WORK/y.log"; }
grep -q "^2 hosts; axes across hosts: y; inside a host: x$" "$WORK/y.log" ||
  fail "--cross-hosts y: $(grep 'hosts;' "$WORK/y.log")"
grep -A6 "^placement" "$WORK/y.log"
grep "^# links" "$WORK/y.log"
[ $fails -eq 0 ] && echo "PASS meshbench across hosts"
[ $fails -eq 0 ]
