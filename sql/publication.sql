-- Publications refuse pasv tables (issue 10, item 7): pgoutput would
-- publish nothing of them, silently. Naming one is an ERROR (and the
-- publication is not created or changed); ALL TABLES and TABLES IN SCHEMA
-- get a WARNING naming them.
-- The check runs after every utility statement; the statement's own errors
-- must keep their error position and CONTEXT (a guarded call lost both).
CREATE TABLE pub_bad (a no_such_type);
DO $$ BEGIN EXECUTE 'CREATE TABLE pub_bad (a no_such_type)'; END $$;
CREATE DATABASE pasv_pub;
\c pasv_pub
CREATE EXTENSION pasv;
SET client_min_messages = warning;
CREATE TABLE pub_p (id int PRIMARY KEY) USING pasv;
CREATE TABLE pub_h (id int PRIMARY KEY) USING heap;
CREATE TABLE pub_parent (id int) PARTITION BY RANGE (id);
CREATE TABLE pub_part1 PARTITION OF pub_parent FOR VALUES FROM (0) TO (10) USING heap;
CREATE TABLE pub_part2 PARTITION OF pub_parent FOR VALUES FROM (10) TO (20) USING pasv;
CREATE PUBLICATION pp FOR TABLE pub_h, pub_p;
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT count(*) AS created FROM pg_publication WHERE pubname = 'pp';
CREATE PUBLICATION pp FOR TABLE pub_h;
ALTER PUBLICATION pp ADD TABLE pub_p;
\echo SQLSTATE :LAST_ERROR_SQLSTATE
ALTER PUBLICATION pp SET TABLE pub_p;
ALTER PUBLICATION pp ADD TABLE pub_parent;
SELECT tablename FROM pg_publication_tables WHERE pubname = 'pp' ORDER BY 1;
CREATE SCHEMA pub_s;
CREATE TABLE pub_s.in_schema (id int) USING pasv;
CREATE PUBLICATION ps FOR TABLES IN SCHEMA pub_s;
CREATE PUBLICATION pall FOR ALL TABLES;
SELECT pubname FROM pg_publication ORDER BY 1;
DROP PUBLICATION pp, ps, pall;
\c pasv_regress
DROP DATABASE pasv_pub;
