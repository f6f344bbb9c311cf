-- Scan kinds: parallel sequential scans, TID scans, TID range scans.
CREATE TABLE wide (id int, v int) USING pasv;
INSERT INTO wide SELECT g, g % 7 FROM generate_series(1, 100000) g;

-- Parallel workers split the rowid space: every row is counted once.
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
EXPLAIN (COSTS OFF) SELECT count(*), sum(id) FROM wide;
SELECT count(*), sum(id), count(DISTINCT id) FROM wide;
SELECT v, count(*) FROM wide GROUP BY v ORDER BY v;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;

-- TID scan and TID range scan (291 rows per block).
EXPLAIN (COSTS OFF) SELECT id FROM wide WHERE ctid = '(1,1)';
SELECT id FROM wide WHERE ctid = '(1,1)';
SELECT id FROM wide WHERE ctid = '(0,0)';
SELECT id FROM wide WHERE ctid = '(0,292)';
EXPLAIN (COSTS OFF) SELECT count(*) FROM wide WHERE ctid >= '(2,0)' AND ctid < '(4,0)';
SELECT count(*), min(id), max(id) FROM wide WHERE ctid >= '(2,0)' AND ctid < '(4,0)';
SELECT count(*) FROM wide WHERE ctid <= '(0,10)';
SELECT count(*) FROM wide WHERE ctid > '(5,291)' AND ctid < '(6,3)';

-- A cursor reads forward in steps, interleaved with other statements.
BEGIN;
DECLARE c CURSOR FOR SELECT id FROM wide WHERE id <= 5 ORDER BY id;
FETCH 2 FROM c;
SELECT count(*) FROM wide;
FETCH 10 FROM c;
COMMIT;

-- Nested scans of the same table (each scan keeps its own batch).
SELECT count(*) FROM wide a WHERE a.id <= 3 AND EXISTS (SELECT 1 FROM wide b WHERE b.id = a.id + 1);

-- Planner estimates come from the engine's rowid count (100000 rows).
CREATE FUNCTION plan_rows(q text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE p json;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) ' || q INTO p;
    RETURN (p -> 0 -> 'Plan' ->> 'Plan Rows')::float8;
END $$;
SELECT plan_rows('SELECT * FROM wide') BETWEEN 90000 AND 110000 AS estimate_ok;
DROP FUNCTION plan_rows(text);

DROP TABLE wide;
