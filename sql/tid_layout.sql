-- New rows fill TID pages as heap fills its pages (engine_client::next_rowid):
-- a row goes on the page of the one before while a heap page would take it
-- (its MAXALIGN'd length plus the fillfactor's reserve within the free
-- space), so TIDs, page counts and TABLESAMPLE follow the rows' widths.
-- Each table is loaded alike into a pasv and a heap twin by one backend.
CREATE FUNCTION tl_same(p regclass, h regclass) RETURNS TABLE (rows bigint, pages bigint, same_tids boolean)
LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY EXECUTE format(
    'SELECT count(*), count(DISTINCT (pc::text::point)[0]), bool_and(pc = hc)
       FROM (SELECT id, ctid AS pc FROM %s) a JOIN (SELECT id, ctid AS hc FROM %s) b USING (id)', p, h);
END $$;

-- Narrow rows: heap's page holds 226 of them (36 bytes each with the line pointer).
CREATE TABLE tl_narrow_p (id int) USING pasv;
CREATE TABLE tl_narrow_h (id int) USING heap;
INSERT INTO tl_narrow_p SELECT g FROM generate_series(1, 1000) g;
INSERT INTO tl_narrow_h SELECT g FROM generate_series(1, 1000) g;
SELECT * FROM tl_same('tl_narrow_p', 'tl_narrow_h');
SELECT max(ctid) FROM tl_narrow_p;

-- Rows of about 130 bytes (tidrangescan's), 58 a page.
CREATE TABLE tl_wide_p (id int, data text) USING pasv;
CREATE TABLE tl_wide_h (id int, data text) USING heap;
INSERT INTO tl_wide_p SELECT g, repeat('x', 100) FROM generate_series(1, 200) g;
INSERT INTO tl_wide_h SELECT g, repeat('x', 100) FROM generate_series(1, 200) g;
SELECT * FROM tl_same('tl_wide_p', 'tl_wide_h');

-- A fillfactor keeps its share of each page free (TABLESAMPLE's table).
CREATE TABLE tl_ff_p (id int, name text) USING pasv WITH (fillfactor = 10);
CREATE TABLE tl_ff_h (id int, name text) USING heap WITH (fillfactor = 10);
INSERT INTO tl_ff_p SELECT i, repeat(i::text, 200) FROM generate_series(0, 9) i;
INSERT INTO tl_ff_h SELECT i, repeat(i::text, 200) FROM generate_series(0, 9) i;
SELECT * FROM tl_same('tl_ff_p', 'tl_ff_h');
SELECT id FROM tl_ff_p TABLESAMPLE SYSTEM (50) REPEATABLE (0);
SELECT id FROM tl_ff_h TABLESAMPLE SYSTEM (50) REPEATABLE (0);

-- A row whose fillfactor reserve would not fit even an empty page goes on
-- a nearly empty one (PostgreSQL's insert test).
CREATE TABLE tl_big_p (id int, b text) USING pasv WITH (fillfactor = 10);
CREATE TABLE tl_big_h (id int, b text) USING heap WITH (fillfactor = 10);
ALTER TABLE tl_big_p ALTER COLUMN b SET STORAGE plain;
ALTER TABLE tl_big_h ALTER COLUMN b SET STORAGE plain;
INSERT INTO tl_big_p VALUES (1, NULL), (2, repeat('a', 1000)), (3, NULL), (4, repeat('a', 8126));
INSERT INTO tl_big_h VALUES (1, NULL), (2, repeat('a', 1000)), (3, NULL), (4, repeat('a', 8126));
SELECT * FROM tl_same('tl_big_p', 'tl_big_h');

-- Rows of mixed widths, by COPY (multi_insert), a row wider than the
-- free space left starting the next page.
CREATE TABLE tl_mix_p (id int, t text) USING pasv;
CREATE TABLE tl_mix_h (id int, t text) USING heap;
COPY tl_mix_p FROM PROGRAM 'seq 1 500 | awk ''{ printf "%d\t%s\n", $1, substr("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz", 1, ($1 * 37) % 97) }''';
COPY tl_mix_h FROM PROGRAM 'seq 1 500 | awk ''{ printf "%d\t%s\n", $1, substr("abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz", 1, ($1 * 37) % 97) }''';
SELECT * FROM tl_same('tl_mix_p', 'tl_mix_h');

-- The page count the planner and pg_relation_size see follows the same pages.
VACUUM tl_wide_p, tl_wide_h;
SELECT c.relname, c.relpages FROM pg_class c WHERE relname IN ('tl_wide_p', 'tl_wide_h') ORDER BY relname;
SELECT pg_relation_size('tl_wide_p') = pg_relation_size('tl_wide_h') AS same_size;

DROP TABLE tl_big_p, tl_big_h, tl_narrow_p, tl_narrow_h, tl_wide_p, tl_wide_h, tl_ff_p, tl_ff_h, tl_mix_p, tl_mix_h;
DROP FUNCTION tl_same(regclass, regclass);
