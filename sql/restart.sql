-- A clean restart keeps every committed row (memtables are flushed at
-- shutdown) and nothing uncommitted.
CREATE TABLE survivor (id int, v text) USING pasv;
INSERT INTO survivor SELECT g, md5(g::text) FROM generate_series(1, 50000) g;
CREATE INDEX survivor_id ON survivor (id);
BEGIN;
INSERT INTO survivor VALUES (-1, 'uncommitted at shutdown');
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m fast -w restart > /dev/null
\c
SELECT count(*), sum(id), count(*) FILTER (WHERE v <> md5(id::text)) AS damaged FROM survivor;
SELECT count(*) AS uncommitted FROM survivor WHERE id = -1;
SET enable_seqscan = off;
SELECT v FROM survivor WHERE id = 31337;
RESET enable_seqscan;
-- New rows after the restart get fresh rowids (no TID collides).
INSERT INTO survivor VALUES (50001, 'after restart');
SELECT count(*), count(DISTINCT ctid) FROM survivor;
DROP TABLE survivor;
-- A row updated again and again by transactions that abort after sending
-- their writes keeps a run of deleted versions between its newest version
-- (aborted) and its visible one. After a restart (nothing cached) a read
-- of the row's newest versions stopped at that run and answered with the
-- aborted head alone: the row cache then held that as the whole row, and
-- an UPDATE or DELETE found "no live version under the row lock" (55000).
CREATE TABLE churned (k int PRIMARY KEY, v int) USING pasv;
INSERT INTO churned SELECT g, 0 FROM generate_series(1, 10) g;
\set ECHO none
\o /dev/null
SELECT 'BEGIN; UPDATE churned SET v = v + 1 WHERE k IN (4, 5, 6); '
       'SELECT count(*) FROM churned WHERE k IN (4, 5, 6); ROLLBACK;'
  FROM generate_series(1, 30) \gexec
\o
\set ECHO all
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m fast -w restart > /dev/null
\c
SELECT max(version) AS newest_aborted_version FROM pasv.versions('churned'::regclass);
SELECT k, v FROM churned WHERE k = 4;
UPDATE churned SET v = v + 100 WHERE k = 4;
DELETE FROM churned WHERE k = 5;
SELECT k, v FROM churned WHERE k = 6 FOR UPDATE;
SELECT k, v FROM churned ORDER BY k;
DROP TABLE churned;
-- VACUUM (FREEZE) freezes a row's oldest version while a newer one is not
-- yet visible to everyone (here: prepared before a restart, committed
-- after). Its batch puts only that row's version 0, which the engine took
-- for a new row and cached as the row's whole answer (the restart left the
-- row uncached): index fetches read the frozen old version and missed the
-- committed update, and an UPDATE found "no live version under the row
-- lock" (the CI's diffcrash failure, with VACUUM (FREEZE) in its load).
CREATE TABLE fz (k int PRIMARY KEY, v int) USING pasv;
INSERT INTO fz VALUES (1, 1), (2, 1);
BEGIN;
UPDATE fz SET v = 2 WHERE k = 1;
PREPARE TRANSACTION 'fz_update';
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m fast -w restart > /dev/null
\c
VACUUM (FREEZE) fz;
COMMIT PREPARED 'fz_update';
SET enable_seqscan = off;
SELECT k, v FROM fz WHERE k = 1;
UPDATE fz SET v = v + 10 WHERE k = 1 RETURNING k, v;
RESET enable_seqscan;
SELECT k, v FROM fz ORDER BY k;
DROP TABLE fz;
