#!/usr/bin/env bash
# Leasehold against etcd, side by side, in one go on this machine:
#   1. the etcd baseline harness (../shared/bench/etcd/run.sh: cycles and claims at
#      c=1/16/64, three leader kill -9 trials);
#   2. the same shapes against three `leasehold serve` processes (`leasehold bench`), and
#      `leasehold bench failover --trials 3`;
#   3. the batch rows (issue 33): `leasehold bench --mode batch-cycle --batch 64` at 16
#      clients, and etcd's nearest (bench/etcd-batch: one txn of 64 puts under one lease,
#      one keepalive, one txn of 64 deletes) on a fresh etcd of its own;
# RUNS times (default 1; the issue's figures use 3), alternating the two systems, then a
# table of medians and ratios. Only loopback traffic; every step bounded by `timeout`.
#
# Env: RUNS (default 1), QUICK=1 (small counts, smoke test), OUT (results dir),
#      ETCD_DIR (the etcd harness, default ../shared/bench/etcd next to this repo),
#      BASE_PORT (our nodes listen on BASE_PORT+1..+3, default 17000),
#      SERVE_FLAGS (extra `leasehold serve` flags for our three nodes, default none; e.g.
#      `SERVE_FLAGS="--worker-threads 1"`, one runtime thread per co-located node),
#      BINS (an A/B of leasehold builds in one run: space-separated LABEL=PATH pairs, e.g.
#      `BINS="before=/tmp/old/leasehold after=target/release/leasehold"`; each run measures
#      them in turn and the table gets a column each; default: this tree's build, labelled
#      leasehold, built first), SKIP_ETCD=1 (no etcd runs: with BINS, a build-vs-build A/B).
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
BINS="${BINS:-}"
SKIP_ETCD="${SKIP_ETCD:-0}"
mkdir -p "$OUT"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ "$QUICK" == 1 ]]; then
  C1=300; C16=1000; C64=1500; Q1=500; Q16=1500; Q64=2000; CL16=1000; TRIALS=1; BB=60
else
  C1=2000; C16=4000; C64=6000; Q1=3000; Q16=6000; Q64=8000; CL16=3000; TRIALS=3; BB=400
fi
# The batch rows (issue 33): BB batch cycles of B=64 jobs at 16 clients. etcd has no batch
# claim: bench/etcd-batch does its nearest, a txn of 64 conditional puts under one lease,
# one keepalive, a txn of 64 conditional deletes.

if [[ "$SKIP_ETCD" != 1 ]]; then
  [[ -x "$ETCD_DIR/run.sh" ]] || { echo "etcd harness not found at $ETCD_DIR (set ETCD_DIR)" >&2; exit 1; }
fi
if [[ -z "$BINS" ]]; then
  log "building leasehold (release)"
  (cd "$ROOT" && timeout 1800 cargo build --release --quiet -p leasehold-cli)
  BINS="leasehold=$BIN"
fi
for pair in $BINS; do
  [[ "$pair" == *=* && -x "${pair#*=}" ]] || { echo "BINS: '$pair' is not LABEL=EXECUTABLE" >&2; exit 1; }
done

# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
DATA=""
stop_ours() {
  stop_three
  [[ -n "$DATA" ]] && rm -rf "$DATA"
  DATA=""
}
trap stop_ours EXIT

start_ours() {
  DATA="$(mktemp -d "${TMPDIR:-/tmp}/leasehold-compare-data.XXXXXX")"
  # shellcheck disable=SC2086 # SERVE_FLAGS is a list of flags
  start_three "$BIN" "$BASE_PORT" "$DATA" "$OUT" $SERVE_FLAGS
}

ours() {  # ours FILE MODE CONC CYCLES [extra]
  local file="$1" mode="$2" c="$3" n="$4"; shift 4
  timeout 120 "$BIN" bench --endpoints "$(endpoints "$BASE_PORT")" --mode "$mode" --concurrency "$c" --cycles "$n" \
    --ttl-ms 10000 --max-secs 60 "$@" | tee -a "$file" >&2
}

measure_ours() {  # measure_ours LABEL RUN: every shape, then the failover trials
  local label="$1" r="$2" f="$OUT/$1-$2.jsonl"
  log "run $r/$RUNS: $label ($BIN)"
  start_ours
  ours "$f" cycle 1 "$C1"
  ours "$f" cycle 16 "$C16"
  ours "$f" cycle 64 "$C64"
  ours "$f" cycle 16 "$CL16" --target leader
  ours "$f" claim 1 "$Q1"
  ours "$f" claim 16 "$Q16"
  ours "$f" claim 64 "$Q64"
  # A build from before the batch routes (an A/B's "before") has no batch-cycle mode.
  if "$BIN" bench --help 2>/dev/null | grep -q batch-cycle; then
    ours "$f" batch-cycle 16 "$BB" --batch 64 --queue bq
  else
    log "$label: no batch-cycle mode in this build, batch rows skipped"
  fi
  stop_ours
  timeout 600 "$BIN" bench failover --trials "$TRIALS" | tee -a "$f" >&2
}

for r in $(seq 1 "$RUNS"); do
  if [[ "$SKIP_ETCD" != 1 ]]; then
    log "run $r/$RUNS: etcd"
    RESULTS="$OUT/etcd-$r.jsonl" QUICK="$QUICK" timeout 900 "$ETCD_DIR/run.sh" >"$OUT/etcd-$r.log" 2>&1 ||
      { echo "etcd harness failed; see $OUT/etcd-$r.log" >&2; exit 1; }
    log "run $r/$RUNS: etcd, batch cycles"
    timeout 900 "$HERE/etcd-batch/run.sh" --concurrency 16 --batches "$BB" --batch 64 \
      | tee "$OUT/etcd-batch-$r.jsonl" >&2 ||
      { echo "etcd batch cycles failed" >&2; exit 1; }
  fi
  for pair in $BINS; do
    BIN="${pair#*=}" measure_ours "${pair%%=*}" "$r"
  done
done

LABELS="$(for pair in $BINS; do printf '%s ' "${pair%%=*}"; done)"
python3 - "$OUT" $LABELS <<'EOF'
import glob, json, statistics, sys
out, labels = sys.argv[1], sys.argv[2:]

def load(pattern):
    rows = []
    for path in sorted(glob.glob(f"{out}/{pattern}")):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows

etcd = load("etcd-*.jsonl")
ours = {label: load(f"{label}-*.jsonl") for label in labels}

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

def pick(rows, mode, c, target="all"):
    return [r for r in rows if r.get("mode") == mode and r.get("concurrency") == c
            and r.get("target", "all") == target]

def lat(r, k, q):
    v = (r.get("lat") or {}).get(k)
    return v.get(q) if isinstance(v, dict) else None

def rows_of(rows):
    """The measures of one system's rows: (name, value, better) in table order."""
    t = []
    for mode in ("cycle", "claim"):
        for c in (1, 16, 64):
            t.append((f"{mode}s/s, c={c}", med(r["per_sec"] for r in pick(rows, mode, c)), "higher"))
    t.append(("cycles/s, c=16, leader", med(r["per_sec"] for r in pick(rows, "cycle", 16, "leader")), "higher"))
    batch = pick(rows, "batch-cycle", 16)
    t.append(("batch jobs/s, B=64, c=16", med(r.get("jobs_per_sec") for r in batch), "higher"))
    t.append(("batch cycle p50 ms, B=64", med(lat(r, "cycle", "p50_ms") for r in batch), "lower"))
    t.append(("claim p50 ms, c=1", med(lat(r, "claim", "p50_ms") for r in pick(rows, "claim", 1)), "lower"))
    t.append(("claim p99 ms, c=64", med(lat(r, "claim", "p99_ms") for r in pick(rows, "claim", 64)), "lower"))
    fo = [r for r in rows if r.get("mode") == "failover"]
    trials = [r for r in rows if "trial" in r]
    if trials:  # ours: one row per trial
        t.append(("failover: new leader ms", med(r.get("new_leader_ms") for r in trials), "lower"))
        t.append(("failover: write gap ms", med(r.get("write_gap_ms") for r in trials), "lower"))
        t.append(("failover: client gap ms", med(r.get("client_gap_ms") for r in trials), "lower"))
    else:  # etcd's harness
        t.append(("failover: new leader ms", med(r.get("new_leader_seen_ms") for r in fo), "lower"))
        t.append(("failover: write gap ms", med(r.get("max_write_gap_ms") for r in fo), "lower"))
        t.append(("failover: client gap ms", None, "lower"))
    return t

columns = ([("etcd", rows_of(etcd))] if etcd else []) + [(l, rows_of(ours[l])) for l in labels]
def fmt(x):
    return "–" if x is None else (f"{x:,.1f}" if x < 100 else f"{x:,.0f}")

base_name, base = columns[0]
print(f"\n{' vs '.join(n for n, _ in columns)} on this machine "
      f"({len(glob.glob(out + '/' + labels[0] + '-*.jsonl'))} run(s) each, medians); results in {out}\n")
head = f"| {'measure':<28} | " + " | ".join(f"{n:>10}" for n, _ in columns)
head += "".join(f" | {n + '/' + base_name:>16}" for n, _ in columns[1:]) + " |"
print(head)
print("|" + "|".join("-" * len(c) for c in head.split("|")[1:-1]) + "|")
for k, (name, _, better) in enumerate(base):
    vals = [col[k][1] for _, col in columns]
    line = f"| {name:<28} | " + " | ".join(f"{fmt(v):>10}" for v in vals)
    for v in vals[1:]:
        ratio = None
        if vals[0] and v:
            ratio = v / vals[0] if better == "higher" else vals[0] / v
        line += f" | {('×%.2f' % ratio) if ratio else '–':>16}"
    print(line + " |")
print(f"\nratio: how many times better each column is than {base_name} (throughput X/{base_name}; "
      f"latency and gaps {base_name}/X).")
print("A cycle: etcd = grant + claim txn + keepalive + complete txn + revoke (5 requests, 4 replicated);")
print("Leasehold = claim + renew + complete (3 requests, 3 replicated). A claim: etcd = grant + txn; Leasehold = 1 request.")
print("A batch cycle of 64 jobs: etcd = grant + txn of 64 puts + keepalive + txn of 64 deletes + revoke (5 requests,")
print("4 replicated, one lease for all 64); Leasehold = claim-next max_jobs 64 + renew 64 + complete 64 (3 requests, 3 replicated).")
for name, col in columns:
    single, batch = dict((n, v) for n, v, _ in col).get("cycles/s, c=64"), dict((n, v) for n, v, _ in col).get("batch jobs/s, B=64, c=16")
    if single and batch:
        print(f"{name}: batch jobs/s (B=64, c=16) / single cycles/s (c=64) = x{batch / single:.1f}")
for label in labels:
    el = [(r.get("mode"), r.get("concurrency"), r.get("elections")) for r in ours[label] if "elections" in r]
    print(f"{label}: leader elections during the timed runs (mode, clients, elections): {el}")
    otrials = [r for r in ours[label] if "trial" in r]
    print(f"{label}: failover held intact per trial {[r.get('held_intact') for r in otrials]}; "
          f"expiry_error_ms per trial {[r.get('expiry_error_ms') for r in otrials]}")
EOF
