//! Inserting rows: single, multi-insert/COPY (batched), and speculative
//! insertion for INSERT ... ON CONFLICT.
//!
//! A new row gets its rowid (and so its TID) before it is written; its value
//! is the MVCC header (creator FullTransactionId, command id) followed by the
//! heap tuple, whose header carries the same xmin/cmin so system columns read
//! as on heap.

use super::{cf_of, rel_name, tid_from_rowid};
use crate::{engine_client, error};
use pasv_am::keys;
use pasv_am::row::{RowHeader, HEADER_LEN};
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;
use std::cell::RefCell;

thread_local! {
    static VALUE: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(8192));
}

/// The room `tuple` would take on one of `rel`'s heap pages, for placing
/// it in a rowid block (`engine_client::next_rowid`): its MAXALIGN'd
/// length, and the free space the table's fillfactor keeps on a page
/// (heap's `RelationGetTargetPageFreeSpace`).
///
/// # Safety
/// `rel` open; `tuple` a valid heap tuple.
pub(super) unsafe fn row_space(rel: pg_sys::Relation, tuple: pg_sys::HeapTuple) -> engine_client::RowSpace {
    let options = (*rel).rd_options as *const pg_sys::StdRdOptions;
    let fillfactor = if options.is_null() { 100 } else { (*options).fillfactor.clamp(10, 100) };
    let page = pg_sys::BLCKSZ;
    engine_client::RowSpace {
        tuple: ((*tuple).t_len + 7) & !7,
        keep_free: page * (100 - fillfactor as u32) / 100,
    }
}

/// Write one tuple of `slot` into `rel` as a new row.
unsafe fn insert_slot(rel: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, cid: pg_sys::CommandId) {
    let rowid = insert_slot_uncovered(rel, slot, cid);
    super::forklen::cover_inserted(rel, rowid);
}

/// [`insert_slot`] without stretching the fork to the row (a batch is
/// covered once, at its end); returns the row's rowid.
unsafe fn insert_slot_uncovered(rel: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot, cid: pg_sys::CommandId) -> u64 {
    let cf = cf_of(rel);
    let mut should_free = false;
    let slot_tuple = pg_sys::ExecFetchSlotHeapTuple(slot, true, &mut should_free);
    (*slot).tts_tableOid = (*rel).rd_id;
    (*slot_tuple).t_tableOid = (*rel).rd_id;
    // The stored tuple may be a toasted copy; the slot keeps the original.
    let tuple = super::toast::prepare(rel, slot_tuple, std::ptr::null_mut());

    super::ssi::conflict_in(rel, None);
    let rowid = match engine_client::next_rowid(cf, row_space(rel, tuple)) {
        Ok(r) => r,
        Err(e) => e.raise(&format!("inserting into {}", rel_name(rel))),
    };
    check_row_size(rel, (*tuple).t_len as usize);
    let full_xid = super::current_full_xid();
    let result = VALUE.with(|v| {
        let mut v = v.borrow_mut();
        stored_value(tuple, rowid, full_xid, cid, &mut v);
        let tablespace = crate::logical::notes::tablespace_of(rel);
        let indexed = (*(*rel).rd_rel).relhasindex;
        engine_client::buffer_put(cf, super::logs_changes(rel), tablespace, full_xid as u32, indexed, &keys::row_key(rowid, 0), &v)
    });
    // The slot keeps the untoasted tuple; it learns the TID like heap's does.
    (*slot_tuple).t_self = (*tuple).t_self;
    (*slot).tts_tid = (*tuple).t_self;
    if let Err(e) = result {
        e.raise(&format!("inserting into {}", rel_name(rel)));
    }
    crate::xact::mark_written();
    if tuple != slot_tuple {
        pg_sys::heap_freetuple(tuple);
    }
    if should_free {
        pg_sys::heap_freetuple(slot_tuple);
    }
    rowid
}

/// Stamp a heap tuple's header as created by (xid, cid) at `rowid` and build
/// its stored value.
pub(super) unsafe fn stored_value(tuple: pg_sys::HeapTuple, rowid: u64, full_xid: u64, cid: pg_sys::CommandId, out: &mut Vec<u8>) {
    tid_from_rowid(rowid, &mut (*tuple).t_self);
    let h = (*tuple).t_data;
    (*h).t_infomask &= !(pg_sys::HEAP_XACT_MASK as u16);
    (*h).t_infomask2 &= !(pg_sys::HEAP2_XACT_MASK as u16);
    (*h).t_infomask |= pg_sys::HEAP_XMAX_INVALID as u16;
    (*h).t_choice.t_heap.t_xmin = pg_sys::TransactionId::from(full_xid as u32);
    (*h).t_choice.t_heap.t_xmax = pg_sys::InvalidTransactionId;
    (*h).t_choice.t_heap.t_field3.t_cid = cid;
    (*h).t_ctid = (*tuple).t_self;
    out.clear();
    out.extend_from_slice(&RowHeader { flags: 0, cid, xid: full_xid, moved_to: 0 }.encode());
    out.extend_from_slice(std::slice::from_raw_parts((*tuple).t_data as *const u8, (*tuple).t_len as usize));
}

/// Rows must fit one channel buffer with their header (larger values have
/// been toasted by then; this catches many wide columns).
pub(super) unsafe fn check_row_size(rel: pg_sys::Relation, tuple_len: usize) {
    let limit = pasv_am::protocol::max_entry_payload(engine_client::batch_capacity());
    if HEADER_LEN + tuple_len > limit {
        error::raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("row of {tuple_len} bytes is too large for pasv table {} (limit {} bytes)", rel_name(rel), limit - HEADER_LEN),
            "Raise pasv.channel_buffer_size (needs a restart), or store large values in a heap table.",
        );
    }
}

/// Send the new row at once if another backend's constraint check may need
/// its values (see [`writes_through`]).
unsafe fn flush_if_checked_by_value(rel: pg_sys::Relation) {
    if writes_through(rel) {
        if let Err(e) = engine_client::flush_pending() {
            e.raise(&format!("inserting into {}", rel_name(rel)));
        }
    }
}

/// `rd_amcache` of a pasv table: whether its new rows are written through.
const WRITE_THROUGH: u8 = 1;
const BUFFERED: u8 = 2;

/// Whether new rows of `rel` must reach the engine before their index
/// entries exist. A buffered row is invisible to other backends: one that
/// reaches it through an index entry learns only its creator
/// (`tam/fetch.rs`, `ipc::buffered_rows`), which is all a btree unique
/// check needs. An exclusion constraint's check (and ON CONFLICT's, through
/// an expression index) forms index values from the row first, so tables
/// with either are written through. Cached in the relcache entry, which an
/// index's creation or drop rebuilds.
unsafe fn writes_through(rel: pg_sys::Relation) -> bool {
    if !(*(*rel).rd_rel).relhasindex {
        return false;
    }
    let cached = (*rel).rd_amcache as *const u8;
    if !cached.is_null() {
        return *cached == WRITE_THROUGH;
    }
    let answer = indexes_check_by_value(rel);
    let cell = pg_sys::MemoryContextAlloc(pg_sys::CacheMemoryContext, 1) as *mut u8;
    *cell = if answer { WRITE_THROUGH } else { BUFFERED };
    (*rel).rd_amcache = cell.cast();
    answer
}

/// Whether some index of `rel` backs an exclusion constraint or has
/// expressions.
unsafe fn indexes_check_by_value(rel: pg_sys::Relation) -> bool {
    let indexes = pg_sys::RelationGetIndexList(rel);
    let mut by_value = false;
    for i in 0..if indexes.is_null() { 0 } else { (*indexes).length } {
        let oid = (*(*indexes).elements.add(i as usize)).oid_value;
        let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::INDEXRELID as i32, pg_sys::Datum::from(oid));
        if tuple.is_null() {
            // Dropped under us: the conservative answer.
            by_value = true;
            break;
        }
        let header = (*tuple).t_data;
        let index = (header as *const u8).add(usize::from((*header).t_hoff)) as *const pg_sys::FormData_pg_index;
        let expressions = !pg_sys::heap_attisnull(tuple, pg_sys::Anum_pg_index_indexprs as i32, std::ptr::null_mut());
        by_value |= (*index).indisexclusion || expressions;
        pg_sys::ReleaseSysCache(tuple);
        if by_value {
            break;
        }
    }
    pg_sys::list_free(indexes);
    by_value
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn tuple_insert(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    _options: i32,
    _bistate: *mut pg_sys::BulkInsertStateData,
) {
    insert_slot(rel, slot, cid);
    flush_if_checked_by_value(rel);
    pg_sys::pgstat_count_heap_insert(rel, 1);
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn multi_insert(
    rel: pg_sys::Relation,
    slots: *mut *mut pg_sys::TupleTableSlot,
    nslots: i32,
    cid: pg_sys::CommandId,
    _options: i32,
    _bistate: *mut pg_sys::BulkInsertStateData,
) {
    let mut highest = None;
    for i in 0..nslots.max(0) as usize {
        let rowid = insert_slot_uncovered(rel, *slots.add(i), cid);
        highest = highest.max(Some(rowid));
    }
    if let Some(rowid) = highest {
        super::forklen::cover_inserted(rel, rowid);
    }
    flush_if_checked_by_value(rel);
    pg_sys::pgstat_count_heap_insert(rel, i64::from(nslots));
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn finish_bulk_insert(rel: pg_sys::Relation, _options: i32) {
    if let Err(e) = engine_client::flush_pending() {
        e.raise(&format!("inserting into {}", rel_name(rel)));
    }
}

/// INSERT ... ON CONFLICT: the row is written through at once (concurrent
/// inserters' unique checks must see it), then kept or removed by
/// `tuple_complete_speculative` depending on the index insertions.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn tuple_insert_speculative(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    _options: i32,
    _bistate: *mut pg_sys::BulkInsertStateData,
    _spec_token: u32,
) {
    insert_slot(rel, slot, cid);
    if let Some(rowid) = super::rowid_from_tid(&(*slot).tts_tid) {
        engine_client::note_pending(pasv_am::protocol::Note::Speculative(rowid));
    }
    if let Err(e) = engine_client::flush_pending() {
        e.raise(&format!("inserting into {}", rel_name(rel)));
    }
    pg_sys::pgstat_count_heap_insert(rel, 1);
}

/// A conflicting speculative row is removed outright ("super-deleted"):
/// nobody but this transaction's dirty-snapshot checkers ever saw it.
/// (Concurrent inserters wait for this transaction rather than for a
/// speculative-insertion token, which heap uses to avoid some waits.)
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn tuple_complete_speculative(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    _spec_token: u32,
    succeeded: bool,
) {
    let Some(rowid) = super::rowid_from_tid(&(*slot).tts_tid) else { return };
    let mut batch = crate::logical::notes::batch_for(rel);
    if succeeded {
        // Logical decoding learns that the row stays (heap logs the same).
        if super::logs_changes(rel) {
            crate::logical::notes::note_speculative(&mut batch, pasv_am::protocol::Note::SpecConfirmed(rowid));
            if let Err(e) = engine_client::put_batch_now(cf_of(rel), true, &batch) {
                e.raise(&format!("confirming a row of {}", rel_name(rel)));
            }
        }
        return;
    }
    crate::logical::notes::note_speculative(&mut batch, pasv_am::protocol::Note::SpecAborted(rowid));
    let pushed = batch.push(&keys::row_key(rowid, 0), &[]);
    if let Err(e) = pushed.map_err(|e| crate::error::CallError::Protocol(e.to_string())).and_then(|_| engine_client::put_batch_now(cf_of(rel), super::logs_changes(rel), &batch)) {
        e.raise(&format!("withdrawing a conflicting row from {}", rel_name(rel)));
    }
}
