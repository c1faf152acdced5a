# Sourced by the benchmark scripts, from the repository root with BUILD set: `. bench/lib.sh NAME`
# (NAME starts its messages). Exits 2 when $BUILD/meshtrain is missing; sets MT and the environment
# of a run with one BLAS/OpenMP thread per rank (and MPI as root) and CPU (/proc/cpuinfo's model
# name, for the tables); defines defaults, field, median, minimum.
MT="$BUILD/meshtrain"
[ -x "$MT" ] || { echo "$1: $MT not found; build first (cmake --build $BUILD)" >&2; exit 2; }
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
# defaults VAR=VALUE...: each VAR that the environment left unset or empty becomes VALUE.
defaults() {
  local kv k
  for kv; do k=${kv%%=*}; [ -n "${!k:-}" ] || printf -v "$k" '%s' "${kv#*=}"; done
}
# field LINE KEY: the first number after "KEY " in LINE ("tok/s median" -> 3512).
field() { sed -n "s|.*$2 \([0-9.]*\).*|\1|p" <<<"$1" | head -1; }
# median, minimum: of the numbers on standard input, one per line (nothing printed for none).
median() {
  sort -g | awk '{v[NR] = $1} END {if (NR) printf "%.6g\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
minimum() { sort -g | head -1; }
# bench_run NAME NP FLAGS...: meshtrain --bench --quiet on NP ranks with FLAGS, its output on
# stdout; when it fails, NAME and the output's first lines on stderr, and status 1.
bench_run() {
  local name=$1 np=$2 out
  shift 2
  out=$(timeout 900 mpirun --oversubscribe --bind-to none -np "$np" "$MT" --bench --quiet "$@" 2>&1) || {
    echo "$name: run failed" >&2
    grep -v '^\(-\|$\)' <<<"$out" | head -5 >&2
    return 1
  }
  echo "$out"
}
# ref_config_flags a|b: meshtrain's shape flags of bench/torch_ref.py's configs (a), (b).
ref_config_flags() {
  case $1 in
    a) echo "--layers 4 --d-model 256 --heads 4 --kv-heads 4 --d-ff 1024 --seq-len 128 --batch 16" ;;
    b) echo "--layers 8 --d-model 512 --heads 8 --kv-heads 8 --d-ff 2048 --seq-len 256 --batch 8" ;;
  esac
}
