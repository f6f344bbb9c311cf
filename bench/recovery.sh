#!/usr/bin/env bash
# Recovery after a crash, pasv vs naive, in one run on one server: the same
# write workload (W MB of rows in small transactions, round-robin over
# TABLES pasv tables, with a memtable budget that makes RocksDB flush as it
# goes), then pg_ctl -m immediate, restart, and time until the database is
# recovered. Prints, per mode: unflushed memtable bytes at the crash, WAL
# decoded, operations replayed and skipped, recovery seconds (the replay
# worker's own figure and the wall time until a query got through).
# SETTLE seconds pass between the end of the load and the crash, so the
# slot's maintenance (once a second) has caught up as it does under a steady
# load (naive's slot moves only at full flushes, so this changes nothing there).
# Usage: bench/recovery.sh [WRITE_MB TABLES SETTLE]   (default 600 4 10)
set -euo pipefail
source "$(dirname "$0")/common.sh"
write_mb=${1:-600} tables=${2:-4} settle=${3:-10}
bench_start
machine_line
# Rows of ~200 bytes; 10 000 rows (~2 MB) per transaction.
rows_per_txn=10000
txns=$((write_mb * 1024 * 1024 / (rows_per_txn * 200)))
echo "workload: $txns transactions of $rows_per_txn rows (~200 B) over $tables tables (~$write_mb MB), memtable budget 128 MB, max_recovery_lag 4 GB; crash $settle s after the load"
declare -A SECS
for mode in naive pasv; do
  bench_restart_with "pasv.durability = $mode" "pasv.memtable_budget = '128MB'" "pasv.max_recovery_lag = '4GB'"
  db=recovery_$mode
  bench_psql -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
  bench_psql -d "$db" -c "CREATE EXTENSION IF NOT EXISTS pasv"
  for t in $(seq 1 "$tables"); do bench_psql -d "$db" -c "CREATE TABLE r$t (id bigint, pad text) USING pasv"; done
  bench_wait_slot "$db"
  {
    for i in $(seq 1 "$txns"); do
      t=$(( (i - 1) % tables + 1 ))
      echo "INSERT INTO r$t SELECT g, repeat('x', 180) FROM generate_series($(( (i - 1) * rows_per_txn )), $(( i * rows_per_txn - 1 ))) g;"
    done
  } | bench_psql -d "$db" >/dev/null
  sleep "$settle"
  read -r unflushed dirty < <(bench_psql -At -F ' ' -d "$db" -c "SELECT sum(memtable_bytes), count(*) FILTER (WHERE unflushed) FROM pasv.cf_status WHERE database_oid = (SELECT oid FROM pg_database WHERE datname = current_database())")
  retained=$(bench_psql -At -d "$db" -c "SELECT retained_wal_bytes FROM pasv.database_status WHERE datname = current_database()")
  t0=$(date +%s.%N)
  bench_crash_restart
  bench_psql -d "$db" -c "SELECT count(*) FROM r1" >/dev/null
  t1=$(date +%s.%N)
  read -r replayed skipped wal secs < <(bench_psql -At -F ' ' -d "$db" -c "SELECT sum(replayed_ops), sum(skipped_ops), max(wal_bytes), max(seconds) FROM pasv.recovery_report")
  total=$(bench_psql -At -d "$db" -c "SELECT $(for t in $(seq 1 "$tables"); do printf '(SELECT count(*) FROM r%s) + ' "$t"; done) 0")
  SECS[$mode]=$secs
  awk -v m="$mode" -v u="$unflushed" -v d="$dirty" -v r="$retained" -v w="$wal" -v rp="$replayed" -v sk="$skipped" \
      -v s="$secs" -v wall="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" -v rows="$total" -v want="$((txns * rows_per_txn))" 'BEGIN {
    printf "%-6s unflushed at crash %5.0f MB in %d CFs; WAL retained %5.0f MB, decoded %5.0f MB; ops replayed %8d, skipped %8d; recovery %6.2f s (crash to first query %6.2f s); rows %d of %d\n",
      m, u / 1048576, d, r / 1048576, w / 1048576, rp, sk, s, wall, rows, want }'
  bench_psql -c "DROP DATABASE $db" >/dev/null
done
awk -v p="${SECS[pasv]}" -v n="${SECS[naive]}" 'BEGIN { printf "recovery time pasv / naive = %.2f\n", p / n }'
