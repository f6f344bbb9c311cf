-- VACUUM re-packs (pasv_am/src/engine/repacking.rs): the row keys its pass
-- leaves beside the packs of a bulk-loaded table (the markers of the
-- versions it removes, the frozen copies FREEZE writes) are folded back into
-- the packs, so later scans step over one RocksDB entry a group again.
-- VERBOSE says how many; every read gives what a heap twin given the same
-- statements gives, before and after, and after later changes of folded
-- rows. (No text column: no TOAST table, whose VERBOSE lines name xids.)
CREATE TABLE rp_pasv (id int8 PRIMARY KEY, grp int4, v float8) USING pasv;
CREATE TABLE rp_heap (id int8 PRIMARY KEY, grp int4, v float8) USING heap;
INSERT INTO rp_pasv SELECT g, g % 100, g * 0.5 FROM generate_series(1, 20000) g;
INSERT INTO rp_heap SELECT g, g % 100, g * 0.5 FROM generate_series(1, 20000) g;
DELETE FROM rp_pasv WHERE id % 7 = 0;
DELETE FROM rp_heap WHERE id % 7 = 0;
UPDATE rp_pasv SET grp = grp + 1 WHERE id % 11 = 0;
UPDATE rp_heap SET grp = grp + 1 WHERE id % 11 = 0;
CREATE FUNCTION rp_same(label text) RETURNS TABLE (what text, same bool) LANGUAGE plpgsql AS $$
DECLARE
  r record;
  ok bool := true;
BEGIN
  SET LOCAL enable_indexscan = off;
  SET LOCAL enable_bitmapscan = off;
  RETURN QUERY SELECT label || ': rows',
    (SELECT count(*) FROM ((TABLE rp_pasv EXCEPT ALL TABLE rp_heap) UNION ALL (TABLE rp_heap EXCEPT ALL TABLE rp_pasv)) d) = 0;
  -- One row at a time by its key (index fetches: the row cache and the
  -- engine's one-row reads open packs too).
  SET LOCAL enable_indexscan = on;
  SET LOCAL enable_seqscan = off;
  FOR r IN SELECT k FROM generate_series(1, 20000, 37) k LOOP
    ok := ok AND (SELECT row(p.*)::text FROM rp_pasv p WHERE id = r.k) IS NOT DISTINCT FROM
                 (SELECT row(h.*)::text FROM rp_heap h WHERE id = r.k);
  END LOOP;
  RETURN QUERY SELECT label || ': rows by key', ok;
END $$;
SELECT * FROM rp_same('before VACUUM');
-- The removals' markers are folded: the groups of every removed row.
VACUUM (VERBOSE) rp_pasv;
VACUUM rp_heap;
SELECT * FROM rp_same('after VACUUM');
-- Nothing left to fold: no re-pack line.
VACUUM (VERBOSE) rp_pasv;
-- A folded row deleted, updated, frozen: its pack holds it now.
DELETE FROM rp_pasv WHERE id % 13 = 0;
DELETE FROM rp_heap WHERE id % 13 = 0;
UPDATE rp_pasv SET v = -v WHERE id % 17 = 0;
UPDATE rp_heap SET v = -v WHERE id % 17 = 0;
SELECT * FROM rp_same('after changes of folded rows');
-- FREEZE writes a frozen copy of every row: folded back, not left as
-- 18 000 row keys.
VACUUM (FREEZE, VERBOSE) rp_pasv;
VACUUM (FREEZE) rp_heap;
SELECT * FROM rp_same('after VACUUM FREEZE');
SELECT pasv.flush_table('rp_pasv'::regclass);
SELECT * FROM rp_same('flushed');
DROP FUNCTION rp_same(text);
DROP TABLE rp_pasv, rp_heap;
