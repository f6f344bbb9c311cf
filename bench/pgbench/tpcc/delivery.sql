-- TPC-C Delivery (clause 2.7), 4% of the mix. pgbench script; needs
-- -D warehouses=W. Runs at READ COMMITTED, executed directly (not queued).
--
-- Inputs (clause 2.7.1): w_id uniform, o_carrier_id uniform 1..10.
--
-- One statement delivers the oldest undelivered order of each of the 10
-- districts (data-modifying CTEs):
--   mins: per district, min(no_o_id) (an index probe each);
--   lk:   those NEW_ORDER rows, SELECT ... ORDER BY no_d_id FOR UPDATE: locked
--         in district order, so two Deliveries cannot deadlock. A row that
--         another Delivery deleted meanwhile is skipped (READ COMMITTED
--         re-check), so each order is delivered exactly once and the
--         remaining NEW_ORDER rows of a district stay contiguous;
--   dn:   DELETE those NEW_ORDER rows;
--   o:    UPDATE orders SET o_carrier_id;
--   ol:   UPDATE order_line SET ol_delivery_d;
--   cu:   UPDATE customer: c_balance += sum(ol_amount), c_delivery_cnt += 1.
-- It returns the bit mask of districts whose oldest order was taken by a
-- concurrent Delivery (they had one in this statement's snapshot but it was
-- gone once locked). Those districts get one second pass, a new statement
-- with a new snapshot that sees the next oldest order: without it a
-- Delivery that waited for another on the same warehouse would deliver
-- nothing. Each pass commits on its own (the specification allows a
-- Delivery to be several database transactions), so no pass waits while
-- holding rows of another, and a district still contended in the second
-- pass is skipped (clause 2.7.4 lets a Delivery skip a district).

\set w_id random(1, :warehouses)
\set carrier_id random(1, 10)
\set todo 1023

WITH mins AS (
  SELECT d, (SELECT min(no_o_id) FROM new_order WHERE no_w_id = :w_id AND no_d_id = d) AS o_id
    FROM generate_series(1, 10) AS d
   WHERE :todo & (1 << (d - 1)) <> 0),
lk AS MATERIALIZED (
  SELECT no_d_id, no_o_id
    FROM new_order JOIN mins ON no_d_id = mins.d AND no_o_id = mins.o_id
   WHERE no_w_id = :w_id
   ORDER BY no_d_id
     FOR UPDATE OF new_order),
dn AS (
  DELETE FROM new_order USING lk
   WHERE new_order.no_w_id = :w_id AND new_order.no_d_id = lk.no_d_id AND new_order.no_o_id = lk.no_o_id
  RETURNING new_order.no_d_id, new_order.no_o_id),
o AS (
  UPDATE orders SET o_carrier_id = :carrier_id
    FROM dn
   WHERE o_w_id = :w_id AND o_d_id = dn.no_d_id AND o_id = dn.no_o_id
  RETURNING o_d_id, o_id, o_c_id),
ol AS (
  UPDATE order_line SET ol_delivery_d = current_timestamp
    FROM dn
   WHERE ol_w_id = :w_id AND ol_d_id = dn.no_d_id AND ol_o_id = dn.no_o_id
  RETURNING ol_d_id, ol_o_id, ol_amount),
cu AS (
  UPDATE customer
     SET c_balance = c_balance + a.amount,
         c_delivery_cnt = c_delivery_cnt + 1
    FROM (SELECT o.o_d_id, o.o_c_id, sum(ol.ol_amount) AS amount
            FROM o JOIN ol ON ol.ol_d_id = o.o_d_id AND ol.ol_o_id = o.o_id
           GROUP BY o.o_d_id, o.o_c_id) AS a
   WHERE c_w_id = :w_id AND c_d_id = a.o_d_id AND c_id = a.o_c_id)
SELECT coalesce(sum(1 << (mins.d - 1)) FILTER (WHERE mins.o_id IS NOT NULL AND dn.no_d_id IS NULL), 0) AS todo
  FROM mins LEFT JOIN dn ON dn.no_d_id = mins.d \gset

\if :todo <> 0
WITH mins AS (
  SELECT d, (SELECT min(no_o_id) FROM new_order WHERE no_w_id = :w_id AND no_d_id = d) AS o_id
    FROM generate_series(1, 10) AS d
   WHERE :todo & (1 << (d - 1)) <> 0),
lk AS MATERIALIZED (
  SELECT no_d_id, no_o_id
    FROM new_order JOIN mins ON no_d_id = mins.d AND no_o_id = mins.o_id
   WHERE no_w_id = :w_id
   ORDER BY no_d_id
     FOR UPDATE OF new_order),
dn AS (
  DELETE FROM new_order USING lk
   WHERE new_order.no_w_id = :w_id AND new_order.no_d_id = lk.no_d_id AND new_order.no_o_id = lk.no_o_id
  RETURNING new_order.no_d_id, new_order.no_o_id),
o AS (
  UPDATE orders SET o_carrier_id = :carrier_id
    FROM dn
   WHERE o_w_id = :w_id AND o_d_id = dn.no_d_id AND o_id = dn.no_o_id
  RETURNING o_d_id, o_id, o_c_id),
ol AS (
  UPDATE order_line SET ol_delivery_d = current_timestamp
    FROM dn
   WHERE ol_w_id = :w_id AND ol_d_id = dn.no_d_id AND ol_o_id = dn.no_o_id
  RETURNING ol_d_id, ol_o_id, ol_amount),
cu AS (
  UPDATE customer
     SET c_balance = c_balance + a.amount,
         c_delivery_cnt = c_delivery_cnt + 1
    FROM (SELECT o.o_d_id, o.o_c_id, sum(ol.ol_amount) AS amount
            FROM o JOIN ol ON ol.ol_d_id = o.o_d_id AND ol.ol_o_id = o.o_id
           GROUP BY o.o_d_id, o.o_c_id) AS a
   WHERE c_w_id = :w_id AND c_d_id = a.o_d_id AND c_id = a.o_c_id)
SELECT coalesce(sum(1 << (mins.d - 1)) FILTER (WHERE mins.o_id IS NOT NULL AND dn.no_d_id IS NULL), 0) AS todo
  FROM mins LEFT JOIN dn ON dn.no_d_id = mins.d \gset
\endif
