-- TABLESAMPLE over rowid blocks, and moving tables between heap and pasv.
CREATE TABLE s (id int, v int) USING pasv;
INSERT INTO s SELECT g, g % 10 FROM generate_series(1, 10000) g;
SELECT count(*) FROM s TABLESAMPLE SYSTEM (100);
SELECT count(*) FROM s TABLESAMPLE BERNOULLI (100);
SELECT count(*) FROM s TABLESAMPLE SYSTEM (0);
SELECT count(*) FROM s TABLESAMPLE BERNOULLI (0);
SELECT count(*) BETWEEN 3000 AND 7000 AS about_half FROM s TABLESAMPLE BERNOULLI (50) REPEATABLE (7);
SELECT (SELECT count(*) FROM s TABLESAMPLE SYSTEM (30) REPEATABLE (1))
     = (SELECT count(*) FROM s TABLESAMPLE SYSTEM (30) REPEATABLE (1)) AS repeatable;
-- Sampled rows are the table's rows; deleted rows are never sampled.
SELECT count(*) AS mismatched FROM (SELECT * FROM s TABLESAMPLE BERNOULLI (30) REPEATABLE (3)) x JOIN s USING (id)
 WHERE x.v <> s.v;
DELETE FROM s WHERE v = 0;
SELECT count(*) FROM s TABLESAMPLE SYSTEM (100);
SELECT count(*) FROM s TABLESAMPLE BERNOULLI (100) WHERE v = 0;
DROP TABLE s;

-- ALTER TABLE ... SET ACCESS METHOD rewrites the rows into the other AM.
CREATE TABLE m (id int PRIMARY KEY, t text) USING heap;
INSERT INTO m SELECT g, md5(g::text) FROM generate_series(1, 2000) g;
ALTER TABLE m SET ACCESS METHOD pasv;
SELECT a.amname, (SELECT count(*) FROM m) AS rows, (SELECT count(*) FROM m WHERE t <> md5(id::text)) AS damaged
  FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.relname = 'm';
SET enable_seqscan = off;
SELECT t FROM m WHERE id = 77;
RESET enable_seqscan;
UPDATE m SET t = 'changed' WHERE id = 5;
ALTER TABLE m SET ACCESS METHOD heap;
SELECT a.amname, (SELECT count(*) FROM m) AS rows, (SELECT t FROM m WHERE id = 5) AS t5
  FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.relname = 'm';
SELECT count(*) AS pasv_cfs_left FROM pasv.column_families() f
  JOIN pg_class c ON c.relfilenode = f.relfilenumber WHERE c.relname = 'm';
DROP TABLE m;
