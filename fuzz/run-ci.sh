#!/usr/bin/env bash
# Runs each fuzz target for a short time on the STABLE toolchain, for CI (which has no
# nightly): RUSTC_BOOTSTRAP=1 lets stable rustc take the unstable flags cargo-fuzz
# passes, and `--sanitizer none` needs no nightly-only sanitizer runtime. Coverage-guided
# libFuzzer still runs; only AddressSanitizer is missing (safe Rust needs it little).
#
#   fuzz/run-ci.sh [seconds per target, default 20]
#
# Starts from the committed corpus (fuzz/corpus/<target>, never written to); new inputs
# go to a temporary directory. A crash, timeout or OOM fails the script and leaves the
# input in fuzz/artifacts/<target>/. Installs cargo-fuzz when missing (about a minute of
# compiling; cache ~/.cargo/bin in CI). FUZZ_TARGET_DIR (default fuzz/target/stable)
# keeps these stable-built artifacts apart from a nightly `cargo fuzz` build's.
set -euo pipefail

seconds="${1:-20}"
cd "$(dirname "$0")"
target_dir="${FUZZ_TARGET_DIR:-target/stable}"

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --version 0.13.2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

export RUSTC_BOOTSTRAP=1
for target in client_request raft_rpc snapshot_restore log_segment; do
    mkdir -p "$work/$target"
    echo "== $target: ${seconds}s"
    cargo fuzz run "$target" --sanitizer none -O --target-dir "$target_dir" \
        "$work/$target" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=16384
done
