-- Backward scans (issue 10, item 3): scrollable cursors over sequential and
-- TID-range scans of pasv tables move both ways like heap's. Rows are only
-- inserted and deleted here, so heap and pasv return them in the same order
-- and a random walk of cursor moves must give the same rows on both.
CREATE TABLE bw_p (id int, v text) USING pasv;
CREATE TABLE bw_h (id int, v text) USING heap;
INSERT INTO bw_p SELECT g, 'r' || g FROM generate_series(1, 600) g;
INSERT INTO bw_h SELECT g, 'r' || g FROM generate_series(1, 600) g;
-- Gaps wider than a backward step's first window (64 rowids).
DELETE FROM bw_p WHERE id % 3 = 0 OR id BETWEEN 100 AND 400;
DELETE FROM bw_h WHERE id % 3 = 0 OR id BETWEEN 100 AND 400;
CREATE FUNCTION bw_walk(tbl regclass, seed float8, steps int) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  c refcursor;
  r record;
  k int;
  result text := '';
  move float8;
BEGIN
  PERFORM setseed(seed);
  OPEN c SCROLL FOR EXECUTE format('SELECT id FROM %s', tbl);
  FOR i IN 1..steps LOOP
    move := random();
    k := 1 + (random() * 40)::int;
    IF move < 0.35 THEN
      FETCH NEXT FROM c INTO r;
    ELSIF move < 0.7 THEN
      FETCH PRIOR FROM c INTO r;
    ELSIF move < 0.8 THEN
      FETCH RELATIVE k FROM c INTO r;
    ELSIF move < 0.9 THEN
      FETCH RELATIVE -k FROM c INTO r;
    ELSIF move < 0.95 THEN
      FETCH LAST FROM c INTO r;
    ELSE
      FETCH FIRST FROM c INTO r;
    END IF;
    result := result || coalesce(r.id::text, '-') || ' ';
  END LOOP;
  CLOSE c;
  RETURN md5(result);
END $$;
SELECT count(*) FILTER (WHERE bw_walk('bw_p', s, 400) = bw_walk('bw_h', s, 400)) AS walks_equal_to_heap
  FROM generate_series(1, 10) g, LATERAL (SELECT g / 20.0 AS s) x;
-- The whole table backward, from the end, and back and forth at the edges.
BEGIN;
DECLARE c SCROLL CURSOR FOR SELECT id FROM bw_p;
FETCH BACKWARD 5 FROM c;
FETCH FORWARD 3 FROM c;
MOVE LAST IN c;
FETCH BACKWARD 3 FROM c;
FETCH ABSOLUTE 1 FROM c;
FETCH PRIOR FROM c;
FETCH PRIOR FROM c;
FETCH NEXT FROM c;
COMMIT;
SELECT count(*) AS rows_forward, sum(id) FROM bw_p;
DO $$
DECLARE c refcursor; r record; n int := 0; s bigint := 0; prev int := 1000000;
BEGIN
  OPEN c SCROLL FOR SELECT id FROM bw_p;
  MOVE LAST IN c;
  MOVE NEXT IN c;
  LOOP
    FETCH PRIOR FROM c INTO r;
    EXIT WHEN NOT FOUND;
    IF r.id >= prev THEN RAISE EXCEPTION 'backward scan out of order: % after %', r.id, prev; END IF;
    prev := r.id; n := n + 1; s := s + r.id;
  END LOOP;
  RAISE NOTICE 'rows backward: %, sum %', n, s;
END $$;
-- Updated rows, the transaction's own changes, and an aborted insert.
UPDATE bw_p SET v = 'updated' WHERE id IN (2, 599);
BEGIN;
INSERT INTO bw_p VALUES (601, 'own insert');
UPDATE bw_p SET v = 'own update' WHERE id = 1;
SAVEPOINT s;
INSERT INTO bw_p VALUES (602, 'rolled back');
ROLLBACK TO s;
DECLARE c SCROLL CURSOR FOR SELECT id, v FROM bw_p;
FETCH LAST FROM c;
FETCH BACKWARD 3 FROM c;
FETCH ABSOLUTE 2 FROM c;
FETCH PRIOR FROM c;
COMMIT;
-- TID-range scans backward.
BEGIN;
DECLARE t SCROLL CURSOR FOR SELECT ctid, id FROM bw_p WHERE ctid >= '(0,5)' AND ctid < '(0,12)';
FETCH ALL FROM t;
FETCH BACKWARD ALL FROM t;
FETCH FORWARD 2 FROM t;
FETCH BACKWARD 1 FROM t;
COMMIT;
-- An empty table and an empty range.
CREATE TABLE bw_empty (id int) USING pasv;
BEGIN;
DECLARE e SCROLL CURSOR FOR SELECT id FROM bw_empty;
FETCH LAST FROM e;
FETCH PRIOR FROM e;
FETCH NEXT FROM e;
COMMIT;
-- A TID past the table's end is invalid, as on heap (currtid2, TID scans).
SELECT currtid2('bw_empty'::text, '(0,1)'::tid);
INSERT INTO bw_empty VALUES (1);
SELECT currtid2('bw_empty'::text, '(0,1)'::tid);
SELECT currtid2('bw_empty'::text, '(1,1)'::tid);
SELECT id FROM bw_empty WHERE ctid = ANY (ARRAY['(0,1)', '(7,1)']::tid[]);
DROP TABLE bw_p, bw_h, bw_empty;
DROP FUNCTION bw_walk;
