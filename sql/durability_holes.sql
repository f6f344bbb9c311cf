-- Durability holes found by review (each failed before its fix): after
-- pg_ctl -m immediate, every acknowledged commit is back, nothing aborted or
-- truncated comes back, and no rowid or version is handed out twice.
CREATE TABLE dh_b1 (id int) USING pasv;
CREATE TABLE dh_b1x (id int) USING pasv;
CREATE TABLE dh_b6 (k int PRIMARY KEY, v text) USING pasv;
CREATE TABLE dh_b7 (id int, v text) USING pasv;
-- Bounded wait until this database's slot protects its writes.
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN EXISTS (SELECT 1 FROM pasv.database_status
                       WHERE datname = current_database() AND slot_state = 'ready');
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT slot_state FROM pasv.database_status WHERE datname = current_database();

-- 1. Buffered rows of a transaction are sent by the first engine call inside
-- its subtransaction; if that subtransaction aborts, their log must not go
-- with it.
BEGIN;
INSERT INTO dh_b1 VALUES (1);
SAVEPOINT s;
SELECT count(*) FROM dh_b1x;
ROLLBACK TO s;
COMMIT;
-- The same through a PL/pgSQL exception block.
DO $$
BEGIN
  INSERT INTO dh_b1 VALUES (2);
  BEGIN
    PERFORM count(*) FROM dh_b1x;
    RAISE EXCEPTION 'roll back the block';
  EXCEPTION WHEN others THEN NULL;
  END;
END $$;
-- Rows of a released savepoint, sent under a deeper one that aborts, twice.
BEGIN;
SAVEPOINT a;
INSERT INTO dh_b1 VALUES (3);
SAVEPOINT b;
SELECT count(*) FROM dh_b1x;
ROLLBACK TO b;
SELECT count(*) FROM dh_b1x;
ROLLBACK TO b;
RELEASE a;
COMMIT;
-- Rows of an aborted savepoint stay dead, whoever sent them.
BEGIN;
SAVEPOINT a;
INSERT INTO dh_b1 VALUES (-4);
SAVEPOINT b;
SELECT count(*) FROM dh_b1x;
RELEASE b;
ROLLBACK TO a;
INSERT INTO dh_b1 VALUES (4);
COMMIT;

-- 2. TRUNCATE inside the creating transaction: the emptied rows must not
-- come back (their messages precede the new incarnation's creation point).
BEGIN;
CREATE TABLE dh_b4 (id int PRIMARY KEY) USING pasv;
INSERT INTO dh_b4 SELECT generate_series(1, 10);
TRUNCATE dh_b4;
INSERT INTO dh_b4 VALUES (100);
COMMIT;
BEGIN;
CREATE TABLE dh_b5 (id int) USING pasv;
INSERT INTO dh_b5 SELECT generate_series(1, 10);
TRUNCATE dh_b5;
INSERT INTO dh_b5 SELECT generate_series(11, 15);
TRUNCATE dh_b5;
INSERT INTO dh_b5 SELECT generate_series(21, 23);
COMMIT;
-- The same with the emptied rows sent before the TRUNCATE (a read sends
-- them): their message is the last WAL record before the new incarnation's
-- creation point and ends exactly at it; replay must not apply it to the
-- new incarnation (it did: rows 14 and 15 came back at rowids the new rows
-- did not overwrite).
BEGIN;
CREATE TABLE dh_b8 (id int) USING pasv;
INSERT INTO dh_b8 SELECT generate_series(1, 10);
TRUNCATE dh_b8;
INSERT INTO dh_b8 SELECT generate_series(11, 15);
SELECT count(*) FROM dh_b8;
TRUNCATE dh_b8;
INSERT INTO dh_b8 SELECT generate_series(21, 23);
COMMIT;

-- VACUUM FULL of a table with TOAST values: recovery decodes the WAL it
-- wrote (decoding failed on its TOAST inserts, which it cannot map to a
-- relation, so recovery never finished).
CREATE TABLE dh_toast (id int PRIMARY KEY, t text) USING pasv;
INSERT INTO dh_toast SELECT g, (SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 1250) i)
  FROM generate_series(1, 20) g;
VACUUM FULL dh_toast;
INSERT INTO dh_toast VALUES (21, 'after the rewrite');

-- 3. An insert in flight at the crash: its btree entries survive (PostgreSQL
-- WAL), its rows do not; their rowids must never be handed out again.
INSERT INTO dh_b6 VALUES (1, 'one');
BEGIN;
INSERT INTO dh_b6 SELECT g, 'in flight' FROM generate_series(100, 199) g;
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
SELECT count(*), sum(length(t)) FROM dh_toast;
SELECT * FROM dh_b1 ORDER BY id;
SELECT count(*), sum(id) FROM dh_b4;
SELECT array_agg(id ORDER BY id) FROM dh_b5;
SELECT array_agg(id ORDER BY id) FROM dh_b8;
INSERT INTO dh_b6 VALUES (2, 'two'), (3, 'three');
INSERT INTO dh_b6 VALUES (101, 'after the crash');
SET enable_seqscan = off;
SELECT * FROM dh_b6 WHERE k IN (1, 2, 3, 101) ORDER BY k;
SELECT count(*) AS in_flight_rows FROM dh_b6 WHERE v = 'in flight';
RESET enable_seqscan;
SELECT count(*) AS verify_problems FROM pasv.verify('dh_b6'::regclass);

-- 4. A clean stop while recovery is still running must not mark the store
-- clean: the next start recovers again. (The test hook makes the replay
-- worker wait, recovering, until the server stops.)
INSERT INTO dh_b7 SELECT g, 'memtable only' FROM generate_series(1, 1000) g;
\! echo replay_stall > "$PASV_TEST_PGDATA/pasv_crash_point"
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
-- (bounded wait until the replay worker took the hook: it is recovering)
\! for i in $(seq 1 300); do [ -e "$PASV_TEST_PGDATA/pasv_crash_point" ] || break; sleep 0.1; done
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m fast -w -t 60 stop > /dev/null 2>&1
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -w start > /dev/null 2>&1
\c
SELECT count(*) FROM dh_b7;
SELECT count(*) AS verify_problems FROM pasv.verify('dh_b7'::regclass);

-- 13. A recovery that fails again and again: after a few attempts backends
-- get an ERROR with a HINT instead of waiting forever; pasv.retry_recovery()
-- starts it again once the cause is gone. (The test hook makes every
-- recovery fail while the file exists.)
INSERT INTO dh_b7 SELECT g, 'memtable only' FROM generate_series(1001, 1500) g;
\! echo replay_fail > "$PASV_TEST_PGDATA/pasv_crash_point"
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
SELECT count(*) FROM dh_b7;
SELECT recovering FROM pasv.database_status WHERE datname = current_database();
\! rm "$PASV_TEST_PGDATA/pasv_crash_point"
SELECT pasv.retry_recovery();
SELECT count(*) FROM dh_b7;
SELECT pasv.retry_recovery() AS nothing_to_retry;
DROP TABLE dh_b1, dh_b1x, dh_b4, dh_b5, dh_b6, dh_b7, dh_b8, dh_toast;
