-- The row cache (src/ipc/HOT_PATH.md, pasv_am/src/row_cache.rs): index
-- fetches under MVCC snapshots are answered from shared memory that the
-- engine keeps current. A random mix of updates (in place and of an
-- indexed column), deletes, upserts, rolled-back subtransactions and
-- rolled-back transactions runs against a pasv table and its heap twin,
-- reading every touched row back by primary key after each step: the two
-- must agree at every step, and the cache must have answered reads.
CREATE TABLE rc_p (id int PRIMARY KEY, k int, v text) USING pasv;
CREATE INDEX rc_p_k ON rc_p (k);
CREATE TABLE rc_h (id int PRIMARY KEY, k int, v text) USING heap;
CREATE INDEX rc_h_k ON rc_h (k);
INSERT INTO rc_p SELECT g, g, 'v' || g FROM generate_series(1, 300) g;
INSERT INTO rc_h SELECT g, g, 'v' || g FROM generate_series(1, 300) g;
CREATE TABLE rc_hits0 USING heap AS SELECT hits FROM pasv.row_cache_stats();
SET enable_seqscan = off;
SET enable_bitmapscan = off;
CREATE FUNCTION rc_steps(seed float8, steps int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
  bad int := 0;
  id1 int;
  op float8;
  a text;
  b text;
BEGIN
  PERFORM setseed(seed);
  FOR i IN 1..steps LOOP
    id1 := 1 + (random() * 320)::int;
    op := random();
    IF op < 0.25 THEN
      UPDATE rc_p SET v = v || 'u' WHERE id = id1;
      UPDATE rc_h SET v = v || 'u' WHERE id = id1;
    ELSIF op < 0.35 THEN
      UPDATE rc_p SET k = k + 1000 WHERE id = id1;
      UPDATE rc_h SET k = k + 1000 WHERE id = id1;
    ELSIF op < 0.42 THEN
      DELETE FROM rc_p WHERE id = id1;
      DELETE FROM rc_h WHERE id = id1;
    ELSIF op < 0.52 THEN
      INSERT INTO rc_p VALUES (id1, id1, 'n' || i) ON CONFLICT (id) DO UPDATE SET v = 'c' || i;
      INSERT INTO rc_h VALUES (id1, id1, 'n' || i) ON CONFLICT (id) DO UPDATE SET v = 'c' || i;
    ELSIF op < 0.6 THEN
      BEGIN
        UPDATE rc_p SET v = 'sub' WHERE id = id1;
        UPDATE rc_h SET v = 'sub' WHERE id = id1;
        DELETE FROM rc_p WHERE id = id1 + 1;
        DELETE FROM rc_h WHERE id = id1 + 1;
        RAISE EXCEPTION 'roll back';
      EXCEPTION WHEN raise_exception THEN
        NULL;
      END;
    END IF;
    SELECT v INTO a FROM rc_p WHERE id = id1;
    SELECT v INTO b FROM rc_h WHERE id = id1;
    IF a IS DISTINCT FROM b THEN
      bad := bad + 1;
    END IF;
    SELECT string_agg(v, ',' ORDER BY id) INTO a FROM rc_p WHERE k IN (id1, id1 + 1000, id1 + 2000);
    SELECT string_agg(v, ',' ORDER BY id) INTO b FROM rc_h WHERE k IN (id1, id1 + 1000, id1 + 2000);
    IF a IS DISTINCT FROM b THEN
      bad := bad + 1;
    END IF;
  END LOOP;
  RETURN bad;
END $$;
CREATE FUNCTION rc_diff() RETURNS bigint LANGUAGE sql AS $$
  SELECT count(*) FROM generate_series(1, 330) g
  WHERE (SELECT row(k, v) FROM rc_p WHERE id = g) IS DISTINCT FROM (SELECT row(k, v) FROM rc_h WHERE id = g)
$$;
SELECT rc_steps(0.1, 400) AS mismatches;
SELECT rc_diff() AS differing_rows;
BEGIN;
SELECT rc_steps(0.2, 300) AS mismatches;
ROLLBACK;
SELECT rc_diff() AS differing_rows_after_rollback;
VACUUM rc_p;
VACUUM rc_h;
SELECT rc_diff() AS differing_rows_after_vacuum;
SELECT rc_steps(0.3, 400) AS mismatches;
SELECT rc_diff() AS differing_rows;
SELECT hits > (SELECT hits FROM rc_hits0) AS cache_answered FROM pasv.row_cache_stats();
-- Bitmap heap scans of a few exact TIDs (TPC-B's UPDATE of a teller or a
-- branch) read them as one-row reads, which the cache answers (tam/scan.rs);
-- a block with more offsets is read whole. The same random mix through
-- bitmap scans only (custom plans, so the settings apply inside rc_steps),
-- then reads of both kinds against heap.
SET enable_indexscan = off;
SET enable_bitmapscan = on;
SET plan_cache_mode = force_custom_plan;
SELECT rc_steps(0.4, 300) AS mismatches_through_bitmap_scans;
SELECT rc_diff() AS differing_rows;
EXPLAIN (COSTS OFF) SELECT v FROM rc_p WHERE id = 5;
SELECT count((SELECT v FROM rc_p WHERE id = g)) AS rows_read FROM generate_series(1, 60) g;
CREATE TABLE rc_scans0 USING heap AS SELECT calls FROM pasv.channel_stats('backend') WHERE request = 'scan';
SELECT count((SELECT v FROM rc_p WHERE id = g)) AS rows_read_again FROM generate_series(1, 60) g;
SELECT calls - (SELECT calls FROM rc_scans0) AS bitmap_round_trips FROM pasv.channel_stats('backend') WHERE request = 'scan';
SELECT (SELECT string_agg(id || ':' || k || ':' || v, ',' ORDER BY id) FROM rc_p WHERE k < 250 OR k > 1100)
       IS NOT DISTINCT FROM
       (SELECT string_agg(id || ':' || k || ':' || v, ',' ORDER BY id) FROM rc_h WHERE k < 250 OR k > 1100) AS whole_blocks_agree;
RESET enable_indexscan;
SET enable_bitmapscan = off;
RESET plan_cache_mode;
-- A TRUNCATE in the creating transaction keeps the relfilenumber (a new
-- incarnation of the same column family): rows cached before it are gone.
BEGIN;
CREATE TABLE rc_t (id int PRIMARY KEY, v text) USING pasv;
INSERT INTO rc_t VALUES (1, 'before');
SELECT v FROM rc_t WHERE id = 1;
TRUNCATE rc_t;
SELECT v FROM rc_t WHERE id = 1;
INSERT INTO rc_t VALUES (1, 'after');
SELECT v FROM rc_t WHERE id = 1;
COMMIT;
SELECT v FROM rc_t WHERE id = 1;
-- An index range scan reads ahead in windows of rows (tam/fetch.rs): rows
-- the cache holds come from it there too, row by row, with the same
-- answer as the engine's; an uncached row sends the window to the engine.
CREATE TABLE rc_w (id int PRIMARY KEY, v text) USING pasv;
INSERT INTO rc_w SELECT g, 'w' || g FROM generate_series(1, 200) g;
UPDATE rc_w SET v = v || ' updated' WHERE id % 3 = 0;
DELETE FROM rc_w WHERE id % 10 = 0;
-- One index scan per row: one-row reads, which fill the cache (not id 151).
SELECT count((SELECT v FROM rc_w WHERE id = g)) AS filled FROM generate_series(101, 200) g WHERE g <> 151;
CREATE TABLE rc_hits1 USING heap AS SELECT hits FROM pasv.row_cache_stats();
SELECT count(*), sum(id), sum(length(v)) FROM rc_w WHERE id BETWEEN 101 AND 200;
SELECT hits - (SELECT hits FROM rc_hits1) >= 80 AS window_rows_from_cache FROM pasv.row_cache_stats();
SELECT count(*), sum(id), sum(length(v)) FROM rc_w WHERE id BETWEEN 1 AND 200;
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT count(*), sum(id), sum(length(v)) FROM rc_w WHERE id BETWEEN 101 AND 200;
SELECT count(*), sum(id), sum(length(v)) FROM rc_w WHERE id BETWEEN 1 AND 200;
-- An index scan's read-ahead window that the cache cannot answer is read
-- from the engine, which caches each row it read (two versions a row, so
-- a row updated once is cached with both): a second pass over the range
-- makes no round trip, and both passes agree with heap.
CREATE TABLE rc_x (id int PRIMARY KEY, v text) USING pasv;
CREATE TABLE rc_xh (id int PRIMARY KEY, v text) USING heap;
INSERT INTO rc_x SELECT g, 'v' || g FROM generate_series(1, 500) g;
INSERT INTO rc_xh SELECT g, 'v' || g FROM generate_series(1, 500) g;
UPDATE rc_x SET v = v || '+' WHERE id % 7 = 0;
UPDATE rc_xh SET v = v || '+' WHERE id % 7 = 0;
DELETE FROM rc_x WHERE id % 11 = 0;
DELETE FROM rc_xh WHERE id % 11 = 0;
-- A TRUNCATE that keeps the relfilenumber (in the creating transaction)
-- raises the cache's generation: nothing of rc_x is cached after it.
BEGIN;
CREATE TABLE rc_gen (x int) USING pasv;
INSERT INTO rc_gen VALUES (1);
TRUNCATE rc_gen;
COMMIT;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT string_agg(v, ',' ORDER BY id) FROM rc_x WHERE id BETWEEN 101 AND 300;
SELECT (SELECT string_agg(v, ',' ORDER BY id) FROM rc_x WHERE id BETWEEN 101 AND 300)
     = (SELECT string_agg(v, ',' ORDER BY id) FROM rc_xh WHERE id BETWEEN 101 AND 300) AS first_pass_agrees;
CREATE TABLE rc_scans1 USING heap AS SELECT calls FROM pasv.channel_stats('backend') WHERE request = 'scan';
SELECT (SELECT string_agg(v, ',' ORDER BY id) FROM rc_x WHERE id BETWEEN 101 AND 300)
     = (SELECT string_agg(v, ',' ORDER BY id) FROM rc_xh WHERE id BETWEEN 101 AND 300) AS second_pass_agrees;
SELECT calls - (SELECT calls FROM rc_scans1) AS second_pass_round_trips FROM pasv.channel_stats('backend') WHERE request = 'scan';
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP TABLE rc_x, rc_xh, rc_gen, rc_scans1;
DROP TABLE rc_p, rc_h, rc_t, rc_hits0, rc_w, rc_hits1, rc_scans0;
DROP FUNCTION rc_steps(float8, int);
DROP FUNCTION rc_diff();

-- DELETE's re-fetch of the row it deleted (RETURNING; AFTER ROW DELETE
-- triggers, foreign keys' among them) is answered from the chain the
-- delete read, not from the engine (before: one round trip a row), and
-- returns what heap returns, also when a savepoint undid an earlier delete.
CREATE TABLE rc_dp (id int PRIMARY KEY, v text) USING pasv;
INSERT INTO rc_dp SELECT g, 'v' || g FROM generate_series(1, 60) g;
SELECT count((SELECT v FROM rc_dp WHERE id = g)) AS rows_cached FROM generate_series(1, 60) g;
CREATE TABLE rc_scans2 USING heap AS SELECT calls FROM pasv.channel_stats('backend') WHERE request = 'scan';
WITH d AS (DELETE FROM rc_dp WHERE id BETWEEN 11 AND 30 RETURNING id, v)
SELECT count(*), string_agg(v, ',' ORDER BY id) FROM d;
SELECT calls - (SELECT calls FROM rc_scans2) < 10 AS few_round_trips FROM pasv.channel_stats('backend') WHERE request = 'scan';
BEGIN;
SAVEPOINT s;
DELETE FROM rc_dp WHERE id = 5 RETURNING id, v;
ROLLBACK TO s;
UPDATE rc_dp SET v = 'changed' WHERE id = 5;
DELETE FROM rc_dp WHERE id = 5 RETURNING id, v;
COMMIT;
DELETE FROM rc_dp WHERE id > 55 RETURNING *;
-- A cascading foreign key: the referencing rows go with their parents.
CREATE TABLE rc_fp (id int PRIMARY KEY) USING pasv;
CREATE TABLE rc_fc (id int PRIMARY KEY, p int REFERENCES rc_fp ON DELETE CASCADE) USING pasv;
CREATE TABLE rc_fa (id int, p int) USING heap;
CREATE FUNCTION rc_fc_gone() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN INSERT INTO rc_fa VALUES (OLD.id, OLD.p); RETURN NULL; END $$;
CREATE TRIGGER rc_fc_gone AFTER DELETE ON rc_fc FOR EACH ROW EXECUTE FUNCTION rc_fc_gone();
INSERT INTO rc_fp SELECT g FROM generate_series(1, 10) g;
INSERT INTO rc_fc SELECT g, (g - 1) % 10 + 1 FROM generate_series(1, 30) g;
DELETE FROM rc_fp WHERE id IN (2, 3) RETURNING id;
SELECT count(*) AS children_left, count(*) FILTER (WHERE p IN (2, 3)) AS of_deleted FROM rc_fc;
SELECT string_agg(id || ':' || p, ',' ORDER BY id) AS trigger_saw FROM rc_fa;
DROP TABLE rc_dp, rc_scans2, rc_fc, rc_fp, rc_fa;
DROP FUNCTION rc_fc_gone();
-- A row whose newest version a rolled-back UPDATE wrote: its lock takes
-- the aborted version, the one below it and one more from the cache (with
-- two, the chain looked unfinished and was read from the engine, two
-- waited scans a row: TPC-C-like's stock rows).
CREATE TABLE rc_ab (id int PRIMARY KEY, v text) USING pasv;
CREATE INDEX rc_ab_v ON rc_ab (v);
CREATE TABLE rc_abh (id int PRIMARY KEY, v text) USING heap;
CREATE INDEX rc_abh_v ON rc_abh (v);
INSERT INTO rc_ab SELECT g, 'v' || g FROM generate_series(1, 40) g;
INSERT INTO rc_abh SELECT g, 'v' || g FROM generate_series(1, 40) g;
BEGIN;
UPDATE rc_ab SET v = 'undone' WHERE id <= 20;
ROLLBACK;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count((SELECT v FROM rc_ab WHERE id = g)) AS rows_cached FROM generate_series(1, 40) g;
CREATE TABLE rc_scans3 USING heap AS SELECT calls FROM pasv.channel_stats('backend') WHERE request = 'scan';
BEGIN;
EXPLAIN (COSTS OFF) SELECT id, v FROM rc_ab WHERE id <= 20 FOR UPDATE;
SELECT string_agg(id || ':' || v, ',' ORDER BY id) AS locked FROM (SELECT id, v FROM rc_ab WHERE id <= 20 FOR UPDATE) s;
SELECT calls - (SELECT calls FROM rc_scans3) AS lock_round_trips FROM pasv.channel_stats('backend') WHERE request = 'scan';
COMMIT;
-- An UPDATE of an indexed column inserts a new primary key entry, and the
-- unique check reads the row its equal entry leads to under a dirty
-- snapshot: after the fence, from the cache (before: one waited scan a row).
TRUNCATE rc_scans3;
INSERT INTO rc_scans3 SELECT calls FROM pasv.channel_stats('backend') WHERE request = 'scan';
UPDATE rc_ab SET v = v || '+' WHERE id > 20;
SELECT calls - (SELECT calls FROM rc_scans3) AS unique_check_round_trips FROM pasv.channel_stats('backend') WHERE request = 'scan';
UPDATE rc_abh SET v = v || '+' WHERE id > 20;
-- The checks still see every live and in-progress key.
BEGIN;
UPDATE rc_ab SET v = v || '!' WHERE id BETWEEN 15 AND 25;
DELETE FROM rc_ab WHERE id = 30;
INSERT INTO rc_ab VALUES (30, 'again');
SAVEPOINT s;
INSERT INTO rc_ab VALUES (25, 'dup');
ROLLBACK TO s;
UPDATE rc_ab SET id = id + 1 WHERE id = 40;
SAVEPOINT s2;
UPDATE rc_ab SET id = 22 WHERE id = 21;
ROLLBACK TO s2;
COMMIT;
BEGIN;
UPDATE rc_abh SET v = v || '!' WHERE id BETWEEN 15 AND 25;
DELETE FROM rc_abh WHERE id = 30;
INSERT INTO rc_abh VALUES (30, 'again');
UPDATE rc_abh SET id = id + 1 WHERE id = 40;
COMMIT;
INSERT INTO rc_ab VALUES (41, 'dup');
SELECT (SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM rc_ab)
     = (SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM rc_abh) AS same_rows;
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP TABLE rc_ab, rc_abh, rc_scans3;
-- An index's deletion check (bottom-up deletion when UPDATEs of an indexed
-- column fill the primary key's pages with entries of one key) reads each
-- row it asks about under a dirty snapshot: after one fence, from the cache
-- (before: a waited round trip a row, 4 544 for these updates).
CREATE TABLE rc_bu (id int PRIMARY KEY, v text) USING pasv;
CREATE INDEX rc_bu_v ON rc_bu (v);
CREATE TABLE rc_buh (id int PRIMARY KEY, v text) USING heap;
CREATE INDEX rc_buh_v ON rc_buh (v);
INSERT INTO rc_bu SELECT g, 'v' || g FROM generate_series(1, 2000) g;
INSERT INTO rc_buh SELECT g, 'v' || g FROM generate_series(1, 2000) g;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count((SELECT v FROM rc_bu WHERE id = g)) AS rows_cached FROM generate_series(1, 2000) g;
CREATE TABLE rc_scans4 USING heap AS SELECT calls FROM pasv.channel_stats('backend') WHERE request = 'scan';
DO $$ BEGIN FOR r IN 1..30 LOOP UPDATE rc_bu SET v = v || 'x' WHERE id BETWEEN 1 AND 200; END LOOP; END $$;
SELECT calls - (SELECT calls FROM rc_scans4) < 50 AS few_round_trips FROM pasv.channel_stats('backend') WHERE request = 'scan';
DO $$ BEGIN FOR r IN 1..30 LOOP UPDATE rc_buh SET v = v || 'x' WHERE id BETWEEN 1 AND 200; END LOOP; END $$;
SELECT (SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM rc_bu)
     = (SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM rc_buh) AS same_rows,
       (SELECT count(*) FROM rc_bu WHERE v LIKE '%xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx') AS updated_by_index;
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP TABLE rc_bu, rc_buh, rc_scans4;
