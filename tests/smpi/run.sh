#!/usr/bin/env bash
# tests/smpi's driver.
#   run.sh build SRC DIR WERROR                  configure and build the SMPI tree DIR from SRC
#   run.sh run SRC DIR CHIP TOPOLOGY EXE ARGS... run DIR/EXE on the simulated slice (bench/simpod)
# Exits 77 (CTest: skipped) where SimGrid's smpicc/smpirun are not installed.
set -euo pipefail
mode="$1" src="$2" dir="$3"
shift 3
if ! command -v smpicc >/dev/null || ! command -v smpirun >/dev/null; then
  echo "SKIP: SimGrid's smpicc/smpirun not installed (Debian 12: apt-get install libsimgrid-dev)"
  exit 77
fi
if [ "$mode" = build ]; then
  cmake -S "$src" -B "$dir" -DMESHTRAIN_SMPI=ON -DCMAKE_BUILD_TYPE=Release \
        -DMESHTRAIN_WERROR="${1:-OFF}" >/dev/null
  exec cmake --build "$dir" -j 2 --target test_coll test_simlink simpod_platform
fi
chip="$1" topo="$2" exe="$3"
shift 3
exec "$src/bench/simpod" --chip "$chip" --topology "$topo" "$dir/$exe" "$@"
