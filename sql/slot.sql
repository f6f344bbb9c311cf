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

-- The worker reads and advances the slot without a snapshot: while a
-- process of the database holds one, no backend may prune a version its
-- xmin covers (heap's HOT pruning neither). Under a steady stream of WAL
-- (advances are due at every tick past twice max_recovery_lag), the
-- worker's xmin is sampled between transactions until the slot moved
-- three times. Sampling starts once the slot's restart_lsn passed the
-- loop's start: an advance decodes from there, and before that its
-- decoding met this test's DDL (and maybe earlier tests'), whose
-- invalidations look the catalog up with a snapshot for a moment, as any
-- decoding of DDL does (1 sample in about 3 000 held in CI). The loop
-- itself writes rows only.
ALTER SYSTEM SET pasv.max_recovery_lag = 16;
SELECT pg_reload_conf();
CREATE TABLE slot_w (id int, pad text) USING pasv;
CREATE PROCEDURE slot_sample(INOUT samples int, INOUT held int, INOUT advances int)
LANGUAGE plpgsql AS $$
DECLARE
  was pg_lsn := (SELECT confirmed_flush_lsn FROM pg_replication_slots s JOIN pasv.database_status d USING (slot_name)
                  WHERE d.datname = current_database());
  now_at pg_lsn;
  loop_start pg_lsn := pg_current_wal_lsn();
  sampling bool := false;
BEGIN
  samples := 0; held := 0; advances := 0;
  FOR i IN 1..20000 LOOP
    INSERT INTO slot_w SELECT g, repeat('x', 100) FROM generate_series(1, 200) g;
    COMMIT;
    sampling := sampling OR (SELECT restart_lsn >= loop_start FROM pg_replication_slots s JOIN pasv.database_status d USING (slot_name)
                                WHERE d.datname = current_database());
    IF sampling THEN
      samples := samples + 1;
      held := held + (SELECT count(*) FROM pg_stat_activity
                       WHERE backend_type = 'pasv replay' AND datname = current_database() AND backend_xmin IS NOT NULL);
    END IF;
    now_at := (SELECT confirmed_flush_lsn FROM pg_replication_slots s JOIN pasv.database_status d USING (slot_name)
                WHERE d.datname = current_database());
    IF now_at <> was THEN advances := advances + sampling::int; was := now_at; END IF;
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN advances >= 3;
    IF i % 100 = 0 THEN DELETE FROM slot_w; END IF;
  END LOOP;
END $$;
CALL slot_sample(NULL, NULL, NULL) \gset
SELECT :advances >= 3 AS slot_advanced, :held AS samples_with_worker_xmin, :samples > 100 AS sampled;
ALTER SYSTEM RESET pasv.max_recovery_lag;
SELECT pg_reload_conf();
DROP PROCEDURE slot_sample;
DROP TABLE slot_w;
