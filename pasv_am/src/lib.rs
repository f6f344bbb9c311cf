//! pasv's storage engine: RocksDB column families holding PostgreSQL tables.
//!
//! This crate never depends on PostgreSQL (no pgrx, no pg_sys), and the
//! extension never sees RocksDB types: they meet only in the byte formats
//! defined here (DESIGN §1, STYLE "a hard wall").
//!
//! * [`cf_name`] — the only place CF names are spelled.
//! * [`keys`] — row keys (rowid ‖ inverted version) and rowid ⇄ TID.
//! * [`pack`] — many rows in one RocksDB entry: the pack format.
//! * [`row`] — the MVCC header in front of every tuple and the chain rule.
//! * [`protocol`] — the backend ⇄ engine wire format (both sides link it).
//! * [`engine`] — the RocksDB instance (engine worker only).
//! * [`row_locks`] — the in-memory row lock table the engine serves.
//! * [`row_cache`] — recent one-row answers, written by the engine and read
//!   by backends without a round trip.
//! * [`shared_row_locks`] — row locks backends take in shared memory,
//!   spilling to [`row_locks`] when a bucket is full.
//! * [`visible_shares`] — each table's all-visible share from its last
//!   VACUUM, for the planner (ANALYZE zeroes `pg_class.relallvisible`).
//! * [`region`] — the stamp and sizing the shared-memory regions share.
//! * [`striped`] — counters in shared memory that every backend bumps.
//! * [`server`] — one request in, one response out, over an [`engine::Engine`].
//! * [`flush_flag`] — the per-CF flag whose persisted copy is the local DPP.
//! * [`wal_order`] — WAL before data: the RocksDB flush listener.

pub mod cf_name;
pub mod engine;
pub mod flush_flag;
pub mod keys;
pub mod pack;
pub mod protocol;
pub mod region;
pub mod row;
pub mod row_cache;
pub mod row_locks;
pub mod server;
pub mod shared_row_locks;
pub mod striped;
pub mod visible_shares;
pub mod wal_order;

/// What the extension's `pasv_version()` reports (kept as the scaffold had it).
pub fn version() -> &'static str {
    "0"
}
