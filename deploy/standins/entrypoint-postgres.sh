#!/bin/bash
# Entrypoint of the local `postgres:16` stand-in (deploy/standins/build.sh): Debian's
# PostgreSQL 15, started the way the official image starts on an empty volume. On the first
# start it initialises $PGDATA with superuser $POSTGRES_USER (default postgres) and password
# $POSTGRES_PASSWORD, creates database $POSTGRES_DB (default: the user's name), and lets every
# host in with scram-sha-256; then (and on every later start) it runs the server as user
# `postgres` in the foreground, with the command's extra arguments. Not the official script:
# no /docker-entrypoint-initdb.d, no POSTGRES_HOST_AUTH_METHOD, no POSTGRES_INITDB_ARGS.
set -euo pipefail

if [ "${1:-postgres}" != "postgres" ]; then
  exec "$@"                               # e.g. `docker run ... postgres:16 psql ...`
fi
[ $# -gt 0 ] && shift

: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
as_postgres=(setpriv --reuid=postgres --regid=postgres --init-groups --)

if [ "$(id -u)" -eq 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 0700 "$PGDATA"
else
  as_postgres=()
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "entrypoint: POSTGRES_PASSWORD is not set" >&2
    exit 1
  fi
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  chown postgres "$pwfile" 2>/dev/null || true
  "${as_postgres[@]}" initdb -D "$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != "postgres" ]; then
    # A server on a private socket alone, for the first-start steps: the healthcheck's
    # pg_isready (default socket) does not see it, so the service is healthy only once the
    # database exists and the real server listens.
    init_socket="$(mktemp -d)"
    chown postgres "$init_socket" 2>/dev/null || true
    "${as_postgres[@]}" pg_ctl -D "$PGDATA" -w -t 60 \
      -o "-c listen_addresses='' -c unix_socket_directories='$init_socket'" start >/dev/null
    "${as_postgres[@]}" psql -v ON_ERROR_STOP=1 -h "$init_socket" -U "$POSTGRES_USER" \
      -d postgres -q -c "CREATE DATABASE \"$POSTGRES_DB\""
    "${as_postgres[@]}" pg_ctl -D "$PGDATA" -m fast -w -t 60 stop >/dev/null
    rm -rf "$init_socket"
  fi
  echo "entrypoint: initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi

# The official image stops on SIGINT (its STOPSIGNAL: a fast shutdown); `docker import`
# cannot set a stop signal, so `docker stop`'s SIGTERM is passed on as SIGINT here.
"${as_postgres[@]}" postgres -D "$PGDATA" -c listen_addresses='*' "$@" &
server=$!
trap 'kill -INT "$server" 2>/dev/null' TERM INT
status=0
wait "$server" || status=$?
while kill -0 "$server" 2>/dev/null; do  # `wait` returned for the trap: wait for the exit
  wait "$server" || status=$?
done
exit "$status"
