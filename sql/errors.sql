-- What pasv does not do yet fails with a clear error: a message, a HINT,
-- and a SQLSTATE (echoed after each statement).
CREATE TABLE e (id int PRIMARY KEY, v text) USING pasv;
INSERT INTO e VALUES (1, 'a'), (2, 'b');

BEGIN;
INSERT INTO e VALUES (3, 'c');
PREPARE TRANSACTION 'p1';
\echo SQLSTATE :LAST_ERROR_SQLSTATE
-- Nothing above changed the table.
SELECT * FROM e ORDER BY id;
DROP TABLE e;
