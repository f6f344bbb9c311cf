#!/usr/bin/env bash
# Rows/s of one INSERT ... SELECT of N rows (int8, int4, text(32)) into a
# pasv table and into a heap table, on the same server in one run, each
# measured from the client including commit. Then a full scan of each.
# Usage: bench/insert_select.sh [N]   (default 1000000)
set -euo pipefail
source "$(dirname "$0")/common.sh"
n=${1:-1000000}
bench_start
machine_line
now() { date +%s.%N; }
for am in heap pasv; do
  bench_psql -c "DROP TABLE IF EXISTS load_$am; CREATE TABLE load_$am (id int8, grp int4, payload text) USING $am"
  bench_psql -c "CHECKPOINT"
  t0=$(now)
  bench_psql -c "INSERT INTO load_$am SELECT g, g % 1000, md5(g::text) FROM generate_series(1, $n) g"
  t1=$(now)
  bench_psql -c "SELECT count(*) FROM load_$am" >/dev/null
  t2=$(now)
  awk -v am="$am" -v n="$n" -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN {
    printf "%-5s INSERT ... SELECT %d rows: %7.2f s  %10.0f rows/s | count(*) scan: %6.2f s  %10.0f rows/s\n",
      am, n, b - a, n / (b - a), c - b, n / (c - b) }'
done
