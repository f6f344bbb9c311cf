//! pasv's table access method: one static `TableAmRoutine`, with callbacks
//! grouped in heapam_handler.c's order (slot, scan, parallel scan, index
//! fetch, non-modifying tuple ops, modifications, DDL, maintenance and
//! planner, bitmap/sample). Callbacks are thin: they turn pointers into
//! values and call the module that owns the behaviour. They reach the engine
//! only through `crate::engine_client`.

pub mod ddl;
mod fetch;
mod forklen;
mod maintenance;
mod modify;
pub mod parallel_plans;
mod rowops;
mod scan;
mod scan_prune;
mod scan_stats;
mod ssi;
mod stream;
mod toast;
mod vacuum;
pub(crate) mod versions;
mod visibility;

use pasv_am::protocol::CfRef;
use pgrx::pg_sys;

/// The routine the relcache keeps a pointer to (so it must be a static).
pub static ROUTINE: pg_sys::TableAmRoutine = pg_sys::TableAmRoutine {
    type_: pg_sys::NodeTag::T_TableAmRoutine,

    slot_callbacks: Some(slot_callbacks),

    scan_begin: Some(scan::scan_begin),
    scan_end: Some(scan::scan_end),
    scan_rescan: Some(scan::scan_rescan),
    scan_getnextslot: Some(scan::scan_getnextslot),
    scan_set_tidrange: Some(scan::scan_set_tidrange),
    scan_getnextslot_tidrange: Some(scan::scan_getnextslot),

    parallelscan_estimate: Some(scan::parallelscan_estimate),
    parallelscan_initialize: Some(scan::parallelscan_initialize),
    parallelscan_reinitialize: Some(scan::parallelscan_reinitialize),

    index_fetch_begin: Some(fetch::index_fetch_begin),
    index_fetch_reset: Some(fetch::index_fetch_reset),
    index_fetch_end: Some(fetch::index_fetch_end),
    index_fetch_tuple: Some(fetch::index_fetch_tuple),

    tuple_fetch_row_version: Some(fetch::tuple_fetch_row_version),
    tuple_tid_valid: Some(fetch::tuple_tid_valid),
    tuple_get_latest_tid: Some(rowops::tuple_get_latest_tid),
    tuple_satisfies_snapshot: Some(fetch::tuple_satisfies_snapshot),
    index_delete_tuples: Some(fetch::index_delete_tuples),

    tuple_insert: Some(modify::tuple_insert),
    tuple_insert_speculative: Some(modify::tuple_insert_speculative),
    tuple_complete_speculative: Some(modify::tuple_complete_speculative),
    multi_insert: Some(modify::multi_insert),
    tuple_delete: Some(rowops::tuple_delete),
    tuple_update: Some(rowops::tuple_update),
    tuple_lock: Some(rowops::tuple_lock),
    finish_bulk_insert: Some(modify::finish_bulk_insert),

    relation_set_new_filelocator: Some(ddl::relation_set_new_filelocator),
    relation_nontransactional_truncate: Some(ddl::relation_nontransactional_truncate),
    relation_copy_data: Some(ddl::relation_copy_data),
    relation_copy_for_cluster: Some(ddl::relation_copy_for_cluster),

    relation_vacuum: Some(maintenance::relation_vacuum),
    scan_analyze_next_block: Some(maintenance::scan_analyze_next_block),
    scan_analyze_next_tuple: Some(maintenance::scan_analyze_next_tuple),
    index_build_range_scan: Some(maintenance::index_build_range_scan),
    index_validate_scan: Some(maintenance::index_validate_scan),

    relation_size: Some(maintenance::relation_size),
    relation_needs_toast_table: Some(maintenance::relation_needs_toast_table),
    relation_toast_am: Some(maintenance::relation_toast_am),
    relation_fetch_toast_slice: Some(maintenance::relation_fetch_toast_slice),
    relation_estimate_size: Some(maintenance::relation_estimate_size),

    scan_bitmap_next_block: Some(scan::scan_bitmap_next_block),
    scan_bitmap_next_tuple: Some(scan::scan_bitmap_next_tuple),
    scan_sample_next_block: Some(scan::scan_sample_next_block),
    scan_sample_next_tuple: Some(scan::scan_sample_next_tuple),
};

/// Tuples come out of pasv as plain heap tuples (header + data), so the
/// executor's slots for pasv tables are heap-tuple slots.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn slot_callbacks(_rel: pg_sys::Relation) -> *const pg_sys::TupleTableSlotOps {
    &raw const pg_sys::TTSOpsHeapTuple
}

/// The column family of a pasv relation.
///
/// # Safety
/// `rel` must be a valid, open relation.
pub unsafe fn cf_of(rel: pg_sys::Relation) -> CfRef {
    let loc = (*rel).rd_locator;
    CfRef { db: loc.dbOid.to_u32(), rel: loc.relNumber.to_u32() }
}

/// Whether `rel`'s changes go to PostgreSQL's WAL as pasv messages: a
/// permanent table's do; an unlogged or temporary table's do not (like heap's
/// `RelationNeedsWAL`, without the `wal_level = minimal` shortcut: pasv
/// never skips a permanent table's messages).
///
/// # Safety
/// `rel` must be a valid, open relation.
pub unsafe fn logs_changes(rel: pg_sys::Relation) -> bool {
    (*(*rel).rd_rel).relpersistence as u8 == pg_sys::RELPERSISTENCE_PERMANENT
}

/// # Safety
/// `rel` must be a valid, open relation.
pub unsafe fn is_pasv(rel: pg_sys::Relation) -> bool {
    (*rel).rd_tableam == &raw const ROUTINE
}

/// `"name"` of a relation, for messages.
///
/// # Safety
/// `rel` must be a valid, open relation.
pub unsafe fn rel_name(rel: pg_sys::Relation) -> String {
    let name = std::ffi::CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr());
    format!("\"{}\"", name.to_string_lossy())
}

/// Set a TID from a rowid.
pub fn tid_from_rowid(rowid: u64, tid: &mut pg_sys::ItemPointerData) {
    let (block, offset) = pasv_am::keys::rowid_to_tid(rowid);
    pgrx::itemptr::item_pointer_set_all(tid, block, offset);
}

/// The rowid a TID names, or None for TIDs no rowid maps to.
///
/// # Safety
/// `tid` must be valid.
pub unsafe fn rowid_from_tid(tid: *const pg_sys::ItemPointerData) -> Option<u64> {
    let (block, offset) = pgrx::itemptr::item_pointer_get_both(*tid);
    pasv_am::keys::tid_to_rowid(block, offset)
}

/// Put a tuple that lives in pasv-owned memory into `slot` without copying
/// (heap-tuple slots), or by copying into a slot of another kind.
///
/// # Safety
/// `tuple` must stay valid while the slot holds it (until the owner's next
/// fetch) — the same contract heapam has with its buffer-pinned tuples.
pub unsafe fn store_in_slot(tuple: *mut pg_sys::HeapTupleData, slot: *mut pg_sys::TupleTableSlot) {
    if (*slot).tts_ops == &raw const pg_sys::TTSOpsHeapTuple {
        // SAFETY: a heap-tuple slot and a tuple (checked and given by the
        // caller): PG16's ExecStoreHeapTuple raises only for another kind
        // of slot, and frees only a tuple the slot owned (pfree), so it
        // returns without a longjmp and needs no guard.
        crate::unguarded::ExecStoreHeapTuple(tuple, slot, false);
    } else {
        pg_sys::ExecForceStoreHeapTuple(tuple, slot, false);
    }
}

/// This transaction's top-level xid, assigned first if it has none. Row
/// writes ask once or twice a row; once the xid is assigned (every row but
/// a statement's first) the answer is a read without pgrx's guard, and only
/// the assignment, which can raise, goes through it.
///
/// # Safety
/// Backend inside a transaction.
pub(crate) unsafe fn top_xid() -> pg_sys::TransactionId {
    // SAFETY: PG16's GetTopTransactionIdIfAny returns a static's value and
    // cannot raise.
    let xid = crate::unguarded::GetTopTransactionIdIfAny();
    if xid != pg_sys::InvalidTransactionId {
        xid
    } else {
        pg_sys::GetTopTransactionId()
    }
}

/// The current (sub)transaction's full xid, assigned first if it has none;
/// as [`top_xid`].
///
/// # Safety
/// Backend inside a transaction.
pub(crate) unsafe fn current_full_xid() -> u64 {
    // SAFETY: PG16's GetCurrentFullTransactionIdIfAny returns a field of the
    // current transaction state and cannot raise.
    let id = crate::unguarded::GetCurrentFullTransactionIdIfAny();
    // Valid when its xid part is (FullTransactionIdIsValid).
    if id.value as u32 != 0 {
        id.value
    } else {
        pg_sys::GetCurrentFullTransactionId().value
    }
}

/// Put a copy of `tuple` in `slot`; the slot owns (and frees) the copy.
///
/// # Safety
/// `tuple` must describe a valid heap tuple.
pub unsafe fn store_copy_in_slot(tuple: *mut pg_sys::HeapTupleData, slot: *mut pg_sys::TupleTableSlot) {
    store_owned_in_slot(pg_sys::heap_copytuple(tuple), slot);
}

/// Put `copy`, a palloc'd tuple nobody else holds, in `slot`; the slot
/// owns (and frees) it.
///
/// # Safety
/// `copy` must be a valid heap tuple from `heap_copytuple` or alike.
pub unsafe fn store_owned_in_slot(copy: pg_sys::HeapTuple, slot: *mut pg_sys::TupleTableSlot) {
    if (*slot).tts_ops == &raw const pg_sys::TTSOpsHeapTuple {
        pg_sys::ExecStoreHeapTuple(copy, slot, true);
    } else {
        pg_sys::ExecForceStoreHeapTuple(copy, slot, true);
    }
}

/// What a tuple handed to the executor says its current transaction did to
/// it, in the header's `xmax` (stored versions never carry one).
#[derive(Clone, Copy)]
pub(crate) enum Xmax {
    /// Deleted it (DELETE's RETURNING and AFTER triggers read the old row).
    Deleted,
    /// Holds a row lock on it of this strength (`SELECT … FOR UPDATE`,
    /// and a row updated after it was locked, as in INSERT … ON CONFLICT
    /// DO UPDATE: heap carries the lock over to the new version).
    Locked(pg_sys::LockTupleMode::Type),
}

/// Write `what` by the current (sub)transaction into `tuple`'s header, as
/// heap's `xmax` would show it: `RETURNING xmax`, and the common
/// "`(xmax = 0) AS inserted`" test after an upsert, read it.
///
/// # Safety
/// `tuple` is a writable heap tuple owned by the caller (a copy).
pub(crate) unsafe fn set_xmax(tuple: pg_sys::HeapTuple, what: Xmax) {
    let h = (*tuple).t_data;
    (*h).t_infomask &= !(pg_sys::HEAP_XMAX_BITS as u16);
    (*h).t_infomask2 &= !(pg_sys::HEAP_KEYS_UPDATED as u16);
    (*h).t_choice.t_heap.t_xmax = pg_sys::GetCurrentTransactionId();
    match what {
        Xmax::Deleted => (*h).t_infomask2 |= pg_sys::HEAP_KEYS_UPDATED as u16,
        Xmax::Locked(mode) => {
            let strength = match mode {
                pg_sys::LockTupleMode::LockTupleKeyShare => pg_sys::HEAP_XMAX_KEYSHR_LOCK,
                pg_sys::LockTupleMode::LockTupleShare => pg_sys::HEAP_XMAX_SHR_LOCK,
                _ => pg_sys::HEAP_XMAX_EXCL_LOCK,
            };
            (*h).t_infomask |= (pg_sys::HEAP_XMAX_LOCK_ONLY | strength) as u16;
        }
    }
}

/// Fill `tuple` to describe a resolved row of `rel`.
///
/// # Safety
/// `rel` valid; `row.tuple` points to `row.tuple_len` bytes of a heap tuple.
pub(crate) unsafe fn describe_row(rel: pg_sys::Relation, row: &stream::Row, tuple: &mut pg_sys::HeapTupleData) {
    tuple.t_len = row.tuple_len as u32;
    tuple.t_data = row.tuple as *mut pg_sys::HeapTupleHeaderData;
    tuple.t_tableOid = (*rel).rd_id;
    tid_from_rowid(row.rowid, &mut tuple.t_self);
}

/// Whether a stored version's creator committed (frozen ones did).
///
/// # Safety
/// Backend inside a transaction.
pub unsafe fn creator_committed(header: &pasv_am::row::RowHeader) -> bool {
    visibility::creator_of(header) == visibility::Creator::Committed
}

/// Whether a committed version is older than every snapshot that may still
/// run (`horizon`: the relation's `GlobalVisTestFor`).
///
/// # Safety
/// Backend inside a transaction; `horizon` from `GlobalVisTestFor`.
pub unsafe fn older_than_all_snapshots(header: &pasv_am::row::RowHeader, horizon: *mut pg_sys::GlobalVisState) -> bool {
    visibility::removable(header, horizon)
}

/// Count every stored version of `cf` in `[start, end)` (diagnostics).
///
/// # Safety
/// Backend inside a transaction.
pub unsafe fn count_versions(cf: CfRef, start: [u8; 12], end: [u8; 12], count: &mut i64) {
    versions::walk_ahead(cf, start, end, "counting versions", |_| {
        *count += 1;
        true
    });
}

/// Forget the rows this backend kept to answer re-fetches without a round
/// trip (the scan's last row, the chain `tuple_lock` read, the row the last
/// DELETE deleted): at the end of a (sub)transaction they may be freed or
/// superseded.
pub(crate) fn forget_cached_rows() {
    stream::forget_last_row();
    visibility::forget_answers();
    rowops::forget_locked_chain();
    rowops::forget_deleted_row();
}

/// At the end of the top-level transaction: `versions::walk`'s page is free
/// again (no walk runs across it), and at an abort, which ends every scan,
/// so are the scans' pooled buffers that an ERROR left lent (`stream`'s
/// module notes; a scan may outlive a commit in a portal kept open).
pub(crate) fn buffers_at_transaction_end(aborted: bool) {
    versions::page_free_at_transaction_end();
    scan_prune::forget();
    if aborted {
        stream::reclaim_buffers_at_abort();
    }
}

/// Register the relcache callback that empties the table AM's caches of
/// relation facts (fork lengths, partitions' trigger facts).
///
/// # Safety
/// Once, from `_PG_init`.
pub unsafe fn install_invalidation_callback() {
    pg_sys::CacheRegisterRelcacheCallback(Some(relcache_invalidated), pg_sys::Datum::from(0usize));
}

unsafe extern "C-unwind" fn relcache_invalidated(_arg: pg_sys::Datum, _relid: pg_sys::Oid) {
    forklen::forget_lengths();
    rowops::forget_cached();
}
