#!/usr/bin/env bash
# Stops the cluster that scripts/start.sh started. Installs nothing.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

data=$PASV_HOME/data
if [ ! -f "$data/PG_VERSION" ]; then
  say "no cluster at $data: nothing to stop"
  exit 0
fi
find_pg || die "cannot find PostgreSQL's pg_ctl (no $PASV_HOME/venv and PG_CONFIG unset)"
is_root || PASV_USER=$(id -un)
stop_cluster "$data"
