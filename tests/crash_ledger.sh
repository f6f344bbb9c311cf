#!/usr/bin/env bash
# kill -9 under load, checked against a client-side ledger (DESIGN §9,
# invariants 1-5). Against a running server (shared_preload_libraries = pasv,
# wal_level = logical), in database pasv_crash with default_table_access_method
# = pasv, each cycle:
#   * writes one row to some of three cold tables (uneven write rates), then
#     starts pgbench (-c 4) and two "ledger clients": psql processes running
#     autocommit INSERTs into ledger, each followed by `\echo acked C N`, so
#     every `acked` line in their output is an acknowledged commit;
#   * in odd cycles flushes pgbench_accounts once mid-load (what RocksDB does
#     by itself when a hot table's memtable fills, at this small scale it does
#     not within seconds), while the cold tables hold the slot back;
#   * after 2-6 s kills -9 one victim, in turn: the pasv engine worker, a
#     pgbench backend, the postmaster (then restarts the server);
#   * once the server is back, checks that every acked ledger row is there,
#     that unacked rows are at most the one in-flight INSERT per client, the
#     pgbench invariant sum(abalance) = sum(tbalance) = sum(bbalance) =
#     sum(delta) with 200000 accounts, the exact rows of the cold tables, and
#     prints pasv.recovery_report.
# Over all cycles, some recovery must have replayed and some skipped
# operations. A last cycle crashes during replay ($PGDATA/pasv_crash_point:
# the replay worker aborts the server after 3 applied messages) and checks
# the same after the second, complete replay.
# Runs as the OS user of the server (it kills its processes and restarts it
# with pg_ctl; after a postmaster kill the server logs to $PGDATA/crash.log).
# Usage: tests/crash_ledger.sh PG_BIN HOST PORT PGDATA [CYCLES]
# Exit 0 when everything held; prints what it checked.
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 PG_BIN HOST PORT PGDATA [CYCLES]" >&2
  exit 2
fi
pg_bin=$1 host=$2 port=$3 cycles=${5:-6}
pgdata=$(cd "$4" && pwd -P)
cd / # our processes must not share the server's working directory (see cluster_pids)
db=pasv_crash
scale=2
accounts_expected=$((scale * 100000))
t_start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/crash_ledger.XXXXXX")
load_pids=()
crash_point_armed=0

cleanup() {
  local p
  for p in "${load_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # Stopped early: leave no crash point behind for the server's next recovery.
  if [ "$crash_point_armed" = 1 ]; then rm -f "$pgdata/pasv_crash_point"; fi
  rm -rf "$work"
}
trap cleanup EXIT

# psql for checks: bounded (statement_timeout, and timeout for connecting).
q() { PGOPTIONS='-c statement_timeout=60s' timeout 90 "$pg_bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U postgres -d "$db" "$@"; }
ready() { "$pg_bin/pg_isready" -q -h "$host" -p "$port" -U postgres -d postgres; }

failures=0
fail() {
  printf 'FAIL: %s\n' "$*"
  failures=$((failures + 1))
}

# A process exists and is not a zombie.
alive() {
  local st
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "${st%% *}" != Z ]
}

# Every live process of the cluster: postgres processes keep PGDATA as their
# working directory (this script and its clients work from /).
cluster_pids() {
  local p
  for p in $(ps -u "$(id -u)" -o pid=); do
    if [ "$(readlink "/proc/$p/cwd" 2>/dev/null)" = "$pgdata" ] && alive "$p"; then echo "$p"; fi
  done
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

postmaster_pid() { head -n 1 "$pgdata/postmaster.pid" 2>/dev/null || true; }

# The file the running server logs to (its stderr), for the pasv lines.
server_log() {
  local pm log
  pm=$(postmaster_pid)
  log=$(readlink "/proc/$pm/fd/2" 2>/dev/null || true)
  if [ -f "$log" ]; then echo "$log"; else echo "$pgdata/crash.log"; fi
}
file_size() { stat -c %s "$1" 2>/dev/null || echo 0; }

# wait_gone SECONDS PID...: until none of the PIDs is alive (bounded).
wait_gone() {
  local limit=$1 p left
  shift
  local deadline=$((SECONDS + limit))
  while :; do
    left=
    for p in "$@"; do if alive "$p"; then left="$left $p"; fi; done
    [ -z "$left" ] && return 0
    if ((SECONDS >= deadline)); then
      echo "still running after $limit s:$left"
      return 1
    fi
    sleep 0.2
  done
}

# wait_reaped SECONDS PID: until PID has left the process table. A new
# postmaster refuses to start while the pid in postmaster.pid exists, even as
# a zombie waiting for init to reap it.
wait_reaped() {
  local deadline=$((SECONDS + $1))
  while [ -e "/proc/$2" ]; do
    if ((SECONDS >= deadline)); then
      echo "pid $2 still in the process table after $1 s: $(ps -o stat=,args= -p "$2" || true)"
      return 1
    fi
    sleep 0.2
  done
}

# Server accepts connections, the first touch of a pasv table came back (it
# waits for pasv's recovery of the database) and the database is not
# recovering. Bounded: 120 s.
wait_recovered() {
  local deadline=$((SECONDS + 120)) rec
  while ((SECONDS < deadline)); do
    if ready && q -c "SELECT count(*) FROM ledger" >/dev/null 2>&1; then
      rec=$(q -c "SELECT recovering FROM pasv.database_status WHERE datname = current_database()" 2>/dev/null || true)
      if [ "$rec" = f ]; then return 0; fi
    fi
    sleep 0.5
  done
  return 1
}

start_server() {
  local log=$pgdata/crash.log
  if ! "$pg_bin/pg_ctl" start -D "$pgdata" -l "$log" -w -t 60 >"$work/pg_ctl.out" 2>&1; then
    cat "$work/pg_ctl.out"
    tail -n 40 "$log"
    fail "pg_ctl start failed"
    exit 1
  fi
}

# The server log text of the current cycle: LOG from byte OFF, and, once a
# restarted server logs to $PGDATA/crash.log, that file from byte CRASH_OFF
# (the main loop sets the three before each crash).
cycle_log_text() {
  tail -c +"$((off + 1))" "$log" 2>/dev/null || true
  if [ "$log" != "$pgdata/crash.log" ] && [ "$(server_log)" = "$pgdata/crash.log" ]; then
    tail -c +"$((crash_off + 1))" "$pgdata/crash.log" 2>/dev/null || true
  fi
}

# pasv's lines of interest in this cycle's server log.
show_cycle_log() {
  local lines
  lines=$(cycle_log_text |
    grep -E 'pasv engine (ready|stopped)|pasv recovery of database [0-9]+ done|crash point|PANIC|TRAP|pasv.*(ERROR|WARNING)|(ERROR|WARNING|FATAL):.*pasv' |
    grep -v 'terminating connection because of crash' || true)
  if [ -n "$lines" ]; then printf '    log: %s\n' "${lines//$'\n'/$'\n'    log: }"; fi
}

# ---- set-up --------------------------------------------------------------
echo "set-up: database $db (pasv by default), pgbench -i -s $scale, ledger, cold1..cold3"
"$pg_bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U postgres -d postgres \
  -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
q -c "CREATE EXTENSION pasv" -c "ALTER DATABASE $db SET default_table_access_method = pasv"
if ! "$pg_bin/pgbench" -i -q -s "$scale" -h "$host" -p "$port" -U postgres "$db" >"$work/init.out" 2>&1; then
  cat "$work/init.out"
  fail "pgbench -i failed"
  exit 1
fi
q -c "CREATE TABLE ledger (client int, n int, PRIMARY KEY (client, n))"
declare -A cold_rows cold_next
for t in cold1 cold2 cold3; do
  q -c "CREATE TABLE $t (id int PRIMARY KEY, v text)" \
    -c "INSERT INTO $t SELECT g, '$t setup ' || g FROM generate_series(1, 5) g"
  cold_rows[$t]="1:$t setup 1,2:$t setup 2,3:$t setup 3,4:$t setup 4,5:$t setup 5"
  cold_next[$t]=6
done
ams=$(q -c "SELECT string_agg(c.relname || '=' || a.amname, ' ' ORDER BY c.relname) FROM pg_class c JOIN pg_am a ON a.oid = c.relam
             WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace")
echo "tables: $ams"
if grep -q "=heap" <<<"$ams"; then fail "a table is not pasv"; exit 1; fi
dboid=$(q -c "SELECT oid FROM pg_database WHERE datname = current_database()")
has_flush_table=$(q -c "SELECT count(*) FROM pg_proc WHERE proname = 'flush_table' AND pronamespace = 'pasv'::regnamespace")
# Until the database's slot is ready every commit flushes what it wrote and a
# crash replays nothing: wait for it (bounded).
deadline=$((SECONDS + 60))
until [ "$(q -c "SELECT slot_state FROM pasv.database_status WHERE datname = current_database()")" = ready ]; do
  if ((SECONDS >= deadline)); then fail "the replication slot of $db is not ready after 60 s"; exit 1; fi
  sleep 0.2
done
echo "database $db (oid $dboid): slot ready; set-up took $((SECONDS - t_start)) s"

# ---- one cycle -----------------------------------------------------------
total_checked=0 any_replayed=0 any_skipped=0

# write_cold CYCLE: cold1 every cycle, cold2 every other, cold3 every third.
write_cold() {
  local c=$1 t every id
  for t in cold1 cold2 cold3; do
    every=${t#cold}
    ((c % every == 0)) || continue
    id=${cold_next[$t]}
    q -c "INSERT INTO $t VALUES ($id, '$t cycle $c')"
    cold_rows[$t]="${cold_rows[$t]},$id:$t cycle $c"
    cold_next[$t]=$((id + 1))
  done
}

# start_load CYCLE SECONDS: pgbench and the two ledger clients, in the background.
start_load() {
  local c=$1 seconds=$2 client base
  load_pids=()
  "$pg_bin/pgbench" -n -c 4 -j 2 -T "$seconds" -h "$host" -p "$port" -U postgres "$db" >"$work/pgbench.$c" 2>&1 &
  pgbench_pid=$!
  load_pids+=("$pgbench_pid")
  ledger_pids=()
  for client in 1 2; do
    base=$((c * 1000000))
    awk -v c="$client" -v s="$((base + 1))" -v e="$((base + 200000))" \
      'BEGIN { for (i = s; i <= e; i++) printf "INSERT INTO ledger VALUES (%d, %d);\n\\echo acked %d %d\n", c, i, c, i }' |
      "$pg_bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U postgres -d "$db" \
        >>"$work/ledger_$client.txt" 2>"$work/ledger_$client.err.$c" &
    ledger_pids+=($!)
    load_pids+=($!)
  done
}

# Every load process must still run when the victim is killed.
check_load_alive() {
  local p ok=1 client
  alive "$pgbench_pid" || { fail "pgbench ended before the crash:"; tail -n 20 "$work/pgbench.$1"; ok=0; }
  for client in 1 2; do
    p=${ledger_pids[$((client - 1))]}
    alive "$p" || { fail "ledger client $client ended before the crash:"; tail -n 5 "$work/ledger_$client.err.$1"; ok=0; }
  done
  [ "$ok" = 1 ]
}

# The load ends by itself once the server is gone (bounded: 30 s, then TERM).
wait_load() {
  local p
  if ! wait_gone 30 "${load_pids[@]}" >/dev/null; then
    echo "    load processes still running 30 s after the crash; terminating them"
    for p in "${load_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  fi
  for p in "${load_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  load_pids=()
}

# kill_victim CYCLE KIND: kill -9 one process; restart the server if it was the postmaster.
kill_victim() {
  local c=$1 kind=$2 pm victim old
  pm=$(postmaster_pid)
  case $kind in
    engine)
      victim=$(ps -o pid=,args= --ppid "$pm" | awk '/pasv engine/ { print $1; exit }')
      ;;
    backend)
      victim=$(q -c "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'pgbench'
                       AND backend_type = 'client backend' ORDER BY state = 'active' DESC, pid LIMIT 1")
      ;;
    postmaster)
      victim=$pm
      ;;
  esac
  if [ -z "$victim" ]; then fail "cycle $c: no $kind process found to kill"; return 1; fi
  old=$(cluster_pids)
  kill_epoch=$(date +%s)
  kill -9 "$victim"
  echo "    kill -9 $kind (pid $victim)"
  if [ "$kind" = postmaster ]; then
    # Its children notice and exit; only then may a new postmaster start.
    # shellcheck disable=SC2086 # one pid per word
    if ! out=$(wait_gone 60 $old); then fail "cycle $c: processes of the killed cluster: $out"; return 1; fi
    if ! out=$(wait_reaped 30 "$pm"); then fail "cycle $c: the killed postmaster: $out"; return 1; fi
    start_server
    echo "    old cluster gone; restarted with pg_ctl start (log: $pgdata/crash.log)"
  else
    # Once the postmaster reaped its child it is in crash restart.
    if ! out=$(wait_gone 30 "$victim"); then fail "cycle $c: the killed $kind: $out"; return 1; fi
  fi
}

# verify LABEL: every check after a recovery; returns 1 if one failed.
verify() {
  local label=$1 before=$failures out
  local t0=$SECONDS
  if ! wait_recovered; then
    fail "$label: the server did not come back (or $db did not recover) within 120 s"
    return 1
  fi
  echo "    server back and $db recovered in $((SECONDS - t0)) s"
  cat "$work"/ledger_*.txt 2>/dev/null | awk '$1 == "acked" && NF == 3 { print $2 "\t" $3 }' >"$work/acked.tsv"
  out=$(q -F ' ' <<SQL
CREATE TEMP TABLE acked (client int, n int) USING heap;
\copy acked FROM '$work/acked.tsv'
CREATE TEMP TABLE unacked USING heap AS
  SELECT l.client, l.n FROM ledger l WHERE NOT EXISTS (SELECT 1 FROM acked a WHERE a.client = l.client AND a.n = l.n);
SELECT 'acked', count(*) FROM acked;
SELECT 'missing', count(*), coalesce(string_agg(client || '/' || n, ' ' ORDER BY client, n) FILTER (WHERE r <= 10), '-')
  FROM (SELECT a.*, row_number() OVER (ORDER BY client, n) r FROM acked a
         WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.client = a.client AND l.n = a.n)) m;
-- An unacked row may only be the INSERT in flight at the crash: the one
-- right after the last acked row of its client in its cycle.
SELECT 'unacked', count(*), count(*) FILTER (WHERE u.n <> coalesce(
         (SELECT max(a.n) FROM acked a WHERE a.client = u.client AND a.n / 1000000 = u.n / 1000000),
         u.n / 1000000 * 1000000) + 1),
       coalesce(string_agg(u.client || '/' || u.n, ' ' ORDER BY u.client, u.n), '-')
  FROM unacked u;
SET enable_indexscan = off; SET enable_bitmapscan = off;
SELECT 'seqcount', count(*) FROM ledger;
RESET enable_indexscan; RESET enable_bitmapscan; SET enable_seqscan = off;
SELECT 'idxcount', count(*) FROM ledger WHERE client BETWEEN 1 AND 2;
RESET enable_seqscan;
SELECT 'sums', (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(tbalance) FROM pgbench_tellers),
       (SELECT sum(bbalance) FROM pgbench_branches), (SELECT coalesce(sum(delta), 0) FROM pgbench_history),
       (SELECT count(*) FROM pgbench_history), (SELECT count(*) FROM pgbench_accounts);
SELECT 'cold1', coalesce(string_agg(id || ':' || v, ',' ORDER BY id), '') FROM cold1;
SELECT 'cold2', coalesce(string_agg(id || ':' || v, ',' ORDER BY id), '') FROM cold2;
SELECT 'cold3', coalesce(string_agg(id || ':' || v, ',' ORDER BY id), '') FROM cold3;
SELECT 'report', coalesce(sum(replayed_ops), 0), coalesce(sum(skipped_ops), 0),
       coalesce(string_agg(coalesce(relation::text, relfilenumber::text) || '=' || replayed_ops || '/' || skipped_ops, ' '
                           ORDER BY relation::text) FILTER (WHERE replayed_ops + skipped_ops > 0), '-')
  FROM pasv.recovery_report;
SELECT 'fresh', (SELECT modification >= to_timestamp($kill_epoch) FROM pg_stat_file('pasv_recovery/$dboid.tsv', true));
SQL
  ) || {
    echo "$out"
    fail "$label: the checking queries failed"
    return 1
  }
  local acked missing missing_list unacked bad unacked_list seqc idxc a t b h hn nacc report_r report_s report_rels fresh
  read -r _ acked < <(grep '^acked ' <<<"$out")
  read -r _ missing missing_list < <(grep '^missing ' <<<"$out")
  read -r _ unacked bad unacked_list < <(grep '^unacked ' <<<"$out")
  read -r _ seqc < <(grep '^seqcount ' <<<"$out")
  read -r _ idxc < <(grep '^idxcount ' <<<"$out")
  read -r _ a t b h hn nacc < <(grep '^sums ' <<<"$out")
  read -r _ report_r report_s report_rels < <(grep '^report ' <<<"$out")
  read -r _ fresh < <(grep '^fresh ' <<<"$out")

  echo "    ledger: $acked acked commits checked, $missing missing; $unacked rows committed but never acked over all cycles ($unacked_list), $bad of them not the INSERT in flight at a crash"
  total_checked=$acked
  [ "$missing" = 0 ] || fail "$label: $missing acknowledged commits lost, e.g. (client/n) $missing_list"
  [ "$bad" = 0 ] || fail "$label: $bad unacked ledger rows are not the in-flight INSERT of their client: $unacked_list"
  [ "$seqc" = "$idxc" ] || fail "$label: ledger has $seqc rows by sequential scan, $idxc by its primary key index"
  echo "    pgbench: sum(abalance)=$a sum(tbalance)=$t sum(bbalance)=$b sum(delta)=$h history rows=$hn accounts=$nacc"
  if [ "$a" != "$t" ] || [ "$t" != "$b" ] || [ "$b" != "$h" ]; then fail "$label: pgbench balances disagree"; fi
  [ "$nacc" = "$accounts_expected" ] || fail "$label: $nacc accounts, expected $accounts_expected"
  local tb got
  for tb in cold1 cold2 cold3; do
    got=$(grep "^$tb " <<<"$out" | cut -d' ' -f2-)
    if [ "$got" != "${cold_rows[$tb]}" ]; then
      fail "$label: $tb holds [$got], expected [${cold_rows[$tb]}]"
    fi
  done
  echo "    cold tables: cold1..cold3 hold $((cold_next[cold1] - 1))/$((cold_next[cold2] - 1))/$((cold_next[cold3] - 1)) rows, exactly as written"
  echo "    recovery report: replayed_ops=$report_r skipped_ops=$report_s ($report_rels)"
  # Did the engine need recovery? (Its "pasv engine ready" line says; the
  # last one counts.) A crash that left RocksDB closed cleanly has nothing
  # to replay and leaves the previous report in place.
  local start_mode
  start_mode=$(cycle_log_text | grep 'pasv engine ready:' | tail -n 1 | awk -F', ' '{ print $NF }')
  case $start_mode in
    "clean start")
      echo "    the engine restarted clean (RocksDB was flushed and closed before the crash ended it): nothing to replay; the report above is an earlier one"
      [ "$fresh" != t ] || fail "$label: a clean engine start, yet a new recovery report"
      ;;
    *)
      if [ -z "$start_mode" ]; then echo "    (no 'pasv engine ready' line found in the server log $(server_log))"; fi
      [ "$fresh" = t ] || fail "$label: pasv.recovery_report is not from a recovery after this crash (pasv_recovery/$dboid.tsv older than the kill; engine: ${start_mode:-?})"
      ((report_r > 0)) && any_replayed=1
      ((report_s > 0)) && any_skipped=1
      ;;
  esac
  [ "$failures" = "$before" ]
}

on_failure() {
  local log
  log=$(server_log)
  echo "---- server log $log (last 40 lines) ----"
  tail -n 40 "$log" || true
  echo "----"
  echo "crash_ledger.sh: FAILED after $((SECONDS - t_start)) s"
  exit 1
}

victims=(engine backend postmaster)
for ((c = 1; c <= cycles; c++)); do
  kind=${victims[$(((c - 1) % 3))]}
  delay=$((2 + RANDOM % 5))
  echo "cycle $c/$cycles: load, kill -9 the $kind after $delay s"
  write_cold "$c"
  log=$(server_log)
  off=$(file_size "$log")
  crash_off=$(file_size "$pgdata/crash.log")
  start_load "$c" 30
  t_load=$(now_ms)
  if ((c % 2 == 1)); then
    sleep 1
    if [ "$has_flush_table" = 1 ]; then
      if q -c "SELECT pasv.flush_table('pgbench_accounts'::regclass)" >/dev/null; then echo "    flushed pgbench_accounts mid-load"; else fail "cycle $c: pasv.flush_table failed"; fi
    else
      if q -c "SELECT pasv.flush()" >/dev/null; then echo "    flushed all pasv tables mid-load (no pasv.flush_table)"; else fail "cycle $c: pasv.flush failed"; fi
    fi
  fi
  left=$((delay * 1000 - ($(now_ms) - t_load)))
  if ((left > 0)); then sleep "$((left / 1000)).$(printf '%03d' $((left % 1000)))"; fi
  check_load_alive "$c" || on_failure
  kill_victim "$c" "$kind" || on_failure
  wait_load
  processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$work/pgbench.$c")
  echo "    pgbench processed ${processed:-?} transactions before the crash"
  verify "cycle $c" || { show_cycle_log; on_failure; }
  show_cycle_log
done

# ---- crash during replay -------------------------------------------------
c=$((cycles + 1))
echo "cycle $c (last): 5 s of load, then pg_ctl -m immediate stop with the crash point replay_after_messages=3"
write_cold "$c"
start_load "$c" 5
sleep 1
if [ "$has_flush_table" = 1 ]; then q -c "SELECT pasv.flush_table('pgbench_accounts'::regclass)" >/dev/null || fail "cycle $c: pasv.flush_table failed"; fi
# pgbench ends by itself after 5 s (bounded wait), the ledger clients run on.
wait_gone 30 "$pgbench_pid" >/dev/null || fail "cycle $c: pgbench -T 5 still running after 30 s"
pgbench_rc=0
wait "$pgbench_pid" || pgbench_rc=$?
grep -E "number of (transactions actually processed|failed transactions)" "$work/pgbench.$c" | sed 's/^/    pgbench: /'
[ "$pgbench_rc" = 0 ] || { tail -n 20 "$work/pgbench.$c"; fail "cycle $c: pgbench exited $pgbench_rc"; }
failed_tx=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$work/pgbench.$c")
[ "${failed_tx:-x}" = 0 ] || fail "cycle $c: ${failed_tx:-?} failed pgbench transactions"
for client in 1 2; do
  alive "${ledger_pids[$((client - 1))]}" || { tail -n 5 "$work/ledger_$client.err.$c"; fail "cycle $c: ledger client $client ended before the crash"; }
done
((failures == 0)) || on_failure
crash_point_armed=1
echo "replay_after_messages=3" >"$pgdata/pasv_crash_point"
crash_log=$pgdata/crash.log
log=$(server_log)
off=$(file_size "$log")
crash_off=$(file_size "$crash_log")
old=$(cluster_pids)
kill_epoch=$(date +%s)
"$pg_bin/pg_ctl" stop -D "$pgdata" -m immediate -w -t 60 >/dev/null || { fail "pg_ctl -m immediate stop failed"; on_failure; }
# shellcheck disable=SC2086 # one pid per word
out=$(wait_gone 60 $old) || { fail "cycle $c: processes of the stopped cluster: $out"; on_failure; }
wait_load
start_server
echo "    stopped (immediate) and started again (log: $crash_log)"
verify "cycle $c" || { show_cycle_log; on_failure; }
show_cycle_log
reached=$(tail -c +"$((crash_off + 1))" "$crash_log" | grep -c 'crash point reached' || true)
done_after=$(tail -c +"$((crash_off + 1))" "$crash_log" | sed -n '/crash point reached/,$p' | grep -c "pasv recovery of database $dboid done" || true)
echo "    server log: 'crash point reached' $reached time(s); recoveries of $dboid done after it: $done_after"
[ "$reached" = 1 ] || fail "cycle $c: 'crash point reached' logged $reached times, expected once"
[ "$done_after" -ge 1 ] || fail "cycle $c: no completed recovery of database $dboid after the crash point"
if [ -e "$pgdata/pasv_crash_point" ]; then
  fail "cycle $c: $pgdata/pasv_crash_point is still there (no recovery read it)"
fi
((failures == 0)) || on_failure

# ---- over all cycles ------------------------------------------------------
[ "$any_replayed" = 1 ] || fail "no recovery replayed any operation"
[ "$any_skipped" = 1 ] || fail "no recovery skipped any operation (partial recovery never skipped work)"
((failures == 0)) || on_failure
echo "crash ledger holds: $cycles kill -9 cycles and a crash during replay, $total_checked acknowledged commits checked; some recovery replayed and some skipped operations"
echo "crash_ledger.sh took $((SECONDS - t_start)) s"
