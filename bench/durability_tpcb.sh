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
  bench_tpcb_db "$db" pasv "$scale"
  case $mode in pasv | naive) bench_wait_slot "$db" ;; esac
  bench_tpcb_run "$db" "$clients" "$seconds" "$mode"
  TPS[$mode]=$BENCH_TPS
  bench_psql -c "DROP DATABASE $db" >/dev/null
done
[ -n "${TPS[pasv]:-}" ] && [ -n "${TPS[engine_wal]:-}" ] && [ -n "${TPS[unlogged]:-}" ] && awk -v p="${TPS[pasv]}" -v e="${TPS[engine_wal]}" -v u="${TPS[unlogged]}" 'BEGIN {
  printf "pasv / engine_wal = %.2fx   pasv / unlogged = %.2fx\n", p / e, p / u }'
