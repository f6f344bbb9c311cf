#!/usr/bin/env bash
# pgbench TPC-B on heap and on pasv, one run on the same server: scale S,
# C clients, T seconds, synchronous_commit on. Prints TPS, average latency
# and WAL bytes per transaction for each.
# Usage: bench/pgbench_tpcb.sh [SCALE CLIENTS SECONDS]   (default 10 2 60)
set -euo pipefail
source "$(dirname "$0")/common.sh"
scale=${1:-10} clients=${2:-2} seconds=${3:-60}
bench_start
machine_line
echo "pgbench TPC-B: scale $scale, $clients clients, $seconds s, synchronous_commit on"
for am in heap pasv; do
  db=tpcb_$am
  bench_psql -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
  bench_psql -d "$db" -c "CREATE EXTENSION IF NOT EXISTS pasv" -c "ALTER DATABASE $db SET default_table_access_method = $am"
  PGOPTIONS="-c client_min_messages=error" "$PG_BIN/pgbench" -i -q -s "$scale" -h "$PASV_RUN" -p "$PASV_BENCH_PORT" -U postgres "$db" >/dev/null 2>&1
  bench_psql -d "$db" -c "CHECKPOINT"
  lsn0=$(bench_psql -At -d "$db" -c "SELECT pg_current_wal_lsn()")
  out=$("$PG_BIN/pgbench" -n -c "$clients" -j "$clients" -T "$seconds" -h "$PASV_RUN" -p "$PASV_BENCH_PORT" -U postgres "$db" 2>&1)
  lsn1=$(bench_psql -At -d "$db" -c "SELECT pg_current_wal_lsn()")
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out")
  lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' <<<"$out")
  n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
  failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' <<<"$out")
  wal=$(bench_psql -At -d "$db" -c "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')")
  awk -v am="$am" -v tps="$tps" -v lat="$lat" -v n="$n" -v f="$failed" -v wal="$wal" 'BEGIN {
    printf "%-5s tps %8.1f  latency %6.2f ms  transactions %7d (failed %s)  WAL %6.0f bytes/transaction\n",
      am, tps, lat, n, f, wal / n }'
done
