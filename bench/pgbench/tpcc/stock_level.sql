-- TPC-C Stock-Level (clause 2.8), 4% of the mix, read only. pgbench script;
-- needs -D warehouses=W. Runs at READ COMMITTED.
--
-- Inputs (clause 2.8.1): w_id and d_id uniform (the specification fixes
-- them per terminal; pgbench has no terminals), threshold uniform 10..20.
-- Counts the distinct items of the district's last 20 orders (o_id from
-- d_next_o_id - 20 to d_next_o_id - 1) whose home-warehouse stock is below
-- the threshold. One statement, so one snapshot.

\set w_id random(1, :warehouses)
\set d_id random(1, 10)
\set threshold random(10, 20)

SELECT count(DISTINCT s_i_id) AS low_stock
  FROM order_line
  JOIN stock ON s_w_id = ol_w_id AND s_i_id = ol_i_id
 WHERE ol_w_id = :w_id AND ol_d_id = :d_id
   AND ol_o_id <  (SELECT d_next_o_id FROM district WHERE d_w_id = :w_id AND d_id = :d_id)
   AND ol_o_id >= (SELECT d_next_o_id FROM district WHERE d_w_id = :w_id AND d_id = :d_id) - 20
   AND s_quantity < :threshold;
