-- Every change reaches PostgreSQL's WAL first, as a transactional logical
-- message with prefix "pasv" holding the exact keys and values.
CREATE TABLE w (id int PRIMARY KEY, v text) USING pasv;
SELECT pg_current_wal_insert_lsn() AS lsn0 \gset
INSERT INTO w SELECT g, 'x' FROM generate_series(1, 1000) g;
UPDATE w SET v = 'y' WHERE id <= 10;
DELETE FROM w WHERE id = 1;
BEGIN;
INSERT INTO w VALUES (5000, 'rolled back');
ROLLBACK;
SELECT pg_current_wal_flush_lsn() AS lsn1 \gset
\setenv LSN0 :lsn0
\setenv LSN1 :lsn1
-- 1000 rows with an index go in 5 batches (one before each rowid
-- reservation after the first: 64, 128, 191 and 382 rows, as 226 rows of
-- this width fill a block, and the rest at commit), the 10 in-place
-- updates in one batch (buffered under their row
-- locks), 1 delete; the rolled-back insert never left its backend's
-- buffer, so nothing of it is logged. (VACUUM's removals, one batch, are
-- left out: whether it finds them depends on other sessions' horizons.)
\! "$PASV_PG_BIN/pg_waldump" -p "$PASV_TEST_PGDATA/pg_wal" -s "$LSN0" -e "$LSN1" -r LogicalMessage 2>/dev/null | grep -c 'transactional, prefix "pasv"'
\! "$PASV_PG_BIN/pg_waldump" -p "$PASV_TEST_PGDATA/pg_wal" -s "$LSN0" -e "$LSN1" -r LogicalMessage 2>/dev/null | grep -c 'non-transactional'
DROP TABLE w;
-- A change batch is logged in a compact form
-- (pasv_am/src/protocol/wal_form.rs): new rows of the bulk benchmark's
-- shape cost less WAL than heap's inserts of the same rows (about 58 bytes
-- a row against heap's 104; 76 with the tuples' heap header in full, 120
-- in the channel's form).
CREATE TABLE wp (id int8, grp int4, payload text) USING pasv;
CREATE TABLE wh (id int8, grp int4, payload text) USING heap;
SELECT pg_current_wal_insert_lsn() AS p0 \gset
INSERT INTO wp SELECT g, g % 1000, md5(g::text) FROM generate_series(1, 10000) g;
SELECT pg_current_wal_insert_lsn() AS p1 \gset
INSERT INTO wh SELECT g, g % 1000, md5(g::text) FROM generate_series(1, 10000) g;
SELECT pg_current_wal_insert_lsn() AS p2 \gset
SELECT pg_wal_lsn_diff(:'p1', :'p0') / 10000 < 70 AS pasv_under_70_bytes_a_row,
       pg_wal_lsn_diff(:'p1', :'p0') < pg_wal_lsn_diff(:'p2', :'p1') AS pasv_under_heap;
DROP TABLE wp, wh;
