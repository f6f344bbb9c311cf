-- Table storage lifecycle: one column family per relfilenumber, created
-- with the table, replaced by TRUNCATE, removed at DROP's commit, and
-- removed again if the creating transaction aborts.
CREATE VIEW my_cfs AS
    SELECT c.relname, f.relfilenumber
      FROM pasv.column_families() f
      LEFT JOIN pg_class c ON c.relfilenode = f.relfilenumber
     WHERE f.database_oid = (SELECT oid FROM pg_database WHERE datname = current_database());

CREATE TABLE life (id int) USING pasv;
INSERT INTO life SELECT generate_series(1, 1000);
SELECT relname FROM my_cfs WHERE relname = 'life';
SELECT relfilenode AS before_truncate FROM pg_class WHERE relname = 'life' \gset

-- TRUNCATE: a new CF; the old one goes at commit.
TRUNCATE life;
SELECT count(*) FROM life;
SELECT count(*) AS old_cf_left FROM my_cfs WHERE relfilenumber = :before_truncate;
INSERT INTO life VALUES (1), (2);
SELECT count(*) FROM life;

-- TRUNCATE rolled back: the rows are still there.
BEGIN;
TRUNCATE life;
SELECT count(*) FROM life;
ROLLBACK;
SELECT count(*) FROM life;

-- CREATE + INSERT + TRUNCATE in one transaction (non-transactional truncate).
BEGIN;
CREATE TABLE scratch (a int) USING pasv;
INSERT INTO scratch SELECT generate_series(1, 100);
TRUNCATE scratch;
INSERT INTO scratch VALUES (42);
SELECT * FROM scratch;
COMMIT;
SELECT * FROM scratch;

-- A CREATE that aborts leaves no CF behind.
BEGIN;
CREATE TABLE doomed (a int) USING pasv;
INSERT INTO doomed VALUES (1);
SELECT relfilenode AS doomed_rfn FROM pg_class WHERE relname = 'doomed' \gset
SELECT count(*) AS doomed_cf_in_tx FROM my_cfs WHERE relfilenumber = :doomed_rfn;
ROLLBACK;
SELECT count(*) AS doomed_cf_after FROM pasv.column_families() WHERE relfilenumber = :doomed_rfn;

-- Same within a savepoint.
BEGIN;
SAVEPOINT s;
CREATE TABLE doomed2 (a int) USING pasv;
SELECT relfilenode AS doomed2_rfn FROM pg_class WHERE relname = 'doomed2' \gset
ROLLBACK TO s;
SELECT count(*) AS doomed2_cf FROM pasv.column_families() WHERE relfilenumber = :doomed2_rfn;
COMMIT;

-- DROP TABLE removes the CF at commit, not before; a rolled-back DROP keeps it.
SELECT relfilenode AS life_rfn FROM pg_class WHERE relname = 'life' \gset
BEGIN;
DROP TABLE life;
SELECT count(*) AS life_cf_during_drop FROM pasv.column_families() WHERE relfilenumber = :life_rfn;
ROLLBACK;
SELECT count(*) FROM life;
DROP TABLE life;
SELECT count(*) AS life_cf_after_drop FROM pasv.column_families() WHERE relfilenumber = :life_rfn;

-- DROP of a table created in a savepoint that is later released.
BEGIN;
SAVEPOINT a;
CREATE TABLE kept (a int) USING pasv;
RELEASE a;
INSERT INTO kept VALUES (1);
COMMIT;
SELECT * FROM kept;

-- Dropping a whole schema with pasv tables.
CREATE SCHEMA s1;
CREATE TABLE s1.x (a int) USING pasv;
CREATE TABLE s1.y (a int) USING pasv;
SELECT count(*) AS schema_cfs FROM my_cfs WHERE relname IN ('x', 'y');
DROP SCHEMA s1 CASCADE;
SELECT count(*) AS schema_cfs_after FROM my_cfs WHERE relname IN ('x', 'y') OR relname IS NULL;

DROP TABLE scratch, kept;
DROP VIEW my_cfs;

-- Table rewrites by ALTER TABLE move the rows into a new CF.
CREATE TABLE rewritten (id int) USING pasv;
INSERT INTO rewritten SELECT generate_series(1, 3000);
SELECT relfilenode AS rw_before FROM pg_class WHERE relname = 'rewritten' \gset
ALTER TABLE rewritten ADD COLUMN r float8 DEFAULT random();
ALTER TABLE rewritten ALTER COLUMN id TYPE int8;
SELECT count(*), sum(id), count(r) FROM rewritten;
SELECT count(*) AS old_cf_left FROM pasv.column_families() WHERE relfilenumber = :rw_before;
SELECT count(*) AS current_cf FROM pasv.column_families() f JOIN pg_class c ON c.relfilenode = f.relfilenumber
 WHERE c.relname = 'rewritten';
DROP TABLE rewritten;

-- DROP DATABASE removes the column families of its pasv tables.
\set home_db :DBNAME
CREATE DATABASE pasv_dropme;
\c pasv_dropme
CREATE EXTENSION pasv;
CREATE TABLE gone1 (a int) USING pasv;
CREATE TABLE gone2 (a int) USING pasv;
INSERT INTO gone1 VALUES (1);
SELECT oid AS dropme_oid FROM pg_database WHERE datname = 'pasv_dropme' \gset
\c :home_db
SELECT count(*) AS cfs_before FROM pasv.column_families() WHERE database_oid = :dropme_oid;
DROP DATABASE pasv_dropme;
SELECT count(*) AS cfs_after FROM pasv.column_families() WHERE database_oid = :dropme_oid;
