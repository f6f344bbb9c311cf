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

DROP TABLE sp, sp_ix;
RESET pasv.move_unindexed_updates;
