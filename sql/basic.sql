-- Rows of common types go in and come out of a pasv table unchanged.
CREATE EXTENSION pasv;
SELECT amname, amtype FROM pg_am WHERE amname = 'pasv';

CREATE TABLE kinds (
    i2 int2, i4 int4, i8 int8, n numeric, t text, b bytea, flag bool,
    ts timestamptz, u uuid, j jsonb, arr int[], tarr text[]
) USING pasv;
SELECT a.amname FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.relname = 'kinds';

INSERT INTO kinds VALUES
    (1, 10, 100, 1.5, 'one', '\x0102', true, '2024-01-02 03:04:05+00',
     'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"k": [1, 2, {"x": null}]}', '{1,2,3}', '{a,NULL,c}'),
    (-32768, -2147483648, -9223372036854775808, -0.000001, '', '\x', false, '-infinity',
     '00000000-0000-0000-0000-000000000000', '[]', '{}', '{}'),
    (32767, 2147483647, 9223372036854775807, 123456789012345678901234567890.123456789, repeat('x', 3000),
     decode(repeat('ff', 500), 'hex'), NULL, 'infinity', NULL, 'null', '{{1,2},{3,4}}', NULL),
    (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);

SELECT i2, i4, i8, n, length(t) AS tlen, length(b) AS blen, flag, ts, u, j, arr, tarr
  FROM kinds ORDER BY i4 NULLS LAST;
SELECT count(*), count(i4), sum(i8::numeric), sum(n), min(ts), max(ts), bool_or(flag) FROM kinds;
SELECT count(*) FROM kinds WHERE t IS NULL AND b IS NULL;
SELECT j -> 'k' -> 2 ->> 'x' IS NULL AS json_null, arr[2][1] AS arr_elem, tarr[2] IS NULL AS elem_null
  FROM kinds WHERE i4 IN (10, 2147483647) ORDER BY i4;

-- ctid maps to a rowid: 291 rows per block, offsets from 1.
CREATE TABLE many (id int) USING pasv;
INSERT INTO many SELECT g FROM generate_series(1, 600) g;
SELECT count(*), count(DISTINCT ctid), max((ctid::text::point)[1]) <= 291 AS offsets_ok FROM many;
SELECT id FROM many WHERE ctid = (SELECT ctid FROM many WHERE id = 300);

-- System columns read as on heap.
SELECT xmin = (SELECT xmin FROM many WHERE id = 1) AS same_xact FROM many WHERE id = 600;
SELECT tableoid::regclass FROM many LIMIT 1;

-- default_table_access_method = pasv
SET default_table_access_method = pasv;
CREATE TABLE by_default (a int, b text);
INSERT INTO by_default VALUES (1, 'x'), (2, 'y');
SELECT a.amname, (SELECT string_agg(b, ',' ORDER BY a) FROM by_default)
  FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.relname = 'by_default';
RESET default_table_access_method;

-- pasv and heap tables mix in one query and one transaction.
CREATE TABLE h (id int, v text);
BEGIN;
INSERT INTO h VALUES (1, 'heap');
INSERT INTO by_default VALUES (1, 'pasv');
SELECT h.v, p.b FROM h JOIN by_default p ON p.a = h.id ORDER BY p.b;
COMMIT;

DROP TABLE kinds, many, by_default, h;
