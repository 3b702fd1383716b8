#!/usr/bin/env bash
# Makes the secrets the compose cluster (deploy/docker-compose.yml) mounts, in
# deploy/secrets/ (its .gitignore keeps them out of git) or $LEASEHOLD_SECRETS_DIR:
#
#   deploy/make-secrets.sh            # peer-secret: 32 random bytes as 64 hex digits
#   deploy/make-secrets.sh --tokens   # also tokens.toml: an admin, a worker, a reader token
#   deploy/make-secrets.sh --force    # replace what exists (restart every node after)
#
# Existing files are kept unless --force: every node must have the same peer secret, and
# a new one locks out nodes still running with the old. Each file is mode 0600 and owned
# by uid/gid 10001, the image's `leasehold` user: Compose bind-mounts file secrets as
# they are on the host (it ignores uid/gid/mode outside Swarm), and `serve` refuses a
# world-readable secret file. chown needs root: run it with sudo, or chown by hand.
set -euo pipefail
# LEASEHOLD_SECRETS_DIR puts them elsewhere (the compose file reads the same variable).
cd "$(dirname "${BASH_SOURCE[0]}")"
dir=${LEASEHOLD_SECRETS_DIR:-secrets}
mkdir -p "$dir"
cd "$dir"

UID_GID=10001:10001
tokens=0 force=0
for arg in "$@"; do
  case $arg in
    --tokens) tokens=1 ;;
    --force) force=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "make-secrets: unknown argument $arg (see --help)" >&2; exit 1 ;;
  esac
done

random_hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# Writes stdin to $1 (0600, then owned by the image's user) unless it exists.
install_secret() {
  local file=$1
  if [ -e "$file" ] && [ "$force" = 0 ]; then
    echo "$dir/$file exists: kept (--force replaces it)" >&2
    cat >/dev/null
    return
  fi
  (umask 077 && cat >"$file.new")
  mv -f "$file.new" "$file"
  if ! chown "$UID_GID" "$file" 2>/dev/null; then
    echo "make-secrets: could not chown $dir/$file to $UID_GID (not root?):" >&2
    echo "  sudo chown $UID_GID $dir/$file" >&2
    exit 1
  fi
  echo "$dir/$file: made (0600, owner $UID_GID)" >&2
}

random_hex 32 | install_secret peer-secret

if [ "$tokens" = 1 ]; then
  install_secret tokens.toml <<EOF
# Client tokens of the compose cluster (format: docs/security.md). Send one as
# Authorization: Bearer <token>, or LEASEHOLD_TOKEN=<token> for the leasehold CLI.
[[token]]
token = "$(random_hex 24)"
role = "admin"
name = "compose admin"

[[token]]
token = "$(random_hex 24)"
role = "worker"
name = "compose worker"

[[token]]
token = "$(random_hex 24)"
role = "reader"
name = "compose reader"
EOF
fi
