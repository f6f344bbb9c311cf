-- Parallel workers for pasv tables (src/tam/parallel_plans.rs): below
-- pasv.parallel_scan_min_cpus CPUs the planner gives a pasv table none,
-- unless the table sets parallel_workers or the session steers parallel
-- plans itself (a parallel cost setting changed from its default, or
-- debug_parallel_query). The machine's CPU count is taken out of the test
-- by setting the threshold above or below any machine's.
CREATE TABLE pp_pasv (id int8, v int4, payload text) USING pasv;
CREATE TABLE pp_heap (id int8, v int4, payload text) USING heap;
INSERT INTO pp_pasv SELECT g, g % 7, md5(g::text) FROM generate_series(1, 500000) g;
INSERT INTO pp_heap SELECT g, g % 7, md5(g::text) FROM generate_series(1, 500000) g;

SET max_parallel_workers_per_gather = 2;

-- A machine with too few CPUs: a serial plan for pasv; heap keeps its workers.
SET pasv.parallel_scan_min_cpus = 1000;
EXPLAIN (COSTS OFF) SELECT count(*) FROM pp_pasv;
EXPLAIN (COSTS OFF) SELECT count(*) FROM pp_heap;
EXPLAIN (COSTS OFF) SELECT sum(v) FROM pp_pasv WHERE id > 10;
SELECT count(*), sum(v) FROM pp_pasv;

-- The table's own setting stands.
ALTER TABLE pp_pasv SET (parallel_workers = 2);
EXPLAIN (COSTS OFF) SELECT count(*) FROM pp_pasv;
ALTER TABLE pp_pasv RESET (parallel_workers);

-- A session that changed the parallel cost settings steers its own plans.
SET parallel_setup_cost = 10;
EXPLAIN (COSTS OFF) SELECT count(*) FROM pp_pasv;
RESET parallel_setup_cost;
SET parallel_tuple_cost = 0.05;
EXPLAIN (COSTS OFF) SELECT count(*) FROM pp_pasv;
RESET parallel_tuple_cost;
SET min_parallel_table_scan_size = 0;
EXPLAIN (COSTS OFF) SELECT count(*) FROM pp_pasv;
RESET min_parallel_table_scan_size;
SET debug_parallel_query = on;
EXPLAIN (COSTS OFF) SELECT count(*) FROM pp_pasv;
RESET debug_parallel_query;
-- Back at the defaults: serial again.
EXPLAIN (COSTS OFF) SELECT count(*) FROM pp_pasv;

-- 0: workers on any machine, and the same answer.
SET pasv.parallel_scan_min_cpus = 0;
EXPLAIN (COSTS OFF) SELECT count(*) FROM pp_pasv;
SELECT count(*), sum(v) FROM pp_pasv;

-- Bad values are refused.
SET pasv.parallel_scan_min_cpus = -1;
RESET pasv.parallel_scan_min_cpus;
RESET max_parallel_workers_per_gather;
DROP TABLE pp_pasv, pp_heap;
