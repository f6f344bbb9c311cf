#!/usr/bin/env bash
# A copy of a pasv cluster made by pg_basebackup must not serve pasv tables:
# RocksDB's files were copied while the engine wrote and compacted them (the
# copy may be torn), and pasv's logical messages are no-ops in redo, so
# nothing brings the copy up to date. Its engine refuses to start (server
# log: ERROR with a HINT); queries on pasv tables get a clear ERROR; heap
# tables of the copy work; the original keeps working.
# Usage: tests/base_backup.sh PG_BIN HOST PORT PGDATA COPY_PORT
# (run as the server's OS user). Exit 0 when all of that held.
set -euo pipefail
pg_bin=$1 host=$2 port=$3 pgdata=$4 copy_port=$5
copy=$pgdata.copy
copy_log=$copy.log
fail() { echo "FAIL: $*"; exit 1; }
q() { timeout 60 "$pg_bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$host" -U postgres "$@"; }
cleanup() {
  "$pg_bin/pg_ctl" -D "$copy" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$copy"
}
trap cleanup EXIT
rm -rf "$copy"
q -p "$port" -d postgres -c "DROP DATABASE IF EXISTS backup_src" -c "CREATE DATABASE backup_src"
q -p "$port" -d backup_src -c "CREATE EXTENSION pasv" \
  -c "CREATE TABLE p (id int PRIMARY KEY) USING pasv" -c "CREATE TABLE h (id int)" \
  -c "INSERT INTO p SELECT generate_series(1, 1000)" -c "INSERT INTO h SELECT generate_series(1, 10)"
timeout 120 "$pg_bin/pg_basebackup" -D "$copy" -h "$host" -p "$port" -U postgres -X stream -c fast ||
  fail "pg_basebackup failed"
sed -i "s/^port = .*/port = $copy_port/" "$copy/pasv.conf"
"$pg_bin/pg_ctl" -D "$copy" -l "$copy_log" -w -t 60 start >/dev/null || fail "the copy did not start"
[ "$(q -p "$copy_port" -d backup_src -c "SELECT count(*) FROM h")" = 10 ] || fail "heap rows of the copy"
if out=$(q -p "$copy_port" -d backup_src -c "SELECT count(*) FROM p" 2>&1); then
  fail "the copy served a pasv table: $out"
fi
echo "query on the copy: $out"
grep -q "pasv engine failed to start" <<<"$out" || fail "no clear ERROR on the copy: $out"
grep -q "restored from a base backup" "$copy_log" || fail "no ERROR in the copy's server log"
grep -q "HINT:  pasv does not support base backups" "$copy_log" || fail "no HINT in the copy's server log"
"$pg_bin/pg_ctl" -D "$copy" -m fast -w stop >/dev/null
[ "$(q -p "$port" -d backup_src -c "SELECT count(*) FROM p")" = 1000 ] || fail "the original lost rows"
# The original restarts cleanly and still serves its tables (its own store
# never saw a restore).
"$pg_bin/pg_ctl" -D "$pgdata" -l "$pgdata.log" -m fast -w restart >/dev/null || fail "restarting the original"
[ "$(q -p "$port" -d backup_src -c "SELECT count(*) FROM p")" = 1000 ] || fail "the original after a restart"
q -p "$port" -d postgres -c "DROP DATABASE backup_src"
echo "ok"
