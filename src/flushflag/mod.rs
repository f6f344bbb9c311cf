//! Flush flags and persistence points, backend side (DESIGN §5).
//!
//! A backend remembers which pasv tables its transaction wrote and the range
//! of its pasv messages. At commit it tells the engine, which writes each
//! table's flush flag (`pasv` mode). Before commit it makes the writes
//! durable when nothing else would:
//! * `engine_wal` mode: RocksDB's WAL is synced (after PostgreSQL's);
//! * `pasv`/`naive` mode while the database has no replication slot yet (or
//!   lost it): the written tables are flushed, because no slot keeps the WAL
//!   that recovery would need.
//!
//! The persistence points themselves (local DPP per CF, global DPP per
//! database) are computed by the replay worker from the engine's report:
//! see [`global_dpp`].

use crate::error::CallError;
use crate::guc::{self, DurabilityMode};
use crate::{engine_client, ipc};
use pasv_am::protocol::CfRef;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::sync::atomic::Ordering;

/// What this backend's transaction wrote to pasv tables.
#[derive(Default)]
struct Touched {
    db: u32,
    rels: Vec<u32>,
    first_lsn: u64,
    last_lsn: u64,
}

thread_local! {
    static TOUCHED: RefCell<Touched> = RefCell::new(Touched::default());
}

/// A batch for `cf`, logged at `lsn` (0: not logged), is being written.
pub fn note_write(cf: CfRef, lsn: u64) {
    TOUCHED.with(|t| {
        let mut t = t.borrow_mut();
        t.db = cf.db;
        if !t.rels.contains(&cf.rel) {
            t.rels.push(cf.rel);
        }
        if lsn != 0 {
            if t.first_lsn == 0 {
                t.first_lsn = lsn;
            }
            t.last_lsn = t.last_lsn.max(lsn);
        }
    });
}

/// Pre-commit (still inside the transaction; an error aborts it).
pub fn before_commit() -> Result<(), CallError> {
    let (db, rels) = TOUCHED.with(|t| {
        let t = t.borrow();
        (t.db, t.rels.clone())
    });
    if rels.is_empty() {
        return Ok(());
    }
    crate::crash_point::reach(crate::crash_point::Point::AfterWriteBeforeCommit);
    match guc::durability() {
        // Like PostgreSQL's own commit record, RocksDB's WAL is synced only
        // when the commit is synchronous.
        DurabilityMode::EngineWal if synchronous() => engine_client::sync_wal(),
        DurabilityMode::EngineWal => Ok(()),
        mode if mode.replays() && !slot_protects(db) => {
            for rel in rels {
                match engine_client::flush_cf(CfRef { db, rel }) {
                    Err(CallError::Engine { code: pasv_am::protocol::ErrorCode::NoSuchCf, .. }) => {}
                    other => other?,
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

thread_local! {
    /// `engine_wal` mode: the (sub)transaction whose first message is known
    /// durable.
    static XID_DURABLE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// `engine_wal` mode, before a change logged by the record ending at `lsn`
/// goes to the engine: RocksDB writes it to its own WAL at once, and that
/// survives a crash of PostgreSQL, so PostgreSQL's WAL must first durably
/// hold a record of the writing (sub)transaction's xid. Otherwise the xid
/// could be handed out again after the crash and the new transaction's
/// commit would make these rows visible. Once per (sub)transaction, and
/// only if no other commit has flushed that far already.
pub fn xid_logged_before_engine_wal(lsn: u64) {
    if guc::durability() != DurabilityMode::EngineWal {
        return;
    }
    // SAFETY: plain reads of transaction and WAL state in a backend.
    unsafe {
        let xid = u32::from(pg_sys::GetCurrentTransactionIdIfAny());
        if XID_DURABLE.with(|x| x.get()) == xid {
            return;
        }
        if pg_sys::GetFlushRecPtr(std::ptr::null_mut()) < lsn {
            pg_sys::XLogFlush(lsn);
        }
        XID_DURABLE.with(|x| x.set(xid));
    }
}

/// After the commit record (never ERRORs): write the flags, releasing the
/// row locks of `locks_xid` (0: none) in the same request when it is this
/// transaction's. Returns whether the locks were released that way.
pub fn after_commit(locks_xid: u32) -> bool {
    let touched = TOUCHED.with(|t| std::mem::take(&mut *t.borrow_mut()));
    if touched.rels.is_empty() || !guc::durability().writes_flags() {
        return false;
    }
    // SAFETY: plain reads of backend globals, valid in the COMMIT callback.
    let (commit_lsn, xid) = unsafe { (pg_sys::XactLastCommitEnd, u32::from(pg_sys::GetTopTransactionIdIfAny())) };
    let release = locks_xid != 0 && locks_xid == xid;
    crate::crash_point::reach(crate::crash_point::Point::AfterCommitBeforeFlag);
    match engine_client::committed(touched.db, xid, commit_lsn, touched.first_lsn, touched.last_lsn, &touched.rels, release) {
        Ok(()) => release,
        Err(e) => {
            // Only cost: these tables' persistence points lag until their next commit.
            pgrx::log!("pasv: writing flush flags after commit of transaction {xid}: {e}");
            false
        }
    }
}

pub fn after_abort() {
    TOUCHED.with(|t| *t.borrow_mut() = Touched::default());
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

/// The creation point of a new CF incarnation: the end of the WAL inserted
/// so far, made durable. Every message logged before it (a reused
/// relfilenumber's past, rows emptied by a TRUNCATE in the creating
/// transaction) starts below it; every later one at or above it.
pub fn creation_point() -> u64 {
    if !guc::durability().replays() {
        return 0;
    }
    // SAFETY: a backend.
    unsafe { crate::wal::flush_inserted() }
}


