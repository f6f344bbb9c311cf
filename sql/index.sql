-- PostgreSQL btree indexes on pasv tables: built from the table, kept up
-- by inserts, read through TID fetches.
CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance int8) USING pasv;
INSERT INTO accounts SELECT g, 'owner' || g, g * 10 FROM generate_series(1, 20000) g;
CREATE INDEX accounts_owner ON accounts (owner);
CREATE INDEX accounts_big ON accounts (balance) WHERE balance > 199000;

SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT * FROM accounts WHERE id = 4242;
SELECT * FROM accounts WHERE id = 4242;
SELECT * FROM accounts WHERE owner = 'owner17';
SELECT count(*), min(id), max(id) FROM accounts WHERE id BETWEEN 100 AND 199;
EXPLAIN (COSTS OFF) SELECT id FROM accounts WHERE balance > 199950 ORDER BY balance;
SELECT id FROM accounts WHERE balance > 199950 ORDER BY balance;
-- Index-only scans fall back to heap fetches (pasv keeps no visibility map).
SELECT count(*) FROM accounts WHERE id < 1000;

-- Rows inserted after the index exists are found through it.
INSERT INTO accounts VALUES (20001, 'late', 5);
SELECT * FROM accounts WHERE id = 20001;
SELECT * FROM accounts WHERE owner = 'late';

-- Uniqueness is enforced through the pasv rows the index points at.
INSERT INTO accounts VALUES (17, 'dup', 0);
BEGIN;
INSERT INTO accounts VALUES (30000, 'in-tx', 1);
INSERT INTO accounts VALUES (30000, 'in-tx-dup', 1);
ROLLBACK;
-- The aborted row's index entry points at an invisible row: the key is free.
INSERT INTO accounts VALUES (30000, 'after-abort', 1);
SELECT id, owner FROM accounts WHERE id = 30000;

-- Bitmap scans over pasv rowid blocks.
SET enable_indexscan = off;
SET enable_bitmapscan = on;
EXPLAIN (COSTS OFF) SELECT count(*) FROM accounts WHERE id BETWEEN 1000 AND 1999 OR owner = 'owner5';
SELECT count(*) FROM accounts WHERE id BETWEEN 1000 AND 1999 OR owner = 'owner5';
RESET enable_seqscan;
RESET enable_bitmapscan;
RESET enable_indexscan;

-- A join that drives index lookups into a pasv table.
CREATE TABLE lookups (k int) USING pasv;
INSERT INTO lookups SELECT g * 7 FROM generate_series(1, 500) g;
SET enable_hashjoin = off;
SET enable_mergejoin = off;
SELECT count(*), sum(a.balance) FROM lookups l JOIN accounts a ON a.id = l.k;
RESET enable_hashjoin;
RESET enable_mergejoin;

DROP TABLE accounts, lookups;
