-- TPC-C consistency conditions 1-4 (clause 3.3.2), checked while no
-- transaction runs:
--   psql -v ON_ERROR_STOP=1 -d DB -f check.sql
-- Prints one line per condition with the number of rows (warehouses or
-- districts) that violate it, and fails (an ERROR, so psql exits with
-- status 3 under ON_ERROR_STOP, which this file sets) if any does.
--   1. W_YTD = sum(D_YTD)                                 per warehouse
--   2. D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)          per district
--   3. max(NO_O_ID) - min(NO_O_ID) + 1 = count(NEW_ORDER)  per district
--   4. sum(O_OL_CNT) = count(ORDER_LINE)                   per district
-- A district with no NEW_ORDER row at all (every order delivered) passes
-- the NEW_ORDER parts of 2 and 3. All four are read by one statement, so
-- from one snapshot.

\set ON_ERROR_STOP on

SELECT
  (SELECT count(*)
     FROM warehouse AS w
    WHERE w.w_ytd IS DISTINCT FROM (SELECT sum(d.d_ytd) FROM district AS d WHERE d.d_w_id = w.w_id))
    AS tpcc_c1,
  (SELECT count(*)
     FROM district AS d
     LEFT JOIN (SELECT o_w_id, o_d_id, max(o_id) AS m FROM orders GROUP BY o_w_id, o_d_id) AS o
            ON o.o_w_id = d.d_w_id AND o.o_d_id = d.d_id
     LEFT JOIN (SELECT no_w_id, no_d_id, max(no_o_id) AS m FROM new_order GROUP BY no_w_id, no_d_id) AS n
            ON n.no_w_id = d.d_w_id AND n.no_d_id = d.d_id
    WHERE o.m IS DISTINCT FROM d.d_next_o_id - 1
       OR (n.m IS NOT NULL AND n.m <> d.d_next_o_id - 1))
    AS tpcc_c2,
  (SELECT count(*)
     FROM (SELECT 1
             FROM new_order
            GROUP BY no_w_id, no_d_id
           HAVING max(no_o_id) - min(no_o_id) + 1 <> count(*)) AS x)
    AS tpcc_c3,
  (SELECT count(*)
     FROM (SELECT o_w_id, o_d_id, sum(o_ol_cnt) AS s FROM orders GROUP BY o_w_id, o_d_id) AS o
     FULL JOIN (SELECT ol_w_id, ol_d_id, count(*) AS c FROM order_line GROUP BY ol_w_id, ol_d_id) AS l
            ON l.ol_w_id = o.o_w_id AND l.ol_d_id = o.o_d_id
    WHERE o.s IS DISTINCT FROM l.c)
    AS tpcc_c4
\gset

\echo 'condition 1  W_YTD = sum(D_YTD)                                  violating warehouses:' :tpcc_c1
\echo 'condition 2  D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)          violating districts: ' :tpcc_c2
\echo 'condition 3  max(NO_O_ID) - min(NO_O_ID) + 1 = count(NEW_ORDER)  violating districts: ' :tpcc_c3
\echo 'condition 4  sum(O_OL_CNT) = count(ORDER_LINE)                   violating districts: ' :tpcc_c4

SELECT :tpcc_c1 + :tpcc_c2 + :tpcc_c3 + :tpcc_c4 > 0 AS tpcc_failed \gset
\if :tpcc_failed
DO $$ BEGIN RAISE EXCEPTION 'TPC-C consistency check failed'; END $$;
\endif
\echo 'TPC-C consistency conditions 1-4 hold'
