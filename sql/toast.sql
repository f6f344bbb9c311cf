-- Large values go to a heap TOAST table; rows stay small in RocksDB.
CREATE TABLE docs (id int, doc text) USING pasv;
SELECT a.amname AS toast_am FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid
  JOIN pg_am a ON a.oid = t.relam WHERE c.relname = 'docs';
INSERT INTO docs VALUES (1, repeat('abcdefghij', 100000));
INSERT INTO docs SELECT 2, string_agg(md5(g::text), '') FROM generate_series(1, 20000) g;
INSERT INTO docs VALUES (3, repeat('s', 100));
SELECT id, length(doc), md5(doc) FROM docs ORDER BY id;
SELECT substr(doc, 999991, 10) FROM docs WHERE id = 1;
-- An UPDATE that leaves the large value alone shares it; one that changes it re-toasts.
UPDATE docs SET id = id + 10;
SELECT id, length(doc), md5(doc) FROM docs ORDER BY id;
UPDATE docs SET doc = doc || 'tail' WHERE id = 11;
SELECT id, length(doc), right(doc, 4) FROM docs ORDER BY id;
BEGIN;
DELETE FROM docs WHERE id = 12;
SELECT count(*) FROM docs;
ROLLBACK;
SELECT id, md5(doc) FROM docs WHERE id = 12;
DELETE FROM docs WHERE id = 12;
SELECT count(*) FROM docs;
-- Values toasted in another table are copied, not pointed at.
CREATE TABLE heap_src (doc text) USING heap;
INSERT INTO heap_src SELECT string_agg(md5((g * 7)::text), '') FROM generate_series(1, 5000) g;
INSERT INTO docs SELECT 4, doc FROM heap_src;
DROP TABLE heap_src;
SELECT id, length(doc) FROM docs WHERE id = 4;
-- COPY of large values.
COPY (SELECT id, doc FROM docs WHERE id = 4) TO '/tmp/pasv_regress_toast.dat';
COPY docs FROM '/tmp/pasv_regress_toast.dat';
SELECT id, count(*), count(DISTINCT md5(doc)) FROM docs WHERE id = 4 GROUP BY id;
VACUUM docs;
SELECT id, length(doc) FROM docs ORDER BY id;
DROP TABLE docs;
