#!/usr/bin/env bash
# FSDP+TP on 2 hosts × 2 ranks equals the 1-rank run (tests/par/test_equiv: losses and final
# parameters within its k = 200, the same mesh twice and --overlap on/off bit-identical). The
# mesh x=2,y=2 puts y (tensor) inside a host and x (FSDP) across the two: the placement
# (`hostname` of every rank) and the TCP bytes on the hosts' links prove that the job really
# spanned both hosts and that x's collectives went over the network.
# usage: equiv.sh TEST_EQUIV WORK_DIR
set -u
EQUIV=$1 WORK=$2
. "$(dirname "$0")/netns.sh"
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
cluster_up 2
fails=0

cluster_mpirun -np 4 hostname >"$WORK/hosts" 2>"$WORK/hosts.err"
if [ "$(sort "$WORK/hosts" | uniq -c | awk '{print $1 " " $2}' | tr '\n' ' ')" != "2 node0 2 node1 " ]; then
  echo "FAIL 4 ranks are not 2 per host:"; cat "$WORK/hosts"; exit 1
fi
tx0=$(cl_tx_bytes 0) tx1=$(cl_tx_bytes 1)
cluster_mpirun -np 4 "$EQUIV" --mesh x=2,y=2 --dp x --zero 3 --tensor y >"$WORK/equiv.log" 2>&1
rc=$?
sed 's/^/  | /' "$WORK/equiv.log"
sent0=$(($(cl_tx_bytes 0) - tx0)) sent1=$(($(cl_tx_bytes 1) - tx1))
echo "TCP bytes sent over the hosts' links during the run: node0 $sent0, node1 $sent1"
if [ $rc -ne 0 ] || ! grep -q '^PASS' "$WORK/equiv.log"; then
  echo "FAIL FSDP+TP across 2 hosts x 2 ranks (status $rc)"; fails=$((fails + 1))
fi
# FSDP over x gathers every layer's weights across the hosts: at least the model's parameters
# (tens of KB here) cross each link; a job that fell back to one host would send almost none.
if [ "$sent0" -lt 100000 ] || [ "$sent1" -lt 100000 ]; then
  echo "FAIL fewer than 100 kB crossed a host's link: the job did not use the network"
  fails=$((fails + 1))
fi
[ $fails -eq 0 ] && echo "PASS FSDP+TP on 2 hosts x 2 ranks (x across hosts, y inside) = 1-rank run"
[ $fails -eq 0 ]
