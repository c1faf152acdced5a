# Sourced by the benchmarks that time meshtrain beside PyTorch, from the repository root with
# BUILD set: `. bench/torch_preamble.sh NAME` (NAME starts its messages). Exits 2 when
# $BUILD/meshtrain is missing or $PYTHON (default /usr/bin/python3) cannot import torch; sets MT
# and PYTHON, and the environment of a one-thread run (MPI as root, one BLAS/OpenMP thread).
PYTHON=${PYTHON:-/usr/bin/python3}
MT="$BUILD/meshtrain"
[ -x "$MT" ] || { echo "$1: $MT not found; build first (cmake --build $BUILD)" >&2; exit 2; }
"$PYTHON" -c "import torch" 2>/dev/null ||
  { echo "$1: $PYTHON cannot import torch (apt-get install python3-torch)" >&2; exit 2; }
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
