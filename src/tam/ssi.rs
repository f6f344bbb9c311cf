//! Serializable snapshot isolation: the calls heapam makes into PostgreSQL's
//! predicate-lock manager, made at the same places for pasv rows, so that
//! SERIALIZABLE transactions fail where they would on heap.
//!
//! All of them return at once unless the transaction is SERIALIZABLE.

use pgrx::pg_sys;

// Called only through pg_guard_ffi_boundary: an ERROR inside becomes a Rust
// panic that unwinds these frames, then an ERROR again at pasv's edge.
extern "C-unwind" {
    // storage/predicate.h; not in pgrx's PG16 bindings.
    fn PredicateLockRelation(relation: pg_sys::Relation, snapshot: pg_sys::Snapshot);
    fn PredicateLockTID(
        relation: pg_sys::Relation,
        tid: pg_sys::ItemPointer,
        snapshot: pg_sys::Snapshot,
        tuple_xid: pg_sys::TransactionId,
    );
    fn CheckForSerializableConflictOutNeeded(relation: pg_sys::Relation, snapshot: pg_sys::Snapshot) -> bool;
    fn CheckForSerializableConflictOut(relation: pg_sys::Relation, xid: pg_sys::TransactionId, snapshot: pg_sys::Snapshot);
    fn CheckForSerializableConflictIn(relation: pg_sys::Relation, tid: pg_sys::ItemPointer, blkno: pg_sys::BlockNumber);
}

/// Whether this transaction is SERIALIZABLE. predicate.c keeps a
/// serializable transaction (`MySerializableXact`) only for those, and each
/// of its calls below returns at once without one; asking here first spares
/// every other transaction the guard around each call, once for every row
/// it fetches by TID or writes.
///
/// # Safety
/// Backend.
unsafe fn serializable() -> bool {
    pg_sys::XactIsoLevel == pg_sys::XACT_SERIALIZABLE as i32
}

/// A sequential (or bitmap) scan reads the whole relation.
///
/// # Safety
/// `rel` open; `snapshot` valid or null.
pub unsafe fn lock_relation(rel: pg_sys::Relation, snapshot: pg_sys::Snapshot) {
    if serializable() && !snapshot.is_null() && (*snapshot).snapshot_type == pg_sys::SnapshotType::SNAPSHOT_MVCC {
        pg_sys::ffi::pg_guard_ffi_boundary(|| PredicateLockRelation(rel, snapshot));
    }
}

/// A row read by TID (index scans, TID scans, row fetches).
///
/// # Safety
/// `rel` open; `snapshot` valid; `tid` valid.
pub unsafe fn lock_row(rel: pg_sys::Relation, tid: &mut pg_sys::ItemPointerData, snapshot: pg_sys::Snapshot, creator: u64) {
    if serializable() && !snapshot.is_null() && (*snapshot).snapshot_type == pg_sys::SnapshotType::SNAPSHOT_MVCC {
        let xid = pg_sys::TransactionId::from(creator as u32);
        pg_sys::ffi::pg_guard_ffi_boundary(|| PredicateLockTID(rel, tid, snapshot, xid));
    }
}

/// Whether skipped versions must be reported (serializable MVCC reads only).
///
/// # Safety
/// `rel` open or null; `snapshot` valid or null.
pub unsafe fn conflict_out_needed(rel: pg_sys::Relation, snapshot: pg_sys::Snapshot) -> bool {
    serializable()
        && !rel.is_null()
        && !snapshot.is_null()
        && (*snapshot).snapshot_type == pg_sys::SnapshotType::SNAPSHOT_MVCC
        && pg_sys::ffi::pg_guard_ffi_boundary(|| CheckForSerializableConflictOutNeeded(rel, snapshot))
}

/// A version written by `creator` was not visible to this reader: if the
/// writer is a concurrent serializable transaction, that is a rw-conflict
/// (heap reports it for an invisible xmin or a newer xmax alike).
///
/// # Safety
/// As [`conflict_out_needed`], which must have returned true.
pub unsafe fn conflict_out(rel: pg_sys::Relation, creator: u64, snapshot: pg_sys::Snapshot) {
    let xid = pg_sys::TransactionId::from(creator as u32);
    if !pg_sys::TransactionIdIsCurrentTransactionId(xid) {
        pg_sys::ffi::pg_guard_ffi_boundary(|| CheckForSerializableConflictOut(rel, xid, snapshot));
    }
}

/// Before writing: a new row (no TID) or a new version of `rowid`'s row.
///
/// # Safety
/// `rel` open.
pub unsafe fn conflict_in(rel: pg_sys::Relation, rowid: Option<u64>) {
    if !serializable() {
        return;
    }
    match rowid {
        Some(r) => {
            let mut tid: pg_sys::ItemPointerData = std::mem::zeroed();
            super::tid_from_rowid(r, &mut tid);
            let block = (r / pasv_am::keys::ROWS_PER_BLOCK) as pg_sys::BlockNumber;
            pg_sys::ffi::pg_guard_ffi_boundary(|| CheckForSerializableConflictIn(rel, &mut tid, block));
        }
        None => pg_sys::ffi::pg_guard_ffi_boundary(|| {
            CheckForSerializableConflictIn(rel, std::ptr::null_mut(), pg_sys::InvalidBlockNumber)
        }),
    }
}
