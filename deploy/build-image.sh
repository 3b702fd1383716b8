#!/usr/bin/env bash
# Builds the Leasehold image (deploy/Dockerfile) from the release binary, on a machine
# with or without a container registry.
#
#   deploy/build-image.sh                # makes the base image locally if it is missing
#   deploy/build-image.sh --pull         # a registry at hand: let Docker pull the base
#   deploy/build-image.sh --rebuild-base # make the local base again (fresh Debian packages)
#
# Steps:
#  1. The base image the Dockerfile's FROM names (debian:bookworm-slim). Present: used
#     as it is (a pulled one, or one this script made). Missing and no --pull: made here
#     with `debootstrap --variant=minbase bookworm`, trimmed as Debian's own -slim images
#     are (no docs, man pages or locales; no apt lists), and `docker import`ed under that
#     tag with a label saying so. Needs root, debootstrap (installed with apt-get if
#     missing) and Debian's package mirror; ~1 min, once per machine.
#  2. target/release/leasehold (built with cargo if missing: never inside the image
#     build), stripped of debug info into target/docker/leasehold (~16 MB; symbols are
#     kept, so backtraces still name functions).
#  3. `docker build -f deploy/Dockerfile` from the repository root (/.dockerignore sends
#     only that binary), tagged leasehold:dev and leasehold:<version>.
#  4. `leasehold --version` in the new image: the binary runs on the base's glibc.
#
# Environment: LEASEHOLD_IMAGE (default leasehold:dev), DEBIAN_MIRROR (default
# http://deb.debian.org/debian).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

IMAGE=${LEASEHOLD_IMAGE:-leasehold:dev}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
# The label that marks a base image as made here (not Debian's).
MADE_HERE=org.leasehold.base=debootstrap-minbase
# The tag of the Dockerfile's (only) FROM line: the base we must provide.
BASE=$(awk 'toupper($1) == "FROM" { print $2; exit }' deploy/Dockerfile)

die() { echo "build-image: $*" >&2; exit 1; }
say() { echo "== $*" >&2; }

pull=0 rebuild_base=0
for arg in "$@"; do
  case $arg in
    --pull) pull=1 ;;
    --rebuild-base) rebuild_base=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $arg (see --help)" ;;
  esac
done

docker info >/dev/null 2>&1 || die "no Docker daemon answers (docker info failed)"

# Debian's -slim trimming (debuerreotype's slimify): what dpkg must not unpack from now
# on, and the same paths deleted from what debootstrap already unpacked.
slim_excludes() {
  cat <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
}

# Trims a fresh debootstrap root the way Debian's docker images are: apt keeps no
# caches or lists, the sources name the point releases and security updates, and the
# files docker manages (hostname, resolv.conf) are empty.
slimify() {
  local root=$1
  slim_excludes >"$root/etc/dpkg/dpkg.cfg.d/docker"
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/{groff,info,linda,locale,man}/* "$root"/usr/share/lintian/overrides/*
  cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/docker-no-languages"
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${MIRROR%/debian}/debian-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin
  rm -rf "$root"/tmp/* "$root"/var/tmp/* "$root"/var/log/*.log "$root"/var/log/apt/*
  : >"$root/etc/hostname"
  : >"$root/etc/resolv.conf"
}

make_base() {
  [ "$(id -u)" = 0 ] || die "making $BASE needs root (debootstrap); or run with --pull where a registry is reachable"
  if ! command -v debootstrap >/dev/null 2>&1; then
    say "installing debootstrap (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y debootstrap >/dev/null
  fi
  local work
  work=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-base.XXXXXX")
  # shellcheck disable=SC2064 # expand $work now: the trap runs after it is out of scope
  trap "rm -rf '$work'" EXIT
  say "debootstrap --variant=minbase $SUITE from $MIRROR (about a minute)"
  nice -n 10 debootstrap --variant=minbase "$SUITE" "$work/root" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
  slimify "$work/root"
  say "docker import as $BASE"
  tar -C "$work/root" --numeric-owner -c . | docker import \
    --change "LABEL $MADE_HERE" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' \
    --message "debootstrap --variant=minbase $SUITE $MIRROR, slimmed (deploy/build-image.sh)" \
    - "$BASE" >/dev/null
  rm -rf "$work"
  trap - EXIT
}

ensure_base() {
  local label
  if label=$(docker image inspect -f '{{ index .Config.Labels "org.leasehold.base" }}' "$BASE" 2>/dev/null); then
    [ "$label" = "<no value>" ] && label=""
    if [ "$rebuild_base" = 0 ]; then
      if [ -n "$label" ]; then say "base $BASE is here (made by this script: $label)"; else say "base $BASE is here (from a registry)"; fi
      return
    fi
    [ -n "$label" ] || die "--rebuild-base: $BASE here came from a registry; not overwriting it"
  elif [ "$pull" = 1 ]; then
    say "base $BASE: docker build will pull it"
    return
  fi
  make_base
}

# The binary the image carries: the release build, minus its debug info.
stage_binary() {
  if [ ! -x target/release/leasehold ]; then
    say "no target/release/leasehold: cargo build --release -p leasehold-cli"
    nice -n 10 cargo build --release -p leasehold-cli --locked
  fi
  # The image carries this binary as it is; say so when the sources moved on since.
  local newer
  newer=$(find cli node statemachine client proc-cluster Cargo.toml Cargo.lock -newer target/release/leasehold \
    -type f -not -path '*/target/*' -print -quit 2>/dev/null || true)
  [ -z "$newer" ] || echo "build-image: warning: $newer is newer than target/release/leasehold (cargo build --release -p leasehold-cli)" >&2
  mkdir -p target/docker
  strip --strip-debug -o target/docker/leasehold target/release/leasehold
}

ensure_base
stage_binary
version=$(target/docker/leasehold --version | awk '{ print $2 }')
say "docker build -f deploy/Dockerfile -t $IMAGE -t leasehold:$version"
pull_flag=()
[ "$pull" = 1 ] && pull_flag=(--pull)
# The label changes on every build, so the image's Created time is this build's even when
# every layer comes from the cache (an unchanged binary): the container tests refuse an
# image created before the binary they were built with (cluster-tests docker/engine.rs).
docker build "${pull_flag[@]}" --label "org.leasehold.built-at=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)" \
  -f deploy/Dockerfile -t "$IMAGE" -t "leasehold:$version" .
docker run --rm "$IMAGE" --version >/dev/null || die "$IMAGE: leasehold --version failed in the image (glibc newer than the base's?)"
size=$(docker image inspect -f '{{ .Size }}' "$IMAGE")
say "built $IMAGE (leasehold:$version): $((size / 1000000)) MB"
