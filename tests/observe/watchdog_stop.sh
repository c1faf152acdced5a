#!/bin/bash
# watchdog_stop.sh MPIEXEC MESHTRAIN TEXT [TRIALS]: the watchdog fires wherever a peer stops.
# Each trial trains on 2 ranks with --timeout 20, per-step metrics (a status agreement between
# steps) and a checkpoint every 2 steps (parallel HDF5), waits for the steps to start, then, after
# a random delay, stops a random rank with SIGSTOP: inside a collective, MPI's own Allreduce,
# HDF5's collective I/O or compute, wherever it happens to be. Every trial must end by itself
# (no `timeout` 124) with status 4, a where-line from the rank still running, the watchdog's
# message, and the stopped rank named as the one that did not answer; and one message per
# failure: one "ends the job", nothing from the stopped rank (mpirun resumes it as the job ends). Prints where the running
# rank was, per trial. Seeded by $RANDOM unless WATCHDOG_SEED is set (printed, to replay).
#
# Nothing here depends on how fast the machine is: the trials wait for their first step however
# long it takes (`timeout` only catches a hang), and --timeout 20 is far above any healthy wait
# before the stop. The watchdog is on from start-up, when a rank can wait in a status agreement
# for a peer still timing its kernels (on a loaded machine the ranks' start-ups drift apart by
# seconds: 10 s seen with five start-ups at once at load 20), and in the steps, behind a peer's
# HDF5 save (~2 s loaded). So the start-ups take turns: a trial starts once the one before has
# reached its first step; the 20 s waits of the running ranks overlap (~30 s idle for 5 trials).
# A stopped rank never answers, so MESHTRAIN_WATCHDOG_GRACE=0.5 (whether it answers does not
# depend on how long the others wait).
set -u
mpiexec=$1 prog=$2 text=$3 trials=${4:-5}
seed=${WATCHDOG_SEED:-$RANDOM}
RANDOM=$seed
echo "watchdog_stop: seed $seed (WATCHDOG_SEED=$seed replays these stop points), $trials trials"
tmp=$(mktemp -d)
cleanup() {
    local f
    for f in "$tmp"/pid.*; do [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT

# The pid of world rank R among the descendants of process P (timeout → mpirun → ranks).
rank_pid() {
    local c
    for c in $(pgrep -P "$1"); do
        if tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
            echo "$c"
            return
        fi
        rank_pid "$c" "$2"
    done
}

# trial T STOP DELAY: writes $tmp/ok.T (where the running rank was) or $tmp/fail.T (why not).
trial() {
    local t=$1 stop=$2 delay=$3 other=$((1 - $2)) log=$tmp/log.$1 pid victim rc out where
    fail() { printf '%s\n' "$*" >"$tmp/fail.$t"; }
    MESHTRAIN_WATCHDOG_GRACE=0.5 timeout -k 10 240 "$mpiexec" --oversubscribe --bind-to none \
        -np 2 "$prog" --data "$text" --layers 2 --d-model 64 --seq-len 32 --batch 4 \
        --steps 1000000 --eval-every 7 --eval-batches 1 --save-every 2 --keep 2 \
        --ckpt-dir "$tmp/ck.$t" --metrics "$tmp/m.$t.jsonl" --timeout 20 >"$log" 2>&1 &
    pid=$!
    echo $pid >"$tmp/pid.$t"
    until grep -q '^step ' "$log" || ! kill -0 $pid 2>/dev/null; do sleep 0.05; done
    : >"$tmp/started.$t" # the next trial may start
    sleep "$delay"
    victim=$(rank_pid "$pid" "$stop")
    [ -n "$victim" ] && kill -STOP "$victim"
    wait $pid
    rc=$?
    rm -f "$tmp/pid.$t"
    # never leave a stopped rank behind (mpirun kills it; this only if something went wrong)
    [ -n "$victim" ] && [ "$(ps -o stat= -p "$victim" 2>/dev/null | cut -c1)" = T ] &&
        kill -KILL "$victim"
    out=$(cat "$log")
    grep -q '^step ' "$log" || { fail "the job ended (exit $rc) before its first step: $out"; return; }
    [ -n "$victim" ] || { fail "rank $stop's process not found (exit $rc): $out"; return; }
    [ $rc = 124 ] && { fail "the job hung (timeout 240 s): $out"; return; }
    [ $rc = 4 ] || { fail "exit $rc, wanted 4: $out"; return; }
    where=$(printf '%s\n' "$out" | grep -E "^meshtrain: where: rank $other \(x=$other\): " | head -1)
    [ -n "$where" ] || { fail "no where-line from rank $other: $out"; return; }
    printf '%s\n' "$out" | grep -qE "^meshtrain: watchdog: rank $other \(x=$other\): .* more than --timeout 20 s" ||
        { fail "no watchdog message from rank $other: $out"; return; }
    printf '%s\n' "$out" | grep -qE "^meshtrain: watchdog: no where-line within 0.5 s from rank $stop \(x=$stop\)" ||
        { fail "rank $stop not named as stopped: $out"; return; }
    # one message per failure: the stopped rank, resumed by mpirun as the job ends, adds nothing
    [ "$(printf '%s\n' "$out" | grep -c 'ends the job (MPI_Abort')" = 1 ] ||
        { fail "not one 'ends the job' line: $out"; return; }
    printf '%s\n' "$out" | grep -qE "^meshtrain: (where|watchdog): rank $stop " &&
        { fail "the stopped rank $stop printed after the job's end: $out"; return; }
    echo "trial $t: stopped rank $stop after ${delay} s; ${where#meshtrain: where: }" >"$tmp/ok.$t"
}

for t in $(seq "$trials"); do # the stop points come from the seed, in order
    stop=$((RANDOM % 2))
    delay=$(printf '0.%03d' $((RANDOM % 1000)))
    trial "$t" "$stop" "$delay" &
    until [ -e "$tmp/started.$t" ] || ! kill -0 $! 2>/dev/null; do sleep 0.05; done
done
wait
bad=0
for t in $(seq "$trials"); do
    if [ -f "$tmp/ok.$t" ]; then
        cat "$tmp/ok.$t"
    else
        echo "watchdog_stop: FAIL (trial $t, seed $seed): $(cat "$tmp/fail.$t" 2>/dev/null || echo 'no result')"
        bad=1
    fi
done
[ $bad = 0 ] || exit 1
echo "watchdog_stop: ok ($trials trials, seed $seed)"
