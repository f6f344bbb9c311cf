-- TPC-C-like initial population (clause 4.3.3.1) for :warehouses warehouses,
-- set-based: one INSERT ... SELECT over generate_series per table.
--   psql -v ON_ERROR_STOP=1 -v warehouses=W -d DB -f schema.sql -f load.sql
--
-- Cardinalities are the specification's: 100 000 items; per warehouse 10
-- districts, 3 000 customers and 3 000 orders per district (orders 2101-3000
-- undelivered: o_carrier_id NULL, ol_delivery_d NULL, one NEW_ORDER row
-- each), 5-15 lines per order, one HISTORY row per customer, 100 000 STOCK
-- rows. Random strings are md5/sha512 hex (the specification asks for random
-- alphanumeric strings; hex is a subset); 10% of I_DATA/S_DATA carry
-- "ORIGINAL" at a random position. C_LAST is built from the specification's
-- syllables from C_ID - 1 for customers 1-1000 and from NURand(255, 0, 999)
-- with C = 157 for the others (the transactions use C = 223: a delta of 66,
-- within the specification's 65..119).
--
-- Every random() below sits in a select list or in a LATERAL subquery that
-- references its row, so it is drawn per row; the LATERAL subqueries carry
-- OFFSET 0 so that the planner does not flatten them and evaluate a drawn
-- value twice.

\set ON_ERROR_STOP on
\if :{?warehouses}
\else
DO $$ BEGIN RAISE EXCEPTION 'load.sql needs the number of warehouses: psql -v warehouses=W -f load.sql'; END $$;
\endif

INSERT INTO item (i_id, i_im_id, i_name, i_price, i_data)
SELECT i,
       1 + floor(random() * 10000)::int,
       substr(md5(random()::text), 1, 14 + floor(random() * 11)::int),
       round((1 + random() * 99)::numeric, 2),
       CASE WHEN random() < 0.1
            THEN overlay(x.s PLACING 'ORIGINAL' FROM 1 + floor(random() * (length(x.s) - 7))::int)
            ELSE x.s END
  FROM generate_series(1, 100000) AS i,
       LATERAL (SELECT substr(md5(i || random()::text) || md5(random()::text), 1, 26 + floor(random() * 25)::int) AS s
                OFFSET 0) AS x;

INSERT INTO warehouse (w_id, w_name, w_street_1, w_street_2, w_city, w_state, w_zip, w_tax, w_ytd)
SELECT w,
       substr(md5(random()::text), 1, 6 + floor(random() * 5)::int),
       substr(md5(random()::text), 1, 10 + floor(random() * 11)::int),
       substr(md5(random()::text), 1, 10 + floor(random() * 11)::int),
       substr(md5(random()::text), 1, 10 + floor(random() * 11)::int),
       chr(65 + floor(random() * 26)::int) || chr(65 + floor(random() * 26)::int),
       lpad(floor(random() * 10000)::int::text, 4, '0') || '11111',
       round((random() * 0.2)::numeric, 4),
       300000.00
  FROM generate_series(1, :warehouses) AS w;

INSERT INTO stock (s_i_id, s_w_id, s_quantity,
                   s_dist_01, s_dist_02, s_dist_03, s_dist_04, s_dist_05,
                   s_dist_06, s_dist_07, s_dist_08, s_dist_09, s_dist_10,
                   s_ytd, s_order_cnt, s_remote_cnt, s_data)
SELECT i, w, 10 + floor(random() * 91)::int,
       substr(md5(random()::text), 1, 24), substr(md5(random()::text), 1, 24),
       substr(md5(random()::text), 1, 24), substr(md5(random()::text), 1, 24),
       substr(md5(random()::text), 1, 24), substr(md5(random()::text), 1, 24),
       substr(md5(random()::text), 1, 24), substr(md5(random()::text), 1, 24),
       substr(md5(random()::text), 1, 24), substr(md5(random()::text), 1, 24),
       0, 0, 0,
       CASE WHEN random() < 0.1
            THEN overlay(x.s PLACING 'ORIGINAL' FROM 1 + floor(random() * (length(x.s) - 7))::int)
            ELSE x.s END
  FROM generate_series(1, :warehouses) AS w,
       generate_series(1, 100000) AS i,
       LATERAL (SELECT substr(md5(i || random()::text) || md5(w || random()::text), 1, 26 + floor(random() * 25)::int) AS s
                OFFSET 0) AS x;

INSERT INTO district (d_id, d_w_id, d_name, d_street_1, d_street_2, d_city, d_state, d_zip, d_tax, d_ytd, d_next_o_id)
SELECT d, w,
       substr(md5(random()::text), 1, 6 + floor(random() * 5)::int),
       substr(md5(random()::text), 1, 10 + floor(random() * 11)::int),
       substr(md5(random()::text), 1, 10 + floor(random() * 11)::int),
       substr(md5(random()::text), 1, 10 + floor(random() * 11)::int),
       chr(65 + floor(random() * 26)::int) || chr(65 + floor(random() * 26)::int),
       lpad(floor(random() * 10000)::int::text, 4, '0') || '11111',
       round((random() * 0.2)::numeric, 4),
       30000.00,
       3001
  FROM generate_series(1, :warehouses) AS w, generate_series(1, 10) AS d;

INSERT INTO customer (c_id, c_d_id, c_w_id, c_first, c_middle, c_last,
                      c_street_1, c_street_2, c_city, c_state, c_zip, c_phone,
                      c_since, c_credit, c_credit_lim, c_discount, c_balance,
                      c_ytd_payment, c_payment_cnt, c_delivery_cnt, c_data)
SELECT c, d, w,
       substr(md5(random()::text), 1, 8 + floor(random() * 9)::int),
       'OE',
       syl.a[x.n / 100 + 1] || syl.a[x.n / 10 % 10 + 1] || syl.a[x.n % 10 + 1],
       substr(md5(random()::text), 1, 10 + floor(random() * 11)::int),
       substr(md5(random()::text), 1, 10 + floor(random() * 11)::int),
       substr(md5(random()::text), 1, 10 + floor(random() * 11)::int),
       chr(65 + floor(random() * 26)::int) || chr(65 + floor(random() * 26)::int),
       lpad(floor(random() * 10000)::int::text, 4, '0') || '11111',
       lpad(floor(random() * 1e16)::bigint::text, 16, '0'),
       current_timestamp,
       CASE WHEN random() < 0.1 THEN 'BC' ELSE 'GC' END,
       50000.00,
       round((random() * 0.5)::numeric, 4),
       -10.00, 10.00, 1, 0,
       substr(encode(sha512((c || random()::text)::bytea), 'hex') || encode(sha512(random()::text::bytea), 'hex')
              || encode(sha512(random()::text::bytea), 'hex') || encode(sha512(random()::text::bytea), 'hex'),
              1, 300 + floor(random() * 201)::int)
  FROM (SELECT '{BAR,OUGHT,ABLE,PRI,PRES,ESE,ANTI,CALLY,ATION,EING}'::text[] AS a) AS syl,
       generate_series(1, :warehouses) AS w,
       generate_series(1, 10) AS d,
       generate_series(1, 3000) AS c,
       LATERAL (SELECT CASE WHEN c <= 1000 THEN c - 1
                            ELSE ((floor(random() * 256)::int | floor(random() * 1000)::int) + 157) % 1000 END AS n
                OFFSET 0) AS x;

INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, h_data)
SELECT c_id, c_d_id, c_w_id, c_d_id, c_w_id, current_timestamp, 10.00,
       substr(md5(random()::text), 1, 12 + floor(random() * 13)::int)
  FROM customer;

-- O_C_ID is a random permutation of 1..3000 per district: row_number() over
-- a random order. The window's sort emits the rows in (w, d, o_id) order.
INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, o_all_local)
SELECT o_id, d, w, c, current_timestamp,
       CASE WHEN o_id <= 2100 THEN 1 + floor(random() * 10)::int END,
       5 + floor(random() * 11)::int,
       1
  FROM (SELECT w, d, c, row_number() OVER (PARTITION BY w, d ORDER BY random()) AS o_id
          FROM generate_series(1, :warehouses) AS w,
               generate_series(1, 10) AS d,
               generate_series(1, 3000) AS c) AS p;

INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id,
                        ol_delivery_d, ol_quantity, ol_amount, ol_dist_info)
SELECT o_id, o_d_id, o_w_id, n,
       1 + floor(random() * 100000)::int,
       o_w_id,
       CASE WHEN o_id <= 2100 THEN o_entry_d END,
       5,
       CASE WHEN o_id <= 2100 THEN 0.00 ELSE round((0.01 + random() * 9999.98)::numeric, 2) END,
       substr(md5(random()::text), 1, 24)
  FROM orders, generate_series(1, o_ol_cnt) AS n;

INSERT INTO new_order (no_o_id, no_d_id, no_w_id)
SELECT o_id, o_d_id, o_w_id FROM orders WHERE o_id > 2100;

ANALYZE warehouse, district, customer, history, new_order, orders, order_line, item, stock;
