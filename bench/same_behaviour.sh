#!/usr/bin/env bash
# same_behaviour.sh BASE_BUILD NEW_BUILD [TEXT]
#
# Proof that a refactoring changed no behaviour: runs one fixed set of short trainings with the
# meshtrain of two build trees and requires bit-identical results. For every run it compares
#   - the loss of every step and every validation loss (from --metrics and the eval lines),
#   - the sampled bytes (--sample),
#   - the final checkpoint (h5diff: every dataset and its attributes, exact; the file's
#     attributes but run_id, a random id of each run),
# and for the resumed run also the checkpoint it resumed from.
#
# The runs: 1 rank; DP on 2 ranks; ZeRO-1 with --overlap on 2 ranks; FSDP+TP on a 2x2 mesh with
# GQA and 2 micro-batches; DP x pipeline (1F1B) on 2x2 and GPipe x TP on 2x2; a run saved at
# step 10 and resumed to step 20 on the same mesh, and the same checkpoint resumed on 1 rank.
# Both builds read the same TEXT (default: data/tinyshakespeare.txt of this repository), so the
# checkpoints' "data" attribute agrees. Exit status 0 = identical, 1 = a difference (printed).
set -u
if [ $# -lt 2 ]; then
    echo "usage: $0 BASE_BUILD NEW_BUILD [TEXT]" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
base=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
text=$(cd "$(dirname "${3:-$here/../data/tinyshakespeare.txt}")" && pwd)/$(basename "${3:-tinyshakespeare.txt}")
for b in "$base" "$new"; do
    [ -x "$b/meshtrain" ] || { echo "no meshtrain in $b" >&2; exit 2; }
done
command -v h5diff > /dev/null || { echo "h5diff not found (Debian: hdf5-tools)" >&2; exit 2; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

small=(--data "$text" --layers 2 --d-model 64 --heads 4 --seq-len 32 --batch 8 --steps 20
       --eval-every 10 --eval-batches 2 --warmup 5 --sample 48)

# name|np|extra flags
runs=(
    "one|1|"
    "dp|2|--mesh x=2 --dp x"
    "zero1_overlap|2|--mesh x=2 --dp x --zero 1 --overlap"
    "fsdp_tp|4|--mesh x=2,y=2 --dp x --zero 3 --tensor y --kv-heads 2 --micro-batch 4"
    "dp_pipe_1f1b|4|--mesh x=2,z=2 --dp x --pipeline z --schedule 1f1b --microbatches 4"
    "tp_pipe_gpipe|4|--mesh y=2,z=2 --tensor y --pipeline z --microbatches 2"
)

# run BUILD DIR NP FLAGS...: one training in DIR; the losses go to DIR/losses.
run() {
    local build=$1 dir=$2 np=$3
    shift 3
    mkdir -p "$dir"
    (cd "$dir" && timeout 300 mpirun --oversubscribe --bind-to none -np "$np" \
        "$build/meshtrain" "${small[@]}" --metrics m.jsonl --save-final final.h5 "$@" \
        > out.txt 2>&1) || { echo "FAILED: $dir ($build)"; tail -5 "$dir/out.txt"; return 1; }
    grep -o '"step":[0-9]*,"loss":[-0-9.e+na]*' "$dir/m.jsonl" > "$dir/losses"
    grep -E '^eval [0-9]+ \| val loss' "$dir/out.txt" >> "$dir/losses"
    # the sample: its header line and every line after it
    awk '/^sample \(/{f=1} f{print}' "$dir/out.txt" > "$dir/sample"
    [ -s "$dir/sample" ] || { echo "no sample in $dir/out.txt"; return 1; }
}

# The attributes of a file without run_id (a random id of each run, not part of its state).
attrs() {
    h5dump -A "$1" | sed '1d' | awk '/ATTRIBUTE "run_id"/{skip=1} skip&&/^   }$/{skip=0; next} !skip'
}
# same_h5 A B: every dataset (data and its attributes) exactly, and the file's attributes.
same_h5() {
    local d n=0
    cmp -s <(attrs "$1") <(attrs "$2") || return 1
    for d in $(h5ls -r "$1" | awk '$2 == "Dataset" {print $1}'); do
        h5diff -q "$1" "$2" "$d" "$d" > /dev/null 2>&1 || return 1
        n=$((n + 1))
    done
    [ "$n" -gt 0 ] && [ "$(h5ls -r "$2" | grep -c Dataset)" -eq "$n" ]
}

fail=0
same() { # same WHAT FILE_A FILE_B
    if [[ $2 == *.h5 ]]; then
        same_h5 "$2" "$3" || { echo "DIFFERENT $1: h5diff $2 $3"; fail=1; return; }
    else
        cmp -s "$2" "$3" || { echo "DIFFERENT $1:"; diff "$2" "$3" | head -6; fail=1; return; }
    fi
}

for r in "${runs[@]}"; do
    IFS='|' read -r name np extra <<< "$r"
    # shellcheck disable=SC2086
    for side in base new; do
        b=$base; [ $side = new ] && b=$new
        run "$b" "$work/$side/$name" "$np" $extra || fail=1
    done
    [ -s "$work/base/$name/losses" ] || { echo "no losses for $name"; fail=1; continue; }
    same "$name losses" "$work/base/$name/losses" "$work/new/$name/losses"
    same "$name sample" "$work/base/$name/sample" "$work/new/$name/sample"
    same "$name checkpoint" "$work/base/$name/final.h5" "$work/new/$name/final.h5"
    echo "$name: $(wc -l < "$work/base/$name/losses") loss lines, sample + final checkpoint compared"
done

# Save at step 10, resume to 20 on the same mesh (2 ranks, ZeRO-3) and on 1 rank.
for side in base new; do
    b=$base; [ $side = new ] && b=$new
    d=$work/$side/resume
    run "$b" "$d/first" 2 --mesh x=2 --dp x --zero 3 --save-every 10 --ckpt-dir "$d/ck" || fail=1
    run "$b" "$d/same" 2 --mesh x=2 --dp x --zero 3 --resume "$d/ck/step_000010.h5" || fail=1
    run "$b" "$d/one" 1 --resume "$d/ck/step_000010.h5" || fail=1
done
for f in ck/step_000010.h5 ck/step_000020.h5 first/final.h5 same/final.h5 one/final.h5; do
    same "resume $f" "$work/base/resume/$f" "$work/new/resume/$f"
done
for f in first same one; do
    same "resume $f losses" "$work/base/resume/$f/losses" "$work/new/resume/$f/losses"
done
# Within each build, a resume on the same mesh is bit-exact to the run that never stopped.
for side in base new; do
    same "$side: resumed vs uninterrupted" "$work/$side/resume/first/final.h5" \
        "$work/$side/resume/same/final.h5"
done
echo "resume: step-10 and step-20 checkpoints, resumed finals (same mesh, 1 rank) compared"

if [ $fail = 0 ]; then
    echo "same_behaviour: IDENTICAL ($base vs $new)"
else
    echo "same_behaviour: DIFFERENT ($base vs $new)"
fi
exit $fail
