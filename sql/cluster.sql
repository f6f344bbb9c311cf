-- VACUUM FULL and CLUSTER rewrite a pasv table into a new column family,
-- keeping every row, its large (toasted) values and its indexes.
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
CREATE TABLE c (id int PRIMARY KEY, grp int, doc text, k int) USING pasv;
INSERT INTO c SELECT g, g % 5,
       CASE WHEN g % 50 = 0 THEN (SELECT string_agg(md5((g * 1000 + i)::text), '') FROM generate_series(1, 600) i)
            ELSE 'small ' || g END,
       (g * 7919) % 2003
  FROM generate_series(1, 2000) g;
UPDATE c SET grp = grp + 10 WHERE id <= 500;
DELETE FROM c WHERE id > 1900;
-- The digest's index scan prunes the updated rows' roots (their original
-- rows) once no snapshot may see them: wait, so the count is exact.
CALL pg_temp.wait_for_horizon();
SELECT md5(string_agg(id || ':' || grp || ':' || doc, ',' ORDER BY id)) AS digest_before FROM c \gset
SELECT relfilenode AS rfn_before FROM pg_class WHERE relname = 'c' \gset
SELECT count(*), pasv.table_versions('c'::regclass) AS versions FROM c;
CALL pg_temp.wait_for_horizon();
VACUUM FULL c;
SELECT count(*), pasv.table_versions('c'::regclass) AS versions FROM c;
SELECT md5(string_agg(id || ':' || grp || ':' || doc, ',' ORDER BY id)) = :'digest_before' AS same_rows FROM c;
SELECT relfilenode <> :rfn_before AS new_storage FROM pg_class WHERE relname = 'c';
SELECT count(*) AS old_cf_left FROM pasv.column_families() WHERE relfilenumber = :rfn_before;
SET enable_seqscan = off;
SELECT id, grp, length(doc) FROM c WHERE id IN (50, 100, 1900, 1950) ORDER BY id;
RESET enable_seqscan;
-- CLUSTER renumbers the rows in index order: a table scan then follows k.
CREATE INDEX c_k ON c (k);
SELECT bool_and(in_order) AS k_order_before FROM (SELECT k >= lag(k, 1, -1) OVER (ORDER BY ctid) AS in_order FROM c) x;
CLUSTER c USING c_k;
SELECT bool_and(in_order) AS k_order_after FROM (SELECT k >= lag(k, 1, -1) OVER (ORDER BY ctid) AS in_order FROM c) x;
SELECT md5(string_agg(id || ':' || grp || ':' || doc, ',' ORDER BY id)) = :'digest_before' AS same_rows FROM c;
SET enable_seqscan = off;
SELECT id, k FROM c WHERE id = 1234;
SELECT id, k FROM c WHERE k = (1234 * 7919) % 2003;
RESET enable_seqscan;
UPDATE c SET doc = doc || '!' WHERE id = 100;
INSERT INTO c VALUES (5000, 1, 'new');
SELECT count(*), count(DISTINCT ctid), right((SELECT doc FROM c WHERE id = 100), 3) AS tail FROM c;
CALL pg_temp.wait_for_horizon();
VACUUM (FULL, FREEZE) c;
-- Frozen up to the oldest running snapshot (pasv's replay worker may hold
-- one a few transactions old for a moment).
SELECT age(relfrozenxid) <= 10 AS frozen_to_now FROM pg_class WHERE relname = 'c';
SELECT count(*), sum(grp) FROM c;
DROP TABLE c;
-- CLUSTER by a sort (the planner's choice when an index scan costs more,
-- here forced): rows with equal keys come out in the order heap's sort
-- gives the same rows, not in the index's TID order. A pasv and a heap twin
-- with the same rows in the same order.
CREATE TABLE cs_p (id int, k int, pad text) USING pasv;
CREATE TABLE cs_h (id int, k int, pad text) USING heap;
INSERT INTO cs_p SELECT g, CASE WHEN g % 97 = 0 THEN NULL ELSE g % 7 END, 'p' || g FROM generate_series(1, 3000) g;
INSERT INTO cs_h SELECT * FROM cs_p;
CREATE INDEX cs_p_k ON cs_p (k);
CREATE INDEX cs_h_k ON cs_h (k);
SET enable_indexscan = off;
CLUSTER cs_p USING cs_p_k;
CLUSTER cs_h USING cs_h_k;
RESET enable_indexscan;
SELECT (SELECT string_agg(id::text, ',' ORDER BY ctid) FROM cs_p) = (SELECT string_agg(id::text, ',' ORDER BY ctid) FROM cs_h) AS order_as_heap,
       (SELECT string_agg(id::text, ',' ORDER BY ctid) FROM (SELECT id, ctid FROM cs_p ORDER BY ctid LIMIT 5) f) AS first_five,
       (SELECT count(*) FROM cs_p) AS rows;
DROP TABLE cs_p, cs_h;
