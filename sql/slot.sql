-- The replication slot pasv_<database oid> keeps the WAL this database's
-- recovery may need. If someone drops it, pasv says so in the server log
-- (WARNING with a HINT), flushes the database's tables (so nothing depended
-- on the lost WAL) and creates the slot again.
CREATE TABLE slot_t (id int) USING pasv;
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    EXIT WHEN EXISTS (SELECT 1 FROM pasv.database_status
                       WHERE datname = current_database() AND slot_state = 'ready');
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT slot_name AS slot FROM pasv.database_status WHERE datname = current_database() \gset
SELECT :'slot' = 'pasv_' || (SELECT oid FROM pg_database WHERE datname = current_database()) AS slot_named_by_oid,
       plugin, slot_type, temporary
  FROM pg_replication_slots WHERE slot_name = :'slot';
INSERT INTO slot_t SELECT generate_series(1, 100);
SELECT unflushed FROM pasv.cf_status WHERE relation = 'slot_t'::regclass;
-- Drop it (the worker holds it for a moment while it advances it: retry).
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    BEGIN
      PERFORM pg_drop_replication_slot(slot_name) FROM pasv.database_status WHERE datname = current_database();
      EXIT;
    EXCEPTION WHEN object_in_use THEN
      PERFORM pg_sleep(0.02);
    END;
  END LOOP;
END $$;
-- It comes back, and what it protected was flushed first.
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    EXIT WHEN EXISTS (SELECT 1 FROM pg_replication_slots s JOIN pasv.database_status d USING (slot_name)
                       WHERE d.datname = current_database() AND d.slot_state = 'ready');
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT count(*) AS slots FROM pg_replication_slots WHERE slot_name = :'slot';
SELECT unflushed FROM pasv.cf_status WHERE relation = 'slot_t'::regclass;
\! grep -c "WARNING:  pasv: the replication slot pasv_[0-9]* of database [0-9]* was dropped" "$PASV_TEST_LOG"
\! grep -c "HINT:  pasv flushes the database's pasv tables and creates the slot again" "$PASV_TEST_LOG"
SELECT count(*) FROM slot_t;
DROP TABLE slot_t;
