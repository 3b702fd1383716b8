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
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
trap 'stop_three; rm -rf "$WORK"' EXIT

PRELOAD=""
if [[ "$SLOW_SYNC_US" != 0 ]]; then
  cc -shared -fPIC -O2 -o "$WORK/slow.so" "$ROOT/bench/slow-fsync/slow.c" -ldl
  PRELOAD="$WORK/slow.so"
fi

trial() {  # trial LABEL [serve flags]
  local label="$1" data="$WORK/data-$1"
  shift
  LD_PRELOAD="$PRELOAD" SLOW_SYNC_US="$SLOW_SYNC_US" start_three "$BIN" "$BASE_PORT" "$data" "$WORK" "$@"
  timeout 120 "$BIN" bench --endpoints "$(endpoints "$BASE_PORT")" --mode claim --concurrency 1 \
    --cycles "$CYCLES" --target leader 2>/dev/null | python3 -c '
import json, sys
d = json.loads(sys.stdin.read()); c = d["lat"]["claim"]
print(sys.argv[1], c["p50_ms"], c["p99_ms"], d["per_sec"])' "$label"
  stop_three
  rm -rf "$data"
}

echo "label p50_ms p99_ms claims_per_s (SLOW_SYNC_US=$SLOW_SYNC_US)"
for _ in $(seq 1 "$TRIALS"); do
  trial speculative
  trial plain --no-speculative-append
done
