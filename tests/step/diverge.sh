#!/usr/bin/env bash
# A diverging run (SGD at lr 10, no clipping) ends on every rank with exit status 2 and exactly
# one "training diverged" message, before the NaN reaches the parameters (a small model: it
# diverges at step 16).
# usage: diverge.sh MPIEXEC MESHTRAIN TEXT
set -u
out=$("$1" --oversubscribe --bind-to none -np 2 "$2" --data "$3" --layers 2 --d-model 64 --heads 4 \
        --seq-len 32 --batch 8 --optimizer sgd --lr 10 --clip 0 --steps 60 --eval-every 0 \
        --quiet 2>&1)
rc=$?
n=$(grep -c "training diverged" <<<"$out")
echo "$out" | grep "meshtrain:" | head -3
echo "exit status $rc, diverged messages: $n"
[ "$rc" -eq 2 ] && [ "$n" -eq 1 ] && echo PASS && exit 0
echo FAIL; exit 1
