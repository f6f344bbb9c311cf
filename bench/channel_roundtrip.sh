#!/usr/bin/env bash
# Backend ⇄ engine channel round trip on an idle server: N pings from one
# backend (after 1000 warm-up pings), percentiles in microseconds.
# Usage: bench/channel_roundtrip.sh [N]   (default 200000)
set -euo pipefail
source "$(dirname "$0")/common.sh"
n=${1:-200000}
bench_start
machine_line
echo "channel round trip, $n pings, one backend, idle server:"
bench_psql -c "SELECT requests, round(p50_us::numeric, 2) AS p50_us, round(p90_us::numeric, 2) AS p90_us,
                      round(p99_us::numeric, 2) AS p99_us, round(max_us::numeric, 1) AS max_us,
                      round(mean_us::numeric, 2) AS mean_us
                 FROM pasv.channel_roundtrip($n)"
