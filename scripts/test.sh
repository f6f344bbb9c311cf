#!/usr/bin/env bash
# THE TEST COMMAND: the set-up of scripts/start.sh (tools, PostgreSQL 16, pasv
# built and installed), then
#   1. unit tests: cargo test --release --workspace
#   2. the wall: pasv_am never sees PostgreSQL, the extension never sees RocksDB
#   3. pg_regress (sql/schedule) on a fresh cluster with pasv preloaded
#   4. pg_regress (sql/schedule_nopreload) on a fresh cluster without it, and
#      (sql/schedule_engine_down) on one whose engine cannot open RocksDB
#   5. scripted tests on fresh clusters: the pgbench invariant, durability
#      modes, posted writes, scan read-ahead, base backup, disk full, crash ledger, and the
#      differential crash tester (tests/)
# The last line is `tests: N passed, M failed` (cargo unit tests + pg_regress
# tests; a step that fails without a test count, e.g. a build error or a broken
# wall, counts as one failure). Exits non-zero if M > 0.
#
# Inside a pg_regress test, `\!` commands see PASV_TEST_PGDATA, PASV_PG_BIN,
# PASV_TEST_LOG, PASV_TEST_DB (the test database), PGHOST, PGPORT and PGUSER,
# so a test can open a second session or restart its server:
#   \! "$PASV_PG_BIN/psql" -X -At -d "$PASV_TEST_DB" -c "SELECT ..."
#   \! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m fast -w restart > /dev/null
#   \c
set -uo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PASSED=0
FAILED=0
FAILED_STEPS=()
TEST_DIR=$PASV_HOME/test
TEST_DB=pasv_regress
TEST_CLUSTERS=("$TEST_DIR/data" "$TEST_DIR/nopreload" "$TEST_DIR/enginedown" "$TEST_DIR/pgbench" "$TEST_DIR/crash"
  "$TEST_DIR/modes-pasv" "$TEST_DIR/modes-naive" "$TEST_DIR/modes-engine_wal" "$TEST_DIR/modes-unlogged" "$TEST_DIR/modes-pasv-replica"
  "$TEST_DIR/diffcrash" "$TEST_DIR/backup" "$TEST_DIR/diskfull" "$TEST_DIR/posted" "$TEST_DIR/readahead")
t0=$SECONDS

# A step that failed without per-test counts: one failure.
step_failed() {
  FAILED=$((FAILED + 1))
  FAILED_STEPS+=("$1")
  printf 'FAILED: %s\n' "$1"
}

stop_test_clusters() {
  local d
  [ -n "${PG_BIN:-}" ] || return 0
  for d in "${TEST_CLUSTERS[@]}"; do
    if [ -f "$d/PG_VERSION" ] && cluster_running "$d"; then stop_cluster "$d"; fi
  done
}

finish() {
  local rc=$?
  trap - EXIT
  stop_test_clusters
  if [ "$rc" -ne 0 ] && [ "$FAILED" -eq 0 ]; then
    step_failed "stopped early (exit $rc; see the ERROR above)"
  fi
  if [ ${#FAILED_STEPS[@]} -gt 0 ]; then
    printf 'failed steps:\n'
    printf '  - %s\n' "${FAILED_STEPS[@]}"
  fi
  printf 'test.sh took %d s\n' $((SECONDS - t0))
  printf 'tests: %d passed, %d failed\n' "$PASSED" "$FAILED"
  [ "$FAILED" -eq 0 ] || exit 1
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM HUP

set -e # a set-up failure stops the run (finish reports it)
setup_all
set +e

# ---- 1. unit tests -------------------------------------------------------
say "unit tests: cargo test --release --workspace"
t=$SECONDS
ulog=$PASV_HOME/log/unit-tests.log
(cd "$PASV_ROOT" && cargo test --release --workspace) 2>&1 | tee "$ulog"
rc=${PIPESTATUS[0]}
read -r up uf < <(awk '/^test result: /{ for (i = 2; i <= NF; i++) { if ($i ~ /^passed;?$/) p += $(i-1); if ($i ~ /^failed;?$/) f += $(i-1) } } END { print p+0, f+0 }' "$ulog")
PASSED=$((PASSED + up))
FAILED=$((FAILED + uf))
if [ "$rc" -ne 0 ] && [ "$uf" -eq 0 ]; then
  step_failed "cargo test --release --workspace exited $rc (log: $ulog)"
fi
say "unit tests: $up passed, $uf failed ($((SECONDS - t)) s)"

# ---- 2. the wall ---------------------------------------------------------
say "the wall: pasv_am has no pgrx, the extension has no rocksdb"
wall_ok=1
if ! out=$(cd "$PASV_ROOT" && cargo tree -p pasv_am -e normal 2>&1); then
  printf '%s\n' "$out"
  step_failed "wall: cargo tree -p pasv_am -e normal failed"
  wall_ok=0
elif hits=$(grep -n 'pgrx' <<<"$out"); then
  printf '%s\n' "$hits"
  step_failed "wall: the engine crate pasv_am depends on pgrx (cargo tree -p pasv_am -e normal); it must never see PostgreSQL"
  wall_ok=0
fi
if ! out=$(cd "$PASV_ROOT" && cargo tree -p pasv -e normal --depth 1 2>&1); then
  printf '%s\n' "$out"
  step_failed "wall: cargo tree -p pasv -e normal --depth 1 failed"
  wall_ok=0
elif hits=$(grep -nE '(^|[^[:alnum:]_-])(rocksdb|librocksdb-sys) v' <<<"$out"); then
  printf '%s\n' "$hits"
  step_failed "wall: the extension pasv depends on RocksDB directly (cargo tree -p pasv -e normal --depth 1); only pasv_am may"
  wall_ok=0
fi
if hits=$(cd "$PASV_ROOT" && grep -rn 'rocksdb' src/); then
  printf '%s\n' "$hits"
  step_failed "wall: src/ mentions rocksdb (grep -rn rocksdb src/); the extension talks to RocksDB only through pasv_am"
  wall_ok=0
fi
[ "$wall_ok" = 1 ] && say "the wall holds"

# ---- 3./4. pg_regress ----------------------------------------------------
PG_REGRESS=$PG_PKGLIBDIR/pgxs/src/test/regress/pg_regress

# run_regress NAME DATADIR PORT SCHEDULE [--no-preload | --engine-broken]
# --engine-broken: $PGDATA/pasv is a plain file, so the engine cannot open
# RocksDB; backends must get a clear error rather than wait forever.
run_regress() {
  local name=$1 data=$2 port=$3 schedule=$4 flag=${5:-} init_flag=
  [ "$flag" = --no-preload ] && init_flag=--no-preload
  local log=$TEST_DIR/$name.log out=$TEST_DIR/out-$name rc p f t=$SECONDS
  if [ ! -f "$schedule" ]; then
    step_failed "pg_regress ($name): no schedule $schedule"
    return 0
  fi
  pasv_dir "$out"
  # pg_regress bails out of the whole schedule at a test with no expected
  # output. It looks in OUTPUTDIR/expected/ before INPUTDIR/expected/, so an
  # empty file there makes just that test fail, its whole output in the diff
  # and in results/NAME.out, ready to review and copy.
  local test
  pasv_dir "$out/expected"
  # shellcheck disable=SC2013 # a schedule line names several tests
  for test in $(sed -n 's/^test:[[:space:]]*//p' "$schedule"); do
    if [ ! -f "$PASV_ROOT/sql/$test.sql" ]; then
      note "no sql/$test.sql: $test (named in $(basename "$schedule")) will fail"
    elif [ ! -f "$PASV_ROOT/expected/$test.out" ]; then
      note "no expected/$test.out: $test will fail; review $out/results/$test.out and copy it to expected/"
      as_pasv touch "$out/expected/$test.out"
    fi
  done
  init_cluster "$data" "$port" "$init_flag"
  # Golden files count row versions: no autovacuum running behind the tests.
  echo "autovacuum = off" >>"$data/pasv.conf"
  # crash.sql checks that a memtable flush makes an asynchronous commit
  # durable: the WAL writer must not do it first.
  echo "wal_writer_delay = 10s" >>"$data/pasv.conf"
  if [ "$flag" = --engine-broken ]; then
    as_pasv sh -c "rm -rf '$data/pasv' && echo 'not a directory' > '$data/pasv'"
    echo "pasv.engine_start_timeout = 10" >>"$data/pasv.conf"
  fi
  start_cluster "$data" "$log"
  wait_ready "$port"
  say "pg_regress ($name): $schedule against port $port; output in $out"
  as_pasv env PASV_TEST_PGDATA="$data" PASV_PG_BIN="$PG_BIN" PASV_TEST_LOG="$log" \
    PASV_TEST_DB="$TEST_DB" PGHOST="$PASV_RUN" PGPORT="$port" PGUSER=postgres \
    "$PG_REGRESS" --bindir="$PG_BIN" --host="$PASV_RUN" --port="$port" --user=postgres \
    --dbname="$TEST_DB" --inputdir="$PASV_ROOT" --outputdir="$out" --schedule="$schedule" \
    2>&1 | tee "$out.txt"
  rc=${PIPESTATUS[0]}
  if [ -n "$(tail -c 1 "$out.txt")" ]; then echo; fi # "Bail out!" ends without a newline
  p=$(grep -cE '^[[:space:]]*ok [0-9]+' "$out.txt")
  f=$(grep -cE '^[[:space:]]*not ok [0-9]+' "$out.txt")
  PASSED=$((PASSED + p))
  FAILED=$((FAILED + f))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    step_failed "pg_regress ($name) exited $rc"
  fi
  if [ "$rc" -ne 0 ] || [ "$f" -gt 0 ]; then
    if [ -s "$out/regression.diffs" ]; then
      printf -- '---- %s/regression.diffs (first 200 lines) ----\n' "$out"
      head -n 200 "$out/regression.diffs"
    fi
    printf -- '---- server log %s (last 60 lines) ----\n' "$log"
    tail -n 60 "$log"
    printf -- '----\n'
  fi
  stop_cluster "$data"
  say "pg_regress ($name): $p passed, $f failed ($((SECONDS - t)) s)"
}

# run_on_fresh_cluster LABEL DATADIR PORT SETTINGS COMMAND...: a fresh
# cluster with SETTINGS (newline-separated) added to pasv.conf (and, if
# BEFORE_START names a function, that function called with DATADIR before the
# server starts), COMMAND run
# as the server's OS user and counted as one test; on failure the end of the
# server log (and of DATADIR/crash.log, where the crash ledger restarts the
# server) is printed.
run_on_fresh_cluster() {
  local label=$1 data=$2 port=$3 settings=$4 log f t=$SECONDS
  shift 4
  log=$data.log
  init_cluster "$data" "$port"
  if [ -n "$settings" ]; then printf '%s\n' "$settings" >>"$data/pasv.conf"; fi
  if [ -n "${BEFORE_START:-}" ]; then "$BEFORE_START" "$data"; fi
  start_cluster "$data" "$log"
  wait_ready "$port"
  if as_pasv "$@"; then
    PASSED=$((PASSED + 1))
    say "$label: passed ($((SECONDS - t)) s)"
  else
    FAILED=$((FAILED + 1))
    for f in "$log" "$data/crash.log"; do
      if [ -f "$f" ]; then
        printf -- '---- server log %s (last 60 lines) ----\n' "$f"
        tail -n 60 "$f"
      fi
    done
    say "$label: FAILED ($((SECONDS - t)) s)"
  fi
  stop_cluster "$data"
}

# tests/pgbench_invariant.sh: pgbench -i -s 10, then 8 clients for
# PASV_PGBENCH_SECONDS (60 by default); autovacuum visits the tables meanwhile.
run_pgbench_invariant() {
  local port=$1 seconds=${PASV_PGBENCH_SECONDS:-60}
  say "pgbench invariant on port $port (scale 10, 8 clients, $seconds s)"
  run_on_fresh_cluster "pgbench invariant" "$TEST_DIR/pgbench" "$port" \
    "max_connections = 50"$'\n'"autovacuum_naptime = 10" \
    "$PASV_ROOT/tests/pgbench_invariant.sh" "$PG_BIN" "$PASV_RUN" "$port" 10 8 "$seconds"
}

# tests/durability_modes.sh once per mode, each on its own cluster;
# pasv-replica is pasv with wal_level = replica, so no slot can exist.
run_durability_modes() {
  local port=$1 variant settings
  for variant in pasv naive engine_wal unlogged pasv-replica; do
    settings="pasv.durability = ${variant%-replica}"
    if [ "$variant" = pasv-replica ]; then settings+=$'\n'"wal_level = replica"; fi
    run_on_fresh_cluster "durability mode $variant" "$TEST_DIR/modes-$variant" "$port" "$settings" \
      "$PASV_ROOT/tests/durability_modes.sh" "$PG_BIN" "$PASV_RUN" "$port" "$TEST_DIR/modes-$variant" "$TEST_DIR/modes-$variant.log"
  done
}

# tests/crash_ledger.sh: kill -9 of the engine, a backend and the postmaster
# under load (6 cycles), then a crash during replay.
run_crash_ledger() {
  local port=$1
  run_on_fresh_cluster "crash ledger" "$TEST_DIR/crash" "$port" "max_connections = 50" \
    "$PASV_ROOT/tests/crash_ledger.sh" "$PG_BIN" "$PASV_RUN" "$port" "$TEST_DIR/crash" 6
}

# tests/diff_crash.sh: pasv tables against heap twins under the same
# transactions, checked after every crash (short mode: 4 seeds, 12 crashes).
run_diff_crash() {
  local port=$1
  ensure_traversable "$(readlink -f "$PASV_HOME/venv/bin/python")" # the driver runs as $PASV_USER
  run_on_fresh_cluster "differential crash test" "$TEST_DIR/diffcrash" "$port" "max_connections = 50" \
    "$PASV_ROOT/tests/diff_crash.sh" "$PG_BIN" "$PASV_RUN" "$port" "$TEST_DIR/diffcrash"
}

# tests/posted_writes.py: other sessions' unique checks and this session's
# reads see writes the engine has not applied yet (src/ipc/HOT_PATH.md).
run_posted_writes() {
  local port=$1
  ensure_traversable "$(readlink -f "$PASV_HOME/venv/bin/python")"
  run_on_fresh_cluster "posted writes" "$TEST_DIR/posted" "$port" "" \
    "$PASV_HOME/venv/bin/python" "$PASV_ROOT/tests/posted_writes.py" --host "$PASV_RUN" --port "$port"
}

# tests/read_ahead.py: sequential scans that read their next batch ahead
# return heap's rows while other sessions and their own transaction write
# between batches (src/ipc/HOT_PATH.md §15).
run_read_ahead() {
  local port=$1
  ensure_traversable "$(readlink -f "$PASV_HOME/venv/bin/python")"
  run_on_fresh_cluster "scan read-ahead" "$TEST_DIR/readahead" "$port" "" \
    "$PASV_HOME/venv/bin/python" "$PASV_ROOT/tests/read_ahead.py" --host "$PASV_RUN" --port "$port"
}

# tests/logical_replication.sh: a subscription receives a pasv table's
# changes under a random concurrent workload and across a publisher crash.
run_logical_replication() {
  local port=$1
  run_on_fresh_cluster "logical replication" "$TEST_DIR/logrep" "$port" "max_connections = 50" \
    "$PASV_ROOT/tests/logical_replication.sh" "$PG_BIN" "$PASV_RUN" "$port" "$TEST_DIR/logrep" "$TEST_DIR/logrep.log"
}

# tests/open_files.sh: 300 SST files in 100 tables, the server restarted under
# a soft limit of 256 open files.
run_open_files() {
  local port=$1
  run_on_fresh_cluster "many tables under a low open-file limit" "$TEST_DIR/files" "$port" "" \
    "$PASV_ROOT/tests/open_files.sh" "$PG_BIN" "$PASV_RUN" "$port" "$TEST_DIR/files" "$TEST_DIR/files.log"
}

# tests/base_backup.sh: a pg_basebackup copy refuses to serve pasv tables.
run_base_backup() {
  local port=$1
  run_on_fresh_cluster "base backup refused" "$TEST_DIR/backup" "$port" "" \
    "$PASV_ROOT/tests/base_backup.sh" "$PG_BIN" "$PASV_RUN" "$port" "$TEST_DIR/backup" "$((port + 1))"
}

# tests/disk_full.sh: pasv's store on a small filesystem (a 160 MB tmpfs)
# fills up. Mounting needs root; as another user the test is skipped.
DISK_FULL_STORE=$TEST_DIR/diskfull-store
store_on_small_fs() {
  ln -sfn "$DISK_FULL_STORE" "$1/pasv"
  chown -h "$PASV_USER:$PASV_USER" "$1/pasv"
}
run_disk_full() {
  local port=$1
  if ! is_root; then
    note "disk full test skipped: mounting a small filesystem needs root"
    return 0
  fi
  pasv_dir "$DISK_FULL_STORE"
  if ! mount -t tmpfs -o size=160m,uid="$(id -u "$PASV_USER")",mode=0700 pasv_disk_full "$DISK_FULL_STORE"; then
    step_failed "disk full: cannot mount a tmpfs on $DISK_FULL_STORE"
    return 0
  fi
  BEFORE_START=store_on_small_fs run_on_fresh_cluster "disk full" "$TEST_DIR/diskfull" "$port" "pasv.memtable_budget = '8MB'" \
    "$PASV_ROOT/tests/disk_full.sh" "$PG_BIN" "$PASV_RUN" "$port" "$TEST_DIR/diskfull" "$DISK_FULL_STORE"
  umount "$DISK_FULL_STORE"
}

if [ ! -x "$PG_REGRESS" ]; then
  step_failed "pg_regress not found at $PG_REGRESS"
else
  say "fresh test clusters under $TEST_DIR"
  stop_test_clusters
  if is_root && mountpoint -q "$DISK_FULL_STORE"; then umount "$DISK_FULL_STORE"; fi
  rm -rf "$TEST_DIR"
  pasv_dir "$TEST_DIR"
  ensure_traversable "$PASV_ROOT/sql"
  if ! as_pasv test -r "$PASV_ROOT/sql/schedule"; then
    step_failed "user $PASV_USER cannot read $PASV_ROOT/sql (pg_regress runs as that user)"
  else
    run_regress preload "$TEST_DIR/data" "$PASV_TEST_PORT" "$PASV_ROOT/sql/schedule"
    run_regress nopreload "$TEST_DIR/nopreload" "$((PASV_TEST_PORT + 1))" "$PASV_ROOT/sql/schedule_nopreload" --no-preload
    run_regress enginedown "$TEST_DIR/enginedown" "$((PASV_TEST_PORT + 2))" "$PASV_ROOT/sql/schedule_engine_down" --engine-broken
    run_pgbench_invariant "$((PASV_TEST_PORT + 3))"
    run_durability_modes "$((PASV_TEST_PORT + 4))"
    run_posted_writes "$((PASV_TEST_PORT + 10))"
    run_read_ahead "$((PASV_TEST_PORT + 12))"
    run_logical_replication "$((PASV_TEST_PORT + 13))"
    run_open_files "$((PASV_TEST_PORT + 11))"
    run_base_backup "$((PASV_TEST_PORT + 7))"
    run_disk_full "$((PASV_TEST_PORT + 9))"
    run_crash_ledger "$((PASV_TEST_PORT + 5))"
    run_diff_crash "$((PASV_TEST_PORT + 6))"
  fi
fi
