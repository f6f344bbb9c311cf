#!/usr/bin/env bash
# PostgreSQL 16's own core regression suite, run twice from the same build:
# on a cluster whose default_table_access_method is heap and on one whose
# default is pasv. Prints "heap: N of T", "pasv: M of T", the tests that fail
# on pasv only (with the known reason where tests/pg_core_regress.known gives
# one) and the server crashes.
#
# Usage: tests/pg_core_regress.sh [SUITE]
#   SUITE  a directory holding src/test/regress/ (parallel_schedule, sql/,
#          expected/, regress.c) and contrib/spi/{refint,autoinc}.c of
#          PostgreSQL 16: a PostgreSQL 16 source tree, or the copy CI finds
#          at ../shared/pg16. Default: $PASV_PG_SUITE.
# Knobs: PASV_CORE_PORT (default PASV_TEST_PORT + 20; +1 for the pasv run),
#        PASV_CORE_FLOOR (exit 1 when pasv passes fewer tests; default 0).
# Exit status: 1 when heap fails a test (the suite or the build is broken),
# a server crashed during the pasv run, or pasv passed fewer than the floor.
# The suite's files are never copied into the project.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

suite=${1:-${PASV_PG_SUITE:-}}
[ -n "$suite" ] || die "no suite given (argument or PASV_PG_SUITE; e.g. a PostgreSQL 16 source tree)"
suite=$(cd "$suite" && pwd -P)
regress=$suite/src/test/regress
[ -f "$regress/parallel_schedule" ] && [ -f "$regress/regress.c" ] ||
  die "$suite has no src/test/regress/parallel_schedule and regress.c"
port=${PASV_CORE_PORT:-$((PASV_TEST_PORT + 20))}
floor=${PASV_CORE_FLOOR:-0}
known=$PASV_ROOT/tests/pg_core_regress.known

setup_all
work=$PASV_HOME/core-regress
pasv_dir "$PASV_HOME"
pasv_dir "$work"
ensure_traversable "$regress" >/dev/null

# The three modules the suite loads, built against this server's headers.
modules=$work/modules
pasv_dir "$modules"
cc_module() {
  local out=$1 src=$2
  shift 2
  # shellcheck disable=SC2046 # pg_config prints flag lists meant to be split
  gcc $("$PG_CONFIG" --cflags) $("$PG_CONFIG" --cflags_sl) -I"$("$PG_CONFIG" --includedir-server)" "$@" \
    -shared -o "$modules/$out" "$src" || die "building $out from $src failed"
}
say "building regress.so, refint.so, autoinc.so against $("$PG_CONFIG" --includedir-server)"
cc_module regress.so "$regress/regress.c"
cc_module refint.so "$suite/contrib/spi/refint.c" -DREFINT_VERBOSE
cc_module autoinc.so "$suite/contrib/spi/autoinc.c"
pg_regress=$(dirname "$(dirname "$("$PG_CONFIG" --pgxs)")")/test/regress/pg_regress
[ -x "$pg_regress" ] || die "no pg_regress at $pg_regress (PostgreSQL's pgxs install is incomplete)"

# run_suite AM PORT: a fresh cluster with AM as the default table access
# method; leaves pg_regress's output in $work/AM.out and the server log in
# $work/AM.log.
run_suite() {
  local am=$1 port=$2 data=$work/$1-data out=$work/$1
  if [ -f "$data/PG_VERSION" ] && cluster_running "$data"; then stop_cluster "$data" >/dev/null; fi
  rm -rf "$data" "$out" "$work/$am.log" "$work/$am.out"
  pasv_dir "$out"
  init_cluster "$data" "$port" >/dev/null
  # As `make check`'s temporary instance: prepared_xacts needs two prepared
  # transactions; fsync off.
  {
    echo "max_prepared_transactions = 2"
    echo "fsync = off"
    echo "default_table_access_method = $am"
  } >>"$data/pasv.conf"
  start_cluster "$data" "$work/$am.log" >/dev/null
  wait_ready "$port" >/dev/null
  local load=()
  [ "$am" = pasv ] && load=(--load-extension=pasv)
  say "$am: running $regress/parallel_schedule (output: $out)"
  as_pasv "$pg_regress" --inputdir="$regress" --outputdir="$out" --bindir="$PG_BIN" --dlpath="$modules" \
    --schedule="$regress/parallel_schedule" --max-concurrent-tests=20 --max-connections=4 \
    --encoding=UTF8 --no-locale --host="$PASV_RUN" --port="$port" --user=postgres "${load[@]}" \
    >"$work/$am.out" 2>&1 || true
  stop_cluster "$data" >/dev/null 2>&1 || true
}

# Test names by outcome in pg_regress's TAP-like output ("ok 12 - name ...").
outcome() { sed -n "s/^$1 *[0-9]* *[-+] *\([a-z0-9_.]*\).*/\1/p" "$2" | sort -u; }

run_suite heap "$port"
run_suite pasv "$((port + 1))"

total=$(grep -cE '^(not )?ok ' "$work/heap.out" || true)
heap_ok=$(outcome ok "$work/heap.out" | wc -l)
pasv_ok=$(outcome ok "$work/pasv.out" | wc -l)
crashes=$(grep -c 'terminated by signal' "$work/pasv.log" || true)
echo "heap: $heap_ok of $total"
echo "pasv: $pasv_ok of $total"
echo "pasv server crashes: $crashes"
# A failing test whose output holds exactly the lines of an expected file,
# in another order: the same rows, returned in another order by a query
# without ORDER BY (pasv keeps an updated row at its rowid; heap puts the
# new version at the end of the page).
row_order_only() {
  local t=$1 result=$work/pasv/results/$1.out e
  [ -f "$result" ] || return 1
  for e in "$regress/expected/$t.out" "$regress/expected/${t}"_[0-9].out; do
    if [ -f "$e" ] && cmp -s <(LC_ALL=C sort "$e") <(LC_ALL=C sort "$result"); then return 0; fi
  done
  return 1
}
only=$(comm -13 <(outcome 'not ok' "$work/heap.out") <(outcome 'not ok' "$work/pasv.out"))
if [ -n "$only" ]; then
  order_only=0
  echo "failing on pasv only ($(wc -l <<<"$only")); diffs in $work/pasv/regression.diffs:"
  while read -r t; do
    reason=$(awk -v t="$t" '$1 == t { $1 = ""; sub(/^ /, ""); print; exit }' "$known" 2>/dev/null || true)
    if [ -z "$reason" ] && row_order_only "$t"; then
      reason="(row order only: the same output lines in another order)"
      order_only=$((order_only + 1))
    fi
    printf '  %-28s %s\n' "$t" "${reason:-(no accepted reason: a bug or a missing feature)}"
  done <<<"$only"
  echo "of these, $order_only differ only in row order"
fi
status=0
if [ "$heap_ok" -ne "$total" ] || [ "$total" -eq 0 ]; then
  echo "FAIL: heap must pass every test (see $work/heap.out)"
  status=1
fi
if [ "$crashes" -ne 0 ]; then
  grep 'terminated by signal' "$work/pasv.log" | head -5
  echo "FAIL: the pasv server crashed (log: $work/pasv.log)"
  status=1
fi
if [ "$pasv_ok" -lt "$floor" ]; then
  echo "FAIL: pasv passed $pasv_ok, fewer than PASV_CORE_FLOOR=$floor"
  status=1
fi
exit "$status"
