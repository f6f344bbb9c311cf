-- Row locks between sessions: NOWAIT, SKIP LOCKED, lock_timeout, shared
-- locks, serialization failures, and EvalPlanQual in READ COMMITTED.
CREATE TABLE q (id int PRIMARY KEY, v int) USING pasv;
INSERT INTO q SELECT g, 0 FROM generate_series(1, 6) g;

BEGIN;
SELECT id FROM q WHERE id <= 2 ORDER BY id FOR UPDATE;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM q WHERE id = 1 FOR UPDATE NOWAIT" 2>&1
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT string_agg(id::text, ',' ORDER BY id) FROM (SELECT id FROM q ORDER BY id FOR UPDATE SKIP LOCKED) s"
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET lock_timeout = '50ms'" -c "UPDATE q SET v = 1 WHERE id = 2" 2>&1
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "UPDATE q SET v = 3 WHERE id = 3"
COMMIT;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM q WHERE id = 1 FOR UPDATE NOWAIT"
SELECT id, v FROM q ORDER BY id;

-- Shared locks coexist; an exclusive one waits for them.
BEGIN;
SELECT id FROM q WHERE id = 4 FOR SHARE;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM q WHERE id = 4 FOR SHARE NOWAIT"
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM q WHERE id = 4 FOR UPDATE NOWAIT" 2>&1
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "DELETE FROM q WHERE id = 4 AND false"
COMMIT;

-- REPEATABLE READ: a row changed after the snapshot cannot be updated.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT v FROM q WHERE id = 5;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "UPDATE q SET v = 50 WHERE id = 5"
UPDATE q SET v = v + 1 WHERE id = 5;
\echo SQLSTATE :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT v FROM q WHERE id = 5;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "DELETE FROM q WHERE id = 5"
SELECT id FROM q WHERE id = 5 FOR UPDATE;
\echo SQLSTATE :LAST_ERROR_SQLSTATE
ROLLBACK;

-- READ COMMITTED: an UPDATE that waited for a concurrent one applies to the
-- new version (EvalPlanQual), so no update is lost. The other session
-- holds the row until we are waiting for it (bounded polls, then a bounded
-- wait for it to finish); the result is the same in either order.
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "SET application_name = 'pasv_bg'" -c "BEGIN" -c "UPDATE q SET v = v + 10 WHERE id = 6" -c "SELECT pg_sleep(1)" -c "COMMIT" > /dev/null 2>&1 &
DO $$ BEGIN
    FOR i IN 1..500 LOOP
        EXIT WHEN EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'pasv_bg' AND query LIKE '%pg_sleep%');
        PERFORM pg_sleep(0.01);
        PERFORM pg_stat_clear_snapshot();
    END LOOP;
END $$;
UPDATE q SET v = v + 1 WHERE id = 6;
DO $$ BEGIN
    FOR i IN 1..500 LOOP
        EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'pasv_bg');
        PERFORM pg_sleep(0.01);
        PERFORM pg_stat_clear_snapshot();
    END LOOP;
END $$;
SELECT v FROM q WHERE id = 6;
-- Same for a row that the other session moves (indexed column) meanwhile.
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "SET application_name = 'pasv_bg'" -c "BEGIN" -c "UPDATE q SET id = 60, v = v + 10 WHERE id = 6" -c "SELECT pg_sleep(1)" -c "COMMIT" > /dev/null 2>&1 &
DO $$ BEGIN
    FOR i IN 1..500 LOOP
        EXIT WHEN EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'pasv_bg' AND query LIKE '%pg_sleep%');
        PERFORM pg_sleep(0.01);
        PERFORM pg_stat_clear_snapshot();
    END LOOP;
END $$;
UPDATE q SET v = v + 1 WHERE v >= 11;
DO $$ BEGIN
    FOR i IN 1..500 LOOP
        EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'pasv_bg');
        PERFORM pg_sleep(0.01);
        PERFORM pg_stat_clear_snapshot();
    END LOOP;
END $$;
SELECT id, v FROM q ORDER BY id;
DROP TABLE q;

-- The same through a sequential scan of a table without indexes: the
-- writer's lock must not trust the row as its scan read it once another
-- transaction has written it since (the row locks' write epoch), or the
-- other session's update would be overwritten. Also for DELETE.
-- wait_bg(true): until the other session sleeps holding its rows;
-- wait_bg(false): until it has ended (bounded polls).
CREATE PROCEDURE wait_bg(sleeping bool) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..500 LOOP
        EXIT WHEN sleeping = EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'pasv_bg'
                                     AND (NOT sleeping OR query LIKE '%pg_sleep%'));
        PERFORM pg_sleep(0.01);
        PERFORM pg_stat_clear_snapshot();
    END LOOP;
END $$;
CREATE TABLE q2 (id int, v int) USING pasv;
INSERT INTO q2 SELECT g, 0 FROM generate_series(1, 50) g;
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "SET application_name = 'pasv_bg'" -c "BEGIN" -c "UPDATE q2 SET v = v + 10 WHERE id IN (6, 7)" -c "SELECT pg_sleep(1)" -c "COMMIT" > /dev/null 2>&1 &
CALL wait_bg(true);
UPDATE q2 SET v = v + 1 WHERE id BETWEEN 5 AND 8;
CALL wait_bg(false);
SELECT id, v FROM q2 WHERE id BETWEEN 4 AND 9 ORDER BY id;
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "SET application_name = 'pasv_bg'" -c "BEGIN" -c "UPDATE q2 SET v = 100 WHERE id = 20" -c "SELECT pg_sleep(1)" -c "COMMIT" > /dev/null 2>&1 &
CALL wait_bg(true);
DELETE FROM q2 WHERE id BETWEEN 19 AND 21 AND v < 100 RETURNING id, v;
CALL wait_bg(false);
SELECT id, v FROM q2 WHERE id BETWEEN 18 AND 22 ORDER BY id;
DROP TABLE q2;
DROP PROCEDURE wait_bg(bool);

-- Row locks are taken in shared memory; a transaction that locks more rows
-- than a bucket holds spills the rest to the engine's lock table. Another
-- session still finds every row locked (SKIP LOCKED skips them all, NOWAIT
-- fails), and after COMMIT none is.
CREATE TABLE many (id int PRIMARY KEY, v int) USING pasv;
INSERT INTO many SELECT g, 0 FROM generate_series(1, 150000) g;
SELECT value AS shared_before FROM pasv.engine_stats() WHERE counter = 'row_locks_shared' \gset
SELECT value AS spilled_before FROM pasv.engine_stats() WHERE counter = 'row_locks_spilled' \gset
BEGIN;
UPDATE many SET v = v + 1;
SELECT value > :shared_before AS some_locks_shared, value < :shared_before + 150000 AS not_all_shared
  FROM pasv.engine_stats() WHERE counter = 'row_locks_shared';
SELECT value > :spilled_before AS some_locks_spilled FROM pasv.engine_stats() WHERE counter = 'row_locks_spilled';
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT count(*) AS skipped_all FROM (SELECT id FROM many FOR UPDATE SKIP LOCKED) s"
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT count(*) AS shared_locks_get_none FROM (SELECT id FROM many FOR KEY SHARE SKIP LOCKED) s"
\! for id in 1 777 20000 39999; do "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM many WHERE id = $id FOR UPDATE NOWAIT" 2>&1 | head -1; done
COMMIT;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT count(*) AS none_locked FROM (SELECT id FROM many FOR UPDATE SKIP LOCKED) s"
SELECT count(*), sum(v) FROM many;
DROP TABLE many;

-- A DELETE or an in-place UPDATE made under a row lock stays in the
-- backend's buffer until its next engine call or COMMIT
-- (tam/rowops.rs::write_row_change). Another session's unique check must
-- still wait for the writer, as heap's waits for a deleter or updater in
-- progress (lock_timeout ends the wait here); a mere FOR UPDATE lock is not
-- waited for. The same steps on heap and on pasv, the same output.
CREATE TABLE uq_heap (k int PRIMARY KEY, v int) USING heap;
CREATE TABLE uq_pasv (k int PRIMARY KEY, v int) USING pasv;
INSERT INTO uq_heap SELECT g, 0 FROM generate_series(1, 3000) g;
INSERT INTO uq_pasv SELECT g, 0 FROM generate_series(1, 3000) g;

BEGIN;
DELETE FROM uq_heap WHERE k = 1;
UPDATE uq_heap SET v = 1 WHERE k = 2;
SELECT k FROM uq_heap WHERE k = 3 FOR UPDATE;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET lock_timeout = '200ms'" -c "INSERT INTO uq_heap VALUES (1, 10)" 2>&1 | grep -v '^CONTEXT'
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET lock_timeout = '200ms'" -c "INSERT INTO uq_heap VALUES (2, 20)" 2>&1 | grep -v '^CONTEXT'
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET lock_timeout = '200ms'" -c "INSERT INTO uq_heap VALUES (3, 30)" 2>&1 | grep -v '^CONTEXT' | sed 's/"uq_heap_pkey"/"pkey"/'
COMMIT;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "INSERT INTO uq_heap VALUES (1, 10)" -c "SELECT 'inserted after the delete committed'"
BEGIN;
DELETE FROM uq_heap WHERE k = 4;
ROLLBACK;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "INSERT INTO uq_heap VALUES (4, 40)" 2>&1 | grep -v '^CONTEXT' | sed 's/"uq_heap_pkey"/"pkey"/'
SELECT count(*), sum(k), sum(v) FROM uq_heap;

BEGIN;
DELETE FROM uq_pasv WHERE k = 1;
UPDATE uq_pasv SET v = 1 WHERE k = 2;
SELECT k FROM uq_pasv WHERE k = 3 FOR UPDATE;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET lock_timeout = '200ms'" -c "INSERT INTO uq_pasv VALUES (1, 10)" 2>&1 | grep -v '^CONTEXT'
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET lock_timeout = '200ms'" -c "INSERT INTO uq_pasv VALUES (2, 20)" 2>&1 | grep -v '^CONTEXT'
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET lock_timeout = '200ms'" -c "INSERT INTO uq_pasv VALUES (3, 30)" 2>&1 | grep -v '^CONTEXT' | sed 's/"uq_pasv_pkey"/"pkey"/'
COMMIT;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "INSERT INTO uq_pasv VALUES (1, 10)" -c "SELECT 'inserted after the delete committed'"
BEGIN;
DELETE FROM uq_pasv WHERE k = 4;
ROLLBACK;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "INSERT INTO uq_pasv VALUES (4, 40)" 2>&1 | grep -v '^CONTEXT' | sed 's/"uq_pasv_pkey"/"pkey"/'
SELECT count(*), sum(k), sum(v) FROM uq_pasv;
-- Buffered, a DELETE of 300 rows sends a few requests, not one per row.
CREATE TABLE uq_posted0 USING heap AS SELECT posted FROM pasv.channel_stats('backend') WHERE request = 'put_batch';
DELETE FROM uq_pasv WHERE k % 10 = 0;
SELECT posted - (SELECT posted FROM uq_posted0) < 10 AS few_requests FROM pasv.channel_stats('backend') WHERE request = 'put_batch';
DELETE FROM uq_heap WHERE k % 10 = 0;
SELECT (SELECT string_agg(k || ':' || v, ',' ORDER BY k) FROM uq_heap) = (SELECT string_agg(k || ':' || v, ',' ORDER BY k) FROM uq_pasv) AS same_rows;
DROP TABLE uq_heap, uq_pasv, uq_posted0;
-- A transaction that locks many rows keeps its locks in shared memory: the
-- table has 2 048 entries a possible backend, so a DELETE of 100 000 rows
-- spills only the few that meet a full bucket to the engine's table (with
-- a quarter of the entries, 5 664 of them spilled, each a round trip).
CREATE TABLE many_locks (id int) USING pasv;
INSERT INTO many_locks SELECT g FROM generate_series(1, 100000) g;
CREATE TEMP TABLE lock_calls0 USING heap AS
    SELECT coalesce(sum(calls), 0) AS calls FROM pasv.channel_stats('backend') WHERE request = 'lock_row';
DELETE FROM many_locks;
SELECT sum(calls) - (SELECT calls FROM lock_calls0) < 200 AS few_spilled
    FROM pasv.channel_stats('backend') WHERE request = 'lock_row';
SELECT count(*) FROM many_locks;
DROP TABLE many_locks, lock_calls0;
