-- VACUUM removes versions no snapshot can see, rows deleted for everyone
-- (and their index entries), freezes old versions and advances relfrozenxid.
CREATE TABLE v (id int PRIMARY KEY, grp int, payload text) USING pasv;
CREATE INDEX v_grp ON v (grp);
INSERT INTO v SELECT g, g % 10, repeat('x', 100) FROM generate_series(1, 10000) g;
SELECT pasv.table_versions('v'::regclass);
-- UPDATE prunes the versions older than the newest one visible to all ...
UPDATE v SET payload = 'y' WHERE id <= 5000;
UPDATE v SET payload = 'z' WHERE id <= 5000;
SELECT pasv.table_versions('v'::regclass);
-- ... while a snapshot that may need them keeps them.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FROM v WHERE payload = 'z';
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "UPDATE v SET payload = 'w' WHERE id <= 100"
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "UPDATE v SET payload = 'u' WHERE id <= 100"
SELECT count(*) FROM v WHERE payload = 'z';
SELECT pasv.table_versions('v'::regclass);
COMMIT;
DELETE FROM v WHERE grp = 0;
SELECT count(*), pasv.table_versions('v'::regclass) FROM v;
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
-- A second VACUUM finds nothing left to do.
VACUUM (VERBOSE, PROCESS_TOAST false) v;
-- Rolled-back inserts leave versions that VACUUM removes.
BEGIN;
INSERT INTO v SELECT g, -1, 'aborted' FROM generate_series(20001, 20500) g;
ROLLBACK;
SELECT pasv.table_versions('v'::regclass);
VACUUM v;
SELECT pasv.table_versions('v'::regclass);
-- VACUUM FREEZE freezes every version and advances relfrozenxid.
SELECT age(relfrozenxid) > 0 AS has_age FROM pg_class WHERE relname = 'v';
VACUUM (FREEZE, VERBOSE, PROCESS_TOAST false) v;
-- (up to the oldest running snapshot: pasv's replay worker may hold one a few
-- transactions old for a moment)
SELECT age(relfrozenxid) <= 10 AS frozen_to_now FROM pg_class WHERE relname = 'v';
SELECT count(*), sum(id) FROM v;
UPDATE v SET payload = 'after freeze' WHERE id = 2;
SELECT payload FROM v WHERE id = 2;
DROP TABLE v;
