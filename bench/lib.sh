# Sourced by bench scripts (compare.sh, hold-cpu.sh): three `leasehold serve` processes on
# loopback, and their end.
#   start_three BIN BASE_PORT DATA LOGDIR [serve flags...]: nodes 1-3 on BASE_PORT+1..+3,
#     data in DATA/n1..n3, logs appended to LOGDIR/node1..3.log, pids in PIDS; returns once
#     all three answer /readyz (30 s at most). Env for the nodes is the caller's.
#   stop_three: SIGTERM, then SIGKILL after 15 s; empties PIDS.
#   endpoints BASE_PORT: the three addresses, comma-separated (bench --endpoints).
PIDS=()

start_three() {
  local bin="$1" port="$2" data="$3" logs="$4" i ready peers=()
  shift 4
  for i in 1 2 3; do peers+=(--peer "$i=127.0.0.1:$((port + i))"); done
  for i in 1 2 3; do
    RUST_LOG="${RUST_LOG:-warn}" "$bin" serve --id "$i" --listen "127.0.0.1:$((port + i))" \
      --data-dir "$data/n$i" "${peers[@]}" "$@" >>"$logs/node$i.log" 2>&1 &
    PIDS+=($!)
  done
  for _ in $(seq 1 120); do
    ready=1
    for i in 1 2 3; do curl -sf "http://127.0.0.1:$((port + i))/readyz" >/dev/null || ready=0; done
    [[ "$ready" == 1 ]] && return 0
    sleep 0.25
  done
  echo "the three nodes did not become ready (logs in $logs)" >&2
  return 1
}

stop_three() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    timeout 15 tail --pid="$p" -f /dev/null 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
  done
  PIDS=()
}

endpoints() {
  echo "127.0.0.1:$(($1 + 1)),127.0.0.1:$(($1 + 2)),127.0.0.1:$(($1 + 3))"
}
