#!/usr/bin/env bash
# etcd's batch cycle (src/main.rs) against a fresh three-member etcd on loopback, with
# etcd's defaults (as ../../../shared/bench/etcd/run.sh starts it), then stops it.
#   bench/etcd-batch/run.sh --concurrency 16 --batches 400 --batch 64
# Extra arguments go to etcd-batch; its JSON line goes to stdout. Needs etcd (Debian's
# etcd-server, which the shared harness installs). Env: ETCD_BATCH_PORT (default 23790:
# clients on +1..+3, peers on +11..+13).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PORT="${ETCD_BATCH_PORT:-23790}"
command -v etcd >/dev/null || { echo "etcd not found (apt-get install etcd-server)" >&2; exit 1; }
timeout 600 cargo build --release --quiet --manifest-path "$HERE/Cargo.toml"
DATA="$(mktemp -d "${TMPDIR:-/tmp}/etcd-batch.XXXXXX")"
PIDS=()
stop() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do timeout 15 tail --pid="$p" -f /dev/null 2>/dev/null || kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$DATA"
}
trap stop EXIT
cluster=""
for i in 1 2 3; do cluster+="${cluster:+,}n$i=http://127.0.0.1:$((PORT + 10 + i))"; done
endpoints=""
for i in 1 2 3; do
  c="http://127.0.0.1:$((PORT + i))"
  endpoints+="${endpoints:+,}$c"
  etcd --name "n$i" --data-dir "$DATA/n$i" \
    --listen-client-urls "$c" --advertise-client-urls "$c" \
    --listen-peer-urls "http://127.0.0.1:$((PORT + 10 + i))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((PORT + 10 + i))" \
    --initial-cluster "$cluster" --initial-cluster-token etcd-batch \
    --initial-cluster-state new >>"$DATA/n$i.log" 2>&1 &
  PIDS+=($!)
done
healthy() {
  local i
  for i in 1 2 3; do
    curl -sf "http://127.0.0.1:$((PORT + i))/health" | grep -q '"true"' || return 1
  done
}
for _ in $(seq 1 120); do healthy && break; sleep 0.25; done
healthy || { echo "etcd did not become healthy" >&2; cat "$DATA"/n*.log >&2; exit 1; }
timeout 180 "$HERE/target/release/etcd-batch" --endpoints "$endpoints" "$@"
