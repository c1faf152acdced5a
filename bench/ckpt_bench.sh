#!/usr/bin/env bash
# Checkpoint save and load: time and MB/s of a ≥ 25M-parameter model on 1, 2 and 4 ranks.
#
# usage: bench/ckpt_bench.sh [MESHTRAIN] [DIR] [REPS]
#   MESHTRAIN  the binary (default build/meshtrain), DIR where checkpoints go (default
#   /tmp/ckpt_bench; its file system is what is measured), REPS repetitions per case (default 3).
#   CKPT_BENCH_DROP_CACHES=1 also times each load after `sync; echo 3 > /proc/sys/vm/drop_caches`
#   (root only; it slows everything else on the machine for a moment).
#
# Each case runs `meshtrain --steps 1 --save-every 1` (one step, then a checkpoint of step 1) and
# `meshtrain --steps 1 --resume DIR/step_000001.h5` (a load, nothing left to train), and reads the
# times meshtrain prints for the save and the load. MB = 1e6 bytes of array payload (params + AdamW
# m and v, float32, each array counted once however many ranks hold it); a save's time covers the
# checksums, the collective HDF5 writes, close, fsync and rename; a load's covers open, header
# checks, the hyperslab reads of this mesh's layout and checksum verification. Reported: the median
# over REPS. Results: a markdown table on stdout and DIR/ckpt_bench.csv.
set -u
MT=${1:-build/meshtrain}
DIR=${2:-/tmp/ckpt_bench}
REPS=${3:-3}
TXT=$(dirname "$0")/../data/tinyshakespeare.txt
MPI=${MPIEXEC:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
# 8 layers, D = 512, F = 1408, V = 256: 25.96M parameters, a 311 MB checkpoint with AdamW state
MODEL=(--layers 8 --d-model 512 --heads 8 --seq-len 64 --batch 4 --eval-every 0 --data "$TXT"
       --steps 1)
CASES=("1|single rank|"
       "2|FSDP over 2|--mesh x=2 --dp x --zero 3"
       "4|FSDP over 4|--mesh x=4 --dp x --zero 3"
       "4|DP over 4 (one writer)|--mesh x=4 --dp x"
       "4|FSDP 2 x TP 2|--mesh x=2,y=2 --dp x --zero 3 --tensor y")
mkdir -p "$DIR" || exit 1
CSV=$DIR/ckpt_bench.csv
echo "ranks,scheme,params_M,payload_MB,save_s,save_MBps,load_s,load_MBps,cold_load_s,cold_load_MBps" >"$CSV"
median() { sort -g | awk '{a[NR] = $1} END {print NR ? a[int((NR + 1) / 2)] : "nan"}'; }
# field LOG PATTERN N: the Nth number after "MB in" on the line matching PATTERN ("MB in X s, Y MB/s")
secs() { sed -n "s/.*$2.* MB in \([0-9.]*\) s, \([0-9.]*\) MB\/s.*/\1/p" "$1" | head -1; }

# the file system's own speed, for scale: dd of 300 MB (write + fsync; read from the page cache;
# read after dropping it)
ddrate() { sed -n 's/.*copied, \([0-9.]*\) s, .*/\1/p' | awk '{ printf "%.0f", 314.5728 / $1 }'; }
w=$(dd if=/dev/zero of="$DIR/dd.bin" bs=1M count=300 conv=fsync 2>&1 | ddrate)
h=$(dd if="$DIR/dd.bin" of=/dev/null bs=1M 2>&1 | ddrate)
c=nan
if [ "${CKPT_BENCH_DROP_CACHES:-0}" = 1 ]; then
  sync && echo 3 >/proc/sys/vm/drop_caches
  c=$(dd if="$DIR/dd.bin" of=/dev/null bs=1M 2>&1 | ddrate)
fi
rm -f "$DIR/dd.bin"
echo "file system of $DIR (dd, 300 MiB): write+fsync $w MB/s, read $h MB/s (page cache), $c MB/s (cold)"
echo
printf "| ranks | scheme | save (s) | save MB/s | load (s) | load MB/s | cold load (s) | cold load MB/s |\n"
printf "|---|---|---|---|---|---|---|---|\n"
for c in "${CASES[@]}"; do
  IFS='|' read -r np name flags <<<"$c"
  saves=() loads=() colds=()
  for ((r = 0; r < REPS; r++)); do
    rm -rf "$DIR/ck"
    # shellcheck disable=SC2086
    "$MPI" --oversubscribe --bind-to none -np "$np" "$MT" "${MODEL[@]}" $flags --save-every 1 \
      --ckpt-dir "$DIR/ck" >"$DIR/save.log" 2>&1 || { echo "save run failed:"; tail "$DIR/save.log"; exit 1; }
    saves+=("$(secs "$DIR/save.log" "checkpoint")")
    # shellcheck disable=SC2086
    "$MPI" --oversubscribe --bind-to none -np "$np" "$MT" "${MODEL[@]}" $flags \
      --resume "$DIR/ck/step_000001.h5" >"$DIR/load.log" 2>&1 || { echo "load run failed:"; tail "$DIR/load.log"; exit 1; }
    loads+=("$(secs "$DIR/load.log" "resumed from")")
    if [ "${CKPT_BENCH_DROP_CACHES:-0}" = 1 ]; then
      sync && echo 3 >/proc/sys/vm/drop_caches
      # shellcheck disable=SC2086
      "$MPI" --oversubscribe --bind-to none -np "$np" "$MT" "${MODEL[@]}" $flags \
        --resume "$DIR/ck/step_000001.h5" >"$DIR/cold.log" 2>&1
      colds+=("$(secs "$DIR/cold.log" "resumed from")")
    fi
  done
  params=$(sed -n 's/.*| \([0-9.]*M\) params.*/\1/p' "$DIR/save.log" | head -1)
  mb=$(sed -n 's/.*checkpoint .*: \([0-9.]*\) MB in.*/\1/p' "$DIR/save.log" | head -1)
  s=$(printf '%s\n' "${saves[@]}" | median)
  l=$(printf '%s\n' "${loads[@]}" | median)
  cl=nan
  [ "${#colds[@]}" -gt 0 ] && cl=$(printf '%s\n' "${colds[@]}" | median)
  rate() { awk -v mb="$mb" -v s="$1" 'BEGIN { if (s + 0 > 0) printf "%.0f", mb / s; else print "nan" }'; }
  printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n" "$np" "$name" "$s" "$(rate "$s")" "$l" \
    "$(rate "$l")" "$cl" "$(rate "$cl")"
  echo "$np,$name,${params%M},$mb,$s,$(rate "$s"),$l,$(rate "$l"),$cl,$(rate "$cl")" >>"$CSV"
done
rm -rf "$DIR/ck"
echo "(model ${params:-?} parameters, ${mb:-?} MB of arrays per checkpoint; median of $REPS; CSV in $CSV)"
