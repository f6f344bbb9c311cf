# shellcheck shell=bash
# Shared set-up for scripts/start.sh, scripts/stop.sh and scripts/test.sh.
#
# Sourced, never run. Defining this file's functions and variables has no
# side effect; each function prints one line saying what it does, and is
# idempotent and fast when its work is already done.
#
# Knobs (environment):
#   PASV_HOME         state dir (venv, pgrx config, clusters, logs); default <checkout>/.pasv
#   PG_CONFIG         use this PostgreSQL 16 instead of the pgserver wheel
#   CARGO_TARGET_DIR  default $HOME/.cache/pasv/target (outside the checkout, so
#                     every clone on a machine shares one RocksDB build)
#   PASV_PORT         port of the cluster started by start.sh (default 5432)
#   PASV_TEST_PORT    port of test.sh's cluster (default 54329; +1 for the
#                     not-preloaded cluster)

PASV_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# With RUST_BACKTRACE set, pgrx attaches a Rust backtrace as the DETAIL of
# PostgreSQL errors that pass through pasv: fine for debugging by hand, but
# the servers these scripts start must report errors as PostgreSQL does.
unset RUST_BACKTRACE RUST_LIB_BACKTRACE
PASV_HOME=${PASV_HOME:-$PASV_ROOT/.pasv}
case $PASV_HOME in /*) ;; *) PASV_HOME=$PWD/$PASV_HOME ;; esac
PASV_RUN=$PASV_HOME/run            # unix socket directory of every cluster
PASV_USER=pasv                     # the OS user that runs postgres
PASV_PG_WHEEL='pgserver==0.1.4'    # PyPI wheel that carries PostgreSQL 16.2
PASV_PGRX_VERSION=0.18.0
PASV_APT_PACKAGES=(libclang-dev clang pkg-config build-essential)
PASV_PORT=${PASV_PORT:-5432}
PASV_TEST_PORT=${PASV_TEST_PORT:-54329}
export PASV_HOME
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/pasv/target}
export PGRX_HOME=$PASV_HOME/pgrx

say() { printf '==> %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }
die() {
  printf 'ERROR: %s\n' "$*" >&2
  exit 1
}

is_root() { [ "$(id -u)" -eq 0 ]; }

# Run a command as the OS user that owns the clusters (from /, so an
# unreadable current directory does not bother initdb or pg_ctl). Not root:
# postgres runs as the invoking user.
as_pasv() {
  if is_root; then
    (cd / && runuser -u "$PASV_USER" -- "$@")
  else
    (cd / && "$@")
  fi
}

# A directory the cluster user owns (mode 0755 unless given).
pasv_dir() {
  local dir=$1 mode=${2:-0755}
  mkdir -p "$dir"
  if is_root; then chown "$PASV_USER:$PASV_USER" "$dir"; fi
  chmod "$mode" "$dir"
}

# run_logged LOG CMD...: run CMD with its output in LOG, printing a line each
# minute (a cold build is 30-45 minutes of RocksDB with no output of its own).
# On failure print the end of LOG. Returns CMD's exit status.
run_logged() {
  local log=$1 pid rc start=$SECONDS next=60 last
  shift
  "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if ((SECONDS - start >= next)); then
      last=$(grep -E '^ *(Compiling|Blocking|Building|Installing|Copying|Finished|Running|Discovered|Writing)' "$log" | tail -n 1 | sed 's/^ *//' || true)
      note "... $(((SECONDS - start) / 60)) min; last: ${last:-(nothing yet)}"
      next=$((next + 60))
    fi
  done
  rc=0
  wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ]; then
    printf -- '---- last 120 lines of %s ----\n' "$log" >&2
    tail -n 120 "$log" | sed 's/\x1b\[[0-9;]*m//g' >&2
    printf -- '---- end of %s ----\n' "$log" >&2
  fi
  return "$rc"
}

ensure_apt() {
  local p missing=()
  for p in "${PASV_APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing+=("$p")
  done
  # The wheel is installed into a venv; Debian's own python3 needs python3-venv for that.
  if [ -z "${PG_CONFIG:-}" ] && ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing+=(python3 python3-venv)
  fi
  if [ ${#missing[@]} -eq 0 ]; then
    say "apt packages present: ${PASV_APT_PACKAGES[*]}"
    return 0
  fi
  is_root || die "missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})"
  say "installing apt packages: ${missing[*]}"
  mkdir -p "$PASV_HOME/log"
  run_logged "$PASV_HOME/log/apt.log" sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"' sh "${missing[@]}" ||
    die "apt-get install ${missing[*]} failed (log: $PASV_HOME/log/apt.log)"
}

# Finds PostgreSQL without installing anything: $PG_CONFIG, else the wheel in
# $PASV_HOME/venv. Sets PG_CONFIG (absolute) and PG_BIN; returns 1 if none.
find_pg() {
  if [ -n "${PG_CONFIG:-}" ]; then
    local p
    p=$(command -v -- "$PG_CONFIG" 2>/dev/null) || die "PG_CONFIG=$PG_CONFIG: no such executable"
    case $p in /*) ;; *) p=$PWD/$p ;; esac
    PG_CONFIG=$p
  else
    local py=$PASV_HOME/venv/bin/python
    [ -x "$py" ] || return 1
    PG_CONFIG=$("$py" -c 'import os, pgserver; print(os.path.join(os.path.dirname(pgserver.__file__), "pginstall", "bin", "pg_config"))' 2>/dev/null) || return 1
    [ -x "$PG_CONFIG" ] || return 1
  fi
  PG_BIN=$("$PG_CONFIG" --bindir) || die "$PG_CONFIG --bindir failed"
  export PG_CONFIG PG_BIN
}

# Sets PG_CONFIG, PG_BIN, PG_VERSION, PG_PKGLIBDIR, PG_SHAREDIR; installs the
# pgserver wheel into $PASV_HOME/venv unless PG_CONFIG is given.
ensure_pg() {
  if [ -z "${PG_CONFIG:-}" ]; then
    local venv=$PASV_HOME/venv
    if [ ! -x "$venv/bin/python" ]; then
      say "creating Python venv $venv"
      mkdir -p "$PASV_HOME"
      python3 -m venv "$venv" || die "python3 -m venv $venv failed"
    fi
    if ! "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("pgserver") != "0.1.4")' 2>/dev/null; then
      say "installing PostgreSQL 16 from PyPI ($PASV_PG_WHEEL) into $venv"
      mkdir -p "$PASV_HOME/log"
      run_logged "$PASV_HOME/log/pip.log" "$venv/bin/pip" install --disable-pip-version-check "$PASV_PG_WHEEL" ||
        die "pip install $PASV_PG_WHEEL failed (log: $PASV_HOME/log/pip.log)"
    fi
  fi
  find_pg || die "no pg_config found in $PASV_HOME/venv"
  PG_VERSION=$("$PG_CONFIG" --version) || die "$PG_CONFIG --version failed"
  if ! [[ $PG_VERSION =~ ^PostgreSQL\ 16([^0-9]|$) ]]; then
    die "pasv needs PostgreSQL 16, but $PG_CONFIG says: $PG_VERSION. Point PG_CONFIG at a PostgreSQL 16 pg_config, or unset it to use the pgserver wheel."
  fi
  PG_PKGLIBDIR=$("$PG_CONFIG" --pkglibdir)
  PG_SHAREDIR=$("$PG_CONFIG" --sharedir)
  say "PostgreSQL: $PG_VERSION ($PG_CONFIG)"
}

# psycopg (pinned) in $PASV_HOME/venv, for tests/diffcrash/diffcrash.py.
# With PG_CONFIG set there may be no venv yet: create it.
ensure_psycopg() {
  local venv=$PASV_HOME/venv pin=3.2.13
  if [ ! -x "$venv/bin/python" ]; then
    say "creating Python venv $venv"
    mkdir -p "$PASV_HOME"
    python3 -m venv "$venv" || die "python3 -m venv $venv failed"
  fi
  if "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(not all(m.version(p) == sys.argv[1] for p in ("psycopg", "psycopg-binary")))' \
    "$pin" 2>/dev/null; then
    say "psycopg $pin present in $venv"
    return 0
  fi
  say "installing psycopg[binary]==$pin into $venv"
  mkdir -p "$PASV_HOME/log"
  run_logged "$PASV_HOME/log/pip-psycopg.log" "$venv/bin/pip" install --disable-pip-version-check "psycopg[binary]==$pin" ||
    die "pip install psycopg[binary]==$pin failed (log: $PASV_HOME/log/pip-psycopg.log)"
}

ensure_cargo() {
  if [ -d "$HOME/.cargo/bin" ]; then
    case ":$PATH:" in *":$HOME/.cargo/bin:"*) ;; *) export PATH=$HOME/.cargo/bin:$PATH ;; esac
  fi
  command -v cargo >/dev/null || die "cargo not found: install Rust (rustup) first"
}

ensure_cargo_pgrx() {
  ensure_cargo
  local v
  v=$(cargo pgrx --version 2>/dev/null || true)
  if [ "$v" = "cargo-pgrx $PASV_PGRX_VERSION" ]; then
    say "cargo-pgrx $PASV_PGRX_VERSION present"
    return 0
  fi
  say "installing cargo-pgrx $PASV_PGRX_VERSION (cargo install --locked; about 8 min)${v:+ (found: $v)}"
  mkdir -p "$PASV_HOME/log"
  run_logged "$PASV_HOME/log/cargo-pgrx-install.log" cargo install cargo-pgrx --version "$PASV_PGRX_VERSION" --locked ||
    die "cargo install cargo-pgrx failed (log: $PASV_HOME/log/cargo-pgrx-install.log)"
}

# Records $PG_CONFIG in $PGRX_HOME/config.toml, only when it is not already
# there: the file's mtime is a rebuild trigger for pgrx-pg-sys.
ensure_pgrx_init() {
  if grep -qxF "pg16 = \"$PG_CONFIG\"" "$PGRX_HOME/config.toml" 2>/dev/null; then
    say "pgrx knows this PostgreSQL (PGRX_HOME=$PGRX_HOME)"
    return 0
  fi
  say "cargo pgrx init --pg16 $PG_CONFIG (PGRX_HOME=$PGRX_HOME)"
  mkdir -p "$PGRX_HOME" "$PASV_HOME/log"
  run_logged "$PASV_HOME/log/pgrx-init.log" cargo pgrx init --pg16 "$PG_CONFIG" ||
    die "cargo pgrx init failed (log: $PASV_HOME/log/pgrx-init.log)"
}

# Builds pasv (release profile, the only one: any other rebuilds RocksDB) and
# installs it into $PG_CONFIG's PostgreSQL.
build_install() {
  say "building and installing pasv: cargo pgrx install --release (CARGO_TARGET_DIR=$CARGO_TARGET_DIR; a cold build compiles RocksDB: 30-45 min)"
  mkdir -p "$PASV_HOME/log"
  # cargo-pgrx overwrites pasv.so in place; a running server that has it
  # mapped would then crash. Give the path a fresh inode first, so running
  # servers keep the old library until they restart.
  local so=$PG_PKGLIBDIR/pasv.so
  if [ -f "$so" ]; then
    cp -p "$so" "$so.new.$$" && mv -f "$so.new.$$" "$so"
  fi
  # Every checkout on a machine shares CARGO_TARGET_DIR (one RocksDB build),
  # but cargo keys the project's own crates (pasv, pasv_am) by package, not by
  # checkout: after another checkout (e.g. CI's fresh clone) built there, cargo
  # would call this checkout's crates fresh when its files are older, and
  # install the other one's library, or link this pasv against the other's
  # pasv_am (seen in session 16: "Finished in 0.10 s", the wrong .so). Drop
  # both crates' fingerprints and outputs then (RocksDB's stay).
  local stamp=$CARGO_TARGET_DIR/release/.pasv-checkout
  if [ "$(cat "$stamp" 2>/dev/null)" != "$PASV_ROOT" ]; then
    rm -rf "$CARGO_TARGET_DIR"/release/.fingerprint/pasv-* "$CARGO_TARGET_DIR"/release/.fingerprint/pasv_am-*
    rm -f "$CARGO_TARGET_DIR/release/deps/libpasv.so" "$CARGO_TARGET_DIR"/release/deps/libpasv_am-*
    mkdir -p "$CARGO_TARGET_DIR/release"
    printf '%s\n' "$PASV_ROOT" >"$stamp"
  fi
  local t=$SECONDS
  (cd "$PASV_ROOT" && run_logged "$PASV_HOME/log/build.log" cargo pgrx install --release --pg-config "$PG_CONFIG") ||
    die "build failed (full log: $PASV_HOME/log/build.log)"
  note "built and installed in $((SECONDS - t)) s ($(grep -E '^ *Finished' "$PASV_HOME/log/build.log" | tail -n 1 | sed 's/^ *//'))"
}

ensure_os_user() {
  if ! is_root; then
    say "not root: PostgreSQL runs as $(id -un)"
    PASV_USER=$(id -un)
    return 0
  fi
  if id -u "$PASV_USER" >/dev/null 2>&1; then
    say "OS user $PASV_USER present (runs postgres, which refuses root)"
    return 0
  fi
  say "creating OS user $PASV_USER (system user; postgres refuses to run as root)"
  useradd --system --user-group --create-home --home-dir "/var/lib/$PASV_USER" --shell /bin/bash "$PASV_USER" ||
    die "useradd $PASV_USER failed"
}

# ensure_traversable PATH...: the cluster user must reach each PATH. Adds o+x
# (traverse only) to the ancestors that block it, and says so.
ensure_traversable() {
  is_root || return 0
  local target d part parts fixed=()
  for target in "$@"; do
    as_pasv test -x "$target" && continue
    d=
    IFS=/ read -ra parts <<<"${target#/}"
    for part in "${parts[@]}"; do
      [ -n "$part" ] || continue
      d=$d/$part
      [ -d "$d" ] || break
      if ! as_pasv test -x "$d"; then
        chmod o+x "$d"
        fixed+=("$d")
      fi
    done
    as_pasv test -x "$target" || die "user $PASV_USER cannot reach $target even after o+x on its ancestors"
  done
  if [ ${#fixed[@]} -gt 0 ]; then
    say "added o+x (traverse only) for user $PASV_USER to: ${fixed[*]}"
  else
    say "user $PASV_USER can reach $*"
  fi
}

# Directories every script needs, plus the path checks.
ensure_dirs() {
  mkdir -p "$PASV_HOME"
  # A unix socket path is at most 107 bytes: <run>/.s.PGSQL.<port>
  if [ $((${#PASV_RUN} + 16)) -gt 107 ]; then
    die "PASV_HOME is too long for a unix socket path ($PASV_RUN); set PASV_HOME to a shorter directory"
  fi
  pasv_dir "$PASV_RUN" 0755
  pasv_dir "$PASV_HOME/log" 0755
  ensure_traversable "$PG_BIN" "$PG_PKGLIBDIR" "$PG_SHAREDIR" "$PASV_HOME"
}

# Everything start.sh and test.sh share: tools, PostgreSQL, pasv built and
# installed, the OS user, directories.
setup_all() {
  ensure_apt
  ensure_pg
  ensure_psycopg
  ensure_cargo_pgrx
  ensure_pgrx_init
  ensure_os_user
  ensure_dirs
  build_install
}

# init_cluster DATADIR PORT [--no-preload]: initdb if DATADIR has no cluster,
# then (re)write pasv's settings into DATADIR/pasv.conf, included from
# postgresql.conf.
init_cluster() {
  local data=$1 port=$2 preload=1
  [ "${3:-}" = --no-preload ] && preload=0
  if [ -f "$data/PG_VERSION" ]; then
    say "cluster $data exists"
  else
    say "initdb $data"
    pasv_dir "$data" 0700
    as_pasv "$PG_BIN/initdb" -D "$data" --username=postgres --auth=trust --encoding=UTF8 --locale=C \
      >"$PASV_HOME/log/initdb.log" 2>&1 || {
      cat "$PASV_HOME/log/initdb.log" >&2
      die "initdb $data failed"
    }
  fi
  local conf=$data/pasv.conf
  {
    echo "# Written by scripts/lib.sh (init_cluster) on every start; edits are lost."
    if [ "$preload" = 1 ]; then echo "shared_preload_libraries = 'pasv'"; fi
    echo "wal_level = logical"
    echo "max_replication_slots = 16"
    echo "max_wal_senders = 16"
    echo "max_worker_processes = 32"
    echo "max_prepared_transactions = 8"
    echo "port = $port"
    echo "listen_addresses = 'localhost'"
    echo "unix_socket_directories = '$PASV_RUN'"
    echo "logging_collector = off"
  } >"$conf"
  if is_root; then chown "$PASV_USER:$PASV_USER" "$conf"; fi
  grep -qxF "include = 'pasv.conf'" "$data/postgresql.conf" ||
    echo "include = 'pasv.conf'" >>"$data/postgresql.conf"
}

cluster_running() { as_pasv "$PG_BIN/pg_ctl" status -D "$1" >/dev/null 2>&1; }

# start_cluster DATADIR LOGFILE: start, or restart if running (so a freshly
# installed pasv.so is loaded).
start_cluster() {
  local data=$1 log=$2
  if cluster_running "$data"; then
    say "restarting the cluster in $data (to load the installed pasv.so); log: $log"
    as_pasv "$PG_BIN/pg_ctl" restart -D "$data" -l "$log" -m fast -w -t 120 >/dev/null || {
      tail -n 40 "$log" >&2
      die "pg_ctl restart failed (log: $log)"
    }
  else
    say "starting the cluster in $data; log: $log"
    as_pasv "$PG_BIN/pg_ctl" start -D "$data" -l "$log" -w -t 120 >/dev/null || {
      tail -n 40 "$log" >&2
      die "pg_ctl start failed (log: $log)"
    }
  fi
}

# stop_cluster DATADIR: fast shutdown, immediate if that does not finish.
stop_cluster() {
  local data=$1
  if ! cluster_running "$data"; then
    say "no server running in $data"
    return 0
  fi
  say "stopping the cluster in $data"
  as_pasv "$PG_BIN/pg_ctl" stop -D "$data" -m fast -w -t 60 >/dev/null ||
    as_pasv "$PG_BIN/pg_ctl" stop -D "$data" -m immediate -w -t 30 >/dev/null
}

# wait_ready PORT: until the server on PORT accepts connections (60 s at most).
wait_ready() {
  local port=$1 i
  for ((i = 0; i < 120; i++)); do
    if "$PG_BIN/pg_isready" -q -h "$PASV_RUN" -p "$port" -U postgres -d postgres; then
      say "server on port $port accepts connections"
      return 0
    fi
    sleep 0.5
  done
  die "server on port $port not ready after 60 s"
}
