-- TPC-C Payment (clause 2.5), 43% of the mix. pgbench script; needs
-- -D warehouses=W. Runs at READ COMMITTED.
--
-- Inputs (clause 2.5.1): w_id uniform, d_id uniform 1..10; 85% home
-- customers (c_w_id = w_id, c_d_id = d_id), 15% from another warehouse and
-- a uniform district (home too when W = 1); 60% by c_id = NURand(1023, 1,
-- 3000), 40% by last name = syllables of NURand(255, 0, 999) (C = 223;
-- loaded with C = 157); h_amount uniform 1.00..5000.00 (drawn in cents).
--
-- Locks in the specification's order: the warehouse row, the district row,
-- then the customer row (by last name: the row at position ceil(n/2) of the
-- customers with that name ordered by c_first, found by a window function
-- inside the UPDATE's WHERE). A Payment holds no customer row while it
-- waits for another lock, so Payments and Deliveries cannot deadlock.
-- Bad-credit customers get the payment prepended to c_data (500 chars max).

\set w_id random(1, :warehouses)
\set d_id random(1, 10)
\set home random(1, 100) <= 85
\set c_w_id case when :home then :w_id else (:w_id + random(0, greatest(:warehouses - 2, 0))) % :warehouses + 1 end
\set c_d_id case when :home then :d_id else random(1, 10) end
\set by_name random(1, 100) <= 40
\set c_id (((random(0, 1023) | random(1, 3000)) + 259) % 3000) + 1
\set c_last_n (((random(0, 255) | random(0, 999)) + 223) % 1000)
\set syl1 :c_last_n / 100 + 1
\set syl2 :c_last_n / 10 % 10 + 1
\set syl3 :c_last_n % 10 + 1
\set h_cents random(100, 500000)

BEGIN;
UPDATE warehouse SET w_ytd = w_ytd + :h_cents * 0.01
 WHERE w_id = :w_id
 RETURNING w_name, w_street_1, w_street_2, w_city, w_state, w_zip;
UPDATE district SET d_ytd = d_ytd + :h_cents * 0.01
 WHERE d_w_id = :w_id AND d_id = :d_id
 RETURNING d_name, d_street_1, d_street_2, d_city, d_state, d_zip;
\if :by_name
UPDATE customer
   SET c_balance = c_balance - :h_cents * 0.01,
       c_ytd_payment = c_ytd_payment + :h_cents * 0.01,
       c_payment_cnt = c_payment_cnt + 1,
       c_data = CASE WHEN c_credit = 'BC'
                     THEN substr(format('%s %s %s %s %s %s | ', c_id, c_d_id, c_w_id, :d_id::int, :w_id::int,
                                        :h_cents * 0.01) || c_data, 1, 500)
                     ELSE c_data END
 WHERE c_w_id = :c_w_id AND c_d_id = :c_d_id
   AND c_id = (SELECT m.c_id
                 FROM (SELECT c_id,
                              row_number() OVER (ORDER BY c_first, c_id) AS pos,
                              count(*) OVER () AS cnt
                         FROM customer
                        WHERE c_w_id = :c_w_id AND c_d_id = :c_d_id
                          AND c_last = (SELECT a[:syl1] || a[:syl2] || a[:syl3]
                                          FROM (SELECT '{BAR,OUGHT,ABLE,PRI,PRES,ESE,ANTI,CALLY,ATION,EING}'::text[] AS a) AS s)
                      ) AS m
                WHERE m.pos = (m.cnt + 1) / 2)
 RETURNING c_id, c_first, c_middle, c_last, c_credit, c_credit_lim, c_discount, c_balance \gset
\else
UPDATE customer
   SET c_balance = c_balance - :h_cents * 0.01,
       c_ytd_payment = c_ytd_payment + :h_cents * 0.01,
       c_payment_cnt = c_payment_cnt + 1,
       c_data = CASE WHEN c_credit = 'BC'
                     THEN substr(format('%s %s %s %s %s %s | ', c_id, c_d_id, c_w_id, :d_id::int, :w_id::int,
                                        :h_cents * 0.01) || c_data, 1, 500)
                     ELSE c_data END
 WHERE c_w_id = :c_w_id AND c_d_id = :c_d_id AND c_id = :c_id
 RETURNING c_id, c_first, c_middle, c_last, c_credit, c_credit_lim, c_discount, c_balance \gset
\endif
INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, h_data)
SELECT :c_id, :c_d_id, :c_w_id, :d_id, :w_id, current_timestamp, :h_cents * 0.01, w_name || '    ' || d_name
  FROM warehouse JOIN district ON d_w_id = w_id
 WHERE w_id = :w_id AND d_id = :d_id;
COMMIT;
