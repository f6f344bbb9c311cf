#!/usr/bin/env bash
# THE MAIN COMMAND: install what is missing, build and install pasv, and run a
# PostgreSQL 16 cluster with pasv preloaded. Safe to run again: each step is
# skipped when done, and a running cluster is restarted to load the new build.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

t0=$SECONDS
setup_all
data=$PASV_HOME/data
log=$PASV_HOME/log/postgres.log
init_cluster "$data" "$PASV_PORT"
start_cluster "$data" "$log"
wait_ready "$PASV_PORT"

cat <<INFO

pasv is running: $PG_VERSION, port $PASV_PORT, data $data (ready in $((SECONDS - t0)) s).

Connect:
  $PG_BIN/psql -h $PASV_RUN -p $PASV_PORT -U postgres postgres
Try:
  CREATE EXTENSION pasv; CREATE TABLE t (id int, v text) USING pasv;
Stop:
  scripts/stop.sh
Server log:
  $log
INFO
