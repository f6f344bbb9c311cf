-- Bulk loads: INSERT ... SELECT and COPY, in and out.
CREATE TABLE big (id int8, grp int4, payload text) USING pasv;
INSERT INTO big SELECT g, g % 100, md5(g::text) FROM generate_series(1, 200000) g;
SELECT count(*), count(DISTINCT id), sum(id), min(id), max(id), count(DISTINCT payload) FROM big;
SELECT grp, count(*) FROM big WHERE grp IN (0, 1, 99) GROUP BY grp ORDER BY grp;
SELECT sum(length(payload)) FROM big;
-- Every row comes back exactly once, with its own values.
SELECT count(*) FROM big WHERE payload <> md5(id::text);

-- A second statement in the same transaction sees the first one's rows.
BEGIN;
INSERT INTO big SELECT g, -1, 'tx' FROM generate_series(200001, 200100) g;
SELECT count(*) FROM big WHERE grp = -1;
INSERT INTO big SELECT id + 1000000, -2, 'again' FROM big WHERE grp = -1;
SELECT grp, count(*) FROM big WHERE grp < 0 GROUP BY grp ORDER BY grp;
COMMIT;
SELECT count(*) FROM big;

-- COPY in (multi_insert) and out.
CREATE TABLE copied (id int, name text, price numeric, tags text[]) USING pasv;
COPY copied FROM STDIN;
1	apple	1.25	{red,fruit}
2	banana	0.5	{yellow}
3	\N	\N	\N
4	tab\there	10	{}
\.
COPY copied TO STDOUT;
COPY (SELECT * FROM copied ORDER BY id DESC) TO STDOUT WITH (FORMAT csv, HEADER);
COPY copied FROM STDIN WITH (FORMAT csv);
5,"quoted, comma",2.00,"{a,b}"
\.
SELECT * FROM copied ORDER BY id;

-- COPY of many rows goes through multi_insert in batches.
CREATE TABLE copy_big (a int, b text) USING pasv;
CREATE TEMP TABLE src AS SELECT g AS a, repeat('y', g % 50) AS b FROM generate_series(1, 50000) g;
COPY (SELECT * FROM src) TO '/tmp/pasv_regress_copy.dat';
COPY copy_big FROM '/tmp/pasv_regress_copy.dat';
SELECT count(*), sum(a), sum(length(b)) FROM copy_big;
SELECT count(*) FROM copy_big c FULL JOIN src s USING (a) WHERE c.b IS DISTINCT FROM s.b;

DROP TABLE big, copied, copy_big;
