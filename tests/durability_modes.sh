#!/usr/bin/env bash
# The four durability modes (DESIGN §7) are real code paths. For each mode,
# on its own fresh cluster: write rows, flush some, write more, crash the
# server (pg_ctl -m immediate), and check what comes back:
#   pasv       every committed row, via partial replay (flushed rows skipped)
#   naive      every committed row, via replay of everything retained (nothing skipped)
#   engine_wal every committed row, via RocksDB's own WAL (no slot, no replay)
#   unlogged   rows survive a clean restart; a crash empties the tables; no pasv WAL messages
# and pasv mode with wal_level = replica (no slot possible): a WARNING with a
# HINT in the log, every commit flushes what it wrote, and a crash loses nothing.
# Usage: tests/durability_modes.sh PG_BIN HOST PORT DATADIR_PREFIX LOG_PREFIX
# (run as the server's OS user; clusters are created by the caller's init
# function, see scripts/test.sh). Exit 0 when every mode behaved.
set -euo pipefail
pg_bin=$1 host=$2 port=$3 data=$4 log=$5
psql() { "$pg_bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U postgres -d modes "$@"; }
fail() { echo "FAIL ($mode): $*"; exit 1; }
crash() {
  "$pg_bin/pg_ctl" -D "$data" -l "$log" -m immediate -w restart >/dev/null 2>&1 || fail "restart after the crash"
}
mode=$(sed -n "s/^pasv.durability = '\{0,1\}\([a-z_]*\)'\{0,1\}$/\1/p" "$data/pasv.conf" | tail -1)
wal_level=$("$pg_bin/psql" -X -At -h "$host" -p "$port" -U postgres -d postgres -c "SHOW wal_level")
echo "mode $mode, wal_level $wal_level"
expect_slot=ready
if [ "$wal_level" != logical ]; then expect_slot="failed (commits flush)"; fi
"$pg_bin/psql" -X -q -h "$host" -p "$port" -U postgres -d postgres -c "DROP DATABASE IF EXISTS modes" -c "CREATE DATABASE modes"
psql -c "CREATE EXTENSION pasv" -c "CREATE TABLE t (id int PRIMARY KEY, v text) USING pasv" -c "CREATE TABLE u (id int, v text) USING pasv"
if [ "$mode" = pasv ] || [ "$mode" = naive ]; then
  for _ in $(seq 1 200); do
    [ "$(psql -c "SELECT slot_state FROM pasv.database_status WHERE datname = 'modes'")" = "$expect_slot" ] && break
    sleep 0.1
  done
  [ "$(psql -c "SELECT slot_state FROM pasv.database_status WHERE datname = 'modes'")" = "$expect_slot" ] ||
    fail "the slot never became '$expect_slot'"
fi
if [ "$wal_level" != logical ]; then
  grep -q "WARNING:  pasv: cannot create the replication slot pasv_.*wal_level is below logical" "$log" ||
    fail "no WARNING about wal_level in the server log"
  grep -q "HINT:  pasv needs wal_level = logical" "$log" || fail "no HINT about wal_level in the server log"
fi
lsn0=$(psql -c "SELECT pg_current_wal_insert_lsn()")
psql -c "INSERT INTO t SELECT g, 'flushed' FROM generate_series(1, 1000) g" -c "SELECT pasv.flush()" >/dev/null
psql -c "INSERT INTO t SELECT g, 'memtable' FROM generate_series(1001, 1500) g" \
     -c "INSERT INTO u SELECT g, 'memtable' FROM generate_series(1, 300) g" \
     -c "UPDATE t SET v = 'updated' WHERE id % 100 = 0"
lsn1=$(psql -c "SELECT pg_current_wal_insert_lsn()")
messages=$("$pg_bin/pg_waldump" -p "$data/pg_wal" -s "$lsn0" -e "$lsn1" -r LogicalMessage 2>/dev/null | grep -c 'prefix "pasv"' || true)
echo "pasv WAL messages for the writes: $messages"
if [ "$mode" = unlogged ]; then
  [ "$messages" -eq 0 ] || fail "unlogged wrote $messages pasv messages"
  "$pg_bin/pg_ctl" -D "$data" -l "$log" -m fast -w restart >/dev/null 2>&1 || fail "clean restart"
  got=$(psql -c "SELECT (SELECT count(*) FROM t) || ' ' || (SELECT count(*) FROM u)")
  echo "after a clean restart: t u = $got"
  [ "$got" = "1500 300" ] || fail "a clean restart lost rows"
  crash
  got=$(psql -c "SELECT (SELECT count(*) FROM t) || ' ' || (SELECT count(*) FROM u)")
  echo "after a crash: t u = $got"
  [ "$got" = "0 0" ] || fail "unlogged tables kept rows through a crash"
  psql -c "INSERT INTO t VALUES (1, 'again')"
  [ "$(psql -c "SELECT count(*) FROM t")" = 1 ] || fail "writing after the crash"
  echo "ok"; exit 0
fi
[ "$messages" -gt 0 ] || fail "no pasv WAL messages"
crash
got=$(psql -c "SELECT (SELECT count(*) FROM t) || ' ' || (SELECT count(*) FROM u) || ' ' || (SELECT count(*) FROM t WHERE v = 'updated')")
echo "after a crash: t u updated = $got"
[ "$got" = "1500 300 15" ] || fail "expected 1500 300 15"
report=$(psql -c "SELECT coalesce(sum(replayed_ops), 0) || ' ' || coalesce(sum(skipped_ops), 0) FROM pasv.recovery_report")
slot=$(psql -c "SELECT slot_state FROM pasv.database_status WHERE datname = 'modes'")
echo "recovery report: replayed skipped = $report; slot: $slot"
read -r replayed skipped <<<"$report"
case $mode in
  pasv) if [ "$wal_level" != logical ]; then
    [ "$replayed" -eq 0 ] || fail "replayed without a slot"
    echo "ok"; exit 0
  fi
    [ "$skipped" -ge 1000 ] || fail "the 1000 flushed rows were not skipped"
    [ "$replayed" -ge 815 ] || fail "the 800 unflushed rows and 15 updates were not replayed" ;;
  naive)
    [ "$skipped" -eq 0 ] || fail "naive skipped $skipped operations"
    [ "$replayed" -ge 1815 ] || fail "naive did not replay everything retained" ;;
  engine_wal)
    [ "$replayed" -eq 0 ] && [ "$skipped" -eq 0 ] || fail "engine_wal replayed through the slot"
    [ "$slot" = "not needed" ] || fail "engine_wal kept a slot ($slot)"
    # An insert in flight at a crash reaches RocksDB's WAL (which survives
    # the crash) at once; its transaction id must be durable in PostgreSQL's
    # WAL first, or the first transaction after the crash gets the same id
    # and its commit revives the rows. The WAL writer is slowed down so that
    # only pasv's own flush can make the id durable.
    psql -c "ALTER SYSTEM SET wal_writer_delay = '10s'" -c "SELECT pg_reload_conf()" >/dev/null
    psql -c "BEGIN" -c "INSERT INTO t SELECT g, 'in flight' FROM generate_series(5001, 5050) g" -c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
    inflight=$!
    for _ in $(seq 1 100); do
      [ "$(psql -c "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'")" = 1 ] && break
      sleep 0.1
    done
    crash
    kill "$inflight" 2>/dev/null || true
    wait "$inflight" 2>/dev/null || true
    psql -c "INSERT INTO u VALUES (-1, 'first after the crash')" -c "INSERT INTO u VALUES (-2, 'second')"
    revived=$(psql -c "SELECT count(*) FROM t WHERE v = 'in flight'")
    echo "engine_wal: rows of the transaction in flight at the crash visible afterwards: $revived"
    [ "$revived" = 0 ] || fail "an aborted transaction's rows came back: its xid was reused"
    psql -c "ALTER SYSTEM RESET wal_writer_delay" -c "SELECT pg_reload_conf()" >/dev/null ;;
esac
if [ "$mode" = pasv ]; then
  # Bounded recovery: a table written once (cold) must not pin the WAL
  # forever; past pasv.max_recovery_lag pasv flushes the lagging tables.
  psql -c "ALTER SYSTEM SET pasv.max_recovery_lag = '16MB'" -c "SELECT pg_reload_conf()" >/dev/null
  psql -c "CREATE TABLE cold (id int) USING pasv" -c "CREATE TABLE hot (id int, pad text) USING pasv" -c "INSERT INTO cold VALUES (1)"
  [ "$(psql -c "SELECT unflushed FROM pasv.cf_status WHERE relation = 'cold'::regclass")" = t ] || fail "cold table not in memtable"
  for i in $(seq 1 8); do
    psql -c "INSERT INTO hot SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g"
  done
  for _ in $(seq 1 100); do
    [ "$(psql -c "SELECT unflushed FROM pasv.cf_status WHERE relation = 'cold'::regclass")" = f ] && break
    sleep 0.2
  done
  [ "$(psql -c "SELECT unflushed FROM pasv.cf_status WHERE relation = 'cold'::regclass")" = f ] ||
    fail "the cold table was never flushed past pasv.max_recovery_lag"
  grep -q "pasv: flushing table .*pasv.max_recovery_lag" "$log" || fail "no log line for the lag-bound flush"
  retained=$(psql -c "SELECT retained_wal_bytes FROM pasv.database_status WHERE datname = 'modes'")
  echo "bounded recovery: the cold table was flushed; WAL retained now $retained bytes"
fi
echo "ok"
