# Sourced by the serving benchmarks after bench/lib.sh: `. bench/lib_serve.sh`. With NP, MODEL
# (an array of shape flags) and OUT set, server_start TAG FLAGS... runs `meshtrain serve` on NP
# ranks on a free loopback port, its output in OUT/TAG.log (with the start-up lines: the BW and C
# it measured), waits until it listens (a server that
# dies first: its log, exit 1) and sets URL; server_stop stops it (TERM, then KILL after 10 s),
# and runs on the script's exit. Also sets CTX (MODEL's --seq-len) and PY, and makes OUT.
CTX=$(awk '{for (i = 1; i < NF; i++) if ($i == "--seq-len") print $(i + 1)}' <<<"${MODEL[*]}")
PY=${PYTHON:-python3}
mkdir -p "$OUT"

server_pid=
server_stop() {
  [ -n "$server_pid" ] || return 0
  kill -TERM "$server_pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}
trap server_stop EXIT INT TERM

server_start() {
  local tag=$1
  shift
  rm -f "$OUT/$tag.log" # a log of an earlier run's is not this server's line
  setsid mpirun --oversubscribe --bind-to none -np "$NP" "$MT" serve --port 0 "${MODEL[@]}" \
    --seed 1 "$@" >"$OUT/$tag.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do
    grep -q 'listening on' "$OUT/$tag.log" && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$OUT/$tag.log"; exit 1; }
    sleep 0.1
  done
  URL=$(sed -n 's|.*listening on \(http://[^ ]*\)/.*|\1|p' "$OUT/$tag.log")
}
