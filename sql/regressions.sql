-- Bugs found by outside checks that need no crash (each failed before its fix).

-- An UPDATE that conflicts with a UNIQUE DEFERRABLE constraint is an ERROR
-- (it crashed the backend), immediately or at COMMIT.
CREATE TABLE ud (i int UNIQUE DEFERRABLE, t text) USING pasv;
INSERT INTO ud VALUES (0, 'a'), (1, 'b');
UPDATE ud SET i = 1 WHERE i = 0;
SELECT * FROM ud ORDER BY i;
-- A swap that is unique again by the end of the statement is fine.
UPDATE ud SET i = 1 - i;
SELECT * FROM ud ORDER BY i;
CREATE TABLE udd (i int UNIQUE DEFERRABLE INITIALLY DEFERRED, t text) USING pasv;
INSERT INTO udd VALUES (0, 'a'), (1, 'b');
BEGIN;
UPDATE udd SET i = 1 WHERE i = 0;
COMMIT;
BEGIN;
UPDATE udd SET i = 2 WHERE i = 0;
UPDATE udd SET i = 0 WHERE i = 1;
COMMIT;
SELECT * FROM udd ORDER BY i;
SELECT count(*) AS verify_problems FROM pasv.verify('udd'::regclass);
DROP TABLE ud, udd;

-- VACUUM keeps the aborted newest version of a live row, so its version
-- number is never written again (replay would order VACUUM's removal after
-- the later UPDATE that reused it).
-- (Versions under one rowid: updates in place.)
SET pasv.hot_updates = off;
CREATE TABLE vr (k int PRIMARY KEY, v int) USING pasv;
INSERT INTO vr VALUES (1, 0);
BEGIN;
UPDATE vr SET v = 1 WHERE k = 1;
-- Reading the row sends the buffered change: version 1 is written.
SELECT v FROM vr WHERE k = 1;
ROLLBACK;
VACUUM vr;
SELECT version, tombstone FROM pasv.versions('vr'::regclass);
UPDATE vr SET v = 2 WHERE k = 1;
SELECT * FROM vr;
-- Version 1 (aborted) was pruned by the UPDATE, which wrote version 2.
SELECT version, tombstone FROM pasv.versions('vr'::regclass);
SELECT count(*) AS verify_problems FROM pasv.verify('vr'::regclass);
DROP TABLE vr;
RESET pasv.hot_updates;

-- pasv.verify and crash points refuse what they cannot do, with a HINT.
CREATE TABLE not_pasv (i int);
SELECT * FROM pasv.verify('not_pasv'::regclass);
DROP TABLE not_pasv;
SELECT pasv.crash_point('no_such_point');
SELECT pasv.crash_point('truncate', -1);
SELECT count(*) AS crash_points FROM pasv.crash_points();
SELECT pasv.clear_crash_points();

-- A prepared transaction keeps the row locks it took: the preparing
-- session's next transaction does not release them (PREPARE used to be
-- refused because it would have).
CREATE TABLE pl (k int PRIMARY KEY) USING pasv;
INSERT INTO pl VALUES (1);
BEGIN;
SELECT * FROM pl WHERE k = 1 FOR UPDATE;
PREPARE TRANSACTION 'pasv_locked';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid = 'pasv_locked';
BEGIN;
SELECT * FROM pl WHERE k = 1;
COMMIT;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT k FROM pl WHERE k = 1 FOR UPDATE NOWAIT" 2>&1
ROLLBACK PREPARED 'pasv_locked';
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT k FROM pl WHERE k = 1 FOR UPDATE NOWAIT" 2>&1
DROP TABLE pl;

-- VACUUM FULL and CLUSTER form every row again for the new descriptor: a
-- column added with a default after the row was stored keeps its value
-- (the rewrite clears the catalog's missing values), a dropped one is gone.
CREATE TABLE fd (k int PRIMARY KEY, d text) USING pasv;
INSERT INTO fd VALUES (1, 'x'), (2, 'y');
ALTER TABLE fd ADD COLUMN e int DEFAULT 7;
ALTER TABLE fd DROP COLUMN d;
INSERT INTO fd VALUES (3, 8);
VACUUM FULL fd;
SELECT * FROM fd ORDER BY k;
ALTER TABLE fd ADD COLUMN f text DEFAULT 'later';
CLUSTER fd USING fd_pkey;
SELECT * FROM fd ORDER BY k;
SET enable_seqscan = off;
SELECT * FROM fd WHERE k = 2;
RESET enable_seqscan;
DROP TABLE fd;

-- Index builds (REINDEX, and the rebuild that ends VACUUM FULL and CLUSTER)
-- keep rows deleted or moved after an older snapshot was taken reachable
-- through the indexes, as heap's keep recently dead tuples; a unique index
-- holds the old and the new rowid of a moved row without a duplicate error.
CREATE TABLE vf (k int PRIMARY KEY, u int UNIQUE, v int, t text) USING pasv;
CREATE INDEX vf_v ON vf (v);
CREATE TABLE vf_other (x int);
INSERT INTO vf SELECT g, g, g, 'r' || g FROM generate_series(200, 240) g;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) AS snapshot_taken FROM vf_other;
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "UPDATE vf SET v = v + 5 WHERE k = 214" -c "DELETE FROM vf WHERE k = 220"
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "VACUUM FULL vf"
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SELECT count(*), sum(k) FROM vf WHERE u BETWEEN 209 AND 230;
SELECT k, v FROM vf WHERE k IN (214, 220) ORDER BY k;
SELECT k, v FROM vf WHERE v IN (214, 219) ORDER BY k;
SET LOCAL enable_indexscan = off;
SET LOCAL enable_bitmapscan = on;
SELECT count(*), sum(k) FROM vf WHERE u BETWEEN 209 AND 230;
COMMIT;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) AS snapshot_taken FROM vf_other;
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "UPDATE vf SET u = -u WHERE k = 216" -c "DELETE FROM vf WHERE k = 222"
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "CLUSTER vf USING vf_pkey"
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SELECT count(*), sum(k) FROM vf WHERE u BETWEEN 209 AND 230;
SELECT k, u FROM vf WHERE k IN (216, 222) ORDER BY k;
COMMIT;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) AS snapshot_taken FROM vf_other;
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "UPDATE vf SET v = 0 WHERE k = 218" -c "DELETE FROM vf WHERE k = 224"
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "REINDEX TABLE vf"
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SELECT count(*), sum(k) FROM vf WHERE u BETWEEN 209 AND 230;
SELECT k, v FROM vf WHERE k IN (218, 224) ORDER BY k;
COMMIT;
-- A new snapshot sees the moved rows once, at their new values, and the
-- unique indexes still refuse duplicates of live rows.
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*), sum(k) FROM vf WHERE u BETWEEN 209 AND 230;
SELECT k, u, v FROM vf WHERE k IN (214, 216, 218, 220, 222, 224) ORDER BY k;
SELECT k, v FROM vf WHERE v IN (0, 214, 219) ORDER BY k;
RESET enable_seqscan;
RESET enable_bitmapscan;
INSERT INTO vf VALUES (300, 214, 0, 'dup');
INSERT INTO vf VALUES (214, 300, 0, 'dup');
VACUUM FULL vf;
SELECT count(*), sum(k), sum(u), sum(v) FROM vf;
DROP TABLE vf, vf_other;

-- An UPDATE that waits for the row lock of a writer that then rolls back
-- builds its new row from the version it saw, not from the writer's aborted
-- one (the executor fetches the old row by TID with SnapshotAny before it
-- waits). Sessions are ordered with an advisory lock; every wait is bounded.
CREATE TABLE ab (k int PRIMARY KEY, v int, t text) USING pasv;
INSERT INTO ab VALUES (1, 5, NULL);
SELECT pg_advisory_lock(4242);
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "BEGIN" -c "UPDATE ab SET t = 'rolled back' WHERE k = 1" -c "SELECT pg_advisory_lock(4242)" -c "ROLLBACK" > /dev/null 2>&1 &
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted);
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "UPDATE ab SET v = v + 4 WHERE k = 1" > /dev/null 2>&1 &
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN EXISTS (SELECT 1 FROM pg_stat_activity
                       WHERE query = 'UPDATE ab SET v = v + 4 WHERE k = 1' AND wait_event_type = 'Lock');
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT pg_advisory_unlock(4242);
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query LIKE 'UPDATE ab SET v = v + 4%');
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT * FROM ab;
DROP TABLE ab;

-- Index scans read ahead a growing window of rowids when they walk them in
-- order (src/tam/fetch.rs). The window must answer exactly as single
-- fetches: rows deleted, updated, moved or inserted by this transaction,
-- by the very statement that scans, and rows invisible to the snapshot.
CREATE TABLE ra (k int PRIMARY KEY, v int, w int) USING pasv;
CREATE INDEX ra_w ON ra (w);
INSERT INTO ra SELECT g, g, g FROM generate_series(1, 2000) g;
DELETE FROM ra WHERE k % 7 = 0;
UPDATE ra SET v = v + 1000000 WHERE k % 5 = 0;
UPDATE ra SET w = w + 10000 WHERE k % 11 = 0;  -- moves those rows
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT sum(v) FROM ra WHERE k BETWEEN 100 AND 1900;
SELECT count(*), sum(v), sum(w) FROM ra WHERE k BETWEEN 100 AND 1900;
SELECT count(*), sum(v) FROM ra WHERE w BETWEEN 1 AND 5000;
BEGIN;
DELETE FROM ra WHERE k BETWEEN 500 AND 520;
INSERT INTO ra SELECT g, -g, g FROM generate_series(2001, 2100) g;
SELECT count(*), sum(v) FROM ra WHERE k BETWEEN 400 AND 2100;
-- The statement updates rows the window has already read: each once.
UPDATE ra SET v = v + 1 WHERE k BETWEEN 1 AND 1500;
SELECT count(*), sum(v) FROM ra WHERE k BETWEEN 1 AND 2100;
ROLLBACK;
-- A second session commits a change to rows inside a window a repeatable
-- read transaction keeps reading: the window follows the snapshot.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*), sum(v) FROM ra WHERE k BETWEEN 1 AND 2000;
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "UPDATE ra SET v = 0 WHERE k BETWEEN 10 AND 60" -c "DELETE FROM ra WHERE k BETWEEN 61 AND 70"
SELECT count(*), sum(v) FROM ra WHERE k BETWEEN 1 AND 2000;
COMMIT;
SELECT count(*), sum(v) FROM ra WHERE k BETWEEN 1 AND 2000;
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT count(*), sum(v) FROM ra WHERE k BETWEEN 1 AND 2000;
DROP TABLE ra;

-- UPDATE statement triggers with transition tables see the old rows in OLD
-- TABLE (they saw the new ones: the executor fetches OLD by TID after the
-- update), on the table itself and through a partitioned parent.
CREATE TABLE tt_plain (k int PRIMARY KEY, v text) USING pasv;
CREATE TABLE tt_parted (k int PRIMARY KEY, v text) PARTITION BY RANGE (k);
CREATE TABLE tt_part1 PARTITION OF tt_parted FOR VALUES FROM (0) TO (100) USING pasv;
CREATE FUNCTION tt_show() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE '%: old %, new %', TG_TABLE_NAME,
    (SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM old_rows),
    (SELECT string_agg(k || '=' || v, ',' ORDER BY k) FROM new_rows);
  RETURN NULL;
END $$;
CREATE TRIGGER tt_plain_upd AFTER UPDATE ON tt_plain REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION tt_show();
CREATE TRIGGER tt_parted_upd AFTER UPDATE ON tt_parted REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION tt_show();
INSERT INTO tt_plain VALUES (1, 'a'), (2, 'b');
INSERT INTO tt_parted VALUES (1, 'a'), (2, 'b');
UPDATE tt_plain SET v = v || '!';
UPDATE tt_parted SET v = v || '!';
INSERT INTO tt_parted VALUES (1, 'c') ON CONFLICT (k) DO UPDATE SET v = excluded.v;
DROP TABLE tt_plain, tt_parted;
DROP FUNCTION tt_show;

-- Sequential scans count in pg_stat_user_tables (seq_scan, seq_tup_read,
-- last_seq_scan) and a block per rowid block in pg_statio_user_tables, as
-- heap's do (they counted nothing); bitmap scans count the rows fetched.
CREATE TABLE st (k int PRIMARY KEY, v int) USING pasv;
INSERT INTO st SELECT g, g FROM generate_series(1, 1000) g;
SELECT pg_stat_force_next_flush();
SELECT seq_scan AS seq_before, seq_tup_read AS read_before FROM pg_stat_user_tables WHERE relname = 'st' \gset
SELECT count(*) FROM st;
SELECT count(*) FROM st WHERE v > 500;
SET enable_seqscan = off;
SET enable_indexscan = off;
SELECT count(*) FROM st WHERE k < 100;
RESET enable_seqscan;
RESET enable_indexscan;
SELECT pg_stat_force_next_flush();
SELECT seq_scan - :seq_before AS seq_scans, seq_tup_read - :read_before AS rows_read,
       last_seq_scan IS NOT NULL AS has_last_seq_scan, idx_tup_fetch >= 99 AS bitmap_fetched
  FROM pg_stat_user_tables WHERE relname = 'st';
SELECT heap_blks_hit >= 8 AS blocks_counted FROM pg_statio_user_tables WHERE relname = 'st';
DROP TABLE st;

-- A bitmap scan skips a block that holds no visible row, as heap's does
-- (EXPLAIN ANALYZE counted it: the core suite's partition_prune showed an
-- extra "Heap Blocks: exact=1"); blocks with rows are still counted.
CREATE TABLE bb (k int, v int) USING pasv;
CREATE INDEX bb_k ON bb (k);
INSERT INTO bb SELECT g, g FROM generate_series(1, 600) g;
DELETE FROM bb WHERE k = 5;
SET enable_seqscan = off;
SET enable_indexscan = off;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT * FROM bb WHERE k = 5;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT * FROM bb WHERE k IN (5, 6, 500);
SELECT * FROM bb WHERE k IN (5, 6, 500) ORDER BY k;
RESET enable_seqscan;
RESET enable_indexscan;
DROP TABLE bb;

-- Large values are stored as heap stores them: a row over 2 kB has its
-- compressible values compressed in the row (they stayed inline and
-- uncompressed up to 16 kB, so pg_column_compression was NULL), and values
-- that do not compress enough move to the TOAST table.
CREATE TABLE lv (k int PRIMARY KEY, t text) USING pasv;
INSERT INTO lv VALUES (1, repeat('compressible ', 300)),
                      (2, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 200) g)),
                      (3, 'small');
SELECT k, length(t), pg_column_compression(t) FROM lv ORDER BY k;
SELECT pg_relation_size(reltoastrelid) > 0 AS toasted FROM pg_class WHERE relname = 'lv';
UPDATE lv SET t = t || '!' WHERE k IN (1, 2);
SELECT k, length(t), right(t, 2), pg_column_compression(t) FROM lv ORDER BY k;
DROP TABLE lv;
