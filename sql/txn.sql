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
