-- Bugs found by outside checks that need no crash (each failed before its fix).

-- An UPDATE that conflicts with a UNIQUE DEFERRABLE constraint is an ERROR
-- (it crashed the backend), immediately or at COMMIT.
CREATE TABLE ud (i int UNIQUE DEFERRABLE, t text) USING pasv;
INSERT INTO ud VALUES (0, 'a'), (1, 'b');
UPDATE ud SET i = 1 WHERE i = 0;
SELECT * FROM ud ORDER BY i;
-- A swap that is unique again by the end of the statement is fine.
UPDATE ud SET i = 1 - i;
SELECT * FROM ud ORDER BY i;
CREATE TABLE udd (i int UNIQUE DEFERRABLE INITIALLY DEFERRED, t text) USING pasv;
INSERT INTO udd VALUES (0, 'a'), (1, 'b');
BEGIN;
UPDATE udd SET i = 1 WHERE i = 0;
COMMIT;
BEGIN;
UPDATE udd SET i = 2 WHERE i = 0;
UPDATE udd SET i = 0 WHERE i = 1;
COMMIT;
SELECT * FROM udd ORDER BY i;
SELECT count(*) AS verify_problems FROM pasv.verify('udd'::regclass);
DROP TABLE ud, udd;

-- VACUUM keeps the aborted newest version of a live row, so its version
-- number is never written again (replay would order VACUUM's removal after
-- the later UPDATE that reused it).
CREATE TABLE vr (k int PRIMARY KEY, v int) USING pasv;
INSERT INTO vr VALUES (1, 0);
BEGIN;
UPDATE vr SET v = 1 WHERE k = 1;
ROLLBACK;
VACUUM vr;
SELECT version, tombstone FROM pasv.versions('vr'::regclass);
UPDATE vr SET v = 2 WHERE k = 1;
SELECT * FROM vr;
-- Version 1 (aborted) was pruned by the UPDATE, which wrote version 2.
SELECT version, tombstone FROM pasv.versions('vr'::regclass);
SELECT count(*) AS verify_problems FROM pasv.verify('vr'::regclass);
DROP TABLE vr;

-- pasv.verify and crash points refuse what they cannot do, with a HINT.
CREATE TABLE not_pasv (i int);
SELECT * FROM pasv.verify('not_pasv'::regclass);
DROP TABLE not_pasv;
SELECT pasv.crash_point('no_such_point');
SELECT pasv.crash_point('truncate', -1);
SELECT count(*) AS crash_points FROM pasv.crash_points();
SELECT pasv.clear_crash_points();

-- PREPARE TRANSACTION after locking pasv rows is refused: the locks live in
-- the engine under this session, whose next transaction would release them.
CREATE TABLE pl (k int PRIMARY KEY) USING pasv;
INSERT INTO pl VALUES (1);
BEGIN;
SELECT * FROM pl WHERE k = 1 FOR UPDATE;
PREPARE TRANSACTION 'pasv_locked';
SELECT count(*) AS prepared FROM pg_prepared_xacts WHERE gid = 'pasv_locked';
DROP TABLE pl;

-- VACUUM FULL and CLUSTER form every row again for the new descriptor: a
-- column added with a default after the row was stored keeps its value
-- (the rewrite clears the catalog's missing values), a dropped one is gone.
CREATE TABLE fd (k int PRIMARY KEY, d text) USING pasv;
INSERT INTO fd VALUES (1, 'x'), (2, 'y');
ALTER TABLE fd ADD COLUMN e int DEFAULT 7;
ALTER TABLE fd DROP COLUMN d;
INSERT INTO fd VALUES (3, 8);
VACUUM FULL fd;
SELECT * FROM fd ORDER BY k;
ALTER TABLE fd ADD COLUMN f text DEFAULT 'later';
CLUSTER fd USING fd_pkey;
SELECT * FROM fd ORDER BY k;
SET enable_seqscan = off;
SELECT * FROM fd WHERE k = 2;
RESET enable_seqscan;
DROP TABLE fd;
