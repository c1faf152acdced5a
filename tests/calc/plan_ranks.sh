#!/bin/sh
# plan_ranks.sh MPIEXEC MESHTRAIN: `meshtrain plan` on 2 and 3 ranks. With a bad model every rank
# must exit with status 2 and the message must appear once; a good plan exits 0 on every rank and
# prints once.
mpiexec=$1
meshtrain=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT INT TERM
fail=0
# run NP WANT ARGS...: each rank appends "status N" to $dir/status; output to $dir/out.
run() {
    np=$1 want=$2
    shift 2
    : >"$dir/status"
    timeout 60 "$mpiexec" --oversubscribe --bind-to none -np "$np" sh -c \
        '"$0" "$@"; echo "status $?" >>"'"$dir"'/status"' "$meshtrain" plan "$@" >"$dir/out" 2>&1
    n_want=$(grep -c "^status $want\$" "$dir/status")
    n_all=$(wc -l <"$dir/status")
    if [ "$n_want" -ne "$np" ] || [ "$n_all" -ne "$np" ]; then
        echo "FAIL: $np ranks, plan $*: statuses $(tr '\n' ' ' <"$dir/status"), expected $np x $want"
        fail=1
    else
        echo "ok: $np ranks, plan $*: every rank exited $want"
    fi
}
run 2 2 --chip v5p --topology 16x16x16 --model foo --tokens 4M
n=$(grep -c "meshplan: error: --model foo: expected llama3-70b, llama2-13b or mixtral-8x7b" "$dir/out")
[ "$n" -eq 1 ] || { echo "FAIL: the message appears $n times, expected once"; cat "$dir/out"; fail=1; }
run 3 2 --chip v5p --topology 16x16x16 --model llama3-70b --tokens 4M --tensor z:5
run 2 0 --chip v5p --topology 16x16x16 --model llama3-70b --tokens 4M --tensor z:4
n=$(grep -c "^step:" "$dir/out")
[ "$n" -eq 1 ] || { echo "FAIL: the plan is printed $n times, expected once"; fail=1; }
# The pipeline schedule's flags reach `meshtrain plan` too: the grid is printed once.
run 2 0 --chip v5p --topology 4x4x4 --model llama2-13b --tokens 1M --pipeline z --microbatches 4 \
    --schedule interleaved --virtual-stages 2
n=$(grep -c "^ *3 | 0F3 *1F2 *2F1 *3F0 *$" "$dir/out")
[ "$n" -eq 1 ] || { echo "FAIL: the interleaved grid is printed $n times, expected once"; fail=1; }
exit $fail
