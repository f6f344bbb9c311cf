-- Named crash points (pasv.crash_point): the server is stopped at a chosen
-- step of a change's life, and what comes back is exactly what committed.
-- Each crash is triggered from a second session (the point aborts that
-- session's process, or the engine), then this session waits (bounded) until
-- the server log shows the crash restart and the server accepts queries.
CREATE TABLE cp (id int PRIMARY KEY, v text) USING pasv;
CREATE TABLE cp_drop (id int) USING pasv;
INSERT INTO cp SELECT g, 'base' FROM generate_series(1, 100) g;
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN EXISTS (SELECT 1 FROM pasv.database_status
                       WHERE datname = current_database() AND slot_state = 'ready');
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT * FROM pasv.crash_points() ORDER BY 1;

-- Logged, never applied, never committed.
SELECT pasv.crash_point('after_log_before_write');
\! n=$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG"); "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "INSERT INTO cp VALUES (1001, 'logged only')" >/dev/null 2>&1; for i in $(seq 1 300); do [ "$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG")" -gt "$n" ] && "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
\c
SELECT count(*), max(id) FROM cp;
-- Applied, never committed.
SELECT pasv.crash_point('after_write_before_commit');
\! n=$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG"); "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "INSERT INTO cp VALUES (1002, 'applied only')" >/dev/null 2>&1; for i in $(seq 1 300); do [ "$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG")" -gt "$n" ] && "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
\c
SELECT count(*), max(id) FROM cp;
-- Committed (the commit record is durable), no flag written: replayed.
SELECT pasv.crash_point('after_commit_before_flag');
\! n=$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG"); "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "INSERT INTO cp VALUES (1003, 'committed, no flag')" >/dev/null 2>&1; for i in $(seq 1 300); do [ "$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG")" -gt "$n" ] && "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
\c
SELECT count(*), max(id) FROM cp;
-- The engine dies as a memtable flush begins.
INSERT INTO cp VALUES (1004, 'before the flush');
SELECT pasv.crash_point('flag_flush');
\! n=$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG"); "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT pasv.flush_table('cp'::regclass)" >/dev/null 2>&1; for i in $(seq 1 300); do [ "$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG")" -gt "$n" ] && "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
\c
SELECT count(*), max(id) FROM cp;
-- The engine dies as it makes the WAL durable for a flush (the commit was
-- asynchronous, so it may be lost with the WAL buffers; nothing else is).
SELECT pasv.crash_point('flush_begin_wal');
\! n=$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG"); "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET synchronous_commit = off" -c "INSERT INTO cp VALUES (1005, 'asynchronous')" -c "SELECT pasv.flush_table('cp'::regclass)" >/dev/null 2>&1; for i in $(seq 1 300); do [ "$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG")" -gt "$n" ] && "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
\c
SELECT count(*) FILTER (WHERE id <= 1004) AS committed, count(*) FILTER (WHERE id = 1005) <= 1 AS async_at_most_once FROM cp;
DELETE FROM cp WHERE id = 1005;
-- CREATE TABLE and TRUNCATE in the creating transaction die before commit:
-- no table, and recovery sweeps their column families.
SELECT pasv.crash_point('create_table');
\! n=$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG"); "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "CREATE TABLE cp_new (id int) USING pasv" >/dev/null 2>&1; for i in $(seq 1 300); do [ "$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG")" -gt "$n" ] && "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
\c
SELECT to_regclass('cp_new') AS cp_new;
SELECT pasv.crash_point('truncate');
\! n=$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG"); "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "BEGIN" -c "CREATE TABLE cp_trunc (id int) USING pasv" -c "INSERT INTO cp_trunc VALUES (1)" -c "TRUNCATE cp_trunc" -c "COMMIT" >/dev/null 2>&1; for i in $(seq 1 300); do [ "$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG")" -gt "$n" ] && "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
\c
SELECT to_regclass('cp_trunc') AS cp_trunc;
-- DROP TABLE committed, its column family not dropped yet: swept.
-- (Reading the table first waits until the engine is back from the last
-- crash: a commit never waits for it, and would skip the drop.)
SELECT count(*) AS cp_drop_rows FROM cp_drop;
SELECT pasv.crash_point('drop_table');
\! n=$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG"); "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "DROP TABLE cp_drop" >/dev/null 2>&1; for i in $(seq 1 300); do [ "$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG")" -gt "$n" ] && "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
\c
SELECT to_regclass('cp_drop') AS cp_drop;
SELECT count(*) AS orphan_column_families FROM pasv.column_families() c
 WHERE c.database_oid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND NOT EXISTS (SELECT 1 FROM pg_class WHERE relfilenode = c.relfilenumber);
-- VACUUM dies after one batch of its row pass reached disk (a memtable
-- flush may persist any prefix of the pass; VACUUM's changes replay only if
-- it commits). A deleted row with more dead versions than a batch holds
-- (5 000 updates in one transaction) must stay deleted: its removals went
-- newest first, so the tombstone went in the first batch and the row came
-- back with its last committed version.
-- (A chain under one rowid: updates in place, not heap-only chains.)
SET pasv.hot_updates = off;
CREATE TABLE cp_versions (id int PRIMARY KEY, v int) USING pasv;
INSERT INTO cp_versions VALUES (1, 0);
DO $$ BEGIN FOR i IN 1..5000 LOOP UPDATE cp_versions SET v = i; END LOOP; END $$;
DELETE FROM cp_versions;
RESET pasv.hot_updates;
SELECT count(*) AS versions_before FROM pasv.versions('cp_versions'::regclass);
SELECT pasv.crash_point('vacuum_batch_written');
\! n=$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG"); "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "VACUUM cp_versions" >/dev/null 2>&1; for i in $(seq 1 300); do [ "$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG")" -gt "$n" ] && "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
\c
-- The crash came midway through the row's removals (else this proves nothing).
SELECT count(*) BETWEEN 1 AND 5000 AS partly_vacuumed FROM pasv.versions('cp_versions'::regclass);
SELECT count(*) AS deleted_rows_back FROM cp_versions;
SELECT count(*) AS verify_problems FROM pasv.verify('cp_versions'::regclass);
VACUUM cp_versions;
SELECT count(*) AS versions_after FROM pasv.versions('cp_versions'::regclass);
DROP TABLE cp_versions;
-- VACUUM dies between removing rows and removing their index entries.
DELETE FROM cp WHERE id BETWEEN 11 AND 20;
SELECT pasv.crash_point('vacuum_between_passes');
\! n=$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG"); "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "VACUUM cp" >/dev/null 2>&1; for i in $(seq 1 300); do [ "$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG")" -gt "$n" ] && "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
\c
SET enable_seqscan = off;
SELECT count(*) AS by_index FROM cp WHERE id BETWEEN 1 AND 2000;
RESET enable_seqscan;
SELECT count(*) AS by_scan FROM cp;
INSERT INTO cp VALUES (15, 'after the vacuum crash');
SELECT count(*) AS verify_problems FROM pasv.verify('cp'::regclass);
-- VACUUM FREEZE dies after its re-packs reached disk, before it committed:
-- the packs now fold the removals and frozen copies of a VACUUM that never
-- committed (the removed versions were dead to everyone, the frozen ones
-- committed), and every row reads as before, by scan and by key.
CREATE TABLE cp_packed (id int8 PRIMARY KEY, v int4) USING pasv;
INSERT INTO cp_packed SELECT g, g FROM generate_series(1, 3000) g;
DELETE FROM cp_packed WHERE id % 5 = 0;
UPDATE cp_packed SET v = -v WHERE id % 7 = 0;
SELECT count(*), sum(v) FROM cp_packed;
SELECT pasv.crash_point('vacuum_repacked');
\! n=$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG"); "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "VACUUM (FREEZE) cp_packed" >/dev/null 2>&1; for i in $(seq 1 300); do [ "$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG")" -gt "$n" ] && "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
\c
SELECT count(*), sum(v) FROM cp_packed;
SET enable_seqscan = off;
SELECT count(*), sum(v) FROM cp_packed WHERE id BETWEEN 1 AND 3000;
RESET enable_seqscan;
SELECT count(*) AS verify_problems FROM pasv.verify('cp_packed'::regclass);
VACUUM cp_packed;
SELECT count(*), sum(v) FROM cp_packed;
DROP TABLE cp_packed;
-- VACUUM FREEZE dies after relfrozenxid moved (in place, durable) but
-- before it committed: no unfrozen version may be older than relfrozenxid.
UPDATE cp SET v = 'to freeze' WHERE id <= 50;
SELECT pasv.crash_point('vacuum_after_relfrozenxid');
\! n=$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG"); "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "VACUUM (FREEZE) cp" >/dev/null 2>&1; for i in $(seq 1 300); do [ "$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG")" -gt "$n" ] && "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
\c
SELECT count(*) AS verify_problems FROM pasv.verify('cp'::regclass);
SELECT count(*) FROM cp;
-- Replay dies midway (after 2 applied messages); the next recovery finishes.
INSERT INTO cp SELECT g, 'replayed' FROM generate_series(2001, 2100) g;
UPDATE cp SET v = 'replayed too' WHERE id <= 30;
INSERT INTO cp SELECT g, 'replayed' FROM generate_series(2101, 2200) g;
SELECT pasv.crash_point('replay_midway', 1);
\! n=$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG"); "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1; for i in $(seq 1 300); do [ "$(grep -c "all server processes terminated; reinitializing" "$PASV_TEST_LOG")" -gt "$n" ] && "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
\c
SELECT count(*), count(*) FILTER (WHERE v = 'replayed too') AS updated FROM cp;
SELECT count(*) AS verify_problems FROM pasv.verify('cp'::regclass);
SELECT pasv.clear_crash_points();
DROP TABLE cp;
-- Every point above fired, once (the server log says so).
\! grep -o "crash point [a-z_]* reached\|crash point reached after [0-9]* applied messages" "$PASV_TEST_LOG" | LC_ALL=C sort | uniq -c
