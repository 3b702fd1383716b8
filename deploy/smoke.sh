#!/usr/bin/env bash
# Proves the image and the compose cluster: what issue 20 items 1-2 promise, end to end.
#
#   deploy/smoke.sh
#
#  1. deploy/build-image.sh (makes the base image if missing; a few seconds when cached).
#  2. One container from the image: first `GET /readyz` 200 within START_MS_MAX of
#     `docker run` (printed); `docker stop` is a clean shutdown (exit code 0).
#  3. `compose up -d` of deploy/docker-compose.yml under its own project name, ports and
#     peer secret (so it never touches a cluster or secrets you already have): all three
#     nodes ready and agreeing on a leader.
#  4. The README's worked example, by curl from the host, through a follower.
#  5. `docker kill` (SIGKILL) of the leader; a new leader; the example again (a new job
#     id: invoice-42 is completed) through a survivor, and invoice-42 is still completed.
#  6. The killed node started again: it catches up (the same state digest on all three).
#  7. `compose stop`: every node exits 0 (SIGTERM handled as PID 1).
#  8. Up again with docker-compose.tokens.yml and `make-secrets.sh --tokens`, on the same
#     volumes: no token is refused 401, a reader's claim 403, a worker's claim 200.
# Everything it creates (containers, network, volumes, secrets) is removed on exit, pass
# or fail; the images stay (build-image.sh reuses them).
#
# No Docker daemon: prints why and exits 0 ("skipped"), unless LEASEHOLD_REQUIRE_DOCKER=1
# (then exits 1). Needs curl and jq on the host. Every wait is bounded.
# Environment: START_MS_MAX (default 2000), LEASEHOLD_SMOKE_PORT (first of three host
# ports, default 17101).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

START_MS_MAX=${START_MS_MAX:-2000}
PORT0=${LEASEHOLD_SMOKE_PORT:-17101}
IMAGE=${LEASEHOLD_IMAGE:-leasehold:dev}
PROJECT=leasehold-smoke-$$
SINGLE=$PROJECT-single

fail() { echo "smoke: FAIL: $*" >&2; exit 1; }
say() { echo "== $*" >&2; }
now_ms() { date +%s%3N; }

if ! docker info >/dev/null 2>&1; then
  if [ "${LEASEHOLD_REQUIRE_DOCKER:-0}" = 1 ]; then
    fail "no Docker daemon answers (docker info failed) and LEASEHOLD_REQUIRE_DOCKER=1"
  fi
  echo "smoke: skipped: no Docker daemon answers (docker info failed)" >&2
  exit 0
fi
for tool in curl jq; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (apt-get install $tool)"
done
# Compose v2 as a docker plugin, else Debian's docker-compose 1.x.
if docker compose version >/dev/null 2>&1; then
  compose_bin=(docker compose)
else
  command -v docker-compose >/dev/null 2>&1 || fail "neither 'docker compose' nor docker-compose"
  compose_bin=(docker-compose)
fi
files=(-f deploy/docker-compose.yml)
compose() { "${compose_bin[@]}" -p "$PROJECT" "${files[@]}" "$@"; }

SECRETS=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-smoke.XXXXXX")
export LEASEHOLD_SECRETS_DIR=$SECRETS LEASEHOLD_IMAGE=$IMAGE
export LEASEHOLD_PORT_1=$PORT0 LEASEHOLD_PORT_2=$((PORT0 + 1)) LEASEHOLD_PORT_3=$((PORT0 + 2))
cleanup() {
  set +e
  docker rm -f -v "$SINGLE" >/dev/null 2>&1
  compose down -v --remove-orphans >/dev/null 2>&1
  rm -rf "$SECRETS"
}
trap cleanup EXIT

url() { echo "http://127.0.0.1:$((PORT0 + $1 - 1))"; }

# call METHOD URL [BODY]: prints "STATUS BODY"; STATUS 000 when nothing answered.
# With TOKEN set, it is sent as the bearer token.
call() {
  local body data=()
  [ $# -lt 3 ] || data=(-H 'Content-Type: application/json' -d "$3")
  [ -z "${TOKEN:-}" ] || data+=(-H "Authorization: Bearer $TOKEN")
  body=$(curl -s -m 5 -w '\n%{http_code}' -X "$1" "$2" "${data[@]}") || true
  printf '%s %s\n' "${body##*$'\n'}" "${body%$'\n'*}"
}

# until_ok SECONDS WHAT CMD…: runs CMD every 100 ms until it succeeds, at most SECONDS.
until_ok() {
  local deadline=$(($(now_ms) + $1 * 1000)) what=$2
  shift 2
  until "$@"; do
    [ "$(now_ms)" -lt "$deadline" ] || fail "not within the bound: $what"
    sleep 0.1
  done
}

ready() { [ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "$(url "$1")/readyz")" = 200 ]; }
# The leader node $1 knows, from /readyz (no token needed, unlike /v1/cluster).
leader_of() { curl -s -m 2 "$(url "$1")/readyz" | jq -r '.leader_id // empty'; }

# all_agree NODE…: every node is ready and names the same leader, one of NODE….
all_agree() {
  local n l first=""
  for n in "$@"; do
    ready "$n" || return 1
    l=$(leader_of "$n")
    [ -n "$l" ] || return 1
    [ -z "$first" ] || [ "$l" = "$first" ] || return 1
    first=$l
  done
  [[ " $* " == *" $first "* ]]
}

# expect WHAT "STATUS BODY" STATUS JQ-TEST: the status, and a jq test on the body.
expect() {
  local status=${2%% *} body=${2#* }
  if [ "$status" != "$3" ] || ! jq -e "$4" >/dev/null 2>&1 <<<"$body"; then
    fail "$1: wanted $3 and $4, got $status $body"
  fi
  echo "   $1: $status $body" | cut -c1-160 >&2
}

# The README's worked example ("The worked example, with curl") against node $1.
worked_example() {
  local N job=$2 r
  N=$(url "$1")
  r=$(call POST "$N/v1/jobs/$job/claim" '{"owner":"worker-a","ttl_ms":2000}')
  expect "A claims $job" "$r" 200 '.owner == "worker-a" and .generation == 1'
  sleep 3 # the example's own step: A "pauses" past its 2 s lease (what is under test)
  r=$(call POST "$N/v1/jobs/$job/claim" '{"owner":"worker-b","ttl_ms":10000}')
  expect "B claims $job" "$r" 200 '.owner == "worker-b" and .generation == 2'
  r=$(call POST "$N/v1/jobs/$job/complete" '{"owner":"worker-a","generation":1}')
  expect "A's late complete" "$r" 409 '.error.code == "stale_lease"'
  r=$(call POST "$N/v1/jobs/$job/complete" '{"owner":"worker-b","generation":2,"result":{"ok":true}}')
  expect "B completes" "$r" 200 '.state == "completed" and .generation == 2'
}

container_of() { compose ps -q "node$1"; }

# 1 --------------------------------------------------------------------------------------
say "build the image (deploy/build-image.sh)"
deploy/build-image.sh
say "image $IMAGE: $(($(docker image inspect -f '{{ .Size }}' "$IMAGE") / 1000000)) MB"

# 2 --------------------------------------------------------------------------------------
say "one node: start time and a clean stop"
t0=$(now_ms)
docker run -d --name "$SINGLE" -p "127.0.0.1:$PORT0:7001" "$IMAGE" serve --id 1 \
  --listen 0.0.0.0:7001 --data-dir /var/lib/leasehold --peer 1=127.0.0.1:7001 >/dev/null
until_ok 10 "one node ready" ready 1
start_ms=$(($(now_ms) - t0))
echo "   first /readyz 200 after docker run: $start_ms ms" >&2
[ "$start_ms" -le "$START_MS_MAX" ] || fail "start took $start_ms ms > START_MS_MAX=$START_MS_MAX"
docker stop -t 30 "$SINGLE" >/dev/null
code=$(docker inspect -f '{{ .State.ExitCode }}' "$SINGLE")
[ "$code" = 0 ] || fail "docker stop: exit code $code, not 0"
docker logs "$SINGLE" 2>&1 | grep -q 'shutting down' || fail "docker stop: no 'shutting down' in the log"
echo "   docker stop: exit 0, 'shutting down' logged" >&2
docker rm -v "$SINGLE" >/dev/null

# 3 --------------------------------------------------------------------------------------
say "compose cluster (project $PROJECT, ports $PORT0-$((PORT0 + 2)))"
deploy/make-secrets.sh
t0=$(now_ms)
compose up -d
until_ok 60 "three nodes ready with one leader" all_agree 1 2 3
echo "   all three ready, one leader, after $(($(now_ms) - t0)) ms" >&2
for n in 1 2 3; do
  docker port "$(container_of "$n")" 7001/tcp | grep -qv '^127\.0\.0\.1:' \
    && fail "node$n publishes its port on more than 127.0.0.1"
done

# 4 --------------------------------------------------------------------------------------
leader=$(leader_of 1)
follower=$((leader % 3 + 1))
say "the worked example through follower node$follower (leader node$leader)"
worked_example "$follower" invoice-42

# 5 --------------------------------------------------------------------------------------
say "docker kill node$leader (the leader)"
docker kill "$(container_of "$leader")" >/dev/null
survivors=()
for n in 1 2 3; do [ "$n" = "$leader" ] || survivors+=("$n"); done
t0=$(now_ms)
until_ok 30 "a new leader among ${survivors[*]}" all_agree "${survivors[@]}"
new_leader=$(leader_of "${survivors[0]}")
echo "   node$new_leader leads after $(($(now_ms) - t0)) ms" >&2
via=${survivors[0]}
[ "$via" != "$new_leader" ] || via=${survivors[1]}
say "the worked example again, through node$via"
worked_example "$via" invoice-43
r=$(call GET "$(url "$via")/v1/jobs/invoice-42")
expect "invoice-42 after the kill" "$r" 200 '.state == "completed" and .owner == "worker-b"'

# 6 --------------------------------------------------------------------------------------
say "node$leader started again: it catches up"
docker start "$(container_of "$leader")" >/dev/null
until_ok 30 "node$leader ready again" all_agree 1 2 3
digests() { for n in 1 2 3; do curl -s -m 2 "$(url "$n")/v1/cluster/digest" | jq -r '"\(.applied_index) \(.digest)"'; done; }
same_digest() { [ "$(digests | sort -u | wc -l)" = 1 ]; }
until_ok 30 "the same applied index and digest on all three" same_digest
echo "   all three at: $(digests | head -1)" >&2

# 7 --------------------------------------------------------------------------------------
say "compose stop: a clean shutdown of every node"
compose stop -t 30 >/dev/null 2>&1
for n in 1 2 3; do
  code=$(docker inspect -f '{{ .State.ExitCode }}' "$(container_of "$n")")
  [ "$code" = 0 ] || fail "node$n exited $code on compose stop, not 0"
done
echo "   all three exited 0" >&2

# 8 --------------------------------------------------------------------------------------
say "client tokens (docker-compose.tokens.yml), on the same volumes"
deploy/make-secrets.sh --tokens
files+=(-f deploy/docker-compose.tokens.yml)
compose up -d
until_ok 60 "three nodes ready with one leader, with tokens" all_agree 1 2 3
token_of() { awk -v role="\"$1\"" '$1 == "token" { t = $3 } $1 == "role" && $3 == role { gsub(/"/, "", t); print t; exit }' "$SECRETS/tokens.toml"; }
claim='{"owner":"worker-c","ttl_ms":10000}'
r=$(call POST "$(url 2)/v1/jobs/invoice-44/claim" "$claim")
expect "claim without a token" "$r" 401 '.error.code == "unauthenticated"'
r=$(TOKEN=$(token_of reader) call POST "$(url 2)/v1/jobs/invoice-44/claim" "$claim")
expect "claim with the reader token" "$r" 403 '.error.code == "permission_denied"'
r=$(TOKEN=$(token_of worker) call POST "$(url 2)/v1/jobs/invoice-44/claim" "$claim")
expect "claim with the worker token" "$r" 200 '.owner == "worker-c" and .generation == 1'
r=$(TOKEN=$(token_of admin) call GET "$(url 3)/v1/jobs/invoice-42")
expect "invoice-42 read with the admin token" "$r" 200 '.state == "completed"'
say "smoke: PASS"
