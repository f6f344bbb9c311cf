-- UPDATE and DELETE: a heap-only version at a new TID when no indexed
-- column changes (HOT, sql/hot_update.sql; in place with pasv.hot_updates
-- off); a moved row (new rowid, "moved" tombstone, new index entries) when
-- one does.
CREATE TABLE acct (id int PRIMARY KEY, owner text, balance int8, note text) USING pasv;
CREATE INDEX acct_owner ON acct (owner);
INSERT INTO acct SELECT g, 'o' || g, 100, 'n' FROM generate_series(1, 1000) g;

-- Non-indexed columns: a new TID, as heap's HOT update.
SELECT ctid AS before_tid FROM acct WHERE id = 7 \gset
UPDATE acct SET balance = balance + 5, note = 'updated' WHERE id = 7;
SELECT ctid = :'before_tid' AS same_tid, balance, note FROM acct WHERE id = 7;

-- An indexed column: the row moves; indexes find it by its new key only.
SELECT ctid AS before_tid FROM acct WHERE id = 8 \gset
UPDATE acct SET owner = 'renamed' WHERE id = 8;
SELECT ctid <> :'before_tid' AS moved, owner FROM acct WHERE id = 8;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id FROM acct WHERE owner = 'o8';
SELECT id, owner FROM acct WHERE owner = 'renamed';
SELECT id, owner FROM acct WHERE id = 8;
-- The primary key itself.
UPDATE acct SET id = 5000 WHERE id = 9;
SELECT count(*) AS old_key FROM acct WHERE id = 9;
SELECT owner FROM acct WHERE id = 5000;
RESET enable_seqscan;
RESET enable_bitmapscan;

-- Many rows at once; totals stay consistent.
UPDATE acct SET balance = balance - 1 WHERE id % 10 = 0;
SELECT count(*), sum(balance) FROM acct;

-- A long version chain on one row.
DO $$ BEGIN FOR i IN 1..50 LOOP UPDATE acct SET balance = balance + 1 WHERE id = 1; END LOOP; END $$;
SELECT balance FROM acct WHERE id = 1;

-- DELETE, then index lookups find nothing and the key can be reused.
DELETE FROM acct WHERE id BETWEEN 100 AND 199;
SELECT count(*) FROM acct;
SET enable_seqscan = off;
SELECT count(*) AS via_index FROM acct WHERE id = 150;
RESET enable_seqscan;
INSERT INTO acct VALUES (150, 'again', 1, 'n');
SELECT id, owner FROM acct WHERE id = 150;

-- Rolled-back updates and deletes leave no trace.
BEGIN;
UPDATE acct SET balance = 0;
DELETE FROM acct WHERE id < 50;
SELECT count(*), sum(balance) FROM acct;
ROLLBACK;
SELECT count(*), sum(balance) FROM acct;

-- Savepoints.
BEGIN;
UPDATE acct SET note = 'a' WHERE id = 2;
SAVEPOINT s;
UPDATE acct SET note = 'b' WHERE id = 2;
DELETE FROM acct WHERE id = 3;
ROLLBACK TO s;
SELECT id, note FROM acct WHERE id IN (2, 3) ORDER BY id;
COMMIT;
SELECT id, note FROM acct WHERE id IN (2, 3) ORDER BY id;

-- RETURNING.
UPDATE acct SET balance = balance * 2 WHERE id = 4 RETURNING id, balance;
DELETE FROM acct WHERE id = 5 RETURNING id, owner;

-- One command reaching the same row twice updates it once (as on heap).
CREATE TABLE twice (k int) USING pasv;
INSERT INTO twice VALUES (6), (6);
UPDATE acct a SET balance = balance + 1000 FROM twice WHERE a.id = twice.k;
SELECT balance FROM acct WHERE id = 6;

-- Later statements of a transaction update its own new versions.
BEGIN;
UPDATE acct SET balance = 1 WHERE id = 10;
UPDATE acct SET balance = balance + 1 WHERE id = 10;
UPDATE acct SET owner = 'moved-in-tx' WHERE id = 10;
UPDATE acct SET balance = balance + 1 WHERE id = 10;
SELECT balance, owner FROM acct WHERE id = 10;
COMMIT;
SELECT balance, owner FROM acct WHERE id = 10;

-- WHERE CURRENT OF.
BEGIN;
DECLARE c CURSOR FOR SELECT id FROM acct WHERE id = 11 FOR UPDATE;
FETCH c;
UPDATE acct SET note = 'cursor' WHERE CURRENT OF c;
COMMIT;
SELECT note FROM acct WHERE id = 11;

-- Triggers see OLD and NEW.
CREATE TABLE audit (op text, old_balance int8, new_balance int8) USING heap;
CREATE FUNCTION audit_acct() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit VALUES (TG_OP, OLD.balance, CASE WHEN TG_OP = 'UPDATE' THEN NEW.balance END);
    RETURN NULL;
END $$;
CREATE TRIGGER acct_audit AFTER UPDATE OR DELETE ON acct FOR EACH ROW EXECUTE FUNCTION audit_acct();
UPDATE acct SET balance = 77 WHERE id = 12;
DELETE FROM acct WHERE id = 13;
SELECT * FROM audit ORDER BY op;
DROP TRIGGER acct_audit ON acct;

-- Row locks in a single session.
SELECT id FROM acct WHERE id = 14 FOR UPDATE;
SELECT id FROM acct WHERE id = 14 FOR NO KEY UPDATE;
SELECT id FROM acct WHERE id = 14 FOR SHARE;
SELECT id FROM acct WHERE id = 14 FOR KEY SHARE;
BEGIN;
SELECT id FROM acct WHERE id BETWEEN 15 AND 17 ORDER BY id FOR UPDATE;
UPDATE acct SET note = 'locked then updated' WHERE id = 15;
COMMIT;
SELECT note FROM acct WHERE id = 15;

-- A foreign key between two pasv tables.
CREATE TABLE child (id int PRIMARY KEY, acct_id int REFERENCES acct (id)) USING pasv;
INSERT INTO child VALUES (1, 20);
INSERT INTO child VALUES (2, 999999);
DELETE FROM acct WHERE id = 20;
UPDATE acct SET balance = balance + 1 WHERE id = 20;
SELECT balance FROM acct WHERE id = 20;

-- The same totals through every access path.
SELECT count(*), sum(balance) FROM acct;
SET enable_seqscan = off;
SELECT count(*), sum(balance) FROM acct WHERE id > 0;
RESET enable_seqscan;

-- A FOR UPDATE cursor over rows this transaction updates after the cursor
-- opened skips them, as on heap (no "attempted to lock invisible tuple"),
-- and still returns a row it did not touch.
CREATE TABLE cur (a int) USING pasv;
INSERT INTO cur VALUES (1), (5);
BEGIN;
DECLARE c1 NO SCROLL CURSOR FOR SELECT * FROM cur FOR UPDATE;
UPDATE cur SET a = 2 WHERE a = 1;
FETCH ALL FROM c1;
COMMIT;
SELECT a FROM cur ORDER BY a;
DROP TABLE cur;

-- An UPDATE or DELETE found by a scan writes each row without reading it
-- again (the row locks' write epoch shows nobody wrote it since the scan
-- read it): no round trip and no row-cache lookup a row. Each update still
-- removes the version below a head every snapshot sees, so repeated
-- updates leave two versions a row, as when the chain was read. (Updates
-- in place: heap-only chains leave their roots' redirects to VACUUM.)
SET pasv.hot_updates = off;
CREATE TABLE upd_scan (id int PRIMARY KEY, v int, pad text) USING pasv;
INSERT INTO upd_scan SELECT g, 0, repeat('p', 20) FROM generate_series(1, 3000) g;
CREATE TABLE upd_before USING heap AS
  SELECT (SELECT calls FROM pasv.channel_stats('backend') WHERE request = 'scan') AS calls,
         (SELECT hits + misses FROM pasv.row_cache_stats()) AS lookups;
UPDATE upd_scan SET v = v + 1;
UPDATE upd_scan SET v = v + 1 WHERE id % 2 = 0;
UPDATE upd_scan SET v = v + 1;
DELETE FROM upd_scan WHERE id % 3 = 0;
SELECT (SELECT calls FROM pasv.channel_stats('backend') WHERE request = 'scan') - calls < 100 AS few_round_trips,
       (SELECT hits + misses FROM pasv.row_cache_stats()) - lookups < 100 AS few_cache_lookups
  FROM upd_before;
SELECT count(*), sum(v), min(v), max(v) FROM upd_scan;
SELECT pasv.table_versions('upd_scan'::regclass) <= 2 * 3000 + 500 AS pruned;
DROP TABLE upd_scan, upd_before;
RESET pasv.hot_updates;

-- With pasv.move_unindexed_updates off, an UPDATE of a table without
-- indexes keeps the row's TID.
SET pasv.move_unindexed_updates = off;
CREATE TABLE ord_p (a int, b text) USING pasv;
INSERT INTO ord_p VALUES (1, 'a'), (2, 'b');
SELECT ctid AS before_tid FROM ord_p WHERE a = 1 \gset
UPDATE ord_p SET b = 'kept' WHERE a = 1;
SELECT ctid = :'before_tid' AS same_tid, b FROM ord_p WHERE a = 1;
DROP TABLE ord_p;
RESET pasv.move_unindexed_updates;
-- By default (pasv.move_unindexed_updates on) it moves the row to a new
-- rowid, as heap puts the new version after the others: a scan without
-- ORDER BY meets the rows in heap's order (PostgreSQL's own tests print
-- such tables unordered). Every statement runs on a pasv and a heap twin.
SHOW pasv.move_unindexed_updates;
CREATE TABLE ord_p (a int, b text) USING pasv;
CREATE TABLE ord_h (a int, b text) USING heap;
CREATE FUNCTION ord_both(stmt text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN EXECUTE format(stmt, 'ord_p'); EXECUTE format(stmt, 'ord_h'); END $$;
CREATE FUNCTION ord_rows(t regclass) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN EXECUTE format('SELECT string_agg(a || '':'' || b, '' '') FROM %s', t) INTO r; RETURN r; END $$;
SELECT ord_both($$INSERT INTO %I SELECT g, 'v' || g FROM generate_series(1, 8) g$$);
SELECT ord_both($$UPDATE %I SET b = 'u' WHERE a IN (2, 5)$$);
SELECT ord_rows('ord_p') AS pasv_order, ord_rows('ord_p') = ord_rows('ord_h') AS as_heap;
BEGIN;
SELECT ord_both($$UPDATE %I SET b = b || '+' WHERE a = 3$$);
-- The row moved by this transaction, moved again and read back.
SELECT ord_both($$UPDATE %I SET b = b || '+' WHERE a = 3$$);
SELECT a, b FROM ord_p WHERE a = 3;
SAVEPOINT s;
SELECT ord_both($$UPDATE %I SET b = 'gone' WHERE a = 4$$);
SELECT ord_both($$DELETE FROM %I WHERE a = 3$$);
ROLLBACK TO s;
SELECT ord_both($$UPDATE %I SET b = 'x' WHERE a = 1$$);
SELECT ord_rows('ord_p') AS in_transaction, ord_rows('ord_p') = ord_rows('ord_h') AS as_heap;
COMMIT;
SELECT ord_rows('ord_p') AS pasv_order, ord_rows('ord_p') = ord_rows('ord_h') AS as_heap;
-- The moved row is found by its new TID; the old TID holds no row.
SELECT a, b FROM ord_p WHERE ctid = (SELECT ctid FROM ord_p WHERE a = 1);
SELECT count(*) AS at_first_tid FROM ord_p WHERE ctid = '(0,1)';
-- The statistics count these updates as HOT, as heap's (no index changes).
SELECT pg_stat_force_next_flush();
SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname IN ('ord_p', 'ord_h') ORDER BY relname;
-- VACUUM removes the versions and tombstones the moves left behind; a
-- row's newest version stays even when an aborted subtransaction wrote it
-- (the move of a = 4 rolled back to s: keys are never reused).
VACUUM ord_p;
SELECT pasv.table_versions('ord_p'::regclass) AS versions, count(*) AS rows FROM ord_p;
DROP TABLE ord_p, ord_h;
DROP FUNCTION ord_both(text), ord_rows(regclass);

DROP TABLE child, acct, twice, audit;
DROP FUNCTION audit_acct();
