-- A clean restart keeps every committed row (memtables are flushed at
-- shutdown) and nothing uncommitted.
CREATE TABLE survivor (id int, v text) USING pasv;
INSERT INTO survivor SELECT g, md5(g::text) FROM generate_series(1, 50000) g;
CREATE INDEX survivor_id ON survivor (id);
BEGIN;
INSERT INTO survivor VALUES (-1, 'uncommitted at shutdown');
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m fast -w restart > /dev/null
\c
SELECT count(*), sum(id), count(*) FILTER (WHERE v <> md5(id::text)) AS damaged FROM survivor;
SELECT count(*) AS uncommitted FROM survivor WHERE id = -1;
SET enable_seqscan = off;
SELECT v FROM survivor WHERE id = 31337;
RESET enable_seqscan;
-- New rows after the restart get fresh rowids (no TID collides).
INSERT INTO survivor VALUES (50001, 'after restart');
SELECT count(*), count(DISTINCT ctid) FROM survivor;
DROP TABLE survivor;
