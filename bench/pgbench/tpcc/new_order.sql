-- TPC-C New-Order (clause 2.4), 45% of the mix. pgbench script; needs
-- -D warehouses=W. Runs at READ COMMITTED.
--
-- Inputs (clause 2.4.1): w_id uniform; d_id uniform 1..10; c_id =
-- NURand(1023, 1, 3000) and each item id NURand(8191, 1, 100000), written
-- out exactly with pgbench's bitwise OR (C = 259 and 7911); 5..15 lines,
-- each with quantity 1..10 and, for 1% of the lines (when W > 1), a remote
-- supplying warehouse; 1% of the orders get the unused item id 100001 on
-- their last line and are rolled back once all their work is done.
--
-- pgbench scripts cannot loop: the script draws 15 items, quantities and
-- supplying warehouses and the SQL keeps the first ol_cnt, as
--   unnest(ARRAY[...], ARRAY[...], ARRAY[...]) WITH ORDINALITY ... WHERE n <= ol_cnt,
-- so the order lines are handled set-based by one statement.
--
-- Statements:
--   1. UPDATE district ... RETURNING: the read-modify-write of d_next_o_id;
--      the district row stays locked until the end, so o_ids are handed out
--      without gaps (a rolled-back order rolls its increment back too);
--   2. the customer's discount/credit and the warehouse tax;
--   3. SELECT ... ORDER BY s_w_id, s_i_id FOR UPDATE: locks the order's STOCK
--      rows in key order (LockRows runs above the Sort), so two New-Orders
--      never lock stock rows in opposite orders and cannot deadlock;
--   4. one statement of data-modifying CTEs: INSERT orders, INSERT new_order,
--      UPDATE stock, INSERT order_line (amount = quantity * i_price,
--      dist_info = s_dist_<d_id> of the supplying stock row); it returns the
--      number of lines written (the line with the unused item has no ITEM or
--      STOCK row, so it is not written) and the order's total;
--   5. COMMIT, or ROLLBACK when fewer lines than ol_cnt were written.
--
-- STOCK update: an item may be drawn twice in one order. Its lines are
-- summed per stock row (one UPDATE per row); s_quantity gets
-- 10 + ((s_quantity - qty - 10) mod 91). That is exactly the specification's
-- rule (s_quantity - q if that is >= 10, else s_quantity - q + 91) applied
-- once per line: the rule keeps s_quantity in 10..100, which holds one value
-- of each residue mod 91, and changes it by -q mod 91.

\set w_id random(1, :warehouses)
\set d_id random(1, 10)
\set c_id (((random(0, 1023) | random(1, 3000)) + 259) % 3000) + 1
\set ol_cnt random(5, 15)
\set bad_line case when random(1, 100) = 1 then :ol_cnt else 0 end
\set i1 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i2 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i3 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i4 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i5 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i6 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i7 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i8 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i9 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i10 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i11 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i12 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i13 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i14 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set i15 (((random(0, 8191) | random(1, 100000)) + 7911) % 100000) + 1
\set sw1 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw2 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw3 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw4 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw5 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw6 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw7 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw8 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw9 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw10 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw11 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw12 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw13 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw14 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set sw15 case when random(1, 100) > 1 then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set q1 random(1, 10)
\set q2 random(1, 10)
\set q3 random(1, 10)
\set q4 random(1, 10)
\set q5 random(1, 10)
\set q6 random(1, 10)
\set q7 random(1, 10)
\set q8 random(1, 10)
\set q9 random(1, 10)
\set q10 random(1, 10)
\set q11 random(1, 10)
\set q12 random(1, 10)
\set q13 random(1, 10)
\set q14 random(1, 10)
\set q15 random(1, 10)

BEGIN;
UPDATE district SET d_next_o_id = d_next_o_id + 1
 WHERE d_w_id = :w_id AND d_id = :d_id
 RETURNING d_next_o_id - 1 AS o_id, d_tax \gset
SELECT c_discount, c_last, c_credit, w_tax
  FROM customer JOIN warehouse ON w_id = c_w_id
 WHERE c_w_id = :w_id AND c_d_id = :d_id AND c_id = :c_id \gset
SELECT s_w_id, s_i_id
  FROM stock
 WHERE (s_w_id, s_i_id) IN (SELECT sw_id, i_id FROM (
  SELECT n, CASE WHEN n = :bad_line THEN 100001 ELSE i_id END AS i_id, sw_id, qty
    FROM unnest(ARRAY[:i1, :i2, :i3, :i4, :i5, :i6, :i7, :i8, :i9, :i10, :i11, :i12, :i13, :i14, :i15]::int[],
                ARRAY[:sw1, :sw2, :sw3, :sw4, :sw5, :sw6, :sw7, :sw8, :sw9, :sw10, :sw11, :sw12, :sw13, :sw14, :sw15]::int[],
                ARRAY[:q1, :q2, :q3, :q4, :q5, :q6, :q7, :q8, :q9, :q10, :q11, :q12, :q13, :q14, :q15]::int[])
         WITH ORDINALITY AS u(i_id, sw_id, qty, n)
   WHERE n <= :ol_cnt) AS l)
 ORDER BY s_w_id, s_i_id
   FOR UPDATE;
WITH l AS (
  SELECT n, CASE WHEN n = :bad_line THEN 100001 ELSE i_id END AS i_id, sw_id, qty
    FROM unnest(ARRAY[:i1, :i2, :i3, :i4, :i5, :i6, :i7, :i8, :i9, :i10, :i11, :i12, :i13, :i14, :i15]::int[],
                ARRAY[:sw1, :sw2, :sw3, :sw4, :sw5, :sw6, :sw7, :sw8, :sw9, :sw10, :sw11, :sw12, :sw13, :sw14, :sw15]::int[],
                ARRAY[:q1, :q2, :q3, :q4, :q5, :q6, :q7, :q8, :q9, :q10, :q11, :q12, :q13, :q14, :q15]::int[])
         WITH ORDINALITY AS u(i_id, sw_id, qty, n)
   WHERE n <= :ol_cnt),
o AS (
  INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, o_all_local)
  SELECT :o_id, :d_id, :w_id, :c_id, current_timestamp, NULL, :ol_cnt,
         CASE WHEN bool_and(sw_id = :w_id) THEN 1 ELSE 0 END
    FROM l),
nw AS (
  INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES (:o_id, :d_id, :w_id)),
s AS (
  UPDATE stock
     SET s_quantity = 10 + ((s_quantity - a.qty - 10) % 91 + 91) % 91,
         s_ytd = s_ytd + a.qty,
         s_order_cnt = s_order_cnt + a.cnt,
         s_remote_cnt = s_remote_cnt + a.remote
    FROM (SELECT sw_id, i_id, sum(qty) AS qty, count(*) AS cnt,
                 count(*) FILTER (WHERE sw_id <> :w_id) AS remote
            FROM l GROUP BY sw_id, i_id) AS a
   WHERE s_w_id = a.sw_id AND s_i_id = a.i_id
  RETURNING s_w_id, s_i_id,
            CASE :d_id::int WHEN 1 THEN s_dist_01 WHEN 2 THEN s_dist_02 WHEN 3 THEN s_dist_03
                            WHEN 4 THEN s_dist_04 WHEN 5 THEN s_dist_05 WHEN 6 THEN s_dist_06
                            WHEN 7 THEN s_dist_07 WHEN 8 THEN s_dist_08 WHEN 9 THEN s_dist_09
                            ELSE s_dist_10 END AS dist_info),
ol AS (
  INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id,
                          ol_delivery_d, ol_quantity, ol_amount, ol_dist_info)
  SELECT :o_id, :d_id, :w_id, l.n, l.i_id, l.sw_id, NULL, l.qty, l.qty * i.i_price, s.dist_info
    FROM l
    JOIN item AS i ON i.i_id = l.i_id
    JOIN s ON s.s_w_id = l.sw_id AND s.s_i_id = l.i_id
  RETURNING ol_amount)
SELECT count(*) AS lines_done,
       coalesce(sum(ol_amount), 0) * (1 - :c_discount::numeric) * (1 + :w_tax::numeric + :d_tax::numeric) AS total
  FROM ol \gset
\if :lines_done < :ol_cnt
ROLLBACK;
\else
COMMIT;
\endif
