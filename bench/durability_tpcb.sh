#!/usr/bin/env bash
# pgbench TPC-B on pasv tables under each durability mode, in one run on one
# server (restarted cleanly between modes): unlogged (no log: the upper
# bound), engine_wal (RocksDB's WAL synced at commit as well: double
# logging), pasv (PostgreSQL's WAL only, flush flags). Scale S, C clients,
# T seconds, synchronous_commit SYNC (on by default; engine_wal syncs
# RocksDB's WAL only for synchronous commits). Prints TPS, latency, WAL bytes
# per transaction, and pasv's TPS relative to the other two.
# Note: in unlogged mode a transaction writes no WAL but its commit record,
# and PostgreSQL does not wait for the fsync of a transaction that wrote no
# other WAL: with SYNC=on, unlogged also saves the commit fsync.
# Usage: bench/durability_tpcb.sh [SCALE CLIENTS SECONDS SYNC]   (default 10 2 60 on)
set -euo pipefail
source "$(dirname "$0")/common.sh"
scale=${1:-10} clients=${2:-2} seconds=${3:-60} sync=${4:-on}
bench_start
machine_line
echo "pgbench TPC-B on pasv tables: scale $scale, $clients clients, $seconds s, synchronous_commit $sync"
declare -A TPS
for mode in ${PASV_BENCH_MODES:-unlogged engine_wal pasv}; do
  bench_restart_with "pasv.durability = $mode" "synchronous_commit = $sync"
  db=tpcb_$mode
  bench_psql -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
  bench_psql -d "$db" -c "CREATE EXTENSION IF NOT EXISTS pasv" -c "ALTER DATABASE $db SET default_table_access_method = pasv"
  PGOPTIONS="-c client_min_messages=error" "$PG_BIN/pgbench" -i -q -s "$scale" -h "$PASV_RUN" -p "$PASV_BENCH_PORT" -U postgres "$db" >/dev/null 2>&1
  bench_psql -d "$db" -c "CHECKPOINT"
  # pasv mode: let the replay worker create the slot first (until then commits flush).
  for _ in $(seq 1 100); do
    state=$(bench_psql -At -d "$db" -c "SELECT coalesce((SELECT slot_state FROM pasv.database_status WHERE datname = current_database()), 'none')")
    [ "$mode" != pasv ] || [ "$state" = ready ] && break
    sleep 0.2
  done
  lsn0=$(bench_psql -At -d "$db" -c "SELECT pg_current_wal_lsn()")
  out=$("$PG_BIN/pgbench" -n -c "$clients" -j "$clients" -T "$seconds" -h "$PASV_RUN" -p "$PASV_BENCH_PORT" -U postgres "$db" 2>&1)
  lsn1=$(bench_psql -At -d "$db" -c "SELECT pg_current_wal_lsn()")
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out")
  lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' <<<"$out")
  n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
  failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' <<<"$out")
  wal=$(bench_psql -At -d "$db" -c "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')")
  TPS[$mode]=$tps
  awk -v m="$mode" -v tps="$tps" -v lat="$lat" -v n="$n" -v f="$failed" -v wal="$wal" 'BEGIN {
    printf "%-10s tps %8.1f  latency %6.2f ms  transactions %7d (failed %s)  PostgreSQL WAL %6.0f bytes/transaction\n",
      m, tps, lat, n, f, wal / n }'
  bench_psql -c "DROP DATABASE $db" >/dev/null
done
[ -n "${TPS[pasv]:-}" ] && [ -n "${TPS[engine_wal]:-}" ] && [ -n "${TPS[unlogged]:-}" ] && awk -v p="${TPS[pasv]}" -v e="${TPS[engine_wal]}" -v u="${TPS[unlogged]}" 'BEGIN {
  printf "pasv / engine_wal = %.2fx   pasv / unlogged = %.2fx\n", p / e, p / u }'
