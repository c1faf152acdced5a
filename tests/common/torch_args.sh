# Sourced by the script tests that compare meshtrain with PyTorch, with their arguments
# MPIEXEC MESHTRAIN REFERENCE TEXT_FILE WORK_DIR NP: sets MPI MT REF TXT WORK NP, and PY (default
# /usr/bin/python3), which must import torch and h5py; exits 77 (CTest's skip) when it cannot.
MPI=$1 MT=$2 REF=$3 TXT=$4 WORK=$5 NP=$6
PY=${PYTHON:-/usr/bin/python3}
if ! "$PY" -c "import torch, h5py" 2>/dev/null; then
  echo "skip: $PY cannot import torch and h5py (apt-get install python3-torch python3-h5py)"
  exit 77
fi
