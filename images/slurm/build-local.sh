#!/usr/bin/env bash
# Build Slurm 24.11.5 from Debian's upstream source tarball into a cache outside
# the checkout, so tests, the demo, the local pod runtime and CI clones on the
# same machine share one build. A no-op when the build is already there.
#
# Why Debian's tarball: it is the exact upstream release Debian 13 ships, and
# apt's source index gives us a checksum to verify it against.
set -euo pipefail

SLURM_VERSION="${SLURM_VERSION:-24.11.5}"
DEBIAN_VERSION="${SLURM_DEBIAN_VERSION:-24.11.5-4+deb13u1}"
SLURM_SHA256="${SLURM_SHA256:-e1a5547edd212c38b5e3230a284133f777b32746551f094aaa81cc4af375e332}"
CACHE="${SLURMKUBE_CACHE:-$HOME/.cache/slurmkube}"
PREFIX="${SLURMKUBE_SLURM_PREFIX:-$CACHE/slurm/$SLURM_VERSION}"
SRC_DIR="$CACHE/src"
TARBALL="$SRC_DIR/slurm-wlm_${SLURM_VERSION}.orig.tar.gz"
STAMP="$PREFIX/.slurmkube-built"

log() { printf 'slurm-build: %s\n' "$*" >&2; }

# One build at a time per cache (several checkouts or worktrees share it); the
# check below runs again once the lock is ours, so a waiter sees the result.
mkdir -p "$CACHE"
exec 9>"$CACHE/.slurm-build.lock"
flock 9

# What the local Slurm fixtures and the local pod runtime run besides Slurm:
# unshare/setpriv/mount (private /run per daemon, pod namespaces), ip (pod network),
# useradd (slurmrestd's user). Checked even when the build is cached.
# mariadb-server-core: mariadbd for the accounting e2e tests (no service is installed).
# slapd, openssh-client: the LDAP directory and the ssh logins of the login pods'
# e2e test (the test starts slapd itself, on the bridge address only).
# stunnel4: TLS in front of slurmrestd, as in the image (build/slurmrestd.py).
RUNTIME_DEPS=(util-linux mount iproute2 procps passwd mariadb-server-core mariadb-client-core
  slapd openssh-client stunnel4)
need=()
for p in "${RUNTIME_DEPS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  log "installing runtime dependencies: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # No package may start its service (slapd would listen on every address):
  # policy-rc.d(8) for the install, removed again unless the machine had one.
  policy=/usr/sbin/policy-rc.d
  own_policy=
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && own_policy=1
  fi
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  if [[ -n $own_policy ]]; then rm -f "$policy"; fi
fi

# What a build must contain; an older cached build without one is rebuilt.
# accounting_storage/mysql is slurmdbd's storage (needs MariaDB's client library).
BUILT=("$PREFIX/sbin/slurmctld" "$PREFIX/sbin/slurmdbd" "$PREFIX/lib/slurm/accounting_storage_mysql.so")
complete=1
for f in "${BUILT[@]}"; do [[ -e $f ]] || complete=0; done
if [[ -f "$STAMP" ]] && ((complete)); then
  log "already built at $PREFIX"
  exit 0
fi

BUILD_DEPS=(build-essential pkg-config libjson-c-dev libyaml-dev libjwt-dev
  libhttp-parser-dev libmunge-dev munge libhwloc-dev libdbus-1-dev liblz4-dev
  libcurl4-openssl-dev libpam0g-dev libmariadb-dev libmariadb-dev-compat dpkg-dev)

missing=()
for p in "${BUILD_DEPS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing build dependencies: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p "$SRC_DIR"
sha_ok() { [[ -f "$TARBALL" ]] && echo "$SLURM_SHA256  $TARBALL" | sha256sum -c --status; }

if ! sha_ok; then
  # A deb-src entry for trixie gives apt the source index that names the tarball.
  # Only the .orig.tar.gz is needed; apt may fail on the .dsc/.debian.tar.xz,
  # so the checksum, not apt's exit code, decides.
  SRC_LIST=/etc/apt/sources.list.d/slurmkube-trixie-src.sources
  if [[ ! -f "$SRC_LIST" ]]; then
    log "adding a trixie deb-src entry ($SRC_LIST)"
    uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [[ -n "$uri" ]] || uri=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    [[ -n "$uri" ]] || { log "cannot find the Debian mirror URI in apt's sources"; exit 1; }
    cat >"$SRC_LIST" <<SRC
Types: deb-src
URIs: $uri
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  apt-get update -qq -o Dir::Etc::sourcelist="$SRC_LIST" -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0
  (cd "$SRC_DIR" && apt-get source --download-only "slurm-wlm=$DEBIAN_VERSION" >/dev/null 2>&1) || true
  if ! sha_ok; then
    log "tarball missing or checksum mismatch: $TARBALL (want sha256 $SLURM_SHA256)"
    exit 1
  fi
fi
log "tarball verified: $TARBALL"

BUILD="$CACHE/build/slurm-$SLURM_VERSION"
rm -rf "$BUILD"
mkdir -p "$BUILD"
tar -xzf "$TARBALL" -C "$BUILD" --strip-components=1
cd "$BUILD"
log "configuring (prefix $PREFIX)"
./configure --prefix="$PREFIX" --sysconfdir="$PREFIX/etc" --enable-multiple-slurmd \
  --with-jwt --with-json --with-yaml --with-http-parser --with-hwloc \
  --disable-debug >"$BUILD/configure.log" 2>&1 || { tail -50 "$BUILD/configure.log"; exit 1; }
log "building with $(nproc) jobs"
make -j"$(nproc)" >"$BUILD/make.log" 2>&1 || { tail -80 "$BUILD/make.log"; exit 1; }
make install >"$BUILD/install.log" 2>&1 || { tail -50 "$BUILD/install.log"; exit 1; }
"$PREFIX/sbin/slurmctld" -V
for f in "${BUILT[@]}"; do
  [[ -e $f ]] || { log "build lacks $f (see $BUILD/configure.log)"; exit 1; }
done
touch "$STAMP"
rm -rf "$BUILD"
log "built into $PREFIX"
