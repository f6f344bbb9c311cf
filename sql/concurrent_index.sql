-- CREATE INDEX CONCURRENTLY and REINDEX CONCURRENTLY on pasv tables
-- (issue 10, item 4): the build indexes the rows an MVCC snapshot sees,
-- the validation pass adds what writers committed meanwhile. A writer runs
-- beside the builds; however the two interleave, every index must then
-- return exactly the rows a sequential scan returns.
CREATE TABLE ci (id int, v text, n int) USING pasv;
INSERT INTO ci SELECT g, 'v' || g, g % 100 FROM generate_series(1, 5000) g;
-- Versions under one rowid that differ in the column about to be indexed.
UPDATE ci SET n = n + 1000 WHERE id % 50 = 0;
DELETE FROM ci WHERE id % 70 = 0;
CREATE TABLE ci_done (writer text);
-- The writer: inserts, updates of the indexed column, deletes, one
-- transaction each, then a row in ci_done.
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "DO \$\$ BEGIN FOR i IN 1..300 LOOP INSERT INTO ci VALUES (10000 + i, 'w', i % 100); UPDATE ci SET n = n + 1 WHERE id = i * 7; DELETE FROM ci WHERE id = i * 11; COMMIT; END LOOP; END \$\$" -c "INSERT INTO ci_done VALUES ('first')" > /dev/null 2>&1 &
CREATE INDEX CONCURRENTLY ci_n ON ci (n);
CREATE UNIQUE INDEX CONCURRENTLY ci_id ON ci (id);
CREATE INDEX CONCURRENTLY ci_partial ON ci (v) WHERE n >= 1000;
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    EXIT WHEN EXISTS (SELECT 1 FROM ci_done);
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT count(*) AS writer_done FROM ci_done;
SELECT c.relname, i.indisvalid, i.indisready
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = 'ci'::regclass ORDER BY 1;
CREATE FUNCTION ci_rows(q text, seq bool) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
  EXECUTE format('SET LOCAL enable_seqscan = %s', seq);
  EXECUTE format('SET LOCAL enable_indexscan = %s', NOT seq);
  EXECUTE format('SET LOCAL enable_bitmapscan = %s', NOT seq);
  EXECUTE format('SELECT md5(string_agg(id::text || '':'' || n, '','' ORDER BY id)) FROM ci WHERE %s', q) INTO r;
  RETURN r;
END $$;
SELECT q, ci_rows(q, true) = ci_rows(q, false) AS index_equals_seqscan
  FROM unnest(ARRAY['n >= 0', 'n BETWEEN 10 AND 20', 'id > 0', 'id BETWEEN 100 AND 200', 'n >= 1000 AND v > ''''']) q;
EXPLAIN (COSTS OFF) SELECT id FROM ci WHERE n = 5;
-- REINDEX CONCURRENTLY, with the writer again.
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "DO \$\$ BEGIN FOR i IN 301..500 LOOP INSERT INTO ci VALUES (10000 + i, 'w', i % 100); UPDATE ci SET n = n + 1 WHERE id = i * 3; DELETE FROM ci WHERE id = i * 5; COMMIT; END LOOP; END \$\$" -c "INSERT INTO ci_done VALUES ('second')" > /dev/null 2>&1 &
REINDEX INDEX CONCURRENTLY ci_n;
REINDEX TABLE CONCURRENTLY ci;
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    EXIT WHEN (SELECT count(*) FROM ci_done) = 2;
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT count(*) AS writers_done FROM ci_done;
SELECT q, ci_rows(q, true) = ci_rows(q, false) AS index_equals_seqscan
  FROM unnest(ARRAY['n >= 0', 'n BETWEEN 10 AND 20', 'id > 0', 'n >= 1000 AND v > ''''']) q;
-- A unique build that finds duplicates fails and leaves an invalid index.
\set VERBOSITY terse
CREATE UNIQUE INDEX CONCURRENTLY ci_dup ON ci (n);
\set VERBOSITY default
SELECT indisvalid FROM pg_index WHERE indexrelid = 'ci_dup'::regclass;
DROP INDEX ci_dup;
-- The unique index still refuses duplicates.
INSERT INTO ci VALUES (1, 'dup', 1);
DROP TABLE ci, ci_done;
DROP FUNCTION ci_rows;
