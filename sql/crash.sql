-- Crash recovery (DESIGN §6): committed rows that lived only in memtables
-- come back through partial replay; flushed ones are skipped; nothing
-- uncommitted appears. The server is killed with pg_ctl -m immediate.
--
CREATE TABLE crash_hot (id int PRIMARY KEY, v text) USING pasv;
CREATE TABLE crash_cold (id int, v text) USING pasv;
CREATE TABLE crash_heap (id int);
-- Bounded wait until this database's replication slot protects its writes
-- (before that, every commit flushes what it wrote and nothing is replayed).
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN EXISTS (SELECT 1 FROM pasv.database_status
                       WHERE datname = current_database() AND slot_state = 'ready');
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT slot_state, recovering FROM pasv.database_status WHERE datname = current_database();
INSERT INTO crash_cold VALUES (1, 'cold, before the hot flush');
INSERT INTO crash_hot SELECT g, 'flushed' FROM generate_series(1, 1000) g;
-- Only the hot table reaches disk: its flag says the 1000 rows are there.
SELECT pasv.flush_table('crash_hot'::regclass);
SELECT persisted_flag_lsn = latest_flag_lsn AS hot_flag_persisted, NOT unflushed AS hot_clean
  FROM pasv.cf_status WHERE relation = 'crash_hot'::regclass;
SELECT unflushed AS cold_unflushed, persisted_flag_lsn = '0/0' AS cold_never_flushed
  FROM pasv.cf_status WHERE relation = 'crash_cold'::regclass;
-- Committed after the flush: in memtables only.
INSERT INTO crash_hot SELECT g, 'memtable' FROM generate_series(1001, 1500) g;
UPDATE crash_hot SET v = 'updated' WHERE id <= 10 OR id BETWEEN 1001 AND 1010;
DELETE FROM crash_hot WHERE id > 1490;
INSERT INTO crash_cold VALUES (2, 'cold, after');
INSERT INTO crash_heap SELECT g FROM generate_series(1, 100) g;
BEGIN;
INSERT INTO crash_hot VALUES (-1, 'rolled back');
ROLLBACK;
BEGIN;
SAVEPOINT s;
INSERT INTO crash_hot VALUES (-2, 'aborted subtransaction');
ROLLBACK TO s;
INSERT INTO crash_cold VALUES (3, 'committed around an aborted subtransaction');
COMMIT;
-- In flight at the crash: never committed (and a table it created is an orphan).
BEGIN;
INSERT INTO crash_hot VALUES (-3, 'in flight');
UPDATE crash_cold SET v = 'in flight' WHERE id = 1;
CREATE TABLE crash_orphan (id int) USING pasv;
INSERT INTO crash_orphan VALUES (1);
SELECT pg_relation_filenode('crash_orphan') AS orphan_rel \gset
SELECT count(*) AS orphan_cf_before FROM pasv.column_families() WHERE relfilenumber = :orphan_rel;
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
-- The first touch of a pasv table waits until the database is recovered.
SELECT count(*), sum(id), count(*) FILTER (WHERE v = 'updated') AS updated,
       count(*) FILTER (WHERE v = 'memtable') AS memtable_rows, min(id), max(id)
  FROM crash_hot;
SELECT * FROM crash_cold ORDER BY id;
SELECT count(*) AS heap_rows FROM crash_heap;
SET enable_seqscan = off;
SELECT v FROM crash_hot WHERE id = 1005;
SELECT count(*) AS by_index FROM crash_hot WHERE id BETWEEN 990 AND 1100;
RESET enable_seqscan;
-- Partial recovery: the hot table's flushed transaction was skipped, what
-- followed it replayed; the cold table (never flushed) replayed in full.
SELECT relation, skipped_ops, replayed_ops > 0 AS replayed, durability
  FROM pasv.recovery_report WHERE relation IN ('crash_hot'::regclass, 'crash_cold'::regclass)
 ORDER BY relation::text;
SELECT recovering FROM pasv.database_status WHERE datname = current_database();
-- The crash left the in-flight CREATE's column family behind: recovery swept it.
SELECT count(*) AS orphan_cf_after FROM pasv.column_families() WHERE relfilenumber = :orphan_rel;
-- Recovery flushed what it replayed: a second crash replays nothing of it.
SELECT count(*) AS unflushed_after_recovery FROM pasv.cf_status
 WHERE relation IN ('crash_hot'::regclass, 'crash_cold'::regclass) AND unflushed;
-- New rows get fresh rowids after replay (no TID collides).
INSERT INTO crash_hot VALUES (5000, 'after recovery');
SELECT count(*), count(DISTINCT ctid) FROM crash_hot;

-- WAL before data: with asynchronous commit the commit record may still be
-- in WAL buffers when a memtable is flushed; the flush first makes the WAL
-- durable up to the table's newest change (its flag's commit LSN).
CREATE TABLE crash_async (id int, v text) USING pasv;
SET synchronous_commit = off;
INSERT INTO crash_async SELECT g, repeat('a', 100) FROM generate_series(1, 2000) g;
RESET synchronous_commit;
SELECT latest_flag_lsn AS async_commit_end FROM pasv.cf_status WHERE relation = 'crash_async'::regclass \gset
-- The commit is not durable yet (the WAL writer sleeps 10 s in this cluster).
SELECT pg_current_wal_flush_lsn() < :'async_commit_end'::pg_lsn AS commit_not_yet_durable;
SELECT pasv.flush_table('crash_async'::regclass);
SELECT pg_current_wal_flush_lsn() >= :'async_commit_end'::pg_lsn AS wal_durable_before_data,
       persisted_flag_lsn = :'async_commit_end'::pg_lsn AS flag_persisted
  FROM pasv.cf_status WHERE relation = 'crash_async'::regclass;
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
-- Its rows reached disk, so its commit did too: all of them are visible,
-- and transaction ids handed out after the crash do not revive anything.
SELECT count(*) FROM crash_async;
INSERT INTO crash_async VALUES (-1, 'after the crash');
SELECT count(*) FROM crash_async;
DROP TABLE crash_hot, crash_cold, crash_heap, crash_async;
