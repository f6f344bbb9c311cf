-- Packed row groups (pasv_am/src/pack.rs) after the rows in them changed:
-- a bulk load packs its rows 64 to a RocksDB entry, and every later UPDATE
-- or DELETE of one of them writes a row key that the engine's view merges
-- with the pack (shadowing or hiding its entry). Every read shape must give
-- what a heap twin given the same statements gives: whole scans, key
-- ranges, and TID ranges, which start and end inside packs. Checked with
-- the changes in the memtable and again after a flush (a pack and its row
-- keys then come from different sorted runs).
CREATE TABLE pk_pasv (id int8 PRIMARY KEY, grp int4, payload text) USING pasv;
CREATE TABLE pk_heap (id int8 PRIMARY KEY, grp int4, payload text) USING heap;
INSERT INTO pk_pasv SELECT g, g % 1000, md5(g::text) FROM generate_series(1, 30000) g;
INSERT INTO pk_heap SELECT g, g % 1000, md5(g::text) FROM generate_series(1, 30000) g;
-- The load went into packs: far fewer RocksDB entries than rows.
SELECT approx_keys < 3000 AS rows_are_packed FROM pasv.column_families()
 WHERE relfilenumber = pg_relation_filenode('pk_pasv')
   AND database_oid = (SELECT oid FROM pg_database WHERE datname = current_database());
SELECT setseed(0.31);
CREATE TEMP TABLE pk_ops AS
  SELECT (random() * 30000)::int8 AS id, (random() * 3)::int AS kind FROM generate_series(1, 5000);
UPDATE pk_pasv SET grp = grp + 1 WHERE id IN (SELECT id FROM pk_ops WHERE kind = 0);
UPDATE pk_heap SET grp = grp + 1 WHERE id IN (SELECT id FROM pk_ops WHERE kind = 0);
DELETE FROM pk_pasv WHERE id IN (SELECT id FROM pk_ops WHERE kind = 1);
DELETE FROM pk_heap WHERE id IN (SELECT id FROM pk_ops WHERE kind = 1);
-- Runs of neighbouring rows change too, not only scattered ones.
UPDATE pk_pasv SET payload = payload || 'x' WHERE id BETWEEN 700 AND 900 OR id % 97 = 3;
UPDATE pk_heap SET payload = payload || 'x' WHERE id BETWEEN 700 AND 900 OR id % 97 = 3;
DELETE FROM pk_pasv WHERE id BETWEEN 1000 AND 1100;
DELETE FROM pk_heap WHERE id BETWEEN 1000 AND 1100;
CREATE FUNCTION pk_same(label text) RETURNS TABLE (what text, same bool) LANGUAGE plpgsql AS $$
DECLARE
  r record;
  ok bool := true;
BEGIN
  SET LOCAL enable_indexscan = off;
  SET LOCAL enable_bitmapscan = off;
  RETURN QUERY SELECT label || ': count', (SELECT count(*) FROM pk_pasv) = (SELECT count(*) FROM pk_heap);
  RETURN QUERY SELECT label || ': rows',
    (SELECT sum(hashtext(id || ' ' || grp || ' ' || payload)::int8) FROM pk_pasv)
      = (SELECT sum(hashtext(id || ' ' || grp || ' ' || payload)::int8) FROM pk_heap);
  -- Key ranges by sequential scan, against the heap twin.
  FOR r IN SELECT k FROM generate_series(1, 30000, 1777) k LOOP
    ok := ok AND (SELECT coalesce(sum(hashtext(id || ' ' || grp || ' ' || payload)::int8), 0)
                    FROM pk_pasv WHERE id BETWEEN r.k AND r.k + 400)
               = (SELECT coalesce(sum(hashtext(id || ' ' || grp || ' ' || payload)::int8), 0)
                    FROM pk_heap WHERE id BETWEEN r.k AND r.k + 400);
  END LOOP;
  RETURN QUERY SELECT label || ': key ranges', ok;
END $$;
-- TID ranges: what a TID range scan finds, against a sequential scan's
-- filter over the same table (TIDs differ from heap's, so no twin here).
-- EXECUTE plans each query anew, under the setting of its call.
CREATE FUNCTION pk_tid_ranges(use_tid_scan bool) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  out text := '';
  piece text;
  k int;
BEGIN
  PERFORM set_config('enable_tidscan', use_tid_scan::text, true);
  FOR k IN SELECT g FROM generate_series(0, 100, 3) g LOOP
    EXECUTE format($q$SELECT count(*) || ':' || coalesce(sum(hashtext(id || ' ' || grp || ' ' || payload)::int8), 0)
                        FROM pk_pasv WHERE ctid >= '(%s,%s)' AND ctid < '(%s,%s)'$q$,
                   k, k % 7 + 1, k + 2, k % 5 + 2)
      INTO piece;
    out := out || piece || ' ';
  END LOOP;
  RETURN out;
END $$;
CREATE FUNCTION pk_tid_plan(use_tid_scan bool) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  line text;
BEGIN
  PERFORM set_config('enable_tidscan', use_tid_scan::text, true);
  FOR line IN EXECUTE $q$EXPLAIN (COSTS OFF) SELECT count(*) FROM pk_pasv WHERE ctid >= '(5,3)' AND ctid < '(8,2)'$q$ LOOP
    IF line LIKE '%Scan%' THEN
      RETURN trim(line);
    END IF;
  END LOOP;
  RETURN NULL;
END $$;
-- The two plans compared below, and that the ranges hold rows.
SELECT pk_tid_plan(true) AS with_tid_scan, pk_tid_plan(false) AS without;
SELECT * FROM pk_same('in the memtable');
SELECT pk_tid_ranges(true) = pk_tid_ranges(false) AS tid_ranges_agree,
       (SELECT sum(split_part(p, ':', 1)::int) > 1000 FROM unnest(string_to_array(trim(pk_tid_ranges(true)), ' ')) p) AS rows_found;
SELECT pasv.flush_table('pk_pasv'::regclass);
SELECT * FROM pk_same('flushed');
SELECT pk_tid_ranges(true) = pk_tid_ranges(false) AS tid_ranges_agree,
       (SELECT sum(split_part(p, ':', 1)::int) > 1000 FROM unnest(string_to_array(trim(pk_tid_ranges(true)), ' ')) p) AS rows_found;
DROP FUNCTION pk_same(text), pk_tid_ranges(bool), pk_tid_plan(bool);
DROP TABLE pk_pasv, pk_heap;
