-- INSERT ... ON CONFLICT on pasv tables.
CREATE TABLE kv (k int PRIMARY KEY, v int) USING pasv;
INSERT INTO kv VALUES (1, 1) ON CONFLICT (k) DO NOTHING;
INSERT INTO kv VALUES (1, 2) ON CONFLICT (k) DO NOTHING;
INSERT INTO kv VALUES (1, 3) ON CONFLICT (k) DO UPDATE SET v = kv.v + excluded.v RETURNING *;
INSERT INTO kv SELECT g, g FROM generate_series(1, 100) g ON CONFLICT (k) DO UPDATE SET v = excluded.v * 10;
SELECT count(*), sum(v) FROM kv;
-- DO UPDATE ... WHERE that does not match leaves the row alone.
INSERT INTO kv VALUES (5, 0) ON CONFLICT (k) DO UPDATE SET v = -1 WHERE kv.v > 1000 RETURNING *;
SELECT v FROM kv WHERE k = 5;
-- The same key twice in one statement.
INSERT INTO kv VALUES (7, 1), (7, 2) ON CONFLICT (k) DO UPDATE SET v = excluded.v;
INSERT INTO kv VALUES (300, 1), (300, 2) ON CONFLICT (k) DO NOTHING;
SELECT k, v FROM kv WHERE k IN (7, 300) ORDER BY k;
-- ON CONSTRAINT, and an upsert that moves the row (an indexed column changes).
CREATE UNIQUE INDEX kv_v ON kv (v) WHERE v < 0;
INSERT INTO kv VALUES (2, 9) ON CONFLICT ON CONSTRAINT kv_pkey DO UPDATE SET v = -2;
SELECT k, v FROM kv WHERE k = 2;
SET enable_seqscan = off;
SELECT k FROM kv WHERE v = -2;
RESET enable_seqscan;
-- Other sessions upsert the same key one after the other.
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "INSERT INTO kv VALUES (200, 1) ON CONFLICT (k) DO UPDATE SET v = kv.v + 1"
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "INSERT INTO kv VALUES (200, 1) ON CONFLICT (k) DO UPDATE SET v = kv.v + 1"
SELECT v FROM kv WHERE k = 200;
-- A rolled-back upsert.
BEGIN;
INSERT INTO kv VALUES (400, 1) ON CONFLICT (k) DO NOTHING;
INSERT INTO kv VALUES (1, 0) ON CONFLICT (k) DO UPDATE SET v = 0;
ROLLBACK;
SELECT count(*) FILTER (WHERE k = 400) AS k400, min(v) FILTER (WHERE k = 1) AS v1 FROM kv;
DROP TABLE kv;

-- xmax as heap shows it, on both access methods: 0 for the row an upsert
-- inserted and this transaction's id for the one it updated (the lock
-- taken on the conflicting row carries over to the new version: the
-- "(xmax = 0) AS inserted" idiom), and the deleter's in DELETE ...
-- RETURNING. (FOR UPDATE returns the row as scanned on both.)
CREATE TABLE ux_heap (k int PRIMARY KEY, v text) USING heap;
CREATE TABLE ux_pasv (k int PRIMARY KEY, v text) USING pasv;
INSERT INTO ux_heap VALUES (1, 'a');
INSERT INTO ux_pasv VALUES (1, 'a');
INSERT INTO ux_heap VALUES (1, 'b'), (2, 'c') ON CONFLICT (k) DO UPDATE SET v = excluded.v
  RETURNING 'heap' AS am, k, v, xmax = 0 AS inserted, xmax = pg_current_xact_id()::xid AS mine;
INSERT INTO ux_pasv VALUES (1, 'b'), (2, 'c') ON CONFLICT (k) DO UPDATE SET v = excluded.v
  RETURNING 'pasv' AS am, k, v, xmax = 0 AS inserted, xmax = pg_current_xact_id()::xid AS mine;
BEGIN;
SELECT 'heap' AS am, k, xmax = pg_current_xact_id()::xid AS locked_by_me FROM ux_heap WHERE k = 1 FOR UPDATE;
SELECT 'pasv' AS am, k, xmax = pg_current_xact_id()::xid AS locked_by_me FROM ux_pasv WHERE k = 1 FOR UPDATE;
COMMIT;
DELETE FROM ux_heap WHERE k = 2 RETURNING 'heap' AS am, k, xmax = pg_current_xact_id()::xid AS deleted_by_me;
DELETE FROM ux_pasv WHERE k = 2 RETURNING 'pasv' AS am, k, xmax = pg_current_xact_id()::xid AS deleted_by_me;
DROP TABLE ux_heap, ux_pasv;
