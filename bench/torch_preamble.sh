# Sourced by the benchmarks that time meshtrain beside PyTorch, from the repository root with
# BUILD set: `. bench/torch_preamble.sh NAME` (NAME starts its messages). bench/lib.sh's set-up,
# and exits 2 when $PYTHON (default /usr/bin/python3) cannot import torch; sets PYTHON.
. bench/lib.sh "$1"
PYTHON=${PYTHON:-/usr/bin/python3}
"$PYTHON" -c "import torch" 2>/dev/null ||
  { echo "$1: $PYTHON cannot import torch (apt-get install python3-torch)" >&2; exit 2; }
