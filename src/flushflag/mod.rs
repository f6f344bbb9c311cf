//! Flush flags and persistence points, backend side (DESIGN §5).
//!
//! A backend remembers which pasv tables its transaction wrote and the range
//! of its pasv messages (`crate::written_tables`). At commit it tells the
//! engine, which writes each table's flush flag (`pasv` mode). Before commit
//! it makes the writes durable when nothing else would:
//! * `engine_wal` mode: RocksDB's WAL is synced (after PostgreSQL's);
//! * `pasv`/`naive` mode while the database has no replication slot yet (or
//!   lost it): the written tables are flushed, because no slot keeps the WAL
//!   that recovery would need;
//! * before PREPARE TRANSACTION, in `pasv`/`naive` mode: always, and no flag
//!   is written for the prepared transaction's commit (its tables'
//!   persistence points only lag).
//!
//! The persistence points themselves (local DPP per CF, global DPP per
//! database) are computed by the replay worker from the engine's report:
//! see [`pasv_am::flush_flag::global_dpp`].
//!
//! Dependencies go one way: this module calls `crate::engine_client` to
//! reach the engine (`committed`, `flush_cf`, `sync_wal`), and the engine
//! client never calls back. What the client records for commit lives in
//! `crate::written_tables`, and the WAL rules it follows before a write in
//! `crate::wal`.

use crate::error::CallError;
use crate::guc::{self, DurabilityMode};
use crate::{engine_client, ipc, written_tables};
use pasv_am::protocol::{CfRef, CommitNotice};
use pgrx::pg_sys;
use std::sync::atomic::Ordering;

/// Pre-commit (still inside the transaction; an error aborts it).
pub fn before_commit() -> Result<(), CallError> {
    let (db, rels) = written_tables::written_so_far();
    if rels.is_empty() {
        return Ok(());
    }
    crate::crash_point::reach(crate::crash_point::Point::AfterWriteBeforeCommit);
    match guc::durability() {
        // Like PostgreSQL's own commit record, RocksDB's WAL is synced only
        // when the commit is synchronous.
        DurabilityMode::EngineWal if synchronous() => engine_client::sync_wal(),
        DurabilityMode::EngineWal => Ok(()),
        mode if mode.replays() && !slot_protects(db) => flush_tables(db, &rels),
        _ => Ok(()),
    }
}

/// Before PREPARE TRANSACTION (rows drained; still inside the transaction):
/// make what it wrote durable now, whatever protects the database. Its
/// change messages are decoded only when it is committed, so replay could
/// not bring back what a crash took from the memtables while it was
/// prepared (`crate::two_phase`).
pub fn before_prepare() -> Result<(), CallError> {
    let (db, rels) = written_tables::written_so_far();
    if rels.is_empty() {
        return Ok(());
    }
    match guc::durability() {
        DurabilityMode::EngineWal => engine_client::sync_wal(),
        mode if mode.replays() => flush_tables(db, &rels),
        _ => Ok(()),
    }
}

fn flush_tables(db: u32, rels: &[u32]) -> Result<(), CallError> {
    for &rel in rels {
        match engine_client::flush_cf(CfRef { db, rel }) {
            Err(CallError::Engine { code: pasv_am::protocol::ErrorCode::NoSuchCf, .. }) => {}
            other => other?,
        }
    }
    Ok(())
}

/// After the commit record (never ERRORs): write the flags, releasing the
/// row locks of `locks_xid` (0: none) in the same request when it is this
/// transaction's. Returns whether the locks were released that way.
pub fn after_commit(locks_xid: u32) -> bool {
    let touched = written_tables::take();
    if touched.rels.is_empty() || !guc::durability().writes_flags() {
        return false;
    }
    // SAFETY: plain reads of backend globals, valid in the COMMIT callback.
    let (commit_lsn, xid) = unsafe { (pg_sys::XactLastCommitEnd, u32::from(pg_sys::GetTopTransactionIdIfAny())) };
    let release = locks_xid != 0 && locks_xid == xid;
    crate::crash_point::reach(crate::crash_point::Point::AfterCommitBeforeFlag);
    let notice = CommitNotice {
        db: touched.db,
        xid,
        commit_lsn,
        first_lsn: touched.first_lsn,
        last_lsn: touched.last_lsn,
        rels: &touched.rels,
        release_locks: release,
    };
    match engine_client::committed(&notice) {
        Ok(()) => release,
        Err(e) => {
            // Only cost: these tables' persistence points lag until their next commit.
            pgrx::log!("pasv: writing flush flags after commit of transaction {xid}: {e}");
            false
        }
    }
}

pub fn after_abort() {
    written_tables::forget();
}

fn synchronous() -> bool {
    // SAFETY: plain read of a setting.
    unsafe { pg_sys::synchronous_commit > pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_OFF as i32 }
}

/// Whether database `db` has a replication slot keeping the WAL its
/// recovery needs.
fn slot_protects(db: u32) -> bool {
    ipc::client::channel()
        .and_then(|chan| chan.header().db_slot(db).map(|s| s.slot.load(Ordering::Acquire) == ipc::SLOT_READY))
        .unwrap_or(false)
}
