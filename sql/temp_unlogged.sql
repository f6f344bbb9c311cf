-- Temporary and UNLOGGED pasv tables (issue 10, item 2): they work like
-- heap's, write no pasv messages to PostgreSQL's WAL, get no flush flags,
-- keep their rows through a clean restart (unlogged) and come back empty
-- after a crash; a temporary table's storage goes with its session.
SET default_table_access_method = pasv;
CREATE TEMP TABLE tt (id int PRIMARY KEY, v text);
INSERT INTO tt SELECT g, 'v' || g FROM generate_series(1, 1000) g;
UPDATE tt SET v = 'updated' WHERE id % 10 = 0;
DELETE FROM tt WHERE id % 7 = 0;
SELECT count(*), count(*) FILTER (WHERE v = 'updated') AS updated, sum(id) FROM tt;
SET enable_seqscan = off;
SELECT v FROM tt WHERE id = 20;
RESET enable_seqscan;
-- Savepoints: the aborted subtransaction's rows stay invisible.
BEGIN;
INSERT INTO tt VALUES (-1, 'kept');
SAVEPOINT s;
INSERT INTO tt VALUES (-2, 'rolled back');
UPDATE tt SET v = 'rolled back' WHERE id = 1;
ROLLBACK TO s;
COMMIT;
SELECT id, v FROM tt WHERE id IN (-2, -1, 1) ORDER BY id;
-- ON COMMIT DELETE ROWS and ON COMMIT DROP.
BEGIN;
CREATE TEMP TABLE t_rows (a int) ON COMMIT DELETE ROWS;
INSERT INTO t_rows VALUES (1), (2);
SELECT count(*) AS before_commit FROM t_rows;
COMMIT;
SELECT count(*) AS after_commit FROM t_rows;
BEGIN;
CREATE TEMP TABLE t_drop (a int) ON COMMIT DROP;
INSERT INTO t_drop VALUES (1);
COMMIT;
SELECT to_regclass('t_drop') IS NULL AS dropped;
-- Each kind has its own column-family name: u. for unlogged and temporary.
CREATE UNLOGGED TABLE ul (id int PRIMARY KEY, v text);
CREATE TABLE lg (id int PRIMARY KEY, v text);
SELECT c.relname, left(f.cf_name, 2) AS kind
  FROM pasv.column_families() f JOIN pg_class c ON c.relfilenode = f.relfilenumber
 WHERE c.relname IN ('tt', 'ul', 'lg') ORDER BY 1;
-- No pasv messages: 2 000 rows of 200 bytes would be ~400 kB of WAL.
SELECT pg_current_wal_insert_lsn() AS lsn0 \gset
INSERT INTO ul SELECT g, repeat('u', 200) FROM generate_series(1, 2000) g;
INSERT INTO tt SELECT g, repeat('t', 200) FROM generate_series(2001, 4000) g;
SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'lsn0') < 65536 AS little_wal;
SELECT pg_current_wal_insert_lsn() AS lsn0 \gset
INSERT INTO lg SELECT g, repeat('l', 200) FROM generate_series(1, 2000) g;
SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'lsn0') > 400000 AS logged_table_logs;
-- SET LOGGED / SET UNLOGGED rewrite the table into the other kind.
ALTER TABLE ul SET LOGGED;
SELECT relpersistence, (SELECT count(*) FROM ul) FROM pg_class WHERE relname = 'ul';
ALTER TABLE ul SET UNLOGGED;
SELECT relpersistence, (SELECT count(*) FROM ul) FROM pg_class WHERE relname = 'ul';
-- A temporary table's storage goes when its session ends.
CREATE TABLE temp_cf AS SELECT pg_relation_filenode('tt') AS rel;
\c
SET default_table_access_method = pasv;
DO $$
BEGIN
  FOR i IN 1..400 LOOP
    EXIT WHEN NOT EXISTS (SELECT 1 FROM pasv.column_families() f, temp_cf t WHERE f.relfilenumber = t.rel);
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT count(*) AS temp_cf_left FROM pasv.column_families() f, temp_cf t WHERE f.relfilenumber = t.rel;
-- A clean restart keeps an unlogged table's rows.
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m fast -w restart > /dev/null 2>&1
\c
SELECT count(*) AS unlogged_after_clean_restart FROM ul;
-- A crash empties it (flushed rows too), and its index; logged rows stay.
SELECT pasv.flush_table('ul'::regclass);
INSERT INTO ul SELECT g, 'memtable' FROM generate_series(2001, 2100) g;
INSERT INTO lg VALUES (0, 'committed before the crash');
CREATE TEMP TABLE t_crash (a int);
INSERT INTO t_crash VALUES (1);
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
SET default_table_access_method = pasv;
SELECT count(*) AS unlogged_after_crash FROM ul;
SET enable_seqscan = off;
SELECT count(*) AS by_index FROM ul WHERE id = 5;
RESET enable_seqscan;
SELECT count(*) AS logged_after_crash, count(*) FILTER (WHERE id = 0) AS last_commit FROM lg;
-- The emptied table takes new rows, and new temporary tables work.
INSERT INTO ul VALUES (5, 'after the crash');
SELECT * FROM ul;
CREATE TEMP TABLE tt2 (a int PRIMARY KEY);
INSERT INTO tt2 SELECT generate_series(1, 10);
SELECT count(*) FROM tt2;
DROP TABLE ul, lg, temp_cf;
-- PREPARE after using temporary objects: PostgreSQL's own refusal, as on heap.
BEGIN;
INSERT INTO tt2 VALUES (11);
PREPARE TRANSACTION 'pasv_temp';
SELECT count(*) FROM tt2;
