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
-- The fork's length follows the rowid space, but it holds no data; a bulk
-- insert stretches it up to 15 blocks past its rows at a time (forklen.rs).
SELECT pg_relation_size('a') / 8192 - relpages BETWEEN 0 AND 15 AS fork_length_ok FROM pg_class WHERE relname = 'a';
-- Most of the fork is holes: a bulk insert writes one page in 16 (every new
-- rowid block wrote a zero page before, the whole length on disk).
CREATE TEMP TABLE fork_file (allocated_blocks bigint, block_bytes bigint, length bigint);
DO $$ BEGIN
    EXECUTE format('COPY fork_file FROM PROGRAM %L WITH (DELIMITER %L)',
                   format('stat -c "%%b %%B %%s" %s/%s', current_setting('data_directory'), pg_relation_filepath('a')), ' ');
END $$;
SELECT length > 150 * 8192 AS long, allocated_blocks * block_bytes < length / 3 AS mostly_holes FROM fork_file;
DROP TABLE fork_file;
DROP FUNCTION plan_rows(text);
DROP TABLE a;
-- Sampling every block reads the table a window of blocks at a time (not
-- one request a block): every row is counted once, none lost or counted
-- twice at the blocks' edges. Sampling some blocks (more blocks than
-- sample rows) reads each on its own, and the estimate still holds.
CREATE TABLE a2 (id int, grp int) USING pasv;
INSERT INTO a2 SELECT g, g % 5 FROM generate_series(1, 120000) g;
ANALYZE a2;
SELECT reltuples AS every_block_sampled FROM pg_class WHERE relname = 'a2';
SET default_statistics_target = 1;
ANALYZE a2;
SELECT reltuples BETWEEN 108000 AND 132000 AS some_blocks_sampled_ok FROM pg_class WHERE relname = 'a2';
SELECT n_distinct FROM pg_stats WHERE tablename = 'a2' AND attname = 'grp';
RESET default_statistics_target;
DROP TABLE a2;
-- ANALYZE sets relallvisible from the visibility map, which a pasv table
-- does not have (0 after every ANALYZE); the planner also counts the
-- all-visible share the last VACUUM recorded, so VACUUM ANALYZE leaves the
-- same index-only-scan plan as on heap, and so does a later ANALYZE.
CREATE TABLE ios_h (id int PRIMARY KEY, pad text) USING heap;
CREATE TABLE ios_p (id int PRIMARY KEY, pad text) USING pasv;
INSERT INTO ios_h SELECT g, repeat('x', 300) FROM generate_series(1, 20000) g;
INSERT INTO ios_p SELECT g, repeat('x', 300) FROM generate_series(1, 20000) g;
-- Rows are all-visible only once no snapshot older than their insert runs
-- (pasv's replay worker reads catalogs in short transactions of its own):
-- wait (bounded) for that before VACUUM.
DO $$
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
VACUUM ANALYZE ios_h;
VACUUM ANALYZE ios_p;
SELECT relname, relallvisible > 0 AS pg_class_all_visible FROM pg_class WHERE relname IN ('ios_h', 'ios_p') ORDER BY relname;
EXPLAIN (COSTS OFF) SELECT count(*) FROM ios_h;
EXPLAIN (COSTS OFF) SELECT count(*) FROM ios_p;
ANALYZE ios_p;
EXPLAIN (COSTS OFF) SELECT count(*) FROM ios_p;
SELECT count(*) FROM ios_p;
DROP TABLE ios_h, ios_p;
-- ANALYZE and index builds judge a row by how its creator stands, not by a
-- snapshot, and read the table ahead as scans do (HOT_PATH §63): over many
-- read-ahead batches, this transaction's rows count and an aborted
-- transaction's and a rolled-back savepoint's do not, as on heap. (A
-- creator that ended is remembered for the rest of the scan.)
CREATE TABLE creators_h (id int, pad text) USING heap;
CREATE TABLE creators_p (id int, pad text) USING pasv;
DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['creators_h', 'creators_p'] LOOP
    EXECUTE format('INSERT INTO %I SELECT g, repeat(''c'', 60) FROM generate_series(1, 30000) g', t);
    BEGIN
      EXECUTE format('INSERT INTO %I SELECT g, repeat(''a'', 60) FROM generate_series(30001, 60000) g', t);
      RAISE EXCEPTION 'roll back';
    EXCEPTION WHEN raise_exception THEN NULL;
    END;
    EXECUTE format('INSERT INTO %I SELECT g, repeat(''d'', 60) FROM generate_series(60001, 70000) g', t);
  END LOOP;
END $$;
BEGIN;
INSERT INTO creators_h SELECT g, repeat('o', 60) FROM generate_series(70001, 80000) g;
INSERT INTO creators_p SELECT g, repeat('o', 60) FROM generate_series(70001, 80000) g;
SAVEPOINT s;
INSERT INTO creators_h SELECT g, repeat('s', 60) FROM generate_series(80001, 90000) g;
INSERT INTO creators_p SELECT g, repeat('s', 60) FROM generate_series(80001, 90000) g;
ROLLBACK TO SAVEPOINT s;
CREATE TEMP TABLE read_aheads (n bigint);
INSERT INTO read_aheads SELECT coalesce((SELECT posted FROM pasv.channel_stats('backend') WHERE request = 'scan'), 0);
ANALYZE creators_h, creators_p;
SELECT relname, reltuples FROM pg_class WHERE relname IN ('creators_h', 'creators_p') ORDER BY relname;
INSERT INTO read_aheads SELECT coalesce((SELECT posted FROM pasv.channel_stats('backend') WHERE request = 'scan'), 0);
CREATE INDEX creators_h_id ON creators_h (id);
CREATE INDEX creators_p_id ON creators_p (id);
INSERT INTO read_aheads SELECT coalesce((SELECT posted FROM pasv.channel_stats('backend') WHERE request = 'scan'), 0);
-- Each of ANALYZE and the build read ahead (scan requests posted, not waited for).
SELECT count(DISTINCT n) AS distinct_read_ahead_counts FROM read_aheads;
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT left(pad, 1), count(*), min(id), max(id) FROM creators_p WHERE id > 0 GROUP BY 1;
SELECT left(pad, 1), count(*), min(id), max(id) FROM creators_h WHERE id > 0 GROUP BY 1 ORDER BY 1;
SELECT left(pad, 1), count(*), min(id), max(id) FROM creators_p WHERE id > 0 GROUP BY 1 ORDER BY 1;
COMMIT;
DROP TABLE creators_h, creators_p, read_aheads;
