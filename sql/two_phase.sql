-- Two-phase commit of transactions that wrote and locked pasv rows: the
-- prepared transaction's changes stay invisible and its row locks held,
-- across sessions, a clean restart and a crash; COMMIT PREPARED makes the
-- changes visible (and durable), ROLLBACK PREPARED discards them.
CREATE TABLE tp (id int PRIMARY KEY, v text) USING pasv;
CREATE TABLE tp_heap (id int PRIMARY KEY, v text);
INSERT INTO tp SELECT g, 'v' || g FROM generate_series(1, 8) g;
INSERT INTO tp_heap SELECT g, 'v' || g FROM generate_series(1, 8) g;
-- Bounded wait until this database's replication slot protects its writes,
-- so that the crash below needs replay (not a flush at every commit).
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN EXISTS (SELECT 1 FROM pasv.database_status
                       WHERE datname = current_database() AND slot_state = 'ready');
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;

-- The same changes on both tables, prepared together.
BEGIN;
UPDATE tp SET v = 'updated' WHERE id = 1;
UPDATE tp_heap SET v = 'updated' WHERE id = 1;
DELETE FROM tp WHERE id = 2;
DELETE FROM tp_heap WHERE id = 2;
INSERT INTO tp VALUES (100, 'inserted');
INSERT INTO tp_heap VALUES (100, 'inserted');
SELECT id FROM tp WHERE id = 3 FOR UPDATE;
SELECT id FROM tp WHERE id = 4 FOR SHARE;
PREPARE TRANSACTION 'tp_one';
SELECT gid FROM pg_prepared_xacts;
-- Invisible until it commits; its locks hold against every other session.
SELECT * FROM tp ORDER BY id;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM tp WHERE id = 1 FOR UPDATE NOWAIT" 2>&1
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM tp WHERE id = 3 FOR SHARE NOWAIT" 2>&1
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM tp WHERE id = 4 FOR SHARE NOWAIT" 2>&1
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM tp WHERE id = 4 FOR UPDATE NOWAIT" 2>&1
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM tp WHERE id = 5 FOR UPDATE NOWAIT" 2>&1
-- A clean restart keeps the prepared transaction, its locks and its rows.
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m fast -w restart > /dev/null
\c
SELECT gid FROM pg_prepared_xacts;
SELECT * FROM tp ORDER BY id;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM tp WHERE id = 3 FOR UPDATE NOWAIT" 2>&1
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM tp WHERE id = 4 FOR UPDATE NOWAIT" 2>&1
-- So does a crash: the prepared rows were made durable at PREPARE (their
-- change messages are decoded only once the transaction commits).
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
SELECT gid FROM pg_prepared_xacts;
SELECT * FROM tp ORDER BY id;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET lock_timeout = '100ms'" -c "UPDATE tp SET v = 'waited' WHERE id = 1" 2>&1
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM tp WHERE id = 4 FOR UPDATE NOWAIT" 2>&1
-- A session waiting for a prepared row goes on when it commits, and sees
-- the committed version (READ COMMITTED re-checks it).
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "SET application_name = 'pasv_tp_waiter'" -c "UPDATE tp SET v = v || ' then waited' WHERE id = 1" > /dev/null 2>&1 &
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'pasv_tp_waiter' AND wait_event_type = 'Lock');
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT count(*) AS waiting FROM pg_stat_activity WHERE application_name = 'pasv_tp_waiter' AND wait_event_type = 'Lock';
COMMIT PREPARED 'tp_one';
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'pasv_tp_waiter');
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT * FROM tp ORDER BY id;
SELECT count(*) AS prepared_left FROM pg_prepared_xacts;
-- Its locks went with it.
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM tp WHERE id IN (3, 4) ORDER BY id FOR UPDATE NOWAIT" 2>&1
-- pasv and heap agree.
SELECT count(*) AS differences FROM (
  (SELECT * FROM tp EXCEPT SELECT id, CASE WHEN id = 1 THEN v || ' then waited' ELSE v END FROM tp_heap)
  UNION ALL
  (SELECT id, CASE WHEN id = 1 THEN v || ' then waited' ELSE v END FROM tp_heap EXCEPT SELECT * FROM tp)) d;

-- ROLLBACK PREPARED after a crash discards the changes and frees the rows.
BEGIN;
UPDATE tp SET v = 'rolled back' WHERE id = 5;
DELETE FROM tp WHERE id = 6;
INSERT INTO tp VALUES (200, 'rolled back');
PREPARE TRANSACTION 'tp_two';
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
SELECT gid FROM pg_prepared_xacts;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM tp WHERE id = 6 FOR UPDATE NOWAIT" 2>&1
-- A PREPARE that fails after pasv wrote its state (the GID is taken)
-- releases its locks and leaves no state file behind.
BEGIN;
SELECT id FROM tp WHERE id = 7 FOR UPDATE;
PREPARE TRANSACTION 'tp_two';
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM tp WHERE id = 7 FOR UPDATE NOWAIT" 2>&1
SELECT count(*) AS state_files FROM pg_ls_dir('pasv_prepared');
ROLLBACK PREPARED 'tp_two';
SELECT count(*) AS state_files FROM pg_ls_dir('pasv_prepared');
SELECT * FROM tp WHERE id IN (5, 6, 200) ORDER BY id;
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SELECT id FROM tp WHERE id IN (5, 6) ORDER BY id FOR UPDATE NOWAIT" 2>&1
-- A unique check meets the prepared row, like heap's.
BEGIN;
INSERT INTO tp VALUES (300, 'prepared');
PREPARE TRANSACTION 'tp_three';
\! "$PASV_PG_BIN/psql" -X -q -At -d "$PASV_TEST_DB" -c "SET lock_timeout = '100ms'" -c "INSERT INTO tp VALUES (300, 'second')" 2>&1 | grep ERROR
COMMIT PREPARED 'tp_three';
INSERT INTO tp VALUES (300, 'third');
\echo SQLSTATE :LAST_ERROR_SQLSTATE

-- Tables created and dropped in a prepared transaction: the new table's
-- rows survive a crash while prepared (recovery does not sweep its column
-- family), and the dropped table's column family goes at COMMIT PREPARED.
CREATE TABLE tp_dropped (id int) USING pasv;
INSERT INTO tp_dropped VALUES (1);
SELECT pg_relation_filenode('tp_dropped') AS dropped_rel \gset
BEGIN;
CREATE TABLE tp_new (id int PRIMARY KEY, v text) USING pasv;
INSERT INTO tp_new SELECT g, 'new' FROM generate_series(1, 50) g;
DROP TABLE tp_dropped;
PREPARE TRANSACTION 'tp_ddl';
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
SELECT gid FROM pg_prepared_xacts;
COMMIT PREPARED 'tp_ddl';
SELECT count(*), min(v), max(id) FROM tp_new;
SELECT count(*) AS dropped_cf_left FROM pasv.column_families() WHERE relfilenumber = :dropped_rel;
-- A table created in a transaction rolled back after PREPARE leaves no
-- column family.
BEGIN;
CREATE TABLE tp_gone (id int) USING pasv;
INSERT INTO tp_gone VALUES (1);
SELECT pg_relation_filenode('tp_gone') AS gone_rel \gset
PREPARE TRANSACTION 'tp_gone';
ROLLBACK PREPARED 'tp_gone';
SELECT count(*) AS gone_cf_left FROM pasv.column_families() WHERE relfilenumber = :gone_rel;
-- Committed prepared transactions survive a later crash (replayed or
-- flushed; nothing lost, nothing doubled).
\! "$PASV_PG_BIN/pg_ctl" -D "$PASV_TEST_PGDATA" -l "$PASV_TEST_LOG" -m immediate -w restart > /dev/null 2>&1
\c
SELECT count(*), count(DISTINCT ctid) FROM tp;
SELECT count(*) FROM tp_new;
SELECT * FROM pasv.verify('tp');
SELECT * FROM pasv.verify('tp_new');
DROP TABLE tp, tp_heap, tp_new;
-- A creator's visibility is remembered per snapshot (tam/visibility.rs):
-- a transaction that commits while an older one runs and a newer one has
-- ended leaves the next statement's snapshot with the same xmin and xmax;
-- the rows it committed must still appear at once.
CREATE TABLE tp_memo (id int) USING pasv;
BEGIN;
SELECT 1 AS holds_xmin FROM pg_current_xact_id();
PREPARE TRANSACTION 'tp_oldest';
BEGIN;
INSERT INTO tp_memo SELECT generate_series(1, 5);
PREPARE TRANSACTION 'tp_writer';
BEGIN;
SELECT 1 AS newest FROM pg_current_xact_id();
COMMIT;
SELECT count(*) AS before_commit FROM tp_memo;
COMMIT PREPARED 'tp_writer';
SELECT count(*) AS after_commit FROM tp_memo;
ROLLBACK PREPARED 'tp_oldest';
DROP TABLE tp_memo;
