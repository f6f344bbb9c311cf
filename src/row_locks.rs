//! This backend's row locks: taken in the shared-memory table
//! (`pasv_am::shared_row_locks`) without a round trip, or in the engine's
//! table when the row's bucket is full or spilled, and released when the
//! transaction ends.
//!
//! Owns what the backend remembers of its locks: the rows it holds in
//! shared memory, the buckets it spilled, and whether the engine may hold
//! locks of its transaction. `xact.rs` calls the release at commit and abort;
//! `tam/rowops.rs` takes locks through [`lock`]. A prepared transaction's
//! locks stay in the shared table under its xid (`crate::two_phase`).
//!
//! Invariants:
//! * A row lock is released only after every write its holder made under it
//!   was applied by the engine (and so merged into the row cache): at commit
//!   the pre-commit drain did it; at abort [`release_at_abort`] waits for the
//!   backend's request in flight first. The next holder reads the row's
//!   versions from the row cache on that promise.
//! * Locks are keyed by the top-level xid and held to the end of the
//!   top-level transaction (a subtransaction's abort keeps them).
//! * DESIGN.md §3's "read the head version under the lock" is met by a
//!   read made *before* the lock when the grant shows that no other
//!   transaction's exclusive holding of the row's bucket ended since the
//!   write epoch loaded before that read (`seen` in [`lock`]): by the
//!   first invariant, any write of the row since then would have ended
//!   such a holding. The scan that found the row is that read
//!   (`tam/stream.rs::last_row_newest`), so UPDATE and DELETE of scanned
//!   rows need no read of their own.

use crate::engine_client::{self, LockOutcome};
use crate::error::CallError;
use pasv_am::protocol::{CfRef, LockMode};
use pasv_am::shared_row_locks::Outcome;
use std::cell::{Cell, RefCell};

thread_local! {
    /// The top-level xid and the rows it holds in shared memory.
    static HELD: RefCell<(u32, Vec<(CfRef, u64)>)> = const { RefCell::new((0, Vec::new())) };
    /// Buckets whose spill count this transaction raised and keeps raised.
    static SPILLED: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    /// The top-level xid that may hold locks in the engine's table (0: none).
    static ENGINE_HOLDER: Cell<u32> = const { Cell::new(0) };
}

/// Ask for `mode` on row `(cf, rowid)` for top-level transaction `xid`;
/// `evict` names a transaction known to have ended whose holding is stale.
/// Granted with `read` > 0: the row's newest `read` versions come with the
/// answer when the row cache (or the engine, for a spilled bucket) has them;
/// otherwise `versions` is empty and `more` true (the caller reads the row).
/// `seen`: the [`write_epoch`] loaded before the caller last read the row;
/// a new grant in shared memory that finds the row unchanged since then
/// says so (`unchanged`) and reads nothing: the caller's copy is current.
pub fn lock(
    cf: CfRef,
    rowid: u64,
    xid: u32,
    mode: LockMode,
    evict: u32,
    read: u8,
    seen: Option<u64>,
) -> Result<LockOutcome, CallError> {
    let Some(table) = crate::shmem::row_locks() else {
        return lock_in_engine(cf, rowid, xid, mode, evict, read, None);
    };
    match table.lock_unchanged_since(cf, rowid, xid, mode, evict, seen) {
        (Outcome::Granted { already }, unchanged) => {
            if !already {
                HELD.with(|h| {
                    let mut h = h.borrow_mut();
                    if h.0 != xid {
                        debug_assert!(h.1.is_empty());
                        h.1.clear();
                        h.0 = xid;
                    }
                    h.1.push((cf, rowid));
                });
            }
            let (versions, more) = if read > 0 && !unchanged {
                engine_client::cached_versions(cf, rowid, read)?.unwrap_or((Vec::new(), true))
            } else {
                (Vec::new(), false)
            };
            Ok(LockOutcome { granted: true, already_held: already, holder: 0, versions, more, unchanged })
        }
        (Outcome::Conflict { holder }, _) => Ok(LockOutcome {
            granted: false,
            already_held: false,
            holder,
            versions: Vec::new(),
            more: false,
            unchanged: false,
        }),
        (Outcome::Engine { bucket }, _) => lock_in_engine(cf, rowid, xid, mode, evict, read, Some(bucket)),
    }
}

/// The shared lock table's write epoch (0 without one): load it before
/// reading rows whose lock may follow (see [`lock`]).
pub fn write_epoch() -> u64 {
    crate::shmem::row_locks().map_or(0, |table| table.write_epoch())
}

/// The engine's table decides; `spilled` is the bucket whose spill count
/// was raised for this request (kept while the engine holds the lock).
fn lock_in_engine(
    cf: CfRef,
    rowid: u64,
    xid: u32,
    mode: LockMode,
    evict: u32,
    read: u8,
    spilled: Option<u32>,
) -> Result<LockOutcome, CallError> {
    ENGINE_HOLDER.with(|e| e.set(xid));
    let outcome = engine_client::lock_row(cf, rowid, xid, mode, evict, read);
    if let Some(bucket) = spilled {
        match &outcome {
            Ok(o) if o.granted && !o.already_held => SPILLED.with(|s| s.borrow_mut().push(bucket)),
            _ => {
                if let Some(table) = crate::shmem::row_locks() {
                    table.unspill(bucket);
                }
            }
        }
    }
    outcome
}

/// Whether this transaction (top-level `xid`) holds row `(cf, rowid)`
/// Exclusive in shared memory; if so the holding is marked as written, so
/// that other backends' unique checks wait for this transaction although
/// the write is still in this backend's buffer (`tam/fetch.rs`).
pub fn note_write(cf: CfRef, rowid: u64, xid: u32) -> bool {
    crate::shmem::row_locks().is_some_and(|table| table.note_write(cf, rowid, xid))
}

/// The transaction other than `me` that wrote row `(cf, rowid)` under a
/// shared-memory lock it still holds ([`note_write`]), if any.
pub fn writer(cf: CfRef, rowid: u64, me: u32) -> Option<u32> {
    crate::shmem::row_locks().and_then(|table| table.writer(cf, rowid, me))
}

/// Whether this transaction holds, or may hold, row locks.
pub fn any_held() -> bool {
    ENGINE_HOLDER.with(|e| e.get()) != 0 || HELD.with(|h| !h.borrow().1.is_empty())
}

/// At commit (writes drained): release the shared-memory locks, and call
/// `commit_notice(xid)` with the xid whose locks the engine may hold (0:
/// none); it returns whether it released them with its own request (the
/// flush flags' notice does), else they are released here. Never ERRORs.
pub fn release_at_commit(commit_notice: impl FnOnce(u32) -> bool) {
    release_shared();
    let xid = ENGINE_HOLDER.with(|e| e.replace(0));
    if !commit_notice(xid) && xid != 0 {
        release_engine_locks(xid);
    }
    unspill_all();
}

/// At abort: wait for this backend's request in flight (a write made under
/// a lock must be applied before the lock goes), then release. Never ERRORs.
pub fn release_at_abort() {
    if !any_held() {
        return;
    }
    crate::ipc::client::settle();
    release_shared();
    let xid = ENGINE_HOLDER.with(|e| e.replace(0));
    if xid != 0 {
        release_engine_locks(xid);
    }
    unspill_all();
}

/// PREPARE TRANSACTION (before its record): the rows this transaction
/// holds, with their modes, for the prepared transaction's state file; or
/// `None` when some of its locks are in the engine's table, which a
/// prepared transaction does not carry over (they are not listed here).
pub fn held_for_prepare() -> Option<Vec<(CfRef, u64, LockMode)>> {
    if ENGINE_HOLDER.with(|e| e.get()) != 0 || SPILLED.with(|s| !s.borrow().is_empty()) {
        return None;
    }
    let (xid, rows) = HELD.with(|h| {
        let h = h.borrow();
        (h.0, h.1.clone())
    });
    let Some(table) = crate::shmem::row_locks() else { return Some(Vec::new()) };
    Some(
        rows.into_iter()
            .filter_map(|(cf, rowid)| {
                let mode = table.holders(cf, rowid).into_iter().find(|&(holder, _)| holder == xid)?.1;
                Some((cf, rowid, mode))
            })
            .collect(),
    )
}

/// PREPARE TRANSACTION (after its record): the locks stay in the shared
/// table under the prepared transaction's xid; this backend forgets them.
pub fn hand_over_to_prepared() {
    HELD.with(|h| *h.borrow_mut() = (0, Vec::new()));
    ENGINE_HOLDER.with(|e| e.set(0));
}

/// COMMIT / ROLLBACK PREPARED of `xid`, which held `rows` (its state
/// file's): release them, and anything the engine's table holds for it.
/// Never ERRORs; a lock left behind is evicted by the next locker of its
/// row, as any ended holder's.
pub fn release_prepared(xid: u32, rows: &[(CfRef, u64, LockMode)]) {
    release_in_table(xid, rows.iter().map(|&(cf, rowid, _)| (cf, rowid)));
    release_engine_locks(xid);
}

/// Engine start: take the locks of prepared transaction `xid` again.
/// `in_engine` takes one in the engine's table when the row's bucket here
/// is full (its spill count then stays raised until the server restarts).
pub fn restore_prepared(xid: u32, rows: &[(CfRef, u64, LockMode)], mut in_engine: impl FnMut(CfRef, u64, LockMode)) {
    let Some(table) = crate::shmem::row_locks() else {
        rows.iter().for_each(|&(cf, rowid, mode)| in_engine(cf, rowid, mode));
        return;
    };
    for &(cf, rowid, mode) in rows {
        match table.lock(cf, rowid, xid, mode, 0) {
            Outcome::Granted { .. } => {}
            Outcome::Engine { .. } => in_engine(cf, rowid, mode),
            Outcome::Conflict { holder } => pgrx::warning!(
                "pasv: the row lock of prepared transaction {xid} on row {rowid} of {cf} conflicts with transaction {holder}'s"
            ),
        }
    }
}

fn release_shared() {
    let (xid, rows) = HELD.with(|h| {
        let mut h = h.borrow_mut();
        (std::mem::replace(&mut h.0, 0), std::mem::take(&mut h.1))
    });
    if !rows.is_empty() {
        release_in_table(xid, rows);
    }
}

/// Release `xid`'s holdings of `rows` in the shared table.
fn release_in_table(xid: u32, rows: impl IntoIterator<Item = (CfRef, u64)>) {
    if let Some(table) = crate::shmem::row_locks() {
        for (cf, rowid) in rows {
            table.release(cf, rowid, xid);
        }
    }
}

/// Release every engine-held lock of `xid` (posted; never ERRORs). A failed
/// release is healed by the next locker, which evicts holders that ended.
fn release_engine_locks(xid: u32) {
    if let Err(e) = engine_client::release_locks(xid) {
        pgrx::log!("pasv: releasing the row locks of transaction {xid}: {e}");
    }
}

fn unspill_all() {
    let buckets = SPILLED.with(|s| std::mem::take(&mut *s.borrow_mut()));
    if let Some(table) = crate::shmem::row_locks() {
        for bucket in buckets {
            table.unspill(bucket);
        }
    }
}
