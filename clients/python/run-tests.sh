#!/usr/bin/env bash
# The Python client's gate: installs the package with its test dependencies into the
# current Python, type-checks it (mypy --strict) and runs its tests against real
# three-node clusters started from LEASEHOLD_BIN (default: <repo>/target/release/leasehold)
# and a throw-away PostgreSQL server (Debian's `postgresql` package; required here).
# Exits non-zero on any failure. Extra arguments go to pytest.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PY="${PYTHON:-python3}"
export LEASEHOLD_BIN="${LEASEHOLD_BIN:-$ROOT/target/release/leasehold}"
export LEASEHOLD_REQUIRE_POSTGRES="${LEASEHOLD_REQUIRE_POSTGRES:-1}"

if [ ! -x "$LEASEHOLD_BIN" ]; then
  echo "no leasehold binary at $LEASEHOLD_BIN (cargo build --release, or set LEASEHOLD_BIN)" >&2
  exit 1
fi

echo "== pip install $HERE[test]"
"$PY" -m pip install --quiet --disable-pip-version-check "$HERE[test]"

echo "== mypy --strict (the package)"
(cd "$HERE" && "$PY" -m mypy --strict src/leasehold)

echo "== openapi-spec-validator docs/openapi.json"
"$PY" -m openapi_spec_validator "$ROOT/docs/openapi.json"

echo "== pytest (clients/python/tests, LEASEHOLD_BIN=$LEASEHOLD_BIN)"
# Run from the tests' directory against the INSTALLED package (not src/), so a missing
# file in the package shows up here.
cd "$HERE/tests"
exec timeout 1200 "$PY" -m pytest -p no:cacheprovider -q -rs "$@" .
