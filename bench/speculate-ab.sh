#!/usr/bin/env bash
# Speculative AppendEntries (issue 33 item 5, node/src/raft/speculate.rs), A/B in one run:
# three `leasehold serve` processes with it (default) and with `--no-speculative-append`,
# alternating, each measured by `leasehold bench --mode claim --concurrency 1 --target
# leader` (a lone write's latency: where the leader's fsync and the follower's are in
# series without it). SLOW_SYNC_US=N (default 0) adds N µs to every fdatasync of the three
# nodes (bench/slow-fsync/slow.c, LD_PRELOAD, built here with cc): a slower disk per node,
# as on machines whose fsync takes a millisecond. Prints one line per trial: label, p50,
# p99 (ms), claims/s. Only loopback traffic; every step bounded.
#
# Env: BIN (default target/release/leasehold), TRIALS (3 per label), CYCLES (6000),
#      SLOW_SYNC_US (0), BASE_PORT (17200: nodes on +1..+3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${BIN:-$ROOT/target/release/leasehold}"
TRIALS="${TRIALS:-3}"
CYCLES="${CYCLES:-6000}"
SLOW_SYNC_US="${SLOW_SYNC_US:-0}"
BASE_PORT="${BASE_PORT:-17200}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/leasehold-speculate-ab.XXXXXX")"
PIDS=()

cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do timeout 15 tail --pid="$p" -f /dev/null 2>/dev/null || kill -KILL "$p" 2>/dev/null || true; done
  PIDS=()
}
trap 'cleanup; rm -rf "$WORK"' EXIT

PRELOAD=""
if [[ "$SLOW_SYNC_US" != 0 ]]; then
  cc -shared -fPIC -O2 -o "$WORK/slow.so" "$ROOT/bench/slow-fsync/slow.c" -ldl
  PRELOAD="$WORK/slow.so"
fi

trial() {  # trial LABEL [serve flags]
  local label="$1" i ok; shift
  local data="$WORK/data-$label" peers=()
  for i in 1 2 3; do peers+=(--peer "$i=127.0.0.1:$((BASE_PORT + i))"); done
  for i in 1 2 3; do
    LD_PRELOAD="$PRELOAD" SLOW_SYNC_US="$SLOW_SYNC_US" RUST_LOG=warn "$BIN" serve --id "$i" \
      --listen "127.0.0.1:$((BASE_PORT + i))" --data-dir "$data/n$i" "${peers[@]}" "$@" \
      >>"$WORK/node$i.log" 2>&1 &
    PIDS+=($!)
  done
  for _ in $(seq 1 120); do
    ok=1
    for i in 1 2 3; do curl -sf "http://127.0.0.1:$((BASE_PORT + i))/readyz" >/dev/null || ok=0; done
    [[ "$ok" == 1 ]] && break
    sleep 0.25
  done
  [[ "$ok" == 1 ]] || { echo "cluster did not become ready" >&2; exit 1; }
  local eps="127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2)),127.0.0.1:$((BASE_PORT + 3))"
  timeout 120 "$BIN" bench --endpoints "$eps" --mode claim --concurrency 1 --cycles "$CYCLES" \
    --target leader 2>/dev/null | python3 -c '
import json, sys
d = json.loads(sys.stdin.read()); c = d["lat"]["claim"]
print(sys.argv[1], c["p50_ms"], c["p99_ms"], d["per_sec"])' "$label"
  cleanup
  rm -rf "$data"
}

echo "label p50_ms p99_ms claims_per_s (SLOW_SYNC_US=$SLOW_SYNC_US)"
for _ in $(seq 1 "$TRIALS"); do
  trial speculative
  trial plain --no-speculative-append
done
