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
  bench_tpcb_db "tpcb_$am" "$am" "$scale"
  [ "$am" = heap ] || bench_wait_slot "tpcb_$am"
  bench_tpcb_run "tpcb_$am" "$clients" "$seconds" "$am"
done
