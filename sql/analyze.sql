-- ANALYZE samples pasv rows (rowid blocks) and gives the planner real
-- statistics; the main fork is a sparse file as long as the rowid space.
CREATE TABLE a (id int, grp int, label text) USING pasv;
INSERT INTO a SELECT g, g % 7, CASE WHEN g % 100 = 0 THEN 'rare' ELSE 'common' END FROM generate_series(1, 50000) g;
ANALYZE a;
SELECT relpages > 150 AS has_pages, reltuples BETWEEN 45000 AND 55000 AS tuples_ok FROM pg_class WHERE relname = 'a';
SELECT attname, n_distinct FROM pg_stats WHERE tablename = 'a' AND attname IN ('grp', 'label') ORDER BY attname;
SELECT most_common_vals::text FROM pg_stats WHERE tablename = 'a' AND attname = 'label';
-- The planner's estimate for a rare value comes from the statistics.
CREATE FUNCTION plan_rows(q text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE p json;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) ' || q INTO p;
    RETURN (p -> 0 -> 'Plan' ->> 'Plan Rows')::float8;
END $$;
SELECT plan_rows('SELECT * FROM a WHERE label = ''rare''') BETWEEN 250 AND 1000 AS rare_estimate_ok;
-- Deleted rows leave the sample.
DELETE FROM a WHERE grp = 0;
ANALYZE a;
SELECT attname, n_distinct FROM pg_stats WHERE tablename = 'a' AND attname = 'grp';
SELECT reltuples BETWEEN 38000 AND 48000 AS tuples_ok FROM pg_class WHERE relname = 'a';
-- The fork's length follows the rowid space, but it holds no data.
SELECT pg_relation_size('a') = (SELECT relpages FROM pg_class WHERE relname = 'a')::bigint * 8192 AS fork_length_ok;
DROP FUNCTION plan_rows(text);
DROP TABLE a;
