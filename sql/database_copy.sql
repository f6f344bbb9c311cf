-- CREATE DATABASE ... TEMPLATE db copies db's pasv tables (issue 10, item
-- 6; src/database_copy.rs): same rows, indexes that still find them, new
-- rowids that do not collide, durable across a crash. The template's
-- replay worker leaves for the statement and comes back, also when the
-- statement fails.
\getenv origdb PASV_TEST_DB
-- Bounded wait until database db's replay worker runs.
CREATE FUNCTION cp_worker_runs(db name) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();
    IF EXISTS (SELECT 1 FROM pasv.database_status WHERE datname = db AND worker_pid IS NOT NULL) THEN
      RETURN true;
    END IF;
    PERFORM pg_sleep(0.05);
  END LOOP;
  RETURN false;
END $$;
CREATE DATABASE dbcopy_src;
\c dbcopy_src
CREATE EXTENSION pasv;
CREATE TABLE cp_t (id int PRIMARY KEY, k int, v text) USING pasv;
CREATE INDEX cp_t_k ON cp_t (k);
INSERT INTO cp_t SELECT g, g % 97, 'row ' || g FROM generate_series(1, 3000) g;
UPDATE cp_t SET v = v || ' updated', k = k + 1 WHERE id % 5 = 0;
DELETE FROM cp_t WHERE id % 11 = 0;
BEGIN;
SAVEPOINT s;
INSERT INTO cp_t VALUES (-1, 0, 'rolled back');
ROLLBACK TO s;
INSERT INTO cp_t VALUES (-2, 0, 'kept');
COMMIT;
CREATE UNLOGGED TABLE cp_u (id int) USING pasv;
INSERT INTO cp_u SELECT generate_series(1, 10);
CREATE TABLE cp_h (id int) USING heap;
INSERT INTO cp_h VALUES (42);
CREATE VIEW cp_summary AS
  SELECT (SELECT count(*) FROM cp_t) AS rows, (SELECT sum(id) FROM cp_t) AS ids,
         (SELECT sum(k) FROM cp_t) AS ks, (SELECT sum(length(v)) FROM cp_t) AS chars,
         (SELECT count(*) FROM cp_u) AS unlogged_rows, (SELECT sum(id) FROM cp_h) AS heap_ids;
SELECT * FROM cp_summary;
\c :origdb
-- The template's replay worker runs: the copy must send it away
-- (PostgreSQL refuses a template others are connected to).
SELECT cp_worker_runs('dbcopy_src') AS template_worker_runs;
CREATE DATABASE dbcopy_a TEMPLATE dbcopy_src;
-- A statement that fails after the worker was sent away: it comes back.
CREATE DATABASE dbcopy_a TEMPLATE dbcopy_src;
SELECT cp_worker_runs('dbcopy_src') AS template_worker_back;
\c dbcopy_a
SELECT * FROM cp_summary;
-- The copied indexes find the copied rows.
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id, k, v FROM cp_t WHERE id IN (5, 6, 11, -1, -2) ORDER BY id;
SELECT count(*) FROM cp_t WHERE k = 3;
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT count(*) FROM cp_t WHERE k = 3;
-- New rows get rowids of their own: nothing copied is overwritten.
INSERT INTO cp_t SELECT g, -g, 'new' FROM generate_series(3001, 3100) g;
UPDATE cp_t SET v = 'changed in the copy' WHERE id = 1;
SELECT * FROM cp_summary;
SELECT * FROM pasv.verify('cp_t');
\c dbcopy_src
-- The template is unchanged by what the copy did.
SELECT * FROM cp_summary;
SELECT v FROM cp_t WHERE id = 1;
-- A crash: the copy is durable, and its own later writes come back.
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c dbcopy_a
SELECT * FROM cp_summary;
SELECT v FROM cp_t WHERE id = 1;
\c dbcopy_src
SELECT rows, ids, ks, chars, heap_ids FROM cp_summary;
-- A template whose pasv tables were all dropped still has its worker: the
-- copy sends it away too.
CREATE DATABASE dbcopy_dropped;
\c dbcopy_dropped
CREATE EXTENSION pasv;
CREATE TABLE cp_gone (id int) USING pasv;
INSERT INTO cp_gone VALUES (1);
DROP TABLE cp_gone;
\c :origdb
SELECT cp_worker_runs('dbcopy_dropped') AS worker_runs;
CREATE DATABASE dbcopy_b TEMPLATE dbcopy_dropped;
\c dbcopy_b
SELECT count(*) AS pasv_tables FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE a.amname = 'pasv';
\c :origdb
DROP DATABASE dbcopy_a;
DROP DATABASE dbcopy_b;
DROP DATABASE dbcopy_dropped;
DROP DATABASE dbcopy_src;
DROP FUNCTION cp_worker_runs(name);
