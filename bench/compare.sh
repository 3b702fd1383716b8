#!/usr/bin/env bash
# Leasehold against etcd, side by side, in one go on this machine:
#   1. the etcd baseline harness (../shared/bench/etcd/run.sh: cycles and claims at
#      c=1/16/64, three leader kill -9 trials);
#   2. the same shapes against three `leasehold serve` processes (`leasehold bench`), and
#      `leasehold bench failover --trials 3`;
# RUNS times (default 1; the issue's figures use 3), alternating the two systems, then a
# table of medians and ratios. Only loopback traffic; every step bounded by `timeout`.
#
# Env: RUNS (default 1), QUICK=1 (small counts, smoke test), OUT (results dir),
#      ETCD_DIR (the etcd harness, default ../shared/bench/etcd next to this repo),
#      BASE_PORT (our nodes listen on BASE_PORT+1..+3, default 17000),
#      SERVE_FLAGS (extra `leasehold serve` flags for our three nodes, default none; e.g.
#      `SERVE_FLAGS="--worker-threads 1"`, one runtime thread per co-located node).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
ETCD_DIR="${ETCD_DIR:-$(cd "$ROOT/.." && pwd)/shared/bench/etcd}"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="${OUT:-${TMPDIR:-/tmp}/leasehold-compare-$STAMP}"
RUNS="${RUNS:-1}"
QUICK="${QUICK:-0}"
BASE_PORT="${BASE_PORT:-17000}"
SERVE_FLAGS="${SERVE_FLAGS:-}"
BIN="$ROOT/target/release/leasehold"
mkdir -p "$OUT"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ "$QUICK" == 1 ]]; then
  C1=300; C16=1000; C64=1500; Q1=500; Q16=1500; Q64=2000; CL16=1000; TRIALS=1
else
  C1=2000; C16=4000; C64=6000; Q1=3000; Q16=6000; Q64=8000; CL16=3000; TRIALS=3
fi

[[ -x "$ETCD_DIR/run.sh" ]] || { echo "etcd harness not found at $ETCD_DIR (set ETCD_DIR)" >&2; exit 1; }
log "building leasehold (release)"
(cd "$ROOT" && timeout 1800 cargo build --release --quiet -p leasehold-node)

PIDS=()
DATA=""
stop_ours() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do timeout 15 tail --pid="$p" -f /dev/null 2>/dev/null || kill -KILL "$p" 2>/dev/null || true; done
  PIDS=()
  [[ -n "$DATA" ]] && rm -rf "$DATA"
  DATA=""
}
trap stop_ours EXIT

start_ours() {
  DATA="$(mktemp -d "${TMPDIR:-/tmp}/leasehold-compare-data.XXXXXX")"
  local i peers=()
  for i in 1 2 3; do peers+=(--peer "$i=127.0.0.1:$((BASE_PORT + i))"); done
  for i in 1 2 3; do
    # shellcheck disable=SC2086 # SERVE_FLAGS is a list of flags
    RUST_LOG=warn "$BIN" serve --id "$i" --listen "127.0.0.1:$((BASE_PORT + i))" \
      --data-dir "$DATA/n$i" "${peers[@]}" $SERVE_FLAGS >>"$OUT/leasehold-node$i.log" 2>&1 &
    PIDS+=($!)
  done
  for _ in $(seq 1 120); do
    if curl -sf "http://127.0.0.1:$((BASE_PORT + 1))/readyz" >/dev/null &&
       curl -sf "http://127.0.0.1:$((BASE_PORT + 2))/readyz" >/dev/null &&
       curl -sf "http://127.0.0.1:$((BASE_PORT + 3))/readyz" >/dev/null; then
      return 0
    fi
    sleep 0.25
  done
  echo "leasehold cluster did not become ready" >&2; return 1
}

ours() {  # ours FILE MODE CONC CYCLES [extra]
  local file="$1" mode="$2" c="$3" n="$4"; shift 4
  local eps="127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2)),127.0.0.1:$((BASE_PORT + 3))"
  timeout 120 "$BIN" bench --endpoints "$eps" --mode "$mode" --concurrency "$c" --cycles "$n" \
    --ttl-ms 10000 --max-secs 60 "$@" | tee -a "$file" >&2
}

for r in $(seq 1 "$RUNS"); do
  log "run $r/$RUNS: etcd"
  RESULTS="$OUT/etcd-$r.jsonl" QUICK="$QUICK" timeout 900 "$ETCD_DIR/run.sh" >"$OUT/etcd-$r.log" 2>&1 ||
    { echo "etcd harness failed; see $OUT/etcd-$r.log" >&2; exit 1; }
  log "run $r/$RUNS: leasehold"
  f="$OUT/leasehold-$r.jsonl"
  start_ours
  ours "$f" cycle 1 "$C1"
  ours "$f" cycle 16 "$C16"
  ours "$f" cycle 64 "$C64"
  ours "$f" cycle 16 "$CL16" --target leader
  ours "$f" claim 1 "$Q1"
  ours "$f" claim 16 "$Q16"
  ours "$f" claim 64 "$Q64"
  stop_ours
  timeout 600 "$BIN" bench failover --trials "$TRIALS" | tee -a "$f" >&2
done

python3 - "$OUT" <<'EOF'
import glob, json, statistics, sys
out = sys.argv[1]

def load(pattern):
    rows = []
    for path in sorted(glob.glob(f"{out}/{pattern}")):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows

etcd, ours = load("etcd-*.jsonl"), load("leasehold-*.jsonl")

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

def pick(rows, mode, c, target="all"):
    return [r for r in rows if r.get("mode") == mode and r.get("concurrency") == c
            and r.get("target", "all") == target]

def lat(r, k, q):
    v = (r.get("lat") or {}).get(k)
    return v.get(q) if isinstance(v, dict) else None

table = []
for mode in ("cycle", "claim"):
    for c in (1, 16, 64):
        e, o = pick(etcd, mode, c), pick(ours, mode, c)
        table.append((f"{mode}s/s, c={c}", med(r["per_sec"] for r in e), med(r["per_sec"] for r in o), "higher"))
e, o = pick(etcd, "cycle", 16, "leader"), pick(ours, "cycle", 16, "leader")
table.append(("cycles/s, c=16, leader", med(r["per_sec"] for r in e), med(r["per_sec"] for r in o), "higher"))
e, o = pick(etcd, "claim", 1), pick(ours, "claim", 1)
table.append(("claim p50 ms, c=1", med(lat(r, "claim", "p50_ms") for r in e), med(lat(r, "claim", "p50_ms") for r in o), "lower"))
e, o = pick(etcd, "claim", 64), pick(ours, "claim", 64)
table.append(("claim p99 ms, c=64", med(lat(r, "claim", "p99_ms") for r in e), med(lat(r, "claim", "p99_ms") for r in o), "lower"))
ef = [r for r in etcd if r.get("mode") == "failover"]
of = [r for r in ours if r.get("mode") == "failover" and "median" in r]
otrials = [r for r in ours if "trial" in r]
table.append(("failover: new leader ms", med(r.get("new_leader_seen_ms") for r in ef), med(r.get("new_leader_ms") for r in otrials), "lower"))
table.append(("failover: write gap ms", med(r.get("max_write_gap_ms") for r in ef), med(r.get("write_gap_ms") for r in otrials), "lower"))
table.append(("failover: client gap ms", None, med(r.get("client_gap_ms") for r in otrials), "lower"))

def fmt(x):
    return "–" if x is None else (f"{x:,.1f}" if x < 100 else f"{x:,.0f}")

print(f"\nLeasehold vs etcd 3.4 on this machine ({len(glob.glob(out + '/etcd-*.jsonl'))} run(s) each, medians); results in {out}\n")
print(f"| {'measure':<28} | {'etcd':>10} | {'leasehold':>10} | {'ratio':>8} |")
print(f"|{'-'*30}|{'-'*12}|{'-'*12}|{'-'*10}|")
for name, e, o, better in table:
    ratio = None
    if e and o:
        ratio = o / e if better == "higher" else e / o
    print(f"| {name:<28} | {fmt(e):>10} | {fmt(o):>10} | {('×%.2f' % ratio) if ratio else '–':>8} |")
print("\nratio: how many times better Leasehold is (throughput ours/etcd; latency and gaps etcd/ours).")
print("A cycle: etcd = grant + claim txn + keepalive + complete txn + revoke (5 requests, 4 replicated);")
print("Leasehold = claim + renew + complete (3 requests, 3 replicated). A claim: etcd = grant + txn; Leasehold = 1 request.")
el = [(r.get("mode"), r.get("concurrency"), r.get("elections")) for r in ours if "elections" in r]
print(f"Leasehold leader elections during the timed runs (mode, clients, elections): {el}")
intact = [r.get("held_intact") for r in otrials]
print(f"Leasehold failover: held intact per trial {intact}; expiry_error_ms per trial "
      f"{[r.get('expiry_error_ms') for r in otrials]}")
EOF
