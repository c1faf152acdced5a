#!/bin/bash
# watchdog_stop.sh MPIEXEC MESHTRAIN TEXT [TRIALS]: the watchdog fires wherever a peer stops.
# Each trial trains on 2 ranks with --timeout, per-step metrics (a status agreement between
# steps) and a checkpoint every 2 steps (parallel HDF5), waits for the steps to start, then, after
# a random delay, stops a random rank with SIGSTOP: inside a collective, MPI's own Allreduce,
# HDF5's collective I/O or compute, wherever it happens to be. Every trial must end by itself
# (no `timeout` 124) with status 4, a where-line from the rank still running, the watchdog's
# message, and the stopped rank named as the one that did not answer. Prints where the running
# rank was, per trial. Seeded by $RANDOM unless WATCHDOG_SEED is set (printed, to replay).
set -u
mpiexec=$1 prog=$2 text=$3 trials=${4:-5}
seed=${WATCHDOG_SEED:-$RANDOM}
RANDOM=$seed
echo "watchdog_stop: seed $seed (WATCHDOG_SEED=$seed replays these stop points), $trials trials"
tmp=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "watchdog_stop: FAIL (trial $t, seed $seed): $*"; exit 1; }

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

for t in $(seq "$trials"); do
    log=$tmp/log.$t
    : >"$log"
    rm -rf "$tmp/ck"
    timeout 120 "$mpiexec" --oversubscribe --bind-to none -np 2 "$prog" --data "$text" \
        --layers 2 --d-model 64 --seq-len 32 --batch 4 --steps 1000000 --eval-every 7 \
        --eval-batches 1 --save-every 2 --keep 2 --ckpt-dir "$tmp/ck" --metrics "$tmp/m.jsonl" \
        --timeout 3 >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do grep -q '^step ' "$log" && break; sleep 0.05; done
    grep -q '^step ' "$log" || fail "no step within 30 s: $(cat "$log")"
    stop=$((RANDOM % 2))
    other=$((1 - stop))
    delay=$(printf '0.%03d' $((RANDOM % 1000)))
    sleep "$delay"
    victim=$(rank_pid "$pid" "$stop")
    [ -n "$victim" ] || fail "rank $stop's process not found"
    kill -STOP "$victim"
    wait "$pid"
    rc=$?
    pid=
    out=$(cat "$log")
    [ $rc = 124 ] && fail "the job hung (timeout 120 s): $out"
    [ $rc = 4 ] || fail "exit $rc, wanted 4: $out"
    where=$(printf '%s\n' "$out" | grep -E "^meshtrain: where: rank $other \(x=$other\): " | head -1)
    [ -n "$where" ] || fail "no where-line from rank $other: $out"
    printf '%s\n' "$out" | grep -qE "^meshtrain: watchdog: rank $other \(x=$other\): .* more than --timeout 3 s" ||
        fail "no watchdog message from rank $other: $out"
    printf '%s\n' "$out" | grep -qE "^meshtrain: watchdog: no where-line within [0-9.]+ s from rank $stop \(x=$stop\)" ||
        fail "rank $stop not named as stopped: $out"
    echo "trial $t: stopped rank $stop after ${delay} s; ${where#meshtrain: where: }"
done
echo "watchdog_stop: ok ($trials trials, seed $seed)"
