#!/usr/bin/env bash
# Makes sure a PostgreSQL answers on 127.0.0.1:5432 with a database `test`
# that user postgres reaches without a password prompt, installing PostgreSQL
# from Debian's packages if needed.
#   scripts/postgres.sh ensure   start or install it
#   scripts/postgres.sh url      print the URL tests should use
set -euo pipefail
HOST=127.0.0.1 PORT=5432
PASSFILE_URL="postgres://postgres:postgres@$HOST:$PORT/test?sslmode=disable"
TRUST_URL="postgres://postgres@$HOST:$PORT/test?sslmode=disable"

ready() { pg_isready -q -h "$HOST" -p "$PORT" 2>/dev/null; }

can_login() { PGPASSWORD=postgres psql "$1" -Atqc 'select 1' >/dev/null 2>&1; }

# can_login_without_password: the URL works as it is, with no password from
# the environment or a password file (as the tests will use it).
can_login_without_password() {
  env -u PGPASSWORD PGPASSFILE=/dev/null psql "$1" -w -Atqc 'select 1' >/dev/null 2>&1
}

url() {
  if can_login_without_password "$TRUST_URL"; then echo "$TRUST_URL"; else echo "$PASSFILE_URL"; fi
}

start_cluster() {
  local version
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
  [ -n "$version" ] || return 1
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
}

ensure() {
  if ! ready; then
    if ! command -v pg_ctlcluster >/dev/null || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
      echo "installing PostgreSQL from Debian's packages"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    fi
    start_cluster
    for _ in $(seq 1 60); do ready && break; sleep 1; done
  fi
  ready || { echo "PostgreSQL does not answer on $HOST:$PORT" >&2; exit 1; }
  if ! can_login "$TRUST_URL" && ! can_login "$PASSFILE_URL"; then
    # A fresh Debian install asks for a password over TCP: give postgres one.
    su postgres -c "psql -qc \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null
  fi
  local admin
  admin=$(url | sed 's#/test?#/postgres?#')
  if ! PGPASSWORD=postgres psql "$admin" -Atqc "select 1 from pg_database where datname='test'" | grep -q 1; then
    PGPASSWORD=postgres psql "$admin" -qc "CREATE DATABASE test"
  fi
  echo "PostgreSQL ready: $(url | sed 's#:postgres@#:xxxxx@#')"
}

case "${1:-}" in
  ensure) ensure ;;
  url) url ;;
  *) echo "usage: $0 ensure|url" >&2; exit 2 ;;
esac
