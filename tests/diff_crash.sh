#!/usr/bin/env bash
# Seeded differential crash tester (DESIGN §9, invariant 8): pasv tables and
# their heap twins go through the same transactions from several clients
# while the server is crashed in many ways (kill -9 of the engine, a backend,
# the postmaster; pg_ctl -m immediate; crashes and fast shutdowns during
# pasv's recovery; crash points); after each recovery every pasv table must
# hold exactly its heap twin's rows, its index and sequential scans must
# agree, and pasv.verify (when it exists) must report nothing. The driver is
# tests/diffcrash/diffcrash.py (its docstring says what exactly is checked).
#
# Usage: tests/diff_crash.sh PG_BIN HOST PORT PGDATA [--long N_CRASHES] [--seed S]... [--cycles-per-seed C]
#   default (short): seeds 1 2 3 and one fresh random seed, 3 crashes each;
#   --long N: N crash cycles, a new (random, unless given) seed every 20;
#   --seed S: re-run seed S (same transactions and crash kinds; the timing of
#   crashes, so the state a crash hits, varies).
# Runs as the OS user of the server (it kills its processes and restarts it
# with pg_ctl; restarted servers log to $PGDATA/crash.log), against a server
# with shared_preload_libraries = pasv and wal_level = logical. Uses database
# diffcrash (dropped and created per seed). Needs psycopg in
# $PASV_HOME/venv (scripts/lib.sh: ensure_psycopg).
# Exit 0 iff every check held.
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 PG_BIN HOST PORT PGDATA [--long N_CRASHES] [--seed S]... [--cycles-per-seed C]" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
pg_bin=$1 host=$2 port=$3 pgdata=$(cd "$4" && pwd -P)
shift 4
python=${PASV_HOME:-$root/.pasv}/venv/bin/python
if ! "$python" -c 'import psycopg' 2>/dev/null; then
  echo "diff_crash.sh: no psycopg for $python (scripts/lib.sh ensure_psycopg installs it)" >&2
  exit 2
fi
cd / # our processes must not share the server's working directory (the driver finds the cluster's by it)
exec "$python" -u "$root/tests/diffcrash/diffcrash.py" --pg-bin "$pg_bin" --host "$host" --port "$port" --pgdata "$pgdata" "$@"
