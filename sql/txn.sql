-- Visibility is PostgreSQL's: aborted and uncommitted rows are invisible.
CREATE TABLE t (id int, note text) USING pasv;
INSERT INTO t VALUES (1, 'committed');

BEGIN;
INSERT INTO t VALUES (2, 'rolled back');
SELECT count(*) FROM t;
ROLLBACK;
SELECT * FROM t ORDER BY id;

-- Savepoints: a rolled-back subtransaction's rows vanish, the rest stay.
BEGIN;
INSERT INTO t VALUES (3, 'outer');
SAVEPOINT s1;
INSERT INTO t SELECT g, 'inner' FROM generate_series(100, 199) g;
SELECT count(*) FROM t;
ROLLBACK TO s1;
INSERT INTO t VALUES (4, 'after rollback to');
SAVEPOINT s2;
INSERT INTO t VALUES (5, 'released');
RELEASE s2;
COMMIT;
SELECT * FROM t ORDER BY id;

-- Another session does not see this session's uncommitted rows.
BEGIN;
INSERT INTO t SELECT g, 'pending' FROM generate_series(1000, 1099) g;
SELECT count(*) FROM t;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 'other session sees ' || count(*) FROM t"
COMMIT;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT 'other session sees ' || count(*) FROM t"

-- A statement does not see the rows it inserts itself.
INSERT INTO t SELECT id + 10000, 'copy' FROM t;
SELECT count(*) FILTER (WHERE note = 'copy') AS copies, count(*) AS total FROM t;

-- PL/pgSQL exception blocks are subtransactions too.
DO $$
BEGIN
    INSERT INTO t VALUES (7, 'kept');
    BEGIN
        INSERT INTO t VALUES (8, 'undone');
        RAISE EXCEPTION 'boom';
    EXCEPTION WHEN others THEN
        NULL;
    END;
END $$;
SELECT id, note FROM t WHERE id IN (7, 8) ORDER BY id;

-- A failed statement leaves nothing behind.
INSERT INTO t SELECT g, CASE WHEN g = 500 THEN (1/0)::text ELSE 'x' END FROM generate_series(1, 1000) g;
SELECT count(*) FROM t WHERE note = 'x';

-- REPEATABLE READ keeps its snapshot.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FROM t;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "INSERT INTO t VALUES (9, 'concurrent')"
SELECT count(*) FROM t;
COMMIT;
SELECT count(*) FROM t;

DROP TABLE t;

-- The write-behind buffer holds rows of several tables of one transaction:
-- an order's lines and the stock rows they update, row by row. At a switch
-- of table it sends what it holds only if the write it posted before was
-- applied; otherwise it keeps the rows (before, every switch sent the
-- buffer and waited for the write before it: 120 posts here). The first
-- write of the loop is held in the engine for 2 s (a test hook), so the
-- rest of the loop must be kept, and every rule of the buffer still holds.
CREATE TABLE wb_lines (id int PRIMARY KEY, item int) USING pasv;
CREATE TABLE wb_stock (item int PRIMARY KEY, qty int) USING pasv;
CREATE UNLOGGED TABLE wb_log (n int, what text) USING pasv;
INSERT INTO wb_stock SELECT g, 100 FROM generate_series(1, 40) g;
CREATE FUNCTION wb_order(lo int, hi int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN lo..hi LOOP
        INSERT INTO wb_lines VALUES (i, i);
        UPDATE wb_stock SET qty = qty - 1 WHERE item = i;
        INSERT INTO wb_log VALUES (i, 'line');
    END LOOP;
END $$;
-- (Stock updates in place: a HOT update takes a new rowid, and a second
-- reservation in the loop would be a request that waits for the held write.)
SET pasv.hot_updates = off;
BEGIN;
-- The first line plans the statements and reserves rowids (requests,
-- which send the buffer and wait for the write before them).
SELECT wb_order(1, 1);
CREATE TEMP TABLE wb_posted0 USING heap AS
    SELECT sum(posted) AS posted FROM pasv.channel_stats('backend') WHERE request IN ('put_batch', 'put_batches');
SELECT pasv.test_delay_next_write(2000000);
SELECT wb_order(2, 40);
SELECT sum(posted) - (SELECT posted FROM wb_posted0) <= 3 AS few_posts
    FROM pasv.channel_stats('backend') WHERE request IN ('put_batch', 'put_batches');
RESET pasv.hot_updates;
-- Reads see the buffered rows of each table (index, sequential scan).
SELECT item FROM wb_lines WHERE id = 17;
SELECT qty FROM wb_stock WHERE item = 39;
SELECT count(*), sum(n) FROM wb_log;
-- A rolled-back savepoint takes its rows of every table, and only those.
SAVEPOINT s;
INSERT INTO wb_lines VALUES (100, 1);
UPDATE wb_stock SET qty = 0 WHERE item = 1;
INSERT INTO wb_log VALUES (100, 'undone');
ROLLBACK TO s;
INSERT INTO wb_lines VALUES (101, 2);
UPDATE wb_stock SET qty = qty + 1000 WHERE item = 2;
COMMIT;
SELECT count(*), max(id) FROM wb_lines;
SELECT item, qty FROM wb_stock WHERE item IN (1, 2, 40) ORDER BY item;
SELECT count(*), max(n) FROM wb_log;
-- Another session sees all of it, through the engine.
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET enable_seqscan = off" -c "SELECT count(*), sum(qty) FROM wb_stock" -c "SELECT item FROM wb_lines WHERE id = 101"
DROP TABLE wb_lines, wb_stock, wb_log;
DROP FUNCTION wb_order(int, int);

-- Two posts in flight (src/ipc/mod.rs, the pair): while the engine holds a
-- write of this backend (the test hook), the backend's next post goes into
-- the other slot of its pair, behind the held one, without waiting for it;
-- a third post waits for the first. Each insert into another indexed table
-- sends the buffer (its rows' publication covers one table): the one into
-- pair_b sends pair_a's row, and so on. The first
-- inserts reserve rowids (requests that wait), so the held ones need none.
CREATE TABLE pair_a (k int PRIMARY KEY, v text) USING pasv;
CREATE TABLE pair_b (k int PRIMARY KEY, v text) USING pasv;
CREATE TABLE pair_c (k int PRIMARY KEY, v text) USING pasv;
INSERT INTO pair_a VALUES (0, 'first');
INSERT INTO pair_b VALUES (0, 'first');
INSERT INTO pair_c VALUES (0, 'first');
CREATE TEMP TABLE pair_w0 USING heap AS
    SELECT value AS w FROM pasv.engine_stats() WHERE counter = 'submits_behind_a_posted_request';
BEGIN;
SELECT pasv.test_delay_next_write(2000000);
INSERT INTO pair_a VALUES (1, 'first post, held');
INSERT INTO pair_b VALUES (1, 'second post');
INSERT INTO pair_c VALUES (1, 'third post');
SELECT value - (SELECT w FROM pair_w0) AS waited_with_two_in_flight
    FROM pasv.engine_stats() WHERE counter = 'submits_behind_a_posted_request';
INSERT INTO pair_a VALUES (2, 'buffered');
SELECT value - (SELECT w FROM pair_w0) AS waited_for_the_third
    FROM pasv.engine_stats() WHERE counter = 'submits_behind_a_posted_request';
-- Reads see every row, through the row cache and the engine.
SELECT k, v FROM pair_a ORDER BY k;
SELECT k, v FROM pair_b WHERE k = 1;
SET LOCAL enable_seqscan = off;
SELECT k, v FROM pair_c WHERE k = 1;
COMMIT;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT (SELECT count(*) FROM pair_a), (SELECT count(*) FROM pair_b), (SELECT count(*) FROM pair_c)"
DROP TABLE pair_a, pair_b, pair_c;

-- The planner's size of a table is read behind this backend's posted
-- writes and leaves its buffered rows buffered (engine_client::
-- estimated_size): planning a query of a table whose size is not known yet
-- asks the engine (one cf_info call) and sends no rows. As a strict call it
-- sent the buffer first (one put_batch post more). (A query that plans the
-- table without reading it: a scan, or any utility statement such as
-- EXPLAIN, sends the buffer itself.)
CREATE TABLE est_rows (k int, v text) USING pasv;
CREATE TABLE est_sized (k int, v text) USING pasv;
BEGIN;
INSERT INTO est_rows VALUES (1, 'buffered');
SELECT coalesce(sum(calls) FILTER (WHERE request = 'cf_info'), 0) AS info0,
       coalesce(sum(posted) FILTER (WHERE request = 'put_batch'), 0) AS posts0
    FROM pasv.channel_stats('backend') \gset
SELECT * FROM est_sized WHERE false;
SELECT coalesce(sum(calls) FILTER (WHERE request = 'cf_info'), 0) - :info0 AS size_calls,
       coalesce(sum(posted) FILTER (WHERE request = 'put_batch'), 0) - :posts0 AS rows_sent
    FROM pasv.channel_stats('backend');
COMMIT;
SELECT k, v FROM est_rows;
DROP TABLE est_rows, est_sized;
