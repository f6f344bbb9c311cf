-- Index entries of rows dead to every snapshot: an index scan that meets one
-- reports it (heap's all_dead), the index marks the entry dead and removes
-- it when its page fills, instead of splitting. So aborted inserts do not
-- grow an index (as in PostgreSQL's mvcc test), and scans stop asking the
-- engine for deleted rows. Killing must never hide a live row: every index
-- scan below must return what a sequential scan returns.
CREATE TABLE ic (key int, data text) USING pasv;
CREATE INDEX ic_key ON ic (key);
INSERT INTO ic VALUES (-1, 'allocates the metapage');
SELECT pg_relation_size('ic_key') AS size_before \gset
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET enable_indexonlyscan = off;
DO $$
BEGIN
  FOR i IN 1..100 LOOP
    BEGIN
      IF EXISTS (SELECT * FROM ic WHERE key > 0 AND key < 100) THEN
        RAISE data_corrupted USING MESSAGE = 'aborted rows are visible';
      END IF;
      INSERT INTO ic SELECT g, 'rolled back' FROM generate_series(1, 100) g;
      RAISE reading_sql_data_not_permitted USING MESSAGE = 'roll back';
    EXCEPTION WHEN reading_sql_data_not_permitted THEN
    END;
  END LOOP;
END $$;
SELECT pg_relation_size('ic_key') = :size_before AS index_did_not_grow;
RESET enable_seqscan;
RESET enable_bitmapscan;
RESET enable_indexonlyscan;
-- Deleted and moved rows: index scans kill their entries, live rows stay.
CREATE TABLE ic2 (id int PRIMARY KEY, n int, v text) USING pasv;
CREATE INDEX ic2_n ON ic2 (n);
INSERT INTO ic2 SELECT g, g % 50, 'v' || g FROM generate_series(1, 3000) g;
DELETE FROM ic2 WHERE id % 3 = 0;
UPDATE ic2 SET n = n + 100 WHERE id % 5 = 0;
BEGIN;
INSERT INTO ic2 SELECT g, g % 50, 'aborted' FROM generate_series(3001, 3500) g;
ROLLBACK;
CREATE FUNCTION ic2_rows(q text, seq bool) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
  EXECUTE format('SET LOCAL enable_seqscan = %s', seq);
  EXECUTE format('SET LOCAL enable_indexscan = %s', NOT seq);
  EXECUTE format('SET LOCAL enable_bitmapscan = false');
  EXECUTE format('SELECT md5(string_agg(id || '':'' || n, '','' ORDER BY id)) FROM ic2 WHERE %s', q) INTO r;
  RETURN r;
END $$;
-- Twice: the first scans kill entries, the second runs over what is left.
SELECT round, q, ic2_rows(q, true) IS NOT DISTINCT FROM ic2_rows(q, false) AS index_equals_seqscan
  FROM generate_series(1, 2) round, unnest(ARRAY['n >= 0', 'n BETWEEN 10 AND 20', 'n >= 100', 'id > 0', 'id BETWEEN 2990 AND 3100']) q
 ORDER BY 1, 2;
-- A snapshot that still sees deleted rows keeps them reachable.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) AS before_delete FROM ic2 WHERE n = 7;
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "DELETE FROM ic2 WHERE n = 7"
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET enable_seqscan = off" -c "SET enable_bitmapscan = off" -c "SELECT count(*) FROM ic2 WHERE n = 7"
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SELECT count(*) AS still_seen_by_old_snapshot FROM ic2 WHERE n = 7;
COMMIT;
SELECT q, ic2_rows(q, true) IS NOT DISTINCT FROM ic2_rows(q, false) AS index_equals_seqscan
  FROM unnest(ARRAY['n >= 0', 'n = 7']) q ORDER BY 1;
DROP TABLE ic, ic2;
DROP FUNCTION ic2_rows;
