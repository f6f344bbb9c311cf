#!/usr/bin/env bash
# WAL retained behind a database's pasv slot under steady pgbench load, with
# and without a cold table (written once, then never), in one run. Samples
# pasv.database_status.retained_wal_bytes every 5 s and prints the series and
# its maximum. With a cold table, its unflushed write pins the global DPP
# until pasv.max_recovery_lag (set to LAG_MB) makes pasv flush it.
# Usage: bench/wal_retention.sh [SECONDS LAG_MB SCALE CLIENTS]   (default 60 32 10 2)
set -euo pipefail
source "$(dirname "$0")/common.sh"
seconds=${1:-60} lag=${2:-32} scale=${3:-10} clients=${4:-2}
bench_start
machine_line
bench_restart_with "pasv.durability = pasv" "pasv.max_recovery_lag = '${lag}MB'"
echo "pgbench TPC-B on pasv tables: scale $scale, $clients clients, $seconds s; pasv.max_recovery_lag = $lag MB"
for variant in no_cold_table cold_table; do
  db=retention_$variant
  bench_tpcb_db "$db" pasv "$scale"
  bench_wait_slot "$db"
  bench_psql -d "$db" -c "SELECT pasv.flush()" >/dev/null
  if [ "$variant" = cold_table ]; then
    bench_psql -d "$db" -c "CREATE TABLE cold (id int, v text)" -c "INSERT INTO cold VALUES (1, 'written once')"
  fi
  "$PG_BIN/pgbench" -n -c "$clients" -j "$clients" -T "$seconds" -h "$PASV_RUN" -p "$PASV_BENCH_PORT" -U postgres "$db" >/dev/null 2>&1 &
  pid=$!
  series="" max=0
  for _ in $(seq 1 $((seconds / 5))); do
    sleep 5
    mb=$(bench_psql -At -d "$db" -c "SELECT coalesce(round(retained_wal_bytes / 1048576.0, 1), 0) FROM pasv.database_status WHERE datname = current_database()")
    series="$series $mb"
    max=$(awk -v a="$max" -v b="$mb" 'BEGIN { print (b > a) ? b : a }')
  done
  wait "$pid" || true
  total=$(bench_psql -At -d "$db" -c "SELECT round(pg_current_wal_lsn() - '0/0'::pg_lsn) / 1048576")
  flushes=$(grep -c "pasv: flushing table .*max_recovery_lag" "$BENCH_LOG" || true)
  printf "%-14s retained WAL (MB, every 5 s):%s   max %s MB; lag-bound flushes so far in the log: %s\n" "$variant" "$series" "$max" "$flushes"
  bench_psql -c "DROP DATABASE $db" >/dev/null
done
