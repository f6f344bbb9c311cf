-- When the engine cannot run (here RocksDB cannot be opened), a backend
-- that needs it gets a clear error instead of waiting forever.
CREATE EXTENSION pasv;
CREATE TABLE t (a int) USING pasv;
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT count(*) AS pasv_tables FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE a.amname = 'pasv';
