-- Without shared_preload_libraries = 'pasv', CREATE EXTENSION says why.
CREATE EXTENSION pasv;
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT count(*) FROM pg_am WHERE amname = 'pasv';
