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
