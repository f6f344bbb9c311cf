-- TPC-C-like schema: the nine tables of the TPC-C specification (clause 1.3)
-- with their primary keys and the two usual secondary indexes.
--
-- Run in an empty database whose default_table_access_method is the access
-- method under test (there is no USING clause here):
--   psql -v ON_ERROR_STOP=1 -d DB -f schema.sql
-- It drops the nine tables first, so it also resets a database.
--
-- No foreign keys, on purpose: PostgreSQL implements them with AFTER ROW
-- triggers, and the storage engine under test (pasv) moves a row updated in
-- a table with AFTER ROW triggers to a new row id instead of appending a
-- version under the same one, so foreign keys would change what the
-- Payment/Delivery/New-Order updates measure. TPC-C kits commonly omit
-- foreign keys too. No triggers, no temporary tables, no storage parameters
-- either.
--
-- No transaction updates an indexed column: d_next_o_id, d_ytd, w_ytd,
-- c_balance/c_ytd_payment/c_payment_cnt/c_delivery_cnt/c_data,
-- o_carrier_id, ol_delivery_d and the s_* counters are in no index.

DROP TABLE IF EXISTS warehouse, district, customer, history, new_order, orders, order_line, item, stock;

CREATE TABLE warehouse (
  w_id       int           NOT NULL,
  w_name     varchar(10)   NOT NULL,
  w_street_1 varchar(20)   NOT NULL,
  w_street_2 varchar(20)   NOT NULL,
  w_city     varchar(20)   NOT NULL,
  w_state    char(2)       NOT NULL,
  w_zip      char(9)       NOT NULL,
  w_tax      numeric(4, 4) NOT NULL,
  w_ytd      numeric(12, 2) NOT NULL,
  PRIMARY KEY (w_id)
);

CREATE TABLE district (
  d_id        int           NOT NULL,
  d_w_id      int           NOT NULL,
  d_name      varchar(10)   NOT NULL,
  d_street_1  varchar(20)   NOT NULL,
  d_street_2  varchar(20)   NOT NULL,
  d_city      varchar(20)   NOT NULL,
  d_state     char(2)       NOT NULL,
  d_zip       char(9)       NOT NULL,
  d_tax       numeric(4, 4) NOT NULL,
  d_ytd       numeric(12, 2) NOT NULL,
  d_next_o_id int           NOT NULL,
  PRIMARY KEY (d_w_id, d_id)
);

CREATE TABLE customer (
  c_id           int            NOT NULL,
  c_d_id         int            NOT NULL,
  c_w_id         int            NOT NULL,
  c_first        varchar(16)    NOT NULL,
  c_middle       char(2)        NOT NULL,
  c_last         varchar(16)    NOT NULL,
  c_street_1     varchar(20)    NOT NULL,
  c_street_2     varchar(20)    NOT NULL,
  c_city         varchar(20)    NOT NULL,
  c_state        char(2)        NOT NULL,
  c_zip          char(9)        NOT NULL,
  c_phone        char(16)       NOT NULL,
  c_since        timestamp      NOT NULL,
  c_credit       char(2)        NOT NULL,
  c_credit_lim   numeric(12, 2) NOT NULL,
  c_discount     numeric(4, 4)  NOT NULL,
  c_balance      numeric(12, 2) NOT NULL,
  c_ytd_payment  numeric(12, 2) NOT NULL,
  c_payment_cnt  int            NOT NULL,
  c_delivery_cnt int            NOT NULL,
  c_data         varchar(500)   NOT NULL,
  PRIMARY KEY (c_w_id, c_d_id, c_id)
);
-- Payment and Order-Status by last name.
CREATE INDEX customer_name_idx ON customer (c_w_id, c_d_id, c_last, c_first);

-- The specification gives HISTORY no primary key; none here either.
CREATE TABLE history (
  h_c_id   int           NOT NULL,
  h_c_d_id int           NOT NULL,
  h_c_w_id int           NOT NULL,
  h_d_id   int           NOT NULL,
  h_w_id   int           NOT NULL,
  h_date   timestamp     NOT NULL,
  h_amount numeric(6, 2) NOT NULL,
  h_data   varchar(24)   NOT NULL
);

CREATE TABLE new_order (
  no_o_id int NOT NULL,
  no_d_id int NOT NULL,
  no_w_id int NOT NULL,
  PRIMARY KEY (no_w_id, no_d_id, no_o_id)
);

CREATE TABLE orders (
  o_id         int       NOT NULL,
  o_d_id       int       NOT NULL,
  o_w_id       int       NOT NULL,
  o_c_id       int       NOT NULL,
  o_entry_d    timestamp NOT NULL,
  o_carrier_id int,                 -- NULL until delivered
  o_ol_cnt     int       NOT NULL,
  o_all_local  int       NOT NULL,
  PRIMARY KEY (o_w_id, o_d_id, o_id)
);
-- Order-Status: a customer's newest order.
CREATE INDEX orders_customer_idx ON orders (o_w_id, o_d_id, o_c_id, o_id);

CREATE TABLE order_line (
  ol_o_id        int           NOT NULL,
  ol_d_id        int           NOT NULL,
  ol_w_id        int           NOT NULL,
  ol_number      int           NOT NULL,
  ol_i_id        int           NOT NULL,
  ol_supply_w_id int           NOT NULL,
  ol_delivery_d  timestamp,               -- NULL until delivered
  ol_quantity    int           NOT NULL,
  ol_amount      numeric(6, 2) NOT NULL,
  ol_dist_info   char(24)      NOT NULL,
  PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number)
);

CREATE TABLE item (
  i_id    int           NOT NULL,
  i_im_id int           NOT NULL,
  i_name  varchar(24)   NOT NULL,
  i_price numeric(5, 2) NOT NULL,
  i_data  varchar(50)   NOT NULL,
  PRIMARY KEY (i_id)
);

CREATE TABLE stock (
  s_i_id       int         NOT NULL,
  s_w_id       int         NOT NULL,
  s_quantity   int         NOT NULL,
  s_dist_01    char(24)    NOT NULL,
  s_dist_02    char(24)    NOT NULL,
  s_dist_03    char(24)    NOT NULL,
  s_dist_04    char(24)    NOT NULL,
  s_dist_05    char(24)    NOT NULL,
  s_dist_06    char(24)    NOT NULL,
  s_dist_07    char(24)    NOT NULL,
  s_dist_08    char(24)    NOT NULL,
  s_dist_09    char(24)    NOT NULL,
  s_dist_10    char(24)    NOT NULL,
  s_ytd        int         NOT NULL,
  s_order_cnt  int         NOT NULL,
  s_remote_cnt int         NOT NULL,
  s_data       varchar(50) NOT NULL,
  PRIMARY KEY (s_w_id, s_i_id)
);
