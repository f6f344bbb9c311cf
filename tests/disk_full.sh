#!/usr/bin/env bash
# pasv's RocksDB directory on a small filesystem fills up (DESIGN §9: bad
# conditions get a clear error, nothing is lost). $PGDATA/pasv points into
# MOUNT, a small filesystem the caller made (tmpfs); this script, as the
# server's OS user, takes most of its space with a ballast file, then:
#   * inserts until one fails: the ERROR has SQLSTATE 53100 (disk_full) and a
#     HINT, and every committed row is still there;
#   * the server did not crash (no process terminated by a signal) and keeps
#     serving heap tables;
#   * a pasv table can be dropped, as a heap table can, to make room;
#   * once the ballast is removed, pasv works again (RocksDB resumes after
#     its background error) without a restart;
#   * a crash afterwards recovers every committed row.
# Usage: tests/disk_full.sh PG_BIN HOST PORT PGDATA MOUNT
set -euo pipefail
pg_bin=$1 host=$2 port=$3 pgdata=$4 mount=$5
log=$pgdata.log
fail() { echo "FAIL: $*"; exit 1; }
q() { timeout 120 "$pg_bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U postgres -d postgres "$@"; }
q -c "CREATE EXTENSION pasv" -c "CREATE TABLE f (id int, pad text) USING pasv" -c "CREATE TABLE h (id int)"
q -c "CREATE TABLE g (id int) USING pasv" -c "INSERT INTO g SELECT generate_series(1, 1000)"
free_kb=$(df -Pk "$mount" | awk 'NR == 2 { print $4 }')
# Leave about 24 MB for RocksDB (memtables flush at 8 MB in this cluster).
ballast_kb=$((free_kb - 24 * 1024))
[ "$ballast_kb" -gt 0 ] || fail "$mount has only $free_kb kB free"
dd if=/dev/zero of="$mount/ballast" bs=1024 count="$ballast_kb" status=none
committed=0 failed=""
for i in $(seq 1 100); do
  if out=$(q -v VERBOSITY=verbose -c "INSERT INTO f SELECT g, md5(g::text) || md5((g + 1)::text) || md5((g + 2)::text) FROM generate_series(1, 20000) g" 2>&1); then
    committed=$((committed + 20000))
  else
    failed=$out
    break
  fi
done
[ -n "$failed" ] || fail "no INSERT failed after $committed rows with $((free_kb - ballast_kb)) kB free"
echo "after $committed committed rows: $(head -n 1 <<<"$failed")"
grep -q "^ERROR:  53100: .*No space left" <<<"$failed" || fail "not a disk_full (53100) ERROR saying the disk is full: $failed"
grep -q "^HINT:  Free disk space" <<<"$failed" || fail "no HINT: $failed"
[ "$(q -c "SELECT count(*) FROM f")" = "$committed" ] || fail "committed rows missing while the disk is full"
q -c "INSERT INTO h VALUES (1)" || fail "heap tables stopped working"
! grep -q "terminated by signal" "$log" || fail "a server process crashed: $(grep "terminated by signal" "$log" | head -n 1)"
out=$(q -c "DROP TABLE g" 2>&1) || fail "a pasv table could not be dropped while the disk is full: $out"
echo "a pasv table dropped while the disk is full"
rm -f "$mount/ballast"
ok=0
for _ in $(seq 1 60); do
  if q -c "INSERT INTO f VALUES (-2, 'space is back')" 2>/dev/null; then ok=1; break; fi
  sleep 1
done
[ "$ok" = 1 ] || fail "pasv did not work again within 60 s after space returned"
committed=$((committed + 1))
echo "space returned: pasv writes again"
"$pg_bin/pg_ctl" -D "$pgdata" -l "$log" -m immediate -w restart >/dev/null 2>&1 || fail "restart after the crash"
[ "$(q -c "SELECT count(*) FROM f")" = "$committed" ] || fail "after a crash: $(q -c "SELECT count(*) FROM f") rows, $committed committed"
echo "after a crash: all $committed committed rows"
echo "ok"
