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

-- TID scan and TID range scan (226 rows of this width a block, as on a heap page).
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

-- Streams borrow their buffers from a per-backend pool of four sets and give
-- them back at the end of the scan, or at the abort of the transaction an
-- ERROR ended a scan in: six scans open at once (nested loops over index
-- and sequential scans: more streams than the pool holds) return the
-- same as heap, before and after scans that ERRORs cut short, also in a
-- subtransaction, and with a cursor left open across other statements.
CREATE TABLE pool_p (id int PRIMARY KEY, v int) USING pasv;
INSERT INTO pool_p SELECT g, g % 7 FROM generate_series(1, 300) g;
CREATE TABLE pool_h (id int PRIMARY KEY, v int) USING heap;
INSERT INTO pool_h SELECT g, g % 7 FROM generate_series(1, 300) g;
SET enable_hashjoin = off;
SET enable_mergejoin = off;
SET enable_material = off;
CREATE FUNCTION pool_join(t regclass) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
    EXECUTE format('SELECT count(*) || '':'' || sum(a.id + b.id + c.id + d.id + e.id + f.v) FROM %1$s a
        JOIN %1$s b ON b.id = a.id JOIN %1$s c ON c.id = b.id + 1 JOIN %1$s d ON d.id = c.id - 1
        JOIN %1$s e ON e.id = d.id + 2 JOIN %1$s f ON f.id = e.id - 2 WHERE a.v = 3', t) INTO r;
    RETURN r;
END $$;
SELECT pool_join('pool_h') AS heap, pool_join('pool_p') AS pasv;
SELECT count(*) FROM pool_p WHERE 1 / (id - 150) IS NOT NULL;
BEGIN;
DECLARE held CURSOR FOR SELECT id FROM pool_p WHERE id % 50 = 0;
FETCH 2 FROM held;
SAVEPOINT s;
SELECT count(*) FROM pool_p a, pool_p b WHERE a.id < 3 AND b.id = 1 / (a.id - 2);
ROLLBACK TO s;
SELECT pool_join('pool_h') = pool_join('pool_p') AS same_in_xact;
FETCH 2 FROM held;
COMMIT;
SELECT pool_join('pool_h') = pool_join('pool_p') AS same_after;
RESET enable_hashjoin;
RESET enable_mergejoin;
RESET enable_material;
DROP FUNCTION pool_join(regclass);
DROP TABLE pool_p, pool_h;

-- Planner estimates come from the engine's rowid count (100000 rows).
CREATE FUNCTION plan_rows(q text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE p json;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) ' || q INTO p;
    RETURN (p -> 0 -> 'Plan' ->> 'Plan Rows')::float8;
END $$;
SELECT plan_rows('SELECT * FROM wide') BETWEEN 90000 AND 110000 AS estimate_ok;
DROP FUNCTION plan_rows(text);

-- A long scan's batches grow up to the read-ahead buffer (1 MB) instead of
-- staying at the channel buffer's 64 kB: a serial count(*) over these rows
-- made 502 scan requests with 64 kB batches, 36 with growing ones (HOT_PATH
-- §49). Rows and sums equal a heap twin's, also where a
-- scan stops early (LIMIT), goes back and forth (a scrollable cursor), or
-- scans advance in turn (each displaces the others' read-aheads).
CREATE TABLE ra_p (id int, v int, pad text) USING pasv;
CREATE TABLE ra_h (id int, v int, pad text) USING heap;
INSERT INTO ra_p SELECT g, g % 11, repeat('x', g % 40) FROM generate_series(1, 300000) g;
INSERT INTO ra_h SELECT * FROM ra_p;
UPDATE ra_p SET v = v + 1 WHERE id % 3 = 0;
UPDATE ra_h SET v = v + 1 WHERE id % 3 = 0;
DELETE FROM ra_p WHERE id % 7 = 0;
DELETE FROM ra_h WHERE id % 7 = 0;
CREATE TABLE ra_scans0 USING heap AS SELECT calls + posted AS n FROM pasv.channel_stats('backend') WHERE request = 'scan';
SET max_parallel_workers_per_gather = 0;
SELECT count(*), sum(v), sum(length(pad)) FROM ra_p;
SELECT calls + posted - (SELECT n FROM ra_scans0) < 100 AS few_batches FROM pasv.channel_stats('backend') WHERE request = 'scan';
-- The scan remembers the snapshot's answers about several creators: the
-- load's, the updater's and the deleter's versions alternate here, and
-- with one remembered answer each change asked the commit log again
-- (pg_stat_slru counted 198 889 such reads in this count, 4 with four).
SELECT pg_stat_force_next_flush();
CREATE TABLE ra_xact0 USING heap AS SELECT blks_hit + blks_read AS n FROM pg_stat_slru WHERE name = 'Xact';
SELECT pg_stat_force_next_flush();
SELECT count(*) FROM ra_p;
SELECT pg_stat_force_next_flush();
SELECT blks_hit + blks_read - (SELECT n FROM ra_xact0) < 1000 AS few_commit_log_reads FROM pg_stat_slru WHERE name = 'Xact';
-- A parallel participant reads its next chunk's first batch ahead too,
-- instead of waiting for the first two batches of every chunk (96 waited
-- scan requests in this count before, 5 after).
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 1;
CREATE TABLE ra_calls0 USING heap AS SELECT calls AS n FROM pasv.channel_stats() WHERE request = 'scan';
SELECT count(*), sum(v), sum(length(pad)) FROM ra_p;
SELECT calls - (SELECT n FROM ra_calls0) < 30 AS few_waited_batches FROM pasv.channel_stats() WHERE request = 'scan';
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;
SELECT (SELECT row(count(*), sum(v), sum(length(pad))) FROM ra_p) = (SELECT row(count(*), sum(v), sum(length(pad))) FROM ra_h) AS same_sums;
SELECT count(*), count(DISTINCT p.id), bool_and(p.v = h.v AND p.pad = h.pad) AS same_rows
  FROM (SELECT * FROM ra_p LIMIT 9000) p JOIN ra_h h USING (id);
CREATE FUNCTION ra_back_and_forth(t regclass) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    c refcursor;
    r record;
    n bigint := 0;
    total bigint := 0;
BEGIN
    OPEN c SCROLL FOR EXECUTE format('SELECT id, v FROM %s', t);
    LOOP
        FETCH NEXT FROM c INTO r;
        EXIT WHEN NOT FOUND;
        n := n + 1;
        total := total + r.id::bigint * r.v;
        IF n % 20000 = 0 THEN
            MOVE BACKWARD 15000 FROM c;
            MOVE FORWARD 15000 FROM c;
        END IF;
    END LOOP;
    RETURN n || ':' || total;
END $$;
SELECT ra_back_and_forth('ra_h') AS heap, ra_back_and_forth('ra_p') AS pasv;
DROP FUNCTION ra_back_and_forth(regclass);
-- Six scans in turn, 3 000 rows each: every one displaces the others'
-- read-aheads, and more of them grow their buffers than the pool holds.
CREATE FUNCTION ra_in_turn(t regclass) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    cur refcursor;
    x int;
    n bigint := 0;
    total bigint := 0;
    open_ones int := 6;
    done bool[] := array_fill(false, ARRAY[6]);
BEGIN
    FOR i IN 1..6 LOOP
        cur := 'ra_c' || i;
        OPEN cur FOR EXECUTE format('SELECT v FROM %s WHERE id %% %s = 0', t, i);
    END LOOP;
    WHILE open_ones > 0 LOOP
        FOR i IN 1..6 LOOP
            CONTINUE WHEN done[i];
            cur := 'ra_c' || i;
            FOR k IN 1..3000 LOOP
                FETCH cur INTO x;
                IF NOT FOUND THEN
                    done[i] := true;
                    open_ones := open_ones - 1;
                    CLOSE cur;
                    EXIT;
                END IF;
                n := n + 1;
                total := total + x * i;
            END LOOP;
        END LOOP;
    END LOOP;
    RETURN n || ':' || total;
END $$;
SELECT ra_in_turn('ra_h') AS heap, ra_in_turn('ra_p') AS pasv;
DROP FUNCTION ra_in_turn(regclass);
DROP TABLE ra_p, ra_h, ra_scans0, ra_calls0, ra_xact0;

DROP TABLE wide;
