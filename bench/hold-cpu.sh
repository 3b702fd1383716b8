#!/usr/bin/env bash
# Issue 33's "10,000 held leases renewed by one worker set at ttl 30 s: <= 2 % of one core
# on the leader, zero leases lost", measured per node: three `leasehold serve` processes,
# one `leasehold bench --mode hold`, and each process's CPU (utime + stime from
# /proc/PID/stat) over exactly the hold window, which the bench marks on stderr
# ("hold: start" / "hold: end"). Prints the bench's JSON line and one line per node, the
# leader marked. Only loopback traffic; every step bounded.
#
# Env: BIN (default target/release/leasehold), LEASES (10000), TTL_MS (30000),
#      SECS (60, the hold window), BASE_PORT (our nodes on BASE_PORT+1..+3, default 17100),
#      OUT (results dir), SERVE_FLAGS (extra `serve` flags, word-split: e.g.
#      --no-speculative-append for an A/B).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${BIN:-$ROOT/target/release/leasehold}"
LEASES="${LEASES:-10000}"
TTL_MS="${TTL_MS:-30000}"
SECS="${SECS:-60}"
BASE_PORT="${BASE_PORT:-17100}"
OUT="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/leasehold-hold-cpu.XXXXXX")}"
mkdir -p "$OUT"
DATA="$(mktemp -d "${TMPDIR:-/tmp}/leasehold-hold-data.XXXXXX")"
TCK="$(getconf CLK_TCK)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
trap 'stop_three; rm -rf "$DATA"' EXIT

ticks() {  # ticks PID: utime + stime, in clock ticks (fields 14 and 15 after the comm)
  awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

wait_line() {  # wait_line FILE PATTERN SECONDS
  local i
  for i in $(seq 1 $(($3 * 20))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "no '$2' in $1 within $3 s" >&2; return 1
}

# shellcheck disable=SC2086 # SERVE_FLAGS is a list of flags
start_three "$BIN" "$BASE_PORT" "$DATA" "$OUT" ${SERVE_FLAGS:-}
eps="$(endpoints "$BASE_PORT")"
timeout $((SECS + 240)) "$BIN" bench --endpoints "$eps" --mode hold --leases "$LEASES" \
  --ttl-ms "$TTL_MS" --max-secs "$SECS" --queue hold >"$OUT/bench.jsonl" 2>"$OUT/bench.err" &
BENCH=$!
wait_line "$OUT/bench.err" "hold: start" 180
before=(); for p in "${PIDS[@]}"; do before+=("$(ticks "$p")"); done
t0=$(date +%s.%N)
wait_line "$OUT/bench.err" "hold: end" $((SECS + 30))
after=(); for p in "${PIDS[@]}"; do after+=("$(ticks "$p")"); done
t1=$(date +%s.%N)
leader="$(curl -sf "http://127.0.0.1:$((BASE_PORT + 1))/v1/cluster" | sed -n 's/.*"leader_id":\([0-9]*\).*/\1/p')"
wait "$BENCH"
cat "$OUT/bench.jsonl"
for i in 0 1 2; do
  awk -v id=$((i + 1)) -v leader="$leader" -v d=$((after[i] - before[i])) -v tck="$TCK" -v t0="$t0" -v t1="$t1" \
    'BEGIN { printf "node %d%s: %.2f %% of one core over %.1f s of holding (%d ticks)\n", id, (id == leader ? " (leader)" : ""), 100 * d / tck / (t1 - t0), t1 - t0, d }'
done | tee "$OUT/cpu.txt"
echo "results in $OUT" >&2
