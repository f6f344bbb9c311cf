-- Sequential scans of a table without indexes remove the rows they find
-- deleted or moved away for every snapshot (src/tam/scan_prune.rs), as heap
-- prunes the pages it reads: a small table updated row by row keeps its
-- scans short without waiting for VACUUM.
SET pasv.move_unindexed_updates = on;
CREATE TABLE sp (id int, v int) USING pasv;
INSERT INTO sp SELECT g, 0 FROM generate_series(1, 10) g;
-- Five rounds, each its own transaction: every round moves the ten rows
-- (a new version at a new rowid, a tombstone at the old one), and its own
-- scan removes what the round before left behind (one key a row when it
-- is removed, three while it is not: the old version, the tombstone, the
-- moved row).
UPDATE sp SET v = v + 1;
UPDATE sp SET v = v + 1;
UPDATE sp SET v = v + 1;
UPDATE sp SET v = v + 1;
UPDATE sp SET v = v + 1;
SELECT pasv.table_versions('sp'::regclass) AS after_updates;
SELECT count(*), sum(v) FROM sp;
SELECT pasv.table_versions('sp'::regclass) AS after_a_scan;

-- A snapshot that still sees the old versions keeps them: the scans under
-- it return the rows as they were and remove nothing they need.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*), sum(v) FROM sp;
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "SET pasv.move_unindexed_updates = on" -c "UPDATE sp SET v = v + 100" -c "DELETE FROM sp WHERE id > 8"
SELECT count(*), sum(v) FROM sp;
SELECT count(*), sum(v) FROM sp;
COMMIT;
SELECT pasv.table_versions('sp'::regclass) AS kept_for_the_snapshot;
SELECT count(*), sum(v) FROM sp;
SELECT pasv.table_versions('sp'::regclass) AS removed_after_it;

-- An update rolled back leaves the row where it was (its tombstone
-- aborted), and nothing of it is removed but what is dead.
BEGIN;
UPDATE sp SET v = -1 WHERE id = 1;
ROLLBACK;
SELECT count(*), sum(v) FROM sp;
SELECT id, v FROM sp WHERE id = 1;

-- The removals are not logged: after a crash the rows are what they were
-- (removed ones may come back, dead as before, until the next scan), and
-- VACUUM and the consistency check find nothing wrong.
UPDATE sp SET v = v + 1000 WHERE id <= 4;
SELECT count(*), sum(v) FROM sp;
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
SELECT count(*), sum(v) FROM sp;
SELECT string_agg(id || ':' || v, ' ') AS rows_in_scan_order FROM sp;
SELECT pasv.table_versions('sp'::regclass) AS after_crash_and_scan;
VACUUM sp;
SELECT count(*), sum(v) FROM sp;
SELECT * FROM pasv.verify('sp'::regclass);

-- A table with an index keeps its dead rows for VACUUM, which removes
-- their index entries with them.
SET pasv.move_unindexed_updates = on;
CREATE TABLE sp_ix (id int, v int) USING pasv;
CREATE INDEX ON sp_ix (v);
INSERT INTO sp_ix SELECT g, 0 FROM generate_series(1, 10) g;
UPDATE sp_ix SET v = v + 1;
DELETE FROM sp_ix WHERE id > 5;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
SELECT count(*) FROM sp_ix;
SELECT count(*) FROM sp_ix;
SELECT pasv.table_versions('sp_ix'::regclass) AS indexed_keeps;
VACUUM sp_ix;
SELECT pasv.table_versions('sp_ix'::regclass) AS after_vacuum;
RESET enable_indexscan;
RESET enable_bitmapscan;

-- In a table with indexes, an UPDATE that changes no indexed column moves
-- the row to a new member of its heap-only chain; sequential scans remove
-- the members that moved on, once no snapshot needs them (no index entry
-- names a member). The chain's root keeps its redirects for VACUUM.
CREATE TABLE sp_hot (id int PRIMARY KEY, v int) USING pasv;
INSERT INTO sp_hot VALUES (1, 0), (2, 0);
-- The rowids holding versions, and a sequential scan of the table.
CREATE VIEW sp_hot_rowids AS SELECT count(DISTINCT rowid) AS rowids FROM pasv.versions('sp_hot'::regclass);
CREATE FUNCTION sp_hot_seqscan() RETURNS TABLE (id int, v int) LANGUAGE sql
  SET enable_indexscan = off SET enable_bitmapscan = off
  AS 'SELECT id, v FROM sp_hot ORDER BY id';
\set ECHO none
SELECT 'UPDATE sp_hot SET v = v + 1 WHERE id = 1' FROM generate_series(1, 40) \gexec
\set ECHO all
SELECT rowids AS after_updates FROM sp_hot_rowids;
SELECT * FROM sp_hot_seqscan();
-- The two roots and row 1's newest member.
SELECT rowids AS after_a_scan FROM sp_hot_rowids;
SELECT v FROM sp_hot WHERE id = 1;
SELECT * FROM pasv.verify('sp_hot'::regclass);

-- A snapshot older than the moves keeps the members it may still reach, by
-- the index (root, then its redirect) or by a scan, while another session
-- scans; they go after it ends.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT v FROM sp_hot WHERE id = 2;
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "UPDATE sp_hot SET v = v + 1 WHERE id = 2" -c "UPDATE sp_hot SET v = v + 1 WHERE id = 2" -c "UPDATE sp_hot SET v = v + 1 WHERE id = 2" -c "SELECT count(*) FROM sp_hot_seqscan()" > /dev/null
SELECT v FROM sp_hot WHERE id = 2;
SELECT * FROM sp_hot_seqscan();
COMMIT;
SELECT rowids AS kept_for_the_snapshot FROM sp_hot_rowids;
SELECT * FROM sp_hot_seqscan();
SELECT rowids AS removed_after_it FROM sp_hot_rowids;
SELECT id, v FROM sp_hot WHERE id IN (1, 2) ORDER BY id;

-- A removal reaches disk only after the commits that made its rows dead,
-- asynchronous ones included: a crash right after the flush that
-- persisted it finds the row at its last update, not gone.
SET synchronous_commit = off;
UPDATE sp_hot SET v = 100 WHERE id = 1;
UPDATE sp_hot SET v = 101 WHERE id = 1;
SELECT count(*) FROM sp_hot_seqscan();
SELECT pasv.flush_table('sp_hot'::regclass::oid);
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
SELECT id, v FROM sp_hot WHERE id = 1;
SELECT * FROM sp_hot_seqscan();
VACUUM sp_hot;
SELECT * FROM pasv.verify('sp_hot'::regclass);
SELECT * FROM sp_hot_seqscan();

DROP VIEW sp_hot_rowids;
DROP FUNCTION sp_hot_seqscan();
DROP TABLE sp, sp_ix, sp_hot;
RESET pasv.move_unindexed_updates;

-- Index fetches prune the roots of heap-only chains they read (as heap
-- prunes the page of a HOT chain it reads): a root's versions below a
-- redirect every snapshot sees (its original row, the redirects before)
-- are removed when the fetch ends, so an updated row's root is one key
-- again without VACUUM; a transaction posts them once it has noted at
-- least 16 (fewer are left for VACUUM: a post costs a point select more
-- than the removal saves). Every step is checked against a heap twin.
-- Removal needs the updates gone for every snapshot: before each scan
-- that should remove, wait (bounded) until no other process holds an
-- older snapshot (pasv's replay worker reads catalogs in short
-- transactions of its own).
CREATE PROCEDURE pg_temp.wait_for_horizon() LANGUAGE plpgsql AS $$
DECLARE
  horizon bigint := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
BEGIN
  FOR i IN 1..2000 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN NOT EXISTS (SELECT FROM pg_stat_activity
                           WHERE pid <> pg_backend_pid() AND backend_xmin::text::bigint < horizon);
    PERFORM pg_sleep(0.005);
  END LOOP;
END $$;
CREATE TABLE sp_root (id int PRIMARY KEY, n int, pad text) USING pasv;
CREATE TABLE sp_root_heap (id int PRIMARY KEY, n int, pad text) USING heap;
INSERT INTO sp_root SELECT g, 0, repeat('x', 50) FROM generate_series(1, 100) g;
INSERT INTO sp_root_heap SELECT * FROM sp_root;
CREATE FUNCTION sp_root_same() RETURNS boolean LANGUAGE sql AS $$
  SELECT (SELECT array_agg(n ORDER BY id) FROM sp_root) IS NOT DISTINCT FROM (SELECT array_agg(n ORDER BY id) FROM sp_root_heap)
$$;
UPDATE sp_root SET n = n + 1 WHERE id <= 50;
UPDATE sp_root SET n = n + 1 WHERE id <= 50;
UPDATE sp_root SET n = n + 1 WHERE id <= 50;
UPDATE sp_root_heap SET n = n + 3 WHERE id <= 50;
-- 50 rows of one key, 50 of nine: a root of four (its row and three
-- redirects), three members that moved on (two keys each), the newest.
SELECT pasv.table_versions('sp_root'::regclass) AS after_updates;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
CALL pg_temp.wait_for_horizon();
SELECT sum(n), count(*) FROM sp_root WHERE id BETWEEN 1 AND 100;
-- Each root lost its row and two redirects.
SELECT pasv.table_versions('sp_root'::regclass) AS after_an_index_scan;
SELECT sp_root_same();

-- A snapshot that may still see a root's older redirect keeps it: another
-- session's index scan removes nothing that snapshot needs, and the
-- snapshot reads the rows as they were.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT sum(n) FROM sp_root WHERE id BETWEEN 1 AND 100;
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "UPDATE sp_root SET n = n + 10 WHERE id <= 70" -c "SET enable_seqscan = off" -c "SET enable_bitmapscan = off" -c "SELECT sum(n) FROM sp_root WHERE id BETWEEN 1 AND 100" -c "SELECT pasv.table_versions('sp_root'::regclass) AS kept_for_the_snapshot"
SELECT sum(n) FROM sp_root WHERE id BETWEEN 1 AND 100;
COMMIT;
UPDATE sp_root_heap SET n = n + 10 WHERE id <= 70;
CALL pg_temp.wait_for_horizon();
SELECT sum(n) FROM sp_root WHERE id BETWEEN 1 AND 100;
SELECT pasv.table_versions('sp_root'::regclass) AS removed_after_it;
SELECT sp_root_same();

-- An update rolled back (sent to the engine by its own transaction's
-- read, so its versions are written) leaves the redirect below it
-- deciding the row: the aborted versions above stay for the row lock's
-- pruning or VACUUM (three more keys), and nothing below is left to
-- remove. A point select notes too few removals to post them: that
-- row's root keeps its older redirect.
UPDATE sp_root SET n = n + 1 WHERE id = 2;
UPDATE sp_root_heap SET n = n + 1 WHERE id = 2;
SELECT n FROM sp_root WHERE id = 2;
SELECT pasv.table_versions('sp_root'::regclass) AS a_point_select_posts_nothing;
BEGIN;
UPDATE sp_root SET n = -1 WHERE id = 1;
SELECT n FROM sp_root WHERE id = 1;
ROLLBACK;
SELECT n FROM sp_root WHERE id = 1;
SELECT pasv.table_versions('sp_root'::regclass) AS after_a_rollback;
SELECT sp_root_same();

-- A cursor's index scan ends with its transaction: one that aborts
-- removes nothing (its notes go with it), one that commits removes what
-- it noted.
UPDATE sp_root SET n = n + 1 WHERE id <= 30;
UPDATE sp_root_heap SET n = n + 1 WHERE id <= 30;
SELECT pasv.table_versions('sp_root'::regclass) AS before_the_cursors;
CALL pg_temp.wait_for_horizon();
BEGIN;
DECLARE sp_root_cursor CURSOR FOR SELECT id, n FROM sp_root WHERE id BETWEEN 1 AND 100 ORDER BY id;
FETCH 40 FROM sp_root_cursor \g /dev/null
ROLLBACK;
SELECT pasv.table_versions('sp_root'::regclass) AS after_an_aborted_cursor;
BEGIN;
DECLARE sp_root_cursor CURSOR FOR SELECT id, n FROM sp_root WHERE id BETWEEN 1 AND 100 ORDER BY id;
FETCH 40 FROM sp_root_cursor \g /dev/null
COMMIT;
SELECT pasv.table_versions('sp_root'::regclass) AS after_a_committed_cursor;
SELECT sp_root_same();

-- The removals are not logged: a crash may bring them back, exactly as
-- dead; the rows and the consistency check agree after it, and after the
-- next index scan and VACUUM.
UPDATE sp_root SET n = n + 1 WHERE id BETWEEN 40 AND 60;
UPDATE sp_root_heap SET n = n + 1 WHERE id BETWEEN 40 AND 60;
SELECT sum(n) FROM sp_root WHERE id BETWEEN 1 AND 100;
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT sum(n) FROM sp_root WHERE id BETWEEN 1 AND 100;
SELECT sp_root_same();
SELECT * FROM pasv.verify('sp_root'::regclass);
VACUUM sp_root;
SELECT * FROM pasv.verify('sp_root'::regclass);
SELECT sp_root_same();
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP FUNCTION sp_root_same();
DROP TABLE sp_root, sp_root_heap;
