#!/usr/bin/env bash
# same_calc.sh BASE_BUILD NEW_BUILD
#
# Proof that a refactoring left the book's calculator unchanged: runs the meshplan and
# `meshtrain plan` commands the README and docs/ show (and a few more formats and shardings) with
# the programs of two build trees and requires byte-identical output (stdout, stderr and the exit
# status). Exit status 0 = identical, 1 = a difference (printed).
set -u
if [ $# -lt 2 ]; then
    echo "usage: $0 BASE_BUILD NEW_BUILD" >&2
    exit 2
fi
base=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmds=(
    # README "Using it"
    "meshtrain plan --chip v5p --topology 16x16x16 --model llama3-70b --batch 1024 --dp xyz --zero 3"
    "meshplan --chip v5p --topology 16x16x16 --model llama3-70b --tokens 4M --tensor z:4"
    "meshplan --chip v5p --chips 8960 --model llama3-70b --tokens 4M --search --format csv"
    "meshplan --chip v5p --topology 16x20x28 --model llama3-70b --tokens 40M --tensor z:4 --zero 3 --pods 10"
    "meshplan --infer --chip v5e --topology 4x4 --model llama3-70b --batch 32 --context 8192 --param-bytes 1 --kv-bytes 1 --flops-dtype int8"
    # docs/inspect.md
    "meshplan --chip v5p --topology 16x16x16 --model llama3-70b --batch 1024 --dp xyz --zero 3 --remat ckpt4"
    "meshplan --chip v5p --chips 8960 --model llama3-70b --tokens 4M --search --top 20"
    "meshplan --chip v5p --topology 16x16x16 --model llama3-70b --tokens 4M --search --top 16"
    # pipeline schedules, context parallelism, experts
    "meshplan --chip v5p --topology 4x4x4 --model llama2-13b --tokens 1M --pipeline z --microbatches 8 --schedule zb-h1"
    "meshplan --infer --chip v5e --topology 4x4 --model llama3-70b --context 131072 --tensor x --cp y"
    "meshplan --chip v5p --topology 4x4x4 --model mixtral-8x7b --tokens 1M --dp xy --tensor z --zero 3"
    # the other formats and a pipeline, a small model, a bad flag
    "meshplan --chip v5p --topology 16x20x28 --model llama3-70b --tokens 40M --tensor z:4 --zero 3 --pods 10 --format json"
    "meshplan --chip v5p --topology 16x16x16 --model llama3-70b --tokens 4M --tensor z:4 --format csv"
    "meshplan --chip v5e --topology 8x8 --model llama2-13b --tokens 1M --dp x --tensor y --zero 1"
    "meshplan --chip v4p --topology 4x4x4 --model llama2-13b --tokens 2M --dp xy --pipeline z --microbatches 8 --remat ffw3"
    "meshplan --chip v5p --topology 4x4 --model llama2-13b --batch 64 --dp x --tensor y --zero 2 --format json"
    "meshplan --chip v5p --topology 2x2 --model llama3-70b --tokens 1M --dp xy --zero 3 --no-such-flag"
)
fail=0
i=0
for c in "${cmds[@]}"; do
    i=$((i + 1))
    for side in base new; do
        b=$base; [ $side = new ] && b=$new
        read -r prog args <<< "$c"
        # shellcheck disable=SC2086
        "$b/$prog" $args > "$work/$side.$i.out" 2> "$work/$side.$i.err"
        echo "status $?" >> "$work/$side.$i.err"
    done
    if cmp -s "$work/base.$i.out" "$work/new.$i.out" && cmp -s "$work/base.$i.err" "$work/new.$i.err"; then
        echo "same: $c"
    else
        echo "DIFFERENT: $c"
        diff "$work/base.$i.out" "$work/new.$i.out" | head -6
        diff "$work/base.$i.err" "$work/new.$i.err" | head -4
        fail=1
    fi
done
if [ $fail = 0 ]; then
    echo "same_calc: IDENTICAL ($base vs $new)"
else
    echo "same_calc: DIFFERENT ($base vs $new)"
fi
exit $fail
