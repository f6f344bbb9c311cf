#!/usr/bin/env bash
# Logical replication of a pasv table under a random concurrent workload,
# across a crash of the publisher: a publication in database lr_pub, a
# subscription in lr_sub (same cluster), both tables pasv. pgbench clients
# run transactions of speculative inserts (INSERT ... ON CONFLICT DO NOTHING
# on a small key range, so some race and withdraw their row), in-place
# updates, updates that move the row (an indexed column changes), deletes,
# upserts and rolled-back savepoints; then the server is killed
# (pg_ctl -m immediate) and restarted, pasv recovers, the workload runs
# again. Afterwards the subscriber must hold exactly the publisher's rows.
# Usage: tests/logical_replication.sh PG_BIN HOST PORT DATA LOG [SECONDS]
set -euo pipefail
pg_bin=$1 host=$2 port=$3 data=$4 log=$5 seconds=${6:-8}
psql() { local db=$1; shift; "$pg_bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U postgres -d "$db" "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

psql postgres -c "CREATE DATABASE lr_pub" -c "CREATE DATABASE lr_sub"
for db in lr_pub lr_sub; do
  psql "$db" -c "CREATE EXTENSION pasv" \
    -c "CREATE TABLE t (k int PRIMARY KEY, g int NOT NULL, n int NOT NULL, v text) USING pasv" \
    -c "CREATE INDEX t_g ON t (g)"
done
psql lr_pub -c "INSERT INTO t SELECT k, k, 0, md5(k::text) FROM generate_series(1, 100) k" \
  -c "CREATE PUBLICATION lr FOR TABLE t" \
  -c "SELECT 'slot' FROM pg_create_logical_replication_slot('lr_slot', 'pgoutput')" >/dev/null
psql lr_sub -c "CREATE SUBSCRIPTION lr CONNECTION 'host=$host port=$port dbname=lr_pub user=postgres'
                PUBLICATION lr WITH (create_slot = false, slot_name = 'lr_slot')"

script=$(mktemp)
trap 'rm -f "$script"' EXIT
printf '%s\n' '\set a random(1, 150)' '\set b random(1, 150)' '\set c random(1, 150)' \
  'BEGIN;' \
  'INSERT INTO t VALUES (:a, :a, 0, md5(:a::text)) ON CONFLICT (k) DO NOTHING;' \
  'UPDATE t SET n = n + 1, v = v || :b WHERE k = :b;' \
  'SAVEPOINT s;' \
  'UPDATE t SET g = g + 1000 WHERE k = :c;' \
  'ROLLBACK TO SAVEPOINT s;' \
  'UPDATE t SET g = g + 1 WHERE k = :c;' \
  'DELETE FROM t WHERE k = :a + 1;' \
  'INSERT INTO t VALUES (:c + 1, 0, 1, NULL) ON CONFLICT (k) DO UPDATE SET n = t.n + 1;' \
  'COMMIT;' >"$script"
chmod 644 "$script"

workload() {
  "$pg_bin/pgbench" -n -f "$script" -c 4 -j 2 -T "$seconds" --max-tries=100 -h "$host" -p "$port" -U postgres lr_pub 2>&1 |
    grep -E "^number of (transactions actually processed|failed transactions)" || true
}
echo "workload before the crash ($seconds s)"
workload
echo "pg_ctl -m immediate restart"
"$pg_bin/pg_ctl" -D "$data" -l "$log" -w -m immediate restart >/dev/null || fail "restart after the crash"
echo "workload after the crash ($seconds s)"
workload

contents() { psql "$1" -c "SELECT count(*) || ' ' || md5(coalesce(string_agg(k || ',' || g || ',' || n || ',' || coalesce(v, '-'), ';' ORDER BY k), ''))
                            FROM t"; }
want=$(contents lr_pub)
# Bounded wait for the subscriber to apply everything: at most 120 s.
got=""
for _ in $(seq 1 240); do
  got=$(contents lr_sub)
  [ "$got" = "$want" ] && break
  sleep 0.5
done
echo "publisher:  $want"
echo "subscriber: $got"
[ "$got" = "$want" ] || fail "the subscriber's rows differ from the publisher's"
psql lr_sub -c "DROP SUBSCRIPTION lr" >/dev/null
echo "logical replication of a pasv table: the subscriber equals the publisher"
