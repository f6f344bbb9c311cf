-- VACUUM removes versions no snapshot can see, rows deleted for everyone
-- (and their index entries), freezes old versions and advances relfrozenxid.
-- VACUUM removes only what no snapshot can see: before each one, wait
-- (bounded) until no other process holds a snapshot older than this
-- session's work (pasv's replay worker reads catalogs in short
-- transactions of its own, and a VACUUM that overlaps one keeps more).
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
-- Version chains under one rowid (updates in place); heap-only chains are
-- vacuumed in sql/hot_update.sql.
SET pasv.hot_updates = off;
CREATE TABLE v (id int PRIMARY KEY, grp int, payload text) USING pasv;
CREATE INDEX v_grp ON v (grp);
INSERT INTO v SELECT g, g % 10, repeat('x', 100) FROM generate_series(1, 10000) g;
SELECT pasv.table_versions('v'::regclass);
-- UPDATE prunes the versions older than the newest one visible to all
-- (as before VACUUM, no other snapshot may still see them: wait) ...
UPDATE v SET payload = 'y' WHERE id <= 5000;
CALL pg_temp.wait_for_horizon();
UPDATE v SET payload = 'z' WHERE id <= 5000;
SELECT pasv.table_versions('v'::regclass);
-- ... while a snapshot that may need them keeps them.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FROM v WHERE payload = 'z';
CALL pg_temp.wait_for_horizon();
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET pasv.hot_updates = off" -c "UPDATE v SET payload = 'w' WHERE id <= 100"
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET pasv.hot_updates = off" -c "UPDATE v SET payload = 'u' WHERE id <= 100"
SELECT count(*) FROM v WHERE payload = 'z';
SELECT pasv.table_versions('v'::regclass);
COMMIT;
DELETE FROM v WHERE grp = 0;
SELECT count(*), pasv.table_versions('v'::regclass) FROM v;
CALL pg_temp.wait_for_horizon();
VACUUM (VERBOSE, PROCESS_TOAST false) v;
SELECT count(*), pasv.table_versions('v'::regclass) FROM v;
-- Index scans agree with the table after the index cleanup.
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*) FROM v WHERE id > 0;
SELECT count(*) FROM v WHERE grp = 0;
SELECT count(*), min(payload), max(payload) FROM v WHERE grp = 5;
RESET enable_seqscan;
RESET enable_bitmapscan;
-- A second VACUUM finds nothing left to do. Its pass over the table (many
-- pages) reads each page ahead while it works on the one before (scan
-- requests posted, not waited for: HOT_PATH §63).
CREATE TEMP TABLE vacuum_reads (n bigint);
INSERT INTO vacuum_reads SELECT coalesce((SELECT posted FROM pasv.channel_stats('backend') WHERE request = 'scan'), 0);
CALL pg_temp.wait_for_horizon();
VACUUM (VERBOSE, PROCESS_TOAST false) v;
SELECT coalesce((SELECT posted FROM pasv.channel_stats('backend') WHERE request = 'scan'), 0) - n > 0 AS vacuum_read_ahead FROM vacuum_reads;
DROP TABLE vacuum_reads;
-- Rolled-back inserts that reached the engine (the count inside the
-- transaction sends the backend's buffered rows first) leave versions that
-- VACUUM removes; rolled-back rows still in the buffer leave none.
BEGIN;
INSERT INTO v SELECT g, -1, 'aborted' FROM generate_series(20001, 20500) g;
SELECT count(*) FROM v WHERE grp = -1;
ROLLBACK;
BEGIN;
INSERT INTO v SELECT g, -1, 'aborted' FROM generate_series(20501, 20600) g;
ROLLBACK;
SELECT pasv.table_versions('v'::regclass);
CALL pg_temp.wait_for_horizon();
VACUUM v;
SELECT pasv.table_versions('v'::regclass);
-- VACUUM FREEZE freezes every version and advances relfrozenxid; the frozen
-- copies of packed rows are folded back into their packs (the re-pack line).
SELECT age(relfrozenxid) > 0 AS has_age FROM pg_class WHERE relname = 'v';
CALL pg_temp.wait_for_horizon();
VACUUM (FREEZE, VERBOSE, PROCESS_TOAST false) v;
-- (up to the oldest running snapshot: pasv's replay worker may hold one a few
-- transactions old for a moment)
SELECT age(relfrozenxid) <= 10 AS frozen_to_now FROM pg_class WHERE relname = 'v';
SELECT count(*), sum(id) FROM v;
UPDATE v SET payload = 'after freeze' WHERE id = 2;
SELECT payload FROM v WHERE id = 2;
DROP TABLE v;
-- VACUUM runs every index's cleanup, as heap's does, dead rows or not: GIN
-- moves its pending list into the tree, BRIN summarizes the ranges filled
-- since.
CREATE TABLE vg (id int, a int[], v int) USING pasv WITH (autovacuum_enabled = off);
CREATE INDEX vg_a ON vg USING gin (a) WITH (fastupdate = on, gin_pending_list_limit = 4096);
CREATE INDEX vg_v ON vg USING brin (v) WITH (pages_per_range = 1);
INSERT INTO vg SELECT g, array[1, g], g FROM generate_series(1, 1000) g;
CALL pg_temp.wait_for_horizon();
VACUUM vg;
SELECT gin_clean_pending_list('vg_a') AS pending_after_vacuum;
SELECT brin_summarize_new_values('vg_v') AS unsummarized_after_vacuum;
-- An UPDATE that changes only columns of summarizing (BRIN) indexes keeps
-- the row's TID, as heap's HOT update does; the BRIN index still finds it.
SELECT ctid AS tid_before FROM vg WHERE id = 7 \gset
UPDATE vg SET v = 1000007 WHERE id = 7;
SELECT ctid = :'tid_before' AS same_tid FROM vg WHERE id = 7;
SET enable_seqscan = off;
SELECT id, v FROM vg WHERE v = 1000007;
RESET enable_seqscan;
DROP TABLE vg;
-- VACUUM truncates the blocks at the end that hold no row any more, as
-- heap's does (pg_relation_size reads the file: 291 rowids a block); not
-- with TRUNCATE false, nor with the vacuum_truncate option off.
CREATE TABLE vt (id int PRIMARY KEY, t text) USING pasv WITH (autovacuum_enabled = off);
INSERT INTO vt SELECT g, 'row ' || g FROM generate_series(1, 1000) g;
SELECT pg_relation_size('vt') / 8192 AS blocks;
DELETE FROM vt WHERE id > 300;
CALL pg_temp.wait_for_horizon();
VACUUM (TRUNCATE false) vt;
SELECT pg_relation_size('vt') / 8192 AS blocks;
ALTER TABLE vt SET (vacuum_truncate = false);
CALL pg_temp.wait_for_horizon();
VACUUM vt;
SELECT pg_relation_size('vt') / 8192 AS blocks;
ALTER TABLE vt RESET (vacuum_truncate);
CALL pg_temp.wait_for_horizon();
VACUUM vt;
SELECT pg_relation_size('vt') / 8192 AS blocks, count(*), sum(id) FROM vt;
SET enable_seqscan = off;
SELECT count(*), sum(id) FROM vt WHERE id > 0;
RESET enable_seqscan;
-- New rows take new rowids (never reused) and stretch it again.
INSERT INTO vt VALUES (1001, 'new');
SELECT pg_relation_size('vt') > 2 * 8192 AS stretched, count(*) FROM vt;
-- A table whose only insert failed ends empty, like heap's.
CREATE TABLE ve (i int NOT NULL) USING pasv WITH (autovacuum_enabled = off);
INSERT INTO ve VALUES (1), (NULL);
SELECT pg_relation_size('ve') > 0 AS has_size;
CALL pg_temp.wait_for_horizon();
VACUUM ve;
SELECT pg_relation_size('ve') AS size_after_vacuum;
DROP TABLE ve;
-- INDEX_CLEANUP off: like heap's dead line pointers, rows dead to everyone
-- keep a stub (so their index entries stay valid) until a VACUUM with
-- index cleanup removes them with their entries.
DELETE FROM vt WHERE id <= 100;
SELECT pasv.table_versions('vt'::regclass) AS versions_before;
CALL pg_temp.wait_for_horizon();
VACUUM (INDEX_CLEANUP off) vt;
SELECT pasv.table_versions('vt'::regclass) AS versions_with_stubs;
SET enable_seqscan = off;
SELECT count(*), sum(id) FROM vt WHERE id > 0;
RESET enable_seqscan;
CALL pg_temp.wait_for_horizon();
VACUUM vt;
SELECT pasv.table_versions('vt'::regclass) AS versions_after;
SELECT count(*), sum(id) FROM vt;
DROP TABLE vt;
