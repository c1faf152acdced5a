#!/bin/bash
# where.sh MODE MPIEXEC TEST_WHERE|MESHTRAIN [TEXT]: hang forensics end to end. Every mode checks
# the exit status, that the job ended by itself (no hang: `timeout` would say 124), and the
# messages, with their count. Prints the output.
#   mismatch, mismatch-op  test_where on 4 ranks (x=2,y=2), --debug-collectives: exit 3, one
#              "collective mismatch" message naming rank 0 (x=0,y=0) and rank 2 (x=1,y=0) with
#              their calls
#   stall      test_where on 4 ranks (y=4), the last one stalled for good, --timeout 5 (50 on
#              the others): exit 4 (nothing but the watchdog can end that job: without it
#              `timeout` would say 124); one watchdog message, rank 3's; one where-line per rank,
#              those of ranks 0-2 "asked by rank 3's watchdog"; rank 1 is "in AllGather #1 over y,
#              1 of 2 hops done" (its step 1 arrived from rank 0; rank 3 never sends), rank 2 "0 of
#              2", rank 3 is "not in mesh ... stalled in compute". The healthy ranks have 5 s to
#              reach the AllGather, and MESHTRAIN_WATCHDOG_GRACE=60 lets every rank answer however
#              loaded the machine is (the wait ends once all have)
#   usr1       test_where on 2 ranks, rank 1 "computing" until released: SIGUSR1 to mpirun, again
#              (each time once both ranks have answered) until rank 0's where-line shows it in the
#              AllGather and rank 1's shows its compute; then the release. Every SIGUSR1 gives one
#              where-line per rank, the last ones "rank 0 in AllGather #1 over x" and "rank 1 ...
#              stalled in compute", and the run completes (exit 0)
#   quiet      test_where on 4 ranks with --timeout 20 and healthy collectives (1 s of steps, the
#              watchdog looking every 0.25 s): exit 0, no report
#   stop-agree test_where on 2 ranks, --timeout 5: rank 1 stops itself (SIGSTOP) between steps
#              while rank 0 enters MPI's own Allreduce (mesh_agree): exit 4, rank 0's where-line
#              names the Allreduce, and the watchdog names rank 1 as the rank that did not answer
#              within MESHTRAIN_WATCHDOG_GRACE=0.5 s (a stopped rank never answers); one
#              "ends the job"
#   stop-resume  as stop-agree inside step 0, rank 1 ignoring SIGTERM, so that the job's end
#              (mpirun's SIGCONT, then SIGTERM) resumes it with its step overdue and rank 0's
#              notice expired: one message per failure: rank 0's where-line, watchdog line,
#              "no where-line ... from rank 1" and "rank 0 ends the job", nothing from rank 1
#   meshtrain  meshtrain on 2 ranks with --timeout 0.01 (every step lasts longer): exit 4, one
#              where-line per rank naming the step, and the watchdog's message;
#              MESHTRAIN_WATCHDOG_GRACE=60 as in stall
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
    out=$(MESHTRAIN_WATCHDOG_GRACE=60 timeout 80 "${run[@]}" -np 4 "$prog" stall --mesh y=4 \
        --timeout 5 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 124 ] && fail "the job hung: the watchdog never ended it"
    [ $rc = 4 ] || fail "exit $rc, wanted 4 (the watchdog's)"
    expect_n "^meshtrain: where: rank [0-3] " 4
    for r in 0 1 2 3; do expect_n "^meshtrain: where: rank $r \(y=$r\): " 1; done
    expect_n "^meshtrain: where: rank 1 \(y=1\): in AllGather #1 over y, 1 of 2 hops done, for [0-9.]+ s \| step 0 " 1
    expect_n "^meshtrain: where: rank 2 \(y=2\): in AllGather #1 over y, 0 of 2 hops done, for " 1
    expect_n "^meshtrain: where: rank 3 \(y=3\): not in mesh \(last: AllReduce #0 over y, ended [0-9.]+ s ago\) \| step 0 \([0-9.]+ s\), stalled in compute, part 1$" 1
    expect_n "^meshtrain: where: rank [0-2] .* \(asked by rank 3's watchdog\)$" 3
    expect_n "^meshtrain: watchdog: rank [0-3] .*more than --timeout" 1
    expect_n "^meshtrain: watchdog: rank 3 \(y=3\): step 0 has run [0-9.]+ s, more than --timeout 5 s" 1
    expect_n "^meshtrain: watchdog: rank 3 ends the job \(MPI_Abort, status 4\)$" 1
    expect_n "no where-line within" 0
    ;;
usr1)
    tmp=$(mktemp -d)
    log=$tmp/log
    trap '[ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
    timeout 60 "${run[@]}" -np 2 "$prog" usr1 --mesh x=2 --release "$tmp/go" >"$log" 2>&1 &
    pid=$!
    alive() { kill -0 $pid 2>/dev/null; }
    until grep -q '^ready' "$log" || ! alive; do sleep 0.05; done
    mp=$(pgrep -P $pid) # timeout's child: mpirun, which forwards SIGUSR1 to the ranks
    rounds=0 last=
    while alive; do
        rounds=$((rounds + 1))
        kill -USR1 $mp
        until [ "$(grep -c '(SIGUSR1)$' "$log")" -ge $((2 * rounds)) ] || ! alive; do sleep 0.05; done
        last=$(grep '(SIGUSR1)$' "$log" | sed -n "$((2 * rounds - 1)),$((2 * rounds))p")
        printf '%s\n' "$last" | grep -qE "^meshtrain: where: rank 0 \(x=0\): in AllGather #1 " &&
            printf '%s\n' "$last" | grep -qE "^meshtrain: where: rank 1 \(x=1\): .*stalled in compute" &&
            break
        sleep 0.1 # not both in place yet: ask again
    done
    touch "$tmp/go"
    wait $pid
    rc=$?
    pid=
    out=$(cat "$log")
    echo "$out"
    [ $rc = 124 ] && fail "the run hung"
    [ $rc = 0 ] || fail "exit $rc, wanted 0 (SIGUSR1 must not end the run)"
    echo "where.sh usr1: $rounds SIGUSR1 rounds"
    expect_n "^meshtrain: where: rank [01] .*\(SIGUSR1\)$" $((2 * rounds))
    expect_n "^meshtrain: where: rank 0 .*\(SIGUSR1\)$" $rounds
    out=$(printf '%s\n' "$last") # the round that found both in place
    expect_n "^meshtrain: where: rank 0 \(x=0\): in AllGather #1 over x, 0 of 1 hops done, for [0-9.]+ s \| step 0 " 1
    expect_n "^meshtrain: where: rank 1 \(x=1\): not in mesh .*stalled in compute" 1
    out=$(cat "$log")
    expect_n "test_where usr1: finished" 1
    ;;
quiet)
    out=$(timeout 60 "${run[@]}" -np 4 "$prog" quiet --mesh 2x2 --timeout 20 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 0 ] || fail "exit $rc, wanted 0"
    expect_n "meshtrain: (where|watchdog)" 0
    ;;
stop-agree | stop-resume)
    out=$(MESHTRAIN_WATCHDOG_GRACE=0.5 timeout 60 "${run[@]}" -np 2 "$prog" "$mode" --mesh x=2 \
        --timeout 5 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 4 ] || fail "exit $rc, wanted 4 (the watchdog's)"
    # one message per failure: rank 0's where-line and watchdog line, the silent rank named, one
    # end; nothing from rank 1, stopped (and, stop-resume, resumed as the job ends)
    if [ "$mode" = stop-agree ]; then
        agree='MPI_Allreduce \(ranks agreeing on a status\)'
        expect_n "^meshtrain: where: rank 0 \(x=0\): in $agree, for [0-9.]+ s$" 1
        expect_n "^meshtrain: watchdog: rank 0 \(x=0\): $agree has waited [0-9.]+ s, more than --timeout 5 s" 1
    else # inside step 0: the step or the Allreduce, whichever the watchdog saw overdue first
        expect_n "^meshtrain: where: rank 0 \(x=0\): in MPI_Allreduce \(ranks agreeing on a status\), for [0-9.]+ s \| step 0 " 1
        expect_n "^meshtrain: watchdog: rank 0 \(x=0\): (MPI_Allreduce \(ranks agreeing on a status\) has waited|step 0 has run) " 1
    fi
    expect_n "^meshtrain: where: " 1
    expect_n "^meshtrain: watchdog: rank [01] .*more than --timeout" 1
    expect_n "^meshtrain: watchdog: no where-line within 0.5 s from rank 1 \(x=1\) \(stopped" 1
    expect_n "ends the job" 1
    expect_n "^meshtrain: watchdog: rank 0 ends the job \(MPI_Abort, status 4\)$" 1
    ;;
meshtrain)
    out=$(MESHTRAIN_WATCHDOG_GRACE=60 timeout 90 "${run[@]}" -np 2 "$prog" --data "$text" \
        --layers 4 --d-model 128 --seq-len 64 --batch 8 --steps 50 --eval-every 0 --timeout 0.01 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 4 ] || fail "exit $rc, wanted 4 (the watchdog's)"
    expect_n "^meshtrain: where: rank [01] \(x=[01]\): " 2
    [ "$(count '^meshtrain: watchdog: rank [01] \(x=[01]\): .*more than --timeout 0.01 s')" -ge 1 ] ||
        fail "no watchdog message"
    expect_n "no where-line within" 0
    [ "$(count 'ends the job \(MPI_Abort')" -ge 1 ] || fail "no rank ended the job"
    [ "$(count 'ends the job \(MPI_Abort')" -le 2 ] || fail "more 'ends the job' lines than ranks"
    ;;
*)
    fail "unknown mode"
    ;;
esac
echo "where.sh $mode: ok"
