-- Bad input to pasv's functions fails with a clear error: a message, a
-- HINT, and a SQLSTATE (echoed after each statement); nothing changes.
CREATE TABLE e (id int PRIMARY KEY, v text) USING pasv;
CREATE TABLE e_heap (id int);
INSERT INTO e VALUES (1, 'a'), (2, 'b');
SELECT pasv.flush_table('e_heap'::regclass);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT pasv.table_versions('e_heap'::regclass);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT pasv.crash_point('no_such_point');
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT pasv.test_delay_next_write(-1);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT * FROM e ORDER BY id;
DROP TABLE e, e_heap;
