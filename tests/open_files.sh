#!/usr/bin/env bash
# Many tables under a low file-descriptor limit. Every pasv table has its own
# SST files; RocksDB kept every one open, so a cluster with a few hundred
# tables failed with "Too many open files" (PostgreSQL's core suite hit it
# under the usual soft limit of 1 024); RocksDB also holds a directory handle
# per column family. The engine now raises its soft limit to the hard one and
# bounds the SST files it keeps open below that. This test restarts the server under a
# soft limit of 256 open files, writes 100 tables of 3 flushed batches each
# (300 SST files), reads them all, restarts cleanly and after a crash (under
# the same limit), and checks every row each time.
# Usage: tests/open_files.sh PG_BIN HOST PORT DATADIR LOG (as the server's OS user).
set -euo pipefail
pg_bin=$1 host=$2 port=$3 data=$4 log=$5
tables=100 batches=3 rows=10
psql() { "$pg_bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U postgres -d files "$@"; }
fail() { echo "FAIL: $*"; exit 1; }
# pg_ctl under the low limit: the postmaster and every process it forks inherit it.
pg_ctl() { (ulimit -Sn 256 && "$pg_bin/pg_ctl" -D "$data" -l "$log" -w "$@" >/dev/null); }

pg_ctl -m fast restart || fail "restart under a soft limit of 256 open files"

postmaster=$(head -1 "$data/postmaster.pid")
engine=$(pgrep -P "$postmaster" -f 'pasv engine' | head -1) || fail "no pasv engine process"
limit=$(awk '/^Max open files/ { print $4 }' "/proc/$postmaster/limits")
echo "the postmaster's soft limit on open files: $limit; the engine's: $(awk '/^Max open files/ { print $4 }' "/proc/$engine/limits")"
[ "$limit" -le 256 ] || fail "the server was not started under a low file limit (got $limit): the test would prove nothing"

"$pg_bin/psql" -X -q -h "$host" -p "$port" -U postgres -d postgres -c "DROP DATABASE IF EXISTS files" -c "CREATE DATABASE files"
psql -c "CREATE EXTENSION pasv"
psql -c "
DO \$\$
BEGIN
  FOR t IN 1..$tables LOOP
    EXECUTE format('CREATE TABLE f%s (id int, v text) USING pasv', t);
    FOR b IN 1..$batches LOOP
      EXECUTE format('INSERT INTO f%s SELECT g, %L FROM generate_series(%s, %s) g', t, 'batch ' || b, (b - 1) * $rows + 1, b * $rows);
      PERFORM pasv.flush_table(format('f%s', t)::regclass);
    END LOOP;
  END LOOP;
END
\$\$"
psql -c "
CREATE FUNCTION total() RETURNS bigint LANGUAGE plpgsql AS \$\$
DECLARE n bigint; s bigint := 0;
BEGIN
  FOR t IN 1..$tables LOOP
    EXECUTE format('SELECT count(DISTINCT id) FROM f%s', t) INTO n;
    s := s + n;
  END LOOP;
  RETURN s;
END \$\$"
files=$(find "$data/pasv" -name '*.sst' | wc -l)
echo "SST files: $files"
[ "$files" -gt "$limit" ] || fail "only $files SST files: not more than the limit of $limit"
want=$((tables * batches * rows))
check() {
  local got
  got=$(psql -c "SELECT total()") || fail "reading every table $1"
  echo "rows $1: $got"
  [ "$got" = "$want" ] || fail "$got rows $1, expected $want"
}
check "after writing"
pg_ctl -m fast restart || fail "clean restart"
check "after a clean restart"
psql -c "INSERT INTO f1 SELECT g, 'after restart' FROM generate_series(1001, 1010) g"
want=$((want + 10))
pg_ctl -m immediate restart || fail "restart after the crash"
check "after a crash"
if grep -q 'Too many open files' "$log"; then fail "the server log reports 'Too many open files'"; fi
echo "passed"
