-- Heap-only chains (HOT_PATH.md §37): an UPDATE of a table with indexes
-- that changes no indexed column moves the row to a new TID after the
-- others, as heap's HOT update does, without new index entries; the index
-- entries of the chain's root lead to the newest member. Every statement
-- runs on a pasv table and on a heap twin, and their answers are compared.
CREATE TABLE hp (id int PRIMARY KEY, k int, v text, n int) USING pasv;
CREATE TABLE hh (id int PRIMARY KEY, k int, v text, n int) USING heap;
CREATE INDEX hp_k ON hp (k);
CREATE INDEX hh_k ON hh (k);
INSERT INTO hp SELECT g, g % 7, 'r' || g, 0 FROM generate_series(1, 20) g;
INSERT INTO hh SELECT g, g % 7, 'r' || g, 0 FROM generate_series(1, 20) g;

-- The same TIDs and the same order as heap's, through three updates of
-- one row and one of others.
UPDATE hp SET n = n + 1 WHERE id = 3;
UPDATE hh SET n = n + 1 WHERE id = 3;
UPDATE hp SET n = n + 1, v = 'again' WHERE id = 3;
UPDATE hh SET n = n + 1, v = 'again' WHERE id = 3;
UPDATE hp SET n = n + 1 WHERE id IN (3, 5, 17);
UPDATE hh SET n = n + 1 WHERE id IN (3, 5, 17);
SELECT ctid, * FROM hp;
SELECT (SELECT array_agg(ctid::text || id || v || n) FROM hp) = (SELECT array_agg(ctid::text || id || v || n) FROM hh) AS as_heap;
SELECT s.relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables s WHERE relname IN ('hp', 'hh') ORDER BY 1;

-- Index, bitmap and index-only paths find the newest member, once.
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT ctid, * FROM hp WHERE id = 3;
SELECT id, n FROM hp WHERE k = 3 ORDER BY id;
SELECT count(*) FROM hp WHERE id BETWEEN 1 AND 20;
SET enable_indexscan = off;
SET enable_bitmapscan = on;
SELECT ctid, * FROM hp WHERE id = 3;
SELECT id, n FROM hp WHERE k IN (3, 5) ORDER BY id;
SELECT count(*) FROM hp WHERE id BETWEEN 1 AND 20;
RESET enable_indexscan;
RESET enable_bitmapscan;
-- A TID names one member: the root's old TID holds nothing now.
SELECT count(*) AS at_old_tid FROM hp WHERE ctid = '(0,3)';
RESET enable_seqscan;

-- A snapshot taken before the updates still sees the old values by index.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT n FROM hp WHERE id = 5;
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "UPDATE hp SET n = 100 WHERE id = 5" -c "UPDATE hp SET n = 200 WHERE id = 5"
SET LOCAL enable_seqscan = off;
SELECT n FROM hp WHERE id = 5;
SET LOCAL enable_indexscan = off;
SELECT n FROM hp WHERE id = 5;
UPDATE hp SET n = 0 WHERE id = 5;
ROLLBACK;
SELECT n FROM hp WHERE id = 5;

-- A key stays unique through the chain; ON CONFLICT finds the member.
INSERT INTO hp VALUES (3, 0, 'dup', 0);
INSERT INTO hp VALUES (3, 0, 'dup', 0) ON CONFLICT (id) DO UPDATE SET n = hp.n + 10;
INSERT INTO hh VALUES (3, 0, 'dup', 0) ON CONFLICT (id) DO UPDATE SET n = hh.n + 10;
-- (No TIDs here: heap's failed insert left a tuple its page pruned for
-- the update to reuse; pasv never reuses a rowid.)
SELECT n FROM hp WHERE id = 3;
SELECT n FROM hh WHERE id = 3;

-- Rolled back to a savepoint: the member before it is the row.
BEGIN;
UPDATE hp SET n = 50 WHERE id = 7;
SAVEPOINT s;
UPDATE hp SET n = 60 WHERE id = 7;
ROLLBACK TO s;
SET LOCAL enable_seqscan = off;
SELECT n FROM hp WHERE id = 7;
COMMIT;
SELECT n FROM hp WHERE id = 7;

-- An indexed column changes on a member: new index entries for a new
-- row; the old key finds nothing, the chain ends.
UPDATE hp SET id = 300 WHERE id = 3;
SET enable_seqscan = off;
SELECT count(*) AS old_key FROM hp WHERE id = 3;
SELECT id, v, n FROM hp WHERE id = 300;
RESET enable_seqscan;
-- A member deleted.
DELETE FROM hp WHERE id = 17;
SET enable_seqscan = off;
SELECT count(*) AS deleted FROM hp WHERE id = 17;
RESET enable_seqscan;

-- VACUUM keeps a live chain's root and removes what nobody sees: each
-- row is one key again, and a chain's root and member two.
-- (The sequential scans above removed the members that moved on
-- already: scan_prune.sql.)
SELECT pasv.table_versions('hp'::regclass) AS keys_before;
VACUUM hp;
SELECT pasv.table_versions('hp'::regclass) AS keys_after, count(*) AS rows FROM hp;
SELECT * FROM pasv.verify('hp');
SET enable_seqscan = off;
SELECT id, n FROM hp WHERE id IN (5, 7) ORDER BY id;
RESET enable_seqscan;

-- A new index over a column the chain changed holds the newest values,
-- under the root's TID, found once by every path.
UPDATE hp SET n = 1000 + id WHERE id IN (1, 2);
UPDATE hh SET n = 1000 + id WHERE id IN (1, 2);
CREATE INDEX hp_n ON hp (n);
CREATE INDEX CONCURRENTLY hp_v ON hp (v);
SET enable_seqscan = off;
SELECT id, n FROM hp WHERE n > 1000 ORDER BY id;
SELECT count(*) AS old_values FROM hp WHERE n = 0 AND id IN (1, 2);
SELECT id, v FROM hp WHERE v = 'r2';
SET enable_indexscan = off;
SELECT id, n FROM hp WHERE n > 1000 ORDER BY id;
SELECT id, v FROM hp WHERE v = 'r2';
RESET enable_indexscan;
RESET enable_seqscan;
REINDEX TABLE hp;
SELECT * FROM pasv.verify('hp');

-- A deferred exclusion check tells the row's own member from others.
CREATE TABLE hx (f1 int, f2 int, EXCLUDE (f1 WITH =) DEFERRABLE INITIALLY DEFERRED) USING pasv;
INSERT INTO hx VALUES (1), (2);
BEGIN;
INSERT INTO hx VALUES (2, 1);
DELETE FROM hx WHERE f1 = 2 AND f2 IS NULL;
UPDATE hx SET f2 = 2 WHERE f1 = 2;
COMMIT;
SELECT * FROM hx ORDER BY f1;

-- CLUSTER ends the chains: every row under its own TID, found by index.
CLUSTER hp USING hp_pkey;
SET enable_seqscan = off;
SELECT id, n FROM hp WHERE id IN (1, 5, 300) ORDER BY id;
RESET enable_seqscan;
SELECT * FROM pasv.verify('hp');

-- Off: the row keeps its TID.
DROP INDEX hp_n;
SET pasv.hot_updates = off;
SELECT ctid AS before_tid FROM hp WHERE id = 4 \gset
UPDATE hp SET n = n + 1 WHERE id = 4;
SELECT ctid = :'before_tid' AS same_tid FROM hp WHERE id = 4;
RESET pasv.hot_updates;

-- A crash: the chains come back whole.
UPDATE hp SET n = n + 1 WHERE id IN (4, 6, 8);
UPDATE hp SET n = n + 1 WHERE id = 6;
SELECT sum(n) AS sum_before, count(*) FROM hp \gset
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
SELECT sum(n) = :sum_before AS same_sum, count(*) = :count AS same_count FROM hp;
SET enable_seqscan = off;
SELECT id, n FROM hp WHERE id IN (4, 6, 8) ORDER BY id;
RESET enable_seqscan;
SELECT * FROM pasv.verify('hp');
DROP TABLE hp, hh, hx;
