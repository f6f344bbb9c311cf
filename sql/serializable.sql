-- SERIALIZABLE on pasv tables: write skew is caught, as on heap.
CREATE TABLE doctors (name text PRIMARY KEY, on_call bool) USING pasv;
INSERT INTO doctors VALUES ('alice', true), ('bob', true);
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT count(*) FROM doctors WHERE on_call;
-- Another session makes the same check and takes bob off call.
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "BEGIN ISOLATION LEVEL SERIALIZABLE" -c "SELECT count(*) FROM doctors WHERE on_call" -c "UPDATE doctors SET on_call = false WHERE name = 'bob'" -c "COMMIT"
-- Taking alice off too would leave nobody on call: this transaction fails.
UPDATE doctors SET on_call = false WHERE name = 'alice';
\echo SQLSTATE :LAST_ERROR_SQLSTATE
COMMIT;
SELECT name, on_call FROM doctors ORDER BY name;

-- Without a conflict, serializable transactions commit.
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT on_call FROM doctors WHERE name = 'alice';
UPDATE doctors SET on_call = true WHERE name = 'bob';
COMMIT;
SELECT name, on_call FROM doctors ORDER BY name;

-- A serializable insert that another serializable reader missed.
CREATE TABLE ledger (id int, amount int) USING pasv;
INSERT INTO ledger VALUES (1, 100);
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT sum(amount) FROM ledger;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "BEGIN ISOLATION LEVEL SERIALIZABLE" -c "SELECT sum(amount) FROM ledger" -c "INSERT INTO ledger VALUES (2, -100)" -c "COMMIT"
INSERT INTO ledger VALUES (3, -100);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
COMMIT;
SELECT count(*), sum(amount) FROM ledger;
DROP TABLE doctors, ledger;

-- The other order: this transaction changes its row first and the other
-- one reads it before this one commits. On heap the reader sees the
-- change in progress (a conflict out); a pasv change still in the writer's
-- buffer is invisible to it, so a serializable writer sends its changes at
-- once (tam/rowops.rs::write_row_change). Heap and pasv, the same outcome:
-- never both off call.
CREATE TABLE doctors_h (name text PRIMARY KEY, on_call bool) USING heap;
CREATE TABLE doctors_p (name text PRIMARY KEY, on_call bool) USING pasv;
INSERT INTO doctors_h VALUES ('alice', true), ('bob', true);
INSERT INTO doctors_p VALUES ('alice', true), ('bob', true);
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT count(*) FROM doctors_h WHERE on_call;
UPDATE doctors_h SET on_call = false WHERE name = 'alice';
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "BEGIN ISOLATION LEVEL SERIALIZABLE" -c "SELECT count(*) FROM doctors_h WHERE on_call" -c "UPDATE doctors_h SET on_call = false WHERE name = 'bob'" -c "COMMIT" 2>&1 | grep -v '^DETAIL\|^HINT'
COMMIT;
\echo SQLSTATE :SQLSTATE
SELECT count(*) AS still_on_call FROM doctors_h WHERE on_call;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT count(*) FROM doctors_p WHERE on_call;
UPDATE doctors_p SET on_call = false WHERE name = 'alice';
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "BEGIN ISOLATION LEVEL SERIALIZABLE" -c "SELECT count(*) FROM doctors_p WHERE on_call" -c "UPDATE doctors_p SET on_call = false WHERE name = 'bob'" -c "COMMIT" 2>&1 | grep -v '^DETAIL\|^HINT'
COMMIT;
\echo SQLSTATE :SQLSTATE
SELECT count(*) AS still_on_call FROM doctors_p WHERE on_call;
DROP TABLE doctors_h, doctors_p;
