#!/bin/bash
# where.sh MODE MPIEXEC TEST_WHERE|MESHTRAIN [TEXT]: hang forensics end to end. Every mode checks
# the exit status, that the job ended by itself (no hang: `timeout` would say 124), and the
# messages, with their count. Prints the output.
#   mismatch, mismatch-op  test_where on 4 ranks (x=2,y=2), --debug-collectives: exit 3, one
#              "collective mismatch" message naming rank 0 (x=0,y=0) and rank 2 (x=1,y=0) with
#              their calls
#   stall      test_where on 4 ranks (y=4), the last one computing for 60 s, --timeout 2: exit 4
#              within 20 s; one where-line per rank; rank 1 is "in AllGather #1 over y, 1 of 2
#              hops done" (its step 1 arrived from rank 0; rank 3 never sends), rank 2 "0 of 2",
#              rank 3 is "not in mesh ... stalled in compute"
#   usr1       test_where on 2 ranks; SIGUSR1 to mpirun once both are in place: each rank prints
#              its where-line, rank 0 "in AllGather #1 over x", and the run completes (exit 0)
#   quiet      test_where on 4 ranks with --timeout 1 and healthy collectives: exit 0, no report
#   stop-agree test_where on 2 ranks: rank 1 stops itself (SIGSTOP) between steps while rank 0
#              enters MPI's own Allreduce (mesh_agree): exit 4, rank 0's where-line names the
#              Allreduce, and the watchdog names rank 1 as the rank that did not answer
#   meshtrain  meshtrain on 2 ranks with --timeout 0.01 (every step lasts longer): exit 4, one
#              where-line per rank naming the step, and the watchdog's message
set -u
mode=$1 mpiexec=$2 prog=$3 text=${4:-}
run=("$mpiexec" --oversubscribe --bind-to none)
fail() { echo "where.sh $mode: FAIL: $*"; exit 1; }
count() { printf '%s\n' "$out" | grep -cE -- "$1"; }
expect_n() { # PATTERN N
    local n
    n=$(count "$1")
    [ "$n" = "$2" ] || fail "'$1' found $n times, wanted $2"
}

case $mode in
mismatch | mismatch-op)
    out=$(timeout 60 "${run[@]}" -np 4 "$prog" "$mode" --mesh x=2,y=2 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 3 ] || fail "exit $rc, wanted 3"
    expect_n "collective mismatch" 1
    if [ "$mode" = mismatch ]; then
        expect_n "^  rank 0 \(x=0,y=0\): AllReduce #0 over x, count 2, alg bidir$" 1
        expect_n "^  rank 2 \(x=1,y=0\): AllReduce #0 over x, count 3, alg bidir$" 1
    else
        expect_n "^  rank 0 \(x=0,y=0\): AllGather #0 over x, count 2, alg bidir$" 1
        expect_n "^  rank 2 \(x=1,y=0\): ReduceScatter #0 over x, count 2, alg bidir$" 1
    fi
    ;;
stall)
    t0=$(date +%s)
    out=$(timeout 60 "${run[@]}" -np 4 "$prog" stall --mesh y=4 --timeout 2 2>&1)
    rc=$?
    t1=$(date +%s)
    echo "$out"
    [ $rc = 4 ] || fail "exit $rc, wanted 4 (the watchdog's)"
    [ $((t1 - t0)) -le 20 ] || fail "took $((t1 - t0)) s: the job did not end promptly"
    expect_n "^meshtrain: where: rank [0-3] " 4
    for r in 0 1 2 3; do expect_n "^meshtrain: where: rank $r \(y=$r\): " 1; done
    expect_n "^meshtrain: where: rank 1 \(y=1\): in AllGather #1 over y, 1 of 2 hops done, for [0-9.]+ s \| step 0 " 1
    expect_n "^meshtrain: where: rank 2 \(y=2\): in AllGather #1 over y, 0 of 2 hops done, for " 1
    expect_n "^meshtrain: where: rank 3 \(y=3\): not in mesh \(last: AllReduce #0 over y, ended [0-9.]+ s ago\) \| step 0 \([0-9.]+ s\), stalled in compute, part 1" 1
    [ "$(count '^meshtrain: watchdog: rank [0-3] \(y=[0-3]\): .*more than --timeout 2 s')" -ge 1 ] ||
        fail "no watchdog message"
    ;;
usr1)
    log=$(mktemp)
    "${run[@]}" -np 2 "$prog" usr1 --mesh x=2 >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do grep -q '^ready' "$log" && break; sleep 0.05; done
    sleep 0.5 # rank 0 enters the AllGather, rank 1 its 4 s of compute
    kill -USR1 $pid
    for _ in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
    kill -0 $pid 2>/dev/null && { kill $pid; fail "the run did not end within 30 s"; }
    wait $pid
    rc=$?
    out=$(cat "$log")
    rm -f "$log"
    echo "$out"
    [ $rc = 0 ] || fail "exit $rc, wanted 0 (SIGUSR1 must not end the run)"
    expect_n "^meshtrain: where: rank [01] .*\(SIGUSR1\)$" 2
    expect_n "^meshtrain: where: rank 0 \(x=0\): in AllGather #1 over x, 0 of 1 hops done, for [0-9.]+ s \| step 0 " 1
    expect_n "^meshtrain: where: rank 1 \(x=1\): not in mesh .*stalled in compute" 1
    expect_n "test_where usr1: finished" 1
    ;;
quiet)
    out=$(timeout 60 "${run[@]}" -np 4 "$prog" quiet --mesh 2x2 --timeout 1 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 0 ] || fail "exit $rc, wanted 0"
    expect_n "meshtrain: (where|watchdog)" 0
    ;;
stop-agree)
    out=$(timeout 60 "${run[@]}" -np 2 "$prog" stop-agree --mesh x=2 --timeout 1 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 4 ] || fail "exit $rc, wanted 4 (the watchdog's)"
    expect_n "^meshtrain: where: rank 0 \(x=0\): in MPI_Allreduce \(ranks agreeing on a status\), for [0-9.]+ s$" 1
    expect_n "^meshtrain: watchdog: rank 0 \(x=0\): MPI_Allreduce \(ranks agreeing on a status\) has waited [0-9.]+ s, more than --timeout 1 s" 1
    expect_n "^meshtrain: watchdog: no where-line within 1.0 s from rank 1 \(x=1\) \(stopped" 1
    ;;
meshtrain)
    out=$(timeout 90 "${run[@]}" -np 2 "$prog" --data "$text" --layers 4 --d-model 128 \
        --seq-len 64 --batch 8 --steps 50 --eval-every 0 --timeout 0.01 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 4 ] || fail "exit $rc, wanted 4 (the watchdog's)"
    expect_n "^meshtrain: where: rank [01] \(x=[01]\): " 2
    [ "$(count '^meshtrain: watchdog: rank [01] \(x=[01]\): .*more than --timeout 0.01 s')" -ge 1 ] ||
        fail "no watchdog message"
    ;;
*)
    fail "unknown mode"
    ;;
esac
echo "where.sh $mode: ok"
