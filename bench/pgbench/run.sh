#!/usr/bin/env bash
# The pasv benchmark suite: heap and pasv on one freshly initialised server
# with pinned settings, interleaved run by run, ratios printed (pasv/heap;
# above 1 means pasv is faster or writes less). It asserts nothing.
#
#   bench/pgbench/run.sh [--quick] [--sections LIST]
#
# Sections (default: all, in this order):
#   tpcb     pgbench TPC-B, scale 10, 2 and 8 clients; select-only (-S);
#            a 100-row range-sum script; single-client latency
#   bulk     INSERT ... SELECT of N rows with and without a primary key,
#            UPDATE and DELETE of 10 %, COPY in, count(*) and sum(); three
#            rounds on fresh tables, the median ratio of each step
#   tpcc     the TPC-C-like workload of bench/pgbench/tpcc (load, mix, check),
#            then again on a fresh load with prepared statements (-M prepared)
#   wal      PostgreSQL WAL bytes per TPC-B transaction over a run spanning
#            at least two checkpoints (checkpoint_timeout = 30s)
#   modes    pasv against the double-logging baselines (naive, engine_wal)
#            on TPC-B, synchronous_commit on and off
#   history  (not in the default list) select-only and the range sum on
#            fresh TPC-B tables, again after the same number of TPC-B
#            transactions on both without VACUUM (HISTORY_TXNS, default
#            300 000; --quick 100 000), and again after a VACUUM of both
# For every pasv run it also prints the channel's round trips per
# transaction (pasv.channel_stats) and the machine's CPU seconds per
# transaction (all processes, pgbench included: the same client for both).
# --quick: shorter runs and smaller bulk loads (under 10 minutes in all).
# PASV_BENCH_SETTINGS='name = value' adds lines to the cluster's pasv.conf
# (to compare a setting, e.g. pasv.hot_updates = off).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/../common.sh"

quick=0
sections="tpcb bulk tpcc wal modes"
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --sections) sections=${2//,/ }; shift ;;
    -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done

if [ "$quick" = 1 ]; then
  T=15 BULK_ROWS=200000 BULK_ROUNDS=3 TPCC_W=1 TPCC_T=30 TPCC_PREP_T=15 WAL_T=65 MODE_T=10 MODE_ROUNDS=2 ROUNDS=1
else
  T=60 BULK_ROWS=1000000 BULK_ROUNDS=3 TPCC_W=2 TPCC_T=120 TPCC_PREP_T=60 WAL_T=95 MODE_T=30 MODE_ROUNDS=4 ROUNDS=2
fi
SCALE=10

pgb() { PGOPTIONS="-c client_min_messages=warning" "$PG_BIN/pgbench" -h "$PASV_RUN" -p "$PASV_BENCH_PORT" -U postgres "$@"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "n/a" }'; }
plus() { awk -v a="$1" -v b="$2" 'BEGIN { print a + b }'; }
median() { tr ' ' '\n' <<<"$*" | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : sprintf("%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2)) }'; }
# speed_probe: milliseconds a fixed CPU-bound loop takes. Printed at the
# start and the end of a run: this kind of VM's CPU speed was seen to move
# by up to 1.8x within minutes, idle, with no steal time reported
# (src/ipc/HOT_PATH.md §42), so figures from runs far apart compare only
# through their ratios, and a run whose probes differ much is suspect.
speed_probe() {
  local t0
  t0=$(date +%s%N)
  awk 'BEGIN { for (i = 0; i < 20000000; i++) s += i }'
  echo $((($(date +%s%N) - t0) / 1000000))
}
cpu_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
clk_tck=$(getconf CLK_TCK)

# Round trips of every backend so far, one line "kind calls posted slept" each.
# The row cache's hits and misses come as two more lines (cache_hit, cache_miss).
rt_snapshot() {
  bench_psql -At -F' ' -c "SELECT request, calls, posted, slept FROM pasv.channel_stats() UNION ALL SELECT 'cache_hit', hits, 0, 0 FROM pasv.row_cache_stats() UNION ALL SELECT 'cache_miss', misses, 0, 0 FROM pasv.row_cache_stats()" 2>/dev/null || true
}
# rt_report BEFORE AFTER TXNS: round trips per transaction by kind.
rt_report() {
  awk -v n="$3" '
    FNR == NR { c0[$1] = $2; p0[$1] = $3; s0[$1] = $4; next }
    /^cache_/ { c = $2 - c0[$1]; if (c > 0) cache = cache sprintf(" %s %.2f", substr($1, 7), c / n); next }
    { c = $2 - c0[$1]; p = $3 - p0[$1]; s = $4 - s0[$1]; tc += c; tp += p; ts += s
      if (c + p > 0) parts = parts sprintf(" %s %.2f/%.2f", $1, c / n, p / n) }
    END { if (n > 0) printf "    channel per transaction: %.1f waited round trips (%.0f%% slept), %.1f posted; by kind (waited/posted):%s; row cache per transaction:%s\n", tc / n, (tc > 0 ? 100 * ts / tc : 0), tp / n, parts, cache }
  ' <(echo "$1") <(echo "$2") || true
}

# run_pgbench LABEL DB CLIENTS SECONDS [pgbench args...]: one measured run;
# prints a line and sets TPS, LAT, TXNS, WALB (bytes/txn), CPUT (CPU s/txn).
# wal_without_fpi LSN0 LSN1 TXNS: WAL bytes a transaction between the two
# positions, full-page images left out (pg_waldump --stats): what a
# transaction logs in a window that no checkpoint precedes closely; "-"
# without pg_waldump.
wal_without_fpi() {
  local stats
  [ "$1" != "$2" ] || { echo 0; return 0; }
  [ -x "$PG_BIN/pg_waldump" ] || { echo -; return 0; }
  # pg_waldump fails on a range it cannot read whole (recycled segments).
  stats=$("$PG_BIN/pg_waldump" -p "$BENCH_DATA/pg_wal" -s "$1" -e "$2" --stats=record 2>/dev/null) || true
  awk -v n="$3" '/^Total/ { printf "%d", $3 / (n > 0 ? n : 1); found = 1 } END { if (!found) print "-" }' <<<"$stats"
}

run_pgbench() {
  local label=$1 db=$2 clients=$3 seconds=$4 out lsn0 lsn1 j0 j1 rt0 rt1
  shift 4
  rt0=$(rt_snapshot)
  lsn0=$(bench_psql -At -d "$db" -c "SELECT pg_current_wal_lsn()")
  j0=$(cpu_jiffies)
  # SECONDS 0: the run's length is in the arguments (-t).
  out=$(pgb -n -c "$clients" -j "$clients" $([ "$seconds" = 0 ] || echo "-T $seconds") "$@" "$db" 2>&1) || { echo "$out" | tail -5; die "pgbench failed ($label)"; }
  j1=$(cpu_jiffies)
  lsn1=$(bench_psql -At -d "$db" -c "SELECT pg_current_wal_lsn()")
  rt1=$(rt_snapshot)
  TPS=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out")
  LAT=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' <<<"$out")
  TXNS=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
  WALB=$(bench_psql -At -c "SELECT round(pg_wal_lsn_diff('$lsn1', '$lsn0') / greatest($TXNS, 1))")
  WALNF=$(wal_without_fpi "$lsn0" "$lsn1" "$TXNS")
  CPUT=$(awk -v a="$j0" -v b="$j1" -v n="$TXNS" -v hz="$clk_tck" 'BEGIN { printf "%.6f", (b - a) / hz / (n > 0 ? n : 1) }')
  printf '  %-34s tps %9.1f  latency %7.3f ms  WAL %6d B/txn (%s without full-page images)  CPU %7.1f us/txn\n' "$label" "$TPS" "$LAT" "$WALB" "$WALNF" "$(awk -v c="$CPUT" 'BEGIN { print c * 1e6 }')"
  case $label in *pasv*) rt_report "$rt0" "$rt1" "$TXNS" ;; esac
}

# best_of: interleave heap and pasv ROUNDS times; keep the mean TPS of each.
# compare NAME CLIENTS SECONDS DB_SUFFIX [pgbench args...]
compare() {
  local name=$1 clients=$2 seconds=$3 suffix=$4 r am sum_h=0 sum_p=0 lat_h=0 lat_p=0 wal_h=- wal_p=-
  shift 4
  for r in $(seq 1 "$ROUNDS"); do
    for am in heap pasv; do
      run_pgbench "$name $am #$r" "${suffix}_$am" "$clients" "$seconds" "$@"
      if [ "$am" = heap ]; then sum_h=$(awk -v a="$sum_h" -v b="$TPS" 'BEGIN { print a + b }'); lat_h=$LAT; wal_h=$WALNF
      else sum_p=$(awk -v a="$sum_p" -v b="$TPS" 'BEGIN { print a + b }'); lat_p=$LAT; wal_p=$WALNF; fi
    done
  done
  printf '  => %-30s pasv/heap throughput %s   latency pasv/heap %s\n' "$name" "$(ratio "$sum_p" "$sum_h")" "$(ratio "$lat_p" "$lat_h")"
  if [ "$name" = "TPC-B 2 clients" ] && [ "$wal_h" != - ] && [ "$wal_p" != - ]; then
    printf '  => WAL per TPC-B transaction without full-page images pasv/heap %s (%s / %s B; target <= 1.0 in a window without a checkpoint)\n' \
      "$(ratio "$wal_p" "$wal_h")" "$wal_p" "$wal_h"
  fi
}

# The 100-row range-sum script, $PASV_HOME/bench/range_sum.sql.
write_range_sum() {
  cat >"$PASV_HOME/bench/range_sum.sql" <<'EOF'
\set aid random(1, 100000 * :scale - 100)
SELECT sum(abalance) FROM pgbench_accounts WHERE aid BETWEEN :aid AND :aid + 99;
EOF
}

section_tpcb() {
  say "pgbench TPC-B family: scale $SCALE, $T s a run, $ROUNDS round(s), heap and pasv interleaved"
  local am
  for am in heap pasv; do
    local t0; t0=$(date +%s.%N)
    bench_tpcb_db "tpcb_$am" "$am" "$SCALE"
    note "loaded tpcb_$am in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
  done
  bench_wait_slot tpcb_pasv
  write_range_sum
  compare "TPC-B 2 clients" 2 "$T" tpcb
  compare "TPC-B 8 clients" 8 "$T" tpcb
  compare "select-only 2 clients" 2 "$T" tpcb -S
  compare "100-row range sum 2 clients" 2 "$T" tpcb -f "$PASV_HOME/bench/range_sum.sql" -D scale="$SCALE"
  compare "TPC-B 1 client (latency)" 1 "$T" tpcb
}

# timed LABEL SQL...: run SQL in one psql session with \timing; prints the
# time of the last statement in ms into MS.
timed() {
  local out
  out=$(bench_psql -d bulk -c '\timing on' "${@:2}" 2>&1) || { echo "$out"; die "bulk step failed: $1"; }
  MS=$(sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' <<<"$out" | tail -1)
}

section_bulk() {
  say "bulk DML: $BULK_ROWS rows (int8, int4, text(32)), heap and pasv interleaved"
  bench_psql -c "DROP DATABASE IF EXISTS bulk" -c "CREATE DATABASE bulk" >/dev/null
  bench_psql -d bulk -c "CREATE EXTENSION IF NOT EXISTS pasv" >/dev/null
  local copy_file=$PASV_HOME/bench/bulk.copy n=$BULK_ROWS
  bench_psql -d bulk -c "COPY (SELECT g, g % 1000, md5(g::text) FROM generate_series(1, $n) g) TO '$copy_file'"
  bench_wait_slot bulk
  declare -A R Q
  local step am round speed steps="insert_noindex insert_pk update10 delete10 copy_in count sum"
  for round in $(seq "$BULK_ROUNDS"); do
  note "round $round of $BULK_ROUNDS, on fresh tables"
  for am in heap pasv; do
    bench_psql -d bulk -c "DROP TABLE IF EXISTS b_$am, bk_$am, bc_$am" \
      -c "CREATE TABLE b_$am (id int8, grp int4, payload text) USING $am" \
      -c "CREATE TABLE bk_$am (id int8 PRIMARY KEY, grp int4, payload text) USING $am" \
      -c "CREATE TABLE bc_$am (id int8, grp int4, payload text) USING $am" -c CHECKPOINT >/dev/null
  done
  for step in $steps; do
    for am in heap pasv; do
      case $step in
        insert_noindex) timed "$step" -c "INSERT INTO b_$am SELECT g, g % 1000, md5(g::text) FROM generate_series(1, $n) g" ;;
        insert_pk) timed "$step" -c "INSERT INTO bk_$am SELECT g, g % 1000, md5(g::text) FROM generate_series(1, $n) g" ;;
        update10) timed "$step" -c "UPDATE bk_$am SET grp = grp + 1 WHERE id % 10 = 0" ;;
        delete10) timed "$step" -c "DELETE FROM bk_$am WHERE id % 10 = 1" ;;
        copy_in) timed "$step" -c "COPY bc_$am FROM '$copy_file'" ;;
        count) timed "$step" -c "SELECT count(*) FROM bk_$am" ;;
        sum) timed "$step" -c "SELECT sum(grp) FROM b_$am" ;;
      esac
      R[$step.$am]=$MS
    done
    speed=$(ratio "${R[$step.heap]}" "${R[$step.pasv]}")
    Q[$step]+="$speed "
    printf '  %-16s heap %9.1f ms   pasv %9.1f ms   pasv/heap speed %s\n' "$step" "${R[$step.heap]}" "${R[$step.pasv]}" "$speed"
  done
  done
  for step in $steps; do
    printf '  => %-16s pasv/heap speed %s (median of %d rounds: %s)\n' "$step" "$(median ${Q[$step]})" "$BULK_ROUNDS" "${Q[$step]% }"
  done
  rm -f "$copy_file"
}

# tpcc_load AM: a fresh TPC-C-like database tpcc_AM; sets LOAD (seconds).
tpcc_load() {
  local am=$1 db=tpcc_$1 t0
  bench_psql -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
  bench_psql -d "$db" -c "CREATE EXTENSION IF NOT EXISTS pasv" -c "ALTER DATABASE $db SET default_table_access_method = $am" >/dev/null
  t0=$(date +%s.%N)
  (cd "$HERE/tpcc" && bench_psql -d "$db" -f schema.sql >/dev/null && bench_psql -d "$db" -v warehouses="$TPCC_W" -f load.sql >/dev/null)
  LOAD=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  bench_psql -d "$db" -c CHECKPOINT >/dev/null
}

# tpcc_mix LABEL AM SECONDS [pgbench args...]: the mix on tpcc_AM, then
# its consistency check; sets TPS.
tpcc_mix() {
  local label=$1 am=$2 seconds=$3 d=$HERE/tpcc
  shift 3
  run_pgbench "$label $am" "tpcc_$am" 2 "$seconds" -f "$d/new_order.sql@45" -f "$d/payment.sql@43" \
    -f "$d/order_status.sql@4" -f "$d/delivery.sql@4" -f "$d/stock_level.sql@4" -D warehouses="$TPCC_W" --max-tries=10 "$@"
  bench_psql -d "tpcc_$am" -f "$d/check.sql" | sed 's/^/    /'
}

section_tpcc() {
  say "TPC-C-like (bench/pgbench/tpcc): $TPCC_W warehouse(s), 2 clients, $TPCC_T s, heap and pasv"
  local am
  declare -A L P Q
  for am in heap pasv; do
    tpcc_load "$am"
    L[$am]=$LOAD
    note "loaded tpcc_$am in $LOAD s"
  done
  bench_wait_slot tpcc_pasv
  for am in heap pasv; do
    tpcc_mix "TPC-C-like" "$am" "$TPCC_T"
    P[$am]=$TPS
  done
  printf '  => TPC-C-like   pasv/heap throughput %s   load speed pasv/heap %s\n' "$(ratio "${P[pasv]}" "${P[heap]}")" "$(ratio "${L[heap]}" "${L[pasv]}")"
  # Prepared statements keep the generic plans made right after the load,
  # when warehouse and district were one page: sequential scans of the
  # two hottest tables for the whole run (heap's too).
  note "prepared statements (-M prepared), $TPCC_PREP_T s, each on a fresh load"
  for am in heap pasv; do
    tpcc_load "$am"
    bench_wait_slot tpcc_pasv
    tpcc_mix "TPC-C-like prepared" "$am" "$TPCC_PREP_T" -M prepared
    Q[$am]=$TPS
  done
  printf '  => TPC-C-like prepared   pasv/heap throughput %s\n' "$(ratio "${Q[pasv]}" "${Q[heap]}")"
}

section_wal() {
  say "WAL per TPC-B transaction across checkpoints: checkpoint_timeout = 30s, $WAL_T s a run, 2 clients"
  bench_restart_with "checkpoint_timeout = '30s'"
  declare -A W
  local am
  for am in heap pasv; do
    [ "$(bench_psql -At -c "SELECT count(*) FROM pg_database WHERE datname = 'tpcb_$am'")" = 1 ] || bench_tpcb_db "tpcb_$am" "$am" "$SCALE"
  done
  bench_wait_slot tpcb_pasv
  for am in heap pasv; do
    local c0 c1
    c0=$(bench_psql -At -c "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter")
    run_pgbench "TPC-B checkpointed $am" "tpcb_$am" 2 "$WAL_T"
    c1=$(bench_psql -At -c "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter")
    note "checkpoints during the run: $((c1 - c0))"
    W[$am]=$WALB
  done
  printf '  => WAL bytes per transaction pasv/heap %s (target <= 0.7)\n' "$(ratio "${W[pasv]}" "${W[heap]}")"
  bench_restart_with "checkpoint_timeout = '30min'"
}

# The modes run on one TPC-B database, loaded once and flushed (every mode
# starts from the same SST files, as heap starts from a checkpoint), with the
# server restarted into each mode in turn; the order rotates every round, so
# no mode always runs first or last. This VM's commit-fsync latency and CPU
# vary run to run by up to 30 %: the mean over MODE_ROUNDS decides.
section_modes() {
  say "durability modes on TPC-B (pasv tables), 2 clients, $MODE_ROUNDS round(s) of $MODE_T s: pasv against naive and engine_wal"
  local sync mode r i order
  local modes=(naive engine_wal pasv)
  declare -A M C
  # per_round SUM [SCALE]: a sum over the rounds as a mean, scaled.
  per_round() { awk -v a="$1" -v n="$MODE_ROUNDS" -v s="${2:-1}" 'BEGIN { print a * s / n }'; }
  bench_restart_with "pasv.durability = pasv"
  bench_tpcb_db "tpcb_mode" pasv "$SCALE" >/dev/null
  bench_psql -d tpcb_mode -c "SELECT pasv.flush()" >/dev/null
  for sync in on off; do
    for mode in "${modes[@]}"; do M[$sync.$mode]=0; C[$sync.$mode]=0; done
    for r in $(seq 1 "$MODE_ROUNDS"); do
      order=()
      for i in 0 1 2; do order+=("${modes[$(((i + r - 1) % 3))]}"); done
      for mode in "${order[@]}"; do
        bench_restart_with "pasv.durability = $mode" "synchronous_commit = $sync"
        case $mode in pasv | naive) bench_wait_slot tpcb_mode ;; esac
        run_pgbench "sync $sync $mode #$r (pasv tables)" tpcb_mode 2 "$MODE_T"
        M[$sync.$mode]=$(plus "${M[$sync.$mode]}" "$TPS")
        C[$sync.$mode]=$(plus "${C[$sync.$mode]}" "$CPUT")
      done
    done
    printf '  => synchronous_commit %s: mean tps naive %.0f engine_wal %.0f pasv %.0f; pasv/naive %s  pasv/engine_wal %s (targets >= 1.0, >= 1.1)\n' "$sync" \
      "$(per_round "${M[$sync.naive]}")" "$(per_round "${M[$sync.engine_wal]}")" "$(per_round "${M[$sync.pasv]}")" \
      "$(ratio "${M[$sync.pasv]}" "${M[$sync.naive]}")" "$(ratio "${M[$sync.pasv]}" "${M[$sync.engine_wal]}")"
    # CPU a transaction (all processes) moves less with the VM's phase than
    # throughput does: the work each mode does, beside what it achieved.
    printf '     CPU per transaction: naive %.0f engine_wal %.0f pasv %.0f us; naive/pasv %s  engine_wal/pasv %s (1.0: the same work)\n' \
      "$(per_round "${C[$sync.naive]}" 1e6)" "$(per_round "${C[$sync.engine_wal]}" 1e6)" "$(per_round "${C[$sync.pasv]}" 1e6)" \
      "$(ratio "${C[$sync.naive]}" "${C[$sync.pasv]}")" "$(ratio "${C[$sync.engine_wal]}" "${C[$sync.pasv]}")"
  done
  bench_psql -c "DROP DATABASE IF EXISTS tpcb_mode" >/dev/null
  bench_restart_with "pasv.durability = pasv" "synchronous_commit = on"
}

# A table's history: what its reads cost after many UPDATEs. Heap prunes
# a page's HOT chains as it reads it; the fresh tables of section_tpcb do
# not show what a long-running workload leaves behind.
section_history() {
  local txns=${HISTORY_TXNS:-$([ "$quick" = 1 ] && echo 100000 || echo 300000)} am stage
  say "reads after a history: select-only and 100-row range sums on fresh TPC-B tables, after $txns TPC-B transactions (2 clients, no VACUUM), after VACUUM"
  for am in heap pasv; do bench_tpcb_db "hist_$am" "$am" "$SCALE"; done
  bench_wait_slot hist_pasv
  write_range_sum
  for stage in fresh aged vacuumed; do
    case $stage in
      aged)
        for am in heap pasv; do
          run_pgbench "TPC-B ageing $am" "hist_$am" 2 0 -t $((txns / 2))
        done ;;
      vacuumed)
        for am in heap pasv; do bench_psql -d "hist_$am" -c "VACUUM"; done ;;
    esac
    note "$stage: $(bench_psql -At -d hist_pasv -c "SELECT 'pasv accounts hold ' || pasv.table_versions('pgbench_accounts'::regclass) || ' stored versions for ' || count(*) || ' rows' FROM pgbench_accounts")"
    compare "select-only 2 clients, $stage" 2 "$T" hist -S
    compare "100-row range sum 2 clients, $stage" 2 "$T" hist -f "$PASV_HOME/bench/range_sum.sql" -D scale="$SCALE"
  done
}

bench_start
machine_line
echo "machine speed probe: $(speed_probe) ms (a fixed awk loop; again at the end)"
echo "settings: $(bench_psql -At -c "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings WHERE name IN ('shared_buffers', 'synchronous_commit', 'checkpoint_timeout', 'max_wal_size', 'autovacuum', 'wal_level', 'pasv.durability', 'pasv.engine_threads', 'pasv.memtable_budget', 'pasv.block_cache_size', 'pasv.row_cache_size')")"
echo "mode: $([ "$quick" = 1 ] && echo quick || echo full); runs of $T s; bulk $BULK_ROWS rows; TPC-C $TPCC_W warehouse(s), $TPCC_T s"
start=$(date +%s)
for s in $sections; do
  case $s in
    tpcb | bulk | tpcc | wal | modes | history) "section_$s" ;;
    *) die "unknown section $s" ;;
  esac
done
echo "machine speed probe: $(speed_probe) ms"
echo "total $(($(date +%s) - start)) s"
