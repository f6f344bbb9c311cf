-- ALTER TABLE ... SET TABLESPACE on pasv tables (issue 10, item 4): the
-- table gets a new relfilenumber and the engine copies every row version
-- (same rowids, so indexes stay valid), durably; an aborted move changes
-- nothing; the old column family goes at commit.
SET allow_in_place_tablespaces = true;
CREATE TABLESPACE pasv_ts LOCATION '';
CREATE TABLE ts_t (id int PRIMARY KEY, v text) USING pasv;
INSERT INTO ts_t SELECT g, 'v' || g FROM generate_series(1, 2000) g;
UPDATE ts_t SET v = 'updated' WHERE id % 10 = 0;
DELETE FROM ts_t WHERE id % 7 = 0;
SELECT pasv.flush_table('ts_t'::regclass);
-- Rows that live only in the memtable at the move.
INSERT INTO ts_t SELECT g, 'memtable' FROM generate_series(2001, 2100) g;
CREATE TABLE ts_before AS
  SELECT count(*) AS n, sum(id) AS s, count(*) FILTER (WHERE v = 'updated') AS u FROM ts_t;
SELECT pg_relation_filenode('ts_t') AS old_rel \gset
ALTER TABLE ts_t SET TABLESPACE pasv_ts;
SELECT t.spcname FROM pg_class c JOIN pg_tablespace t ON t.oid = c.reltablespace WHERE c.relname = 'ts_t';
SELECT (SELECT row(n, s, u) FROM ts_before) = (SELECT row(count(*), sum(id), count(*) FILTER (WHERE v = 'updated')) FROM ts_t)
  AS same_rows;
SELECT count(*) AS old_cf_left FROM pasv.column_families() WHERE relfilenumber = :old_rel;
-- The index kept its TIDs.
SET enable_seqscan = off;
SELECT id, v FROM ts_t WHERE id IN (10, 11, 14, 2050) ORDER BY id;
ALTER INDEX ts_t_pkey SET TABLESPACE pasv_ts;
SELECT id, v FROM ts_t WHERE id IN (10, 11, 14, 2050) ORDER BY id;
RESET enable_seqscan;
-- New rows continue above every rowid the old table handed out.
INSERT INTO ts_t VALUES (5000, 'after the move');
SELECT (SELECT ctid FROM ts_t WHERE id = 5000) > (SELECT max(ctid) FROM ts_t WHERE id < 5000) AS new_rowid_above;
-- An aborted move changes nothing.
SELECT pg_relation_filenode('ts_t') AS cur_rel \gset
BEGIN;
ALTER TABLE ts_t SET TABLESPACE pg_default;
INSERT INTO ts_t VALUES (5001, 'rolled back');
ROLLBACK;
SELECT pg_relation_filenode('ts_t') = :cur_rel AS same_relfilenode, count(*) AS rows FROM ts_t;
SELECT count(*) AS cfs_of_table FROM pasv.column_families() f
 WHERE f.relfilenumber = pg_relation_filenode('ts_t');
-- A crash after the move: nothing lost.
INSERT INTO ts_t VALUES (5002, 'committed before the crash');
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
SELECT count(*) AS rows_after_crash, count(*) FILTER (WHERE id >= 5000) AS new_rows FROM ts_t;
-- Back to the default tablespace, then the tablespace can go.
ALTER TABLE ts_t SET TABLESPACE pg_default;
ALTER INDEX ts_t_pkey SET TABLESPACE pg_default;
SELECT count(*) FROM ts_t;
DROP TABLESPACE pasv_ts;
DROP TABLE ts_t, ts_before;
