# Shared by the benchmarks: build and install pasv like scripts/start.sh,
# then run a dedicated, freshly initialised cluster with pinned settings.
# Benchmarks print figures; they assert nothing.
# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

PASV_BENCH_PORT=${PASV_BENCH_PORT:-54339}
BENCH_DATA=$PASV_HOME/bench/data
BENCH_LOG=$PASV_HOME/log/bench.log

bench_start() {
  setup_all
  if cluster_running "$BENCH_DATA"; then stop_cluster "$BENCH_DATA"; fi
  rm -rf "$BENCH_DATA"
  pasv_dir "$PASV_HOME/bench"
  init_cluster "$BENCH_DATA" "$PASV_BENCH_PORT"
  {
    echo "shared_buffers = '1GB'"
    echo "synchronous_commit = on"
    echo "max_wal_size = '8GB'"
    echo "checkpoint_timeout = '30min'"
    echo "autovacuum = off"
    echo "pasv.memtable_budget = '512MB'"
    # Heap keeps scale 10's tables in its 1 GB of buffers; pasv's row cache
    # gets half of that for the rows backends read without the engine.
    echo "pasv.row_cache_size = '512MB'"
    # PASV_BENCH_SETTINGS: more pasv.conf lines, to compare a setting.
    [ -z "${PASV_BENCH_SETTINGS:-}" ] || printf '%s\n' "$PASV_BENCH_SETTINGS"
  } >>"$BENCH_DATA/pasv.conf"
  start_cluster "$BENCH_DATA" "$BENCH_LOG"
  wait_ready "$PASV_BENCH_PORT"
  trap 'stop_cluster "$BENCH_DATA"' EXIT
  bench_psql -c "CREATE EXTENSION IF NOT EXISTS pasv" >/dev/null
}

bench_psql() {
  PGOPTIONS="-c client_min_messages=warning" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PASV_RUN" -p "$PASV_BENCH_PORT" -U postgres -d postgres "$@"
}

machine_line() {
  echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -sr); PostgreSQL $("$PG_CONFIG" --version)"
}

# bench_restart_with "SETTING = VALUE" ...: append settings to the bench
# cluster's pasv.conf and restart it (a clean shutdown: pasv.durability may
# change only then).
bench_restart_with() {
  local kv
  for kv in "$@"; do echo "$kv" >>"$BENCH_DATA/pasv.conf"; done
  start_cluster "$BENCH_DATA" "$BENCH_LOG" >/dev/null
  wait_ready "$PASV_BENCH_PORT" >/dev/null
}

# bench_crash_restart: pg_ctl -m immediate stop, then start; prints nothing.
bench_crash_restart() {
  as_pasv "$PG_BIN/pg_ctl" stop -D "$BENCH_DATA" -m immediate -w >/dev/null
  as_pasv "$PG_BIN/pg_ctl" start -D "$BENCH_DATA" -l "$BENCH_LOG" -w -t 120 >/dev/null
  wait_ready "$PASV_BENCH_PORT" >/dev/null
}

# bench_tpcb_db DB AM SCALE: a fresh database DB whose tables default to the
# access method AM, loaded by pgbench -i -s SCALE and checkpointed.
bench_tpcb_db() {
  local db=$1 am=$2 scale=$3
  bench_psql -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
  bench_psql -d "$db" -c "CREATE EXTENSION IF NOT EXISTS pasv" -c "ALTER DATABASE $db SET default_table_access_method = $am"
  PGOPTIONS="-c client_min_messages=error" "$PG_BIN/pgbench" -i -q -s "$scale" -h "$PASV_RUN" -p "$PASV_BENCH_PORT" -U postgres "$db" >/dev/null 2>&1
  bench_psql -d "$db" -c "CHECKPOINT"
}

# bench_tpcb_run DB CLIENTS SECONDS LABEL: pgbench TPC-B on DB; prints one
# line (TPS, latency, transactions, PostgreSQL WAL bytes per transaction) and
# leaves the TPS in BENCH_TPS.
bench_tpcb_run() {
  local db=$1 clients=$2 seconds=$3 label=$4 lsn0 lsn1 out lat n failed wal
  lsn0=$(bench_psql -At -d "$db" -c "SELECT pg_current_wal_lsn()")
  out=$("$PG_BIN/pgbench" -n -c "$clients" -j "$clients" -T "$seconds" -h "$PASV_RUN" -p "$PASV_BENCH_PORT" -U postgres "$db" 2>&1)
  lsn1=$(bench_psql -At -d "$db" -c "SELECT pg_current_wal_lsn()")
  BENCH_TPS=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out")
  lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' <<<"$out")
  n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
  failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' <<<"$out")
  wal=$(bench_psql -At -d "$db" -c "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')")
  awk -v m="$label" -v tps="$BENCH_TPS" -v lat="$lat" -v n="$n" -v f="$failed" -v wal="$wal" 'BEGIN {
    printf "%-10s tps %8.1f  latency %6.2f ms  transactions %7d (failed %s)  PostgreSQL WAL %6.0f bytes/transaction\n",
      m, tps, lat, n, f, wal / n }'
}

# bench_wait_slot DB: until DB's pasv replication slot is ready (before
# that, pasv commits flush what they wrote); at most 20 s.
bench_wait_slot() {
  local db=$1 state
  for _ in $(seq 1 100); do
    state=$(bench_psql -At -d "$db" -c "SELECT coalesce((SELECT slot_state FROM pasv.database_status WHERE datname = current_database()), 'none')")
    [ "$state" = ready ] && return 0
    sleep 0.2
  done
}
