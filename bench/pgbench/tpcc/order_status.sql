-- TPC-C Order-Status (clause 2.6), 4% of the mix, read only. pgbench
-- script; needs -D warehouses=W. Runs at READ COMMITTED.
--
-- Inputs (clause 2.6.1): w_id uniform, d_id uniform 1..10; 60% by c_id =
-- NURand(1023, 1, 3000), 40% by last name (syllables of NURand(255, 0, 999),
-- C = 223), the customer at position ceil(n/2) by c_first.
--
-- The last-name lookup resolves the name to a c_id (customers never change
-- name, so it needs no snapshot of its own); the customer's balance, its
-- newest order (orders_customer_idx, backwards) and that order's lines are
-- then read by one statement, so under READ COMMITTED they come from one
-- snapshot.

\set w_id random(1, :warehouses)
\set d_id random(1, 10)
\set by_name random(1, 100) <= 40
\set c_id (((random(0, 1023) | random(1, 3000)) + 259) % 3000) + 1
\set c_last_n (((random(0, 255) | random(0, 999)) + 223) % 1000)
\set syl1 :c_last_n / 100 + 1
\set syl2 :c_last_n / 10 % 10 + 1
\set syl3 :c_last_n % 10 + 1

\if :by_name
SELECT m.c_id
  FROM (SELECT c_id,
               row_number() OVER (ORDER BY c_first, c_id) AS pos,
               count(*) OVER () AS cnt
          FROM customer
         WHERE c_w_id = :w_id AND c_d_id = :d_id
           AND c_last = (SELECT a[:syl1] || a[:syl2] || a[:syl3]
                           FROM (SELECT '{BAR,OUGHT,ABLE,PRI,PRES,ESE,ANTI,CALLY,ATION,EING}'::text[] AS a) AS s)
       ) AS m
 WHERE m.pos = (m.cnt + 1) / 2 \gset
\endif
SELECT c.c_id, c.c_first, c.c_middle, c.c_last, c.c_balance,
       o.o_id, o.o_entry_d, o.o_carrier_id,
       ol.ol_i_id, ol.ol_supply_w_id, ol.ol_quantity, ol.ol_amount, ol.ol_delivery_d
  FROM customer AS c
  LEFT JOIN LATERAL (SELECT o_id, o_entry_d, o_carrier_id
                       FROM orders
                      WHERE o_w_id = c.c_w_id AND o_d_id = c.c_d_id AND o_c_id = c.c_id
                      ORDER BY o_id DESC
                      LIMIT 1) AS o ON true
  LEFT JOIN order_line AS ol ON ol.ol_w_id = c.c_w_id AND ol.ol_d_id = c.c_d_id AND ol.ol_o_id = o.o_id
 WHERE c.c_w_id = :w_id AND c.c_d_id = :d_id AND c.c_id = :c_id;
