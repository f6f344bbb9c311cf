-- Logical decoding sees a pasv table's changes as the row changes heap's
-- give (src/logical/): the same statements on a heap table and on a pasv
-- table decode to the same pgoutput messages (relation ids aside), and a
-- publication carries a pasv table to a subscription.
-- The statement's own errors keep their error position and CONTEXT
-- (pasv's ProcessUtility hook must not lose them).
CREATE TABLE ld_bad (a no_such_type);
DO $$ BEGIN EXECUTE 'CREATE TABLE ld_bad (a no_such_type)'; END $$;
CREATE TABLE ld_heap (id int PRIMARY KEY, v text, n int) USING heap;
CREATE TABLE ld_pasv (id int PRIMARY KEY, v text, n int) USING pasv;
-- The same in a tablespace that is not the database's default.
SET allow_in_place_tablespaces = true;
CREATE TABLESPACE ld_ts LOCATION '';
CREATE TABLE ld_pts (id int PRIMARY KEY, v text, n int) USING pasv TABLESPACE ld_ts;
-- A value stored out of line by both (incompressible, 19 200 bytes: pasv
-- keeps rows up to 16 kB inline).
CREATE FUNCTION ld_big() RETURNS text LANGUAGE sql
  AS $$ SELECT string_agg(md5(i::text), '') FROM generate_series(1, 600) i $$;
CREATE FUNCTION ld_work(t text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('INSERT INTO %I VALUES (1, %L, 10), (2, %L, 20), (3, ld_big(), 30)', t, 'one', 'two');
  EXECUTE format('UPDATE %I SET n = n + 1 WHERE id = 1', t);
  EXECUTE format('UPDATE %I SET id = 4 WHERE id = 2', t);
  EXECUTE format('DELETE FROM %I WHERE id = 1', t);
  EXECUTE format('INSERT INTO %I VALUES (5, %L, 50) ON CONFLICT (id) DO NOTHING', t, 'five');
  EXECUTE format('INSERT INTO %I VALUES (5, %L, 55) ON CONFLICT (id) DO UPDATE SET v = excluded.v', t, 'again');
  BEGIN
    EXECUTE format('INSERT INTO %I VALUES (6, %L, 60)', t, 'rolled back');
    RAISE EXCEPTION 'roll the subtransaction back';
  EXCEPTION WHEN raise_exception THEN NULL;
  END;
  EXECUTE format('INSERT INTO %I VALUES (7, %L, 70)', t, 'after the savepoint');
  -- The large value unchanged, then replaced.
  EXECUTE format('UPDATE %I SET n = 0 WHERE id = 3', t);
  EXECUTE format('UPDATE %I SET v = v || %L WHERE id = 3', t, '!');
END $$;
CREATE FUNCTION ld_work_full(t text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('ALTER TABLE %I REPLICA IDENTITY FULL', t);
  EXECUTE format('UPDATE %I SET n = -1 WHERE id = 4', t);
  EXECUTE format('DELETE FROM %I WHERE id = 5', t);
  EXECUTE format('ALTER TABLE %I REPLICA IDENTITY DEFAULT', t);
  EXECUTE format('TRUNCATE %I', t);
END $$;
CREATE PUBLICATION ld_dec FOR TABLE ld_heap, ld_pasv, ld_pts;
SELECT 'slot' FROM pg_create_logical_replication_slot('ld_slot', 'pgoutput');
SELECT ld_work('ld_heap');
SELECT ld_work('ld_pasv');
SELECT ld_work('ld_pts');
BEGIN;
INSERT INTO ld_heap VALUES (8, 'rolled back', 80);
INSERT INTO ld_pasv VALUES (8, 'rolled back', 80);
ROLLBACK;
-- VACUUM, VACUUM FULL and CLUSTER write no row changes.
DELETE FROM ld_heap WHERE id = 7;
DELETE FROM ld_pasv WHERE id = 7;
DELETE FROM ld_pts WHERE id = 7;
VACUUM ld_heap;
VACUUM ld_pasv;
VACUUM FULL ld_pasv;
CLUSTER ld_pasv USING ld_pasv_pkey;
SELECT ld_work_full('ld_heap');
SELECT ld_work_full('ld_pasv');
SELECT ld_work_full('ld_pts');
-- A message some session logs under pasv's prefix is skipped, not an
-- ERROR that would stop every decoder (a WARNING names its position).
SELECT 'emitted' FROM pg_logical_emit_message(true, 'pasv', 'not a change batch');
-- pgoutput's row messages: INSERT, UPDATE, DELETE (relation id in bytes
-- 2-5) and TRUNCATE (relation ids from byte 7); the ids zeroed, the rest
-- compared byte for byte. Which table a message is for: its relation id.
SET client_min_messages = error;
CREATE TABLE ld_changes AS
  SELECT row_number() OVER () AS n, data FROM pg_logical_slot_get_binary_changes('ld_slot', NULL, NULL,
         'proto_version', '1', 'publication_names', 'ld_dec')
  WHERE get_byte(data, 0) IN (ascii('I'), ascii('U'), ascii('D'), ascii('T'));
RESET client_min_messages;
ALTER TABLE ld_changes ADD am text, ADD change text;
UPDATE ld_changes SET
  am = CASE WHEN get_byte(data, 0) = ascii('T') THEN 'truncate'
            WHEN ('x' || encode(substr(data, 2, 4), 'hex'))::bit(32)::int = 'ld_pasv'::regclass::oid::int THEN 'pasv'
            WHEN ('x' || encode(substr(data, 2, 4), 'hex'))::bit(32)::int = 'ld_pts'::regclass::oid::int THEN 'pasv_ts'
            ELSE 'heap' END,
  change = CASE WHEN get_byte(data, 0) = ascii('T') THEN encode(substr(data, 1, 6), 'hex')
                ELSE chr(get_byte(data, 0)) || ' ' || regexp_replace(encode(substr(data, 6), 'escape'), '[0-9a-f]{32}[0-9a-f]*', '<big>', 'g') END;
SELECT am, change FROM ld_changes WHERE am IN ('pasv', 'truncate') ORDER BY n;
-- Heap's changes, in heap's order, are exactly pasv's (both tables').
CREATE FUNCTION ld_differ(other text) RETURNS TABLE (change text, pos bigint) LANGUAGE sql AS $$
  (SELECT change, row_number() OVER (ORDER BY n) FROM ld_changes WHERE am = 'heap'
   EXCEPT ALL
   SELECT change, row_number() OVER (ORDER BY n) FROM ld_changes WHERE am = other)
  UNION ALL
  (SELECT change, row_number() OVER (ORDER BY n) FROM ld_changes WHERE am = other
   EXCEPT ALL
   SELECT change, row_number() OVER (ORDER BY n) FROM ld_changes WHERE am = 'heap')
$$;
SELECT am, count(*) AS changes FROM ld_changes GROUP BY am ORDER BY am;
SELECT * FROM ld_differ('pasv');
SELECT * FROM ld_differ('pasv_ts');
DROP FUNCTION ld_differ;
SELECT pg_drop_replication_slot('ld_slot');
DROP TABLE ld_changes;
DROP PUBLICATION ld_dec;
-- A publication of a pasv table, and FOR ALL TABLES, as for heap.
CREATE PUBLICATION ld_pub FOR TABLE ld_pasv;
CREATE PUBLICATION ld_all FOR ALL TABLES;
SELECT pubname, tablename FROM pg_publication_tables WHERE pubname LIKE 'ld_%' AND tablename LIKE 'ld_%' ORDER BY 1, 2;
DROP PUBLICATION ld_all;
-- A subscription in another database of this cluster receives the rows:
-- the initial copy, then inserts, updates (in place and moving), deletes.
INSERT INTO ld_pasv SELECT g, 'copied ' || g, g FROM generate_series(1, 100) g;
SELECT 'slot' FROM pg_create_logical_replication_slot('ld_sub_slot', 'pgoutput');
SELECT format('host=%s port=%s dbname=%s user=postgres', split_part(current_setting('unix_socket_directories'), ',', 1),
              current_setting('port'), current_database()) AS publisher,
       current_database() AS publisher_db \gset
CREATE DATABASE ld_subscriber;
\c ld_subscriber
CREATE EXTENSION pasv;
CREATE TABLE ld_pasv (id int PRIMARY KEY, v text, n int) USING pasv;
CREATE SUBSCRIPTION ld_sub CONNECTION :'publisher' PUBLICATION ld_pub
  WITH (create_slot = false, slot_name = 'ld_sub_slot');
-- Bounded wait: at most 60 s for the copy.
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    EXIT WHEN (SELECT count(*) FROM ld_pasv) = 100;
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT count(*), sum(id), sum(n) FROM ld_pasv;
\c :publisher_db
INSERT INTO ld_pasv VALUES (1000, ld_big(), 1000);
UPDATE ld_pasv SET n = -n WHERE id <= 10;
UPDATE ld_pasv SET id = id + 500 WHERE id BETWEEN 11 AND 20;
DELETE FROM ld_pasv WHERE id BETWEEN 21 AND 30;
INSERT INTO ld_pasv VALUES (31, 'upserted', 0) ON CONFLICT (id) DO UPDATE SET v = excluded.v;
INSERT INTO ld_pasv VALUES (2000, 'speculative', 0) ON CONFLICT (id) DO NOTHING;
SELECT count(*), sum(id), sum(n), md5(string_agg(v, ',' ORDER BY id)) FROM ld_pasv;
\c ld_subscriber
DO $$
BEGIN
  FOR i IN 1..600 LOOP
    EXIT WHEN (SELECT count(*) FROM ld_pasv WHERE id = 2000) = 1;
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT count(*), sum(id), sum(n), md5(string_agg(v, ',' ORDER BY id)) FROM ld_pasv;
DROP SUBSCRIPTION ld_sub;
\c :publisher_db
DROP DATABASE ld_subscriber;
DROP PUBLICATION ld_pub;
DROP TABLE ld_heap, ld_pasv, ld_pts;
DROP TABLESPACE ld_ts;
DROP FUNCTION ld_work, ld_work_full, ld_big;
-- A table without indexes, where every UPDATE moves the row
-- (pasv.move_unindexed_updates): with REPLICA IDENTITY FULL its changes
-- decode to heap's (the old row, then the new); without a replica
-- identity, UPDATE is refused as on heap.
SET pasv.move_unindexed_updates = on;
CREATE TABLE ld_ni_heap (a int, b text) USING heap;
CREATE TABLE ld_ni_pasv (a int, b text) USING pasv;
ALTER TABLE ld_ni_heap REPLICA IDENTITY FULL;
ALTER TABLE ld_ni_pasv REPLICA IDENTITY FULL;
CREATE PUBLICATION ld_ni FOR TABLE ld_ni_heap, ld_ni_pasv;
SELECT 'slot' FROM pg_create_logical_replication_slot('ld_ni_slot', 'pgoutput');
CREATE FUNCTION ld_ni_work(t text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('INSERT INTO %I VALUES (1, %L), (2, %L), (3, %L)', t, 'x', 'y', 'z');
  EXECUTE format('UPDATE %I SET b = %L WHERE a = 1', t, 'moved');
  EXECUTE format('UPDATE %I SET b = b || %L WHERE a = 1', t, ' again');
  EXECUTE format('DELETE FROM %I WHERE a = 2', t);
END $$;
SELECT ld_ni_work('ld_ni_heap');
SELECT ld_ni_work('ld_ni_pasv');
SET client_min_messages = error;
CREATE TABLE ld_ni_changes AS
  SELECT row_number() OVER () AS n,
         CASE WHEN ('x' || encode(substr(data, 2, 4), 'hex'))::bit(32)::int = 'ld_ni_pasv'::regclass::oid::int THEN 'pasv' ELSE 'heap' END AS am,
         chr(get_byte(data, 0)) || ' ' || encode(substr(data, 6), 'escape') AS change
    FROM pg_logical_slot_get_binary_changes('ld_ni_slot', NULL, NULL, 'proto_version', '1', 'publication_names', 'ld_ni')
   WHERE get_byte(data, 0) IN (ascii('I'), ascii('U'), ascii('D'));
RESET client_min_messages;
SELECT am, count(*) AS changes,
       string_agg(left(change, 1), '' ORDER BY n) AS kinds
  FROM ld_ni_changes GROUP BY am ORDER BY am;
SELECT (SELECT array_agg(change ORDER BY n) FROM ld_ni_changes WHERE am = 'heap')
     = (SELECT array_agg(change ORDER BY n) FROM ld_ni_changes WHERE am = 'pasv') AS same_changes;
SELECT pg_drop_replication_slot('ld_ni_slot');
ALTER TABLE ld_ni_pasv REPLICA IDENTITY DEFAULT;
UPDATE ld_ni_pasv SET b = 'refused' WHERE a = 1;
DROP PUBLICATION ld_ni;
DROP TABLE ld_ni_changes, ld_ni_heap, ld_ni_pasv;
DROP FUNCTION ld_ni_work;
RESET pasv.move_unindexed_updates;
