#!/usr/bin/env bash
# Local stand-ins for the two base images deploy/ names, for a machine that reaches Debian's
# package mirror but no image registry (Docker Hub). NOT the official images: each is a
# Debian bookworm `debootstrap --variant=minbase` root file system plus a few packages,
# imported with `docker import` under the official tag, so that deploy/Dockerfile and
# deploy/docker-compose.yaml run unchanged. Wherever an image can be pulled, pull it instead
# and do not run this.
#
#   python:3.11-slim-bookworm  Debian's python3 (3.11) with pip, `python` and `pip` on PATH,
#                              pip allowed to install system-wide (as in the official image,
#                              it installs under /usr/local), PATH and LANG as the official one.
#   postgres:16                Debian's PostgreSQL 15 (bookworm has no 16), with an entrypoint
#                              (entrypoint-postgres.sh, beside this file) that honours
#                              POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB and PGDATA
#                              (/var/lib/postgresql/data) like the official image's first start.
#
# Both images trust the CA certificates of this host's /usr/local/share/ca-certificates, so
# that apt and pip inside `docker build` work behind a proxy that re-signs TLS.
#
#   bash deploy/standins/build.sh                     # builds the images that are missing
#   bash deploy/standins/build.sh --force             # builds both again
#   bash deploy/standins/build.sh --force postgres    # only one of them (python, postgres)
#
# Needs root, debootstrap and a running Docker daemon. ~2-4 min per image on 2 cores.
# DEBIAN_MIRROR overrides the mirror (default http://deb.debian.org/debian).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
force=0
[ "${1:-}" = "--force" ] && { force=1; shift; }
only=("$@")
[ ${#only[@]} -gt 0 ] || only=(python postgres)
wanted() { [[ " ${only[*]} " == *" $1 "* ]]; }

[ "$(id -u)" -eq 0 ] || { echo "standins: run as root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "standins: apt-get install debootstrap" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "standins: no Docker daemon" >&2; exit 1; }

work="$(mktemp -d /var/tmp/p2panda-standins.XXXXXX)"
cleanup() {
  for root in "$work"/*/; do
    if mountpoint -q "${root}proc" 2>/dev/null; then umount "${root}proc" || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT

# A minbase bookworm root with PACKAGES, the official images' apt sources, this host's
# extra CA certificates, everything upgraded to the security archive; then IMPORT_CHANGES.
build() {
  local tag="$1" packages="$2" setup="$3"
  shift 3
  if [ "$force" -eq 0 ] && docker image inspect "$tag" >/dev/null 2>&1; then
    echo "standins: $tag exists (--force builds it again)"
    return
  fi
  local root="$work/${tag//[:\/]/_}" start=$SECONDS
  echo "standins: $tag: debootstrap bookworm + $packages"
  debootstrap --variant=minbase --include="ca-certificates,$packages" bookworm "$root" "$mirror" \
    > "$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  cat > "$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  fi
  if [ -n "${ENTRYPOINT_FILE:-}" ]; then
    install -m 0755 "$ENTRYPOINT_FILE" "$root/usr/local/bin/docker-entrypoint.sh"
  fi
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mount -t proc proc "$root/proc"
  chroot "$root" /bin/sh -ec "
    update-ca-certificates
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -y -qq upgrade
    $setup
    apt-get clean
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/* /var/tmp/*
  " > "$work/chroot.log" 2>&1 || { tail -20 "$work/chroot.log" >&2; exit 1; }
  umount "$root/proc"
  rm -f "$root/etc/resolv.conf" "$root/etc/hostname"
  tar -C "$root" --numeric-owner -c . | docker import "$@" - "$tag" >/dev/null
  echo "standins: $tag built in $((SECONDS - start)) s" \
       "($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
  rm -rf "$root"
}

if wanted python; then
  build python:3.11-slim-bookworm "python3,python3-pip,python-is-python3,passwd" \
    "ln -sf /usr/bin/pip3 /usr/local/bin/pip
     rm -f /usr/lib/python3*/EXTERNALLY-MANAGED" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'LABEL org.p2panda.standin="debootstrap bookworm minbase, Debian python3 3.11"' \
    --change 'CMD ["python3"]'
fi

if wanted postgres; then
  ENTRYPOINT_FILE="$here/entrypoint-postgres.sh" \
  build postgres:16 "postgresql-15,postgresql-client-15,util-linux" \
    "mkdir -p /var/lib/postgresql/data /var/run/postgresql
     chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
     chmod 0700 /var/lib/postgresql/data" \
    --change 'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV PGDATA=/var/lib/postgresql/data' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'LABEL org.p2panda.standin="debootstrap bookworm minbase, Debian PostgreSQL 15"' \
    --change 'VOLUME /var/lib/postgresql/data' \
    --change 'EXPOSE 5432' \
    --change 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' \
    --change 'CMD ["postgres"]'
fi
