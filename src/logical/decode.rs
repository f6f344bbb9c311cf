//! The read side of logical decoding: pasv's change messages become row
//! changes (INSERT, UPDATE, DELETE) that every output plugin sees, as it sees
//! heap's, so `CREATE PUBLICATION` and subscriptions carry pasv tables.
//!
//! How: PostgreSQL decodes a logical message with the `rm_decode` of its
//! resource manager, `RM_LOGICALMSG_ID`, which queues the message for the
//! output plugin. At preload, pasv wraps that entry of `RmgrTable` (which
//! PostgreSQL 16 keeps writable, for custom resource managers): the original
//! runs first, unchanged, and then, for a transactional `pasv` message of
//! the slot's database, the batch's rows are queued as the changes heap's
//! decoder would queue for the same statements, under the same checks
//! (snapshot state, fast-forward, origin filter). pasv's own plugin (crash
//! recovery) gets none.
//!
//! What a batch means (the write paths in `tam/` build them so):
//! * a tuple at version 0: an INSERT (speculative if noted so; its end is
//!   noted later, confirmed or withdrawn);
//! * a tuple at a newer version: an UPDATE in place;
//! * a delete marker: a DELETE; one that says "moved to r" with the tuple
//!   at r's version 0 in the same batch: an UPDATE that moved;
//! * an empty value: pruning or a withdrawn speculative row, no change;
//! * batches noted as maintenance (VACUUM, CLUSTER): nothing.
//!
//! The old row of a DELETE or UPDATE is the replica identity the batch
//! noted. TOAST: large values are in a heap TOAST table whose own records
//! come first, so PostgreSQL's reorder buffer reassembles them as for heap.

use crate::wal::LogicalMessageHeader;
use pasv_am::keys::decode_row_key;
use pasv_am::protocol::{decode_request, expand, parse_notes, put_batch_len, Note, Request};
use pasv_am::row::{RowHeader, HEADER_LEN};
use pgrx::pg_sys;
use std::collections::{HashMap, HashSet};

/// `XLogRecordBuffer` (replication/decode.h; opaque in pgrx's bindings).
#[repr(C)]
struct RecordBuffer {
    origptr: pg_sys::XLogRecPtr,
    endptr: pg_sys::XLogRecPtr,
    record: *mut pg_sys::XLogReaderState,
}

/// `SNAPBUILD_FULL_SNAPSHOT` of `SnapBuildState`.
const SNAPBUILD_FULL_SNAPSHOT: i32 = 1;
/// `SizeofHeapTupleHeader`: what `ReorderBufferGetTupleBuf` adds to a length.
const HEAP_TUPLE_HEADER: usize = 23;

// replication/snapbuild.h; not in pgrx's PG16 bindings. Called through
// pg_guard_ffi_boundary.
extern "C-unwind" {
    fn SnapBuildCurrentState(builder: *mut pg_sys::SnapBuild) -> i32;
    fn SnapBuildProcessChange(builder: *mut pg_sys::SnapBuild, xid: pg_sys::TransactionId, lsn: pg_sys::XLogRecPtr) -> bool;
}

type DecodeFn = unsafe extern "C-unwind" fn(*mut pg_sys::LogicalDecodingContext, *mut pg_sys::XLogRecordBuffer);

/// The logical message decoder pasv wraps (set once, at preload).
static mut ORIGINAL: Option<DecodeFn> = None;

/// Wrap the logical message resource manager's decoder.
///
/// # Safety
/// Once, from `_PG_init` in the postmaster (children inherit the table).
pub unsafe fn install() {
    let entry = (&raw mut pg_sys::RmgrTable).cast::<pg_sys::RmgrData>().add(pg_sys::RmgrIds::RM_LOGICALMSG_ID as usize);
    ORIGINAL = (*entry).rm_decode;
    (*entry).rm_decode = Some(decode_message);
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn decode_message(ctx: *mut pg_sys::LogicalDecodingContext, buf: *mut pg_sys::XLogRecordBuffer) {
    if let Some(original) = ORIGINAL {
        pg_sys::ffi::pg_guard_ffi_boundary(|| original(ctx, buf));
    }
    queue_row_changes(ctx, &*(buf as *const RecordBuffer));
}

/// The message's payload if it is a transactional pasv message of the
/// slot's database that this decoding session should see as row changes.
unsafe fn pasv_payload<'a>(ctx: *mut pg_sys::LogicalDecodingContext, buf: &RecordBuffer) -> Option<&'a [u8]> {
    let builder = (*ctx).snapshot_builder;
    if (*ctx).fast_forward || pg_sys::ffi::pg_guard_ffi_boundary(|| SnapBuildCurrentState(builder)) < SNAPBUILD_FULL_SNAPSHOT {
        return None;
    }
    let record = (*buf.record).record;
    let data = (*record).main_data as *const u8;
    let len = (*record).main_data_len as usize;
    let header_len = std::mem::size_of::<LogicalMessageHeader>();
    if data.is_null() || len < header_len {
        return None;
    }
    let header = std::ptr::read_unaligned(data as *const LogicalMessageHeader);
    let slot = &(*(*ctx).slot).data;
    if !header.transactional || header.db_id != slot.database {
        return None;
    }
    let end = header_len.checked_add(header.prefix_size)?.checked_add(header.message_size)?;
    if end > len || header.prefix_size != crate::wal::PREFIX.to_bytes_with_nul().len() {
        return None;
    }
    let bytes = std::slice::from_raw_parts(data, end);
    if &bytes[header_len..header_len + header.prefix_size] != crate::wal::PREFIX.to_bytes_with_nul() {
        return None;
    }
    // pasv's own plugin (recovery) reads the messages themselves.
    let plugin = std::ffi::CStr::from_ptr(slot.plugin.data.as_ptr());
    if plugin.to_bytes() == crate::replay::PLUGIN_NAME.as_bytes() {
        return None;
    }
    let origin = (*record).record_origin;
    if (*ctx).callbacks.filter_by_origin_cb.is_some() && pg_sys::filter_by_origin_cb_wrapper(ctx, origin) {
        return None;
    }
    let (xid, lsn) = ((*record).header.xl_xid, buf.origptr);
    if !pg_sys::ffi::pg_guard_ffi_boundary(|| SnapBuildProcessChange(builder, xid, lsn)) {
        return None;
    }
    Some(&bytes[header_len + header.prefix_size..])
}

/// One row change to queue.
enum Change<'a> {
    Insert { rowid: u64, tuple: &'a [u8], speculative: bool },
    Update { old_rowid: u64, tuple: &'a [u8] },
    Delete { rowid: u64 },
    SpecConfirm,
    SpecAbort,
}

unsafe fn queue_row_changes(ctx: *mut pg_sys::LogicalDecodingContext, buf: &RecordBuffer) {
    let Some(logged) = pasv_payload(ctx, buf) else { return };
    // pasv writes only change batches under its prefix, but any session may
    // log a message with it (`pg_logical_emit_message`): such a message is
    // skipped, as recovery skips it, rather than stopping every decoder.
    let Ok(payload) = expand(logged) else {
        pgrx::warning!("pasv: skipping a damaged compact change message at {}", crate::fmt_lsn(buf.origptr));
        return;
    };
    let payload: &[u8] = &payload;
    let Ok(Request::PutBatch { cf, batch, .. }) = decode_request(payload) else {
        pgrx::warning!("pasv: skipping a \"pasv\" message at {} that is not a change batch", crate::fmt_lsn(buf.origptr));
        return;
    };
    let notes = match parse_notes(&payload[put_batch_len(batch).min(payload.len())..]) {
        Ok(notes) => notes,
        Err(e) => {
            pgrx::warning!("pasv: skipping the change message at {}: its logical notes are damaged: {e}", crate::fmt_lsn(buf.origptr));
            return;
        }
    };
    if notes.contains(&Note::Maintenance) {
        return;
    }
    let mut tablespace = 0;
    let mut old_rows: HashMap<u64, &[u8]> = HashMap::new();
    let mut speculative: HashSet<u64> = HashSet::new();
    let mut aborted: HashSet<u64> = HashSet::new();
    let mut confirmed = 0usize;
    for note in &notes {
        match *note {
            Note::Tablespace(oid) => tablespace = oid,
            Note::OldRow { rowid, tuple } => {
                old_rows.insert(rowid, tuple);
            }
            Note::Speculative(rowid) => {
                speculative.insert(rowid);
            }
            Note::SpecConfirmed(_) => confirmed += 1,
            Note::SpecAborted(rowid) => {
                aborted.insert(rowid);
            }
            Note::Maintenance => {}
        }
    }
    // Rows some delete marker of this batch says its row moved to.
    let mut moved_from: HashMap<u64, u64> = HashMap::new();
    let mut entries = Vec::with_capacity(batch.len());
    for (key, value) in batch.iter() {
        let Some((rowid, version)) = decode_row_key(key) else { continue };
        if value.is_empty() {
            if version == 0 && aborted.contains(&rowid) {
                entries.push(Change::SpecAbort);
            }
            continue;
        }
        let Ok((header, _)) = RowHeader::decode(value) else { continue };
        if header.is_bookkeeping() {
            // A chain root's side of another member's change.
            continue;
        }
        if header.is_tombstone() {
            if header.is_moved() {
                moved_from.insert(header.moved_to, rowid);
            } else {
                entries.push(Change::Delete { rowid });
            }
        } else if version == 0 {
            entries.push(Change::Insert { rowid, tuple: &value[HEADER_LEN..], speculative: speculative.contains(&rowid) });
        } else {
            entries.push(Change::Update { old_rowid: rowid, tuple: &value[HEADER_LEN..] });
        }
    }
    entries.extend((0..confirmed).map(|_| Change::SpecConfirm));
    let record = (*buf.record).record;
    let target = Target {
        ctx,
        xid: (*record).header.xl_xid,
        lsn: buf.origptr,
        origin: (*record).record_origin,
        locator: pg_sys::RelFileLocator { spcOid: pg_sys::Oid::from(tablespace), dbOid: pg_sys::Oid::from(cf.db), relNumber: pg_sys::Oid::from(cf.rel) },
    };
    for change in entries {
        match change {
            Change::Insert { rowid, tuple, speculative } => match moved_from.get(&rowid) {
                Some(from) => target.queue(pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_UPDATE, old_rows.get(from).copied(), Some(tuple)),
                None if speculative => target.queue(pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_INTERNAL_SPEC_INSERT, None, Some(tuple)),
                None => target.queue(pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_INSERT, None, Some(tuple)),
            },
            Change::Update { old_rowid, tuple } => {
                target.queue(pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_UPDATE, old_rows.get(&old_rowid).copied(), Some(tuple))
            }
            Change::Delete { rowid } => {
                target.queue(pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_DELETE, old_rows.get(&rowid).copied(), None)
            }
            Change::SpecConfirm => target.queue(pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_INTERNAL_SPEC_CONFIRM, None, None),
            Change::SpecAbort => target.queue(pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_INTERNAL_SPEC_ABORT, None, None),
        }
    }
}

/// Where the changes of one message go.
struct Target {
    ctx: *mut pg_sys::LogicalDecodingContext,
    xid: pg_sys::TransactionId,
    lsn: pg_sys::XLogRecPtr,
    origin: pg_sys::RepOriginId,
    locator: pg_sys::RelFileLocator,
}

impl Target {
    /// Queue one change, as heap's decoder does for its records.
    unsafe fn queue(&self, action: pg_sys::ReorderBufferChangeType::Type, old: Option<&[u8]>, new: Option<&[u8]>) {
        let rb = (*self.ctx).reorder;
        let change = pg_sys::ReorderBufferGetChange(rb);
        (*change).action = action;
        (*change).origin_id = self.origin;
        (*change).data.tp.rlocator = self.locator;
        (*change).data.tp.oldtuple = old.map_or(std::ptr::null_mut(), |t| tuple_buf(rb, t));
        (*change).data.tp.newtuple = new.map_or(std::ptr::null_mut(), |t| tuple_buf(rb, t));
        (*change).data.tp.clear_toast_afterwards = true;
        pg_sys::ReorderBufferQueueChange(rb, self.xid, self.lsn, change, false);
    }
}

/// A reorder-buffer tuple holding a copy of `tuple` (a whole heap tuple).
unsafe fn tuple_buf(rb: *mut pg_sys::ReorderBuffer, tuple: &[u8]) -> *mut pg_sys::ReorderBufferTupleBuf {
    let buf = pg_sys::ReorderBufferGetTupleBuf(rb, tuple.len().saturating_sub(HEAP_TUPLE_HEADER));
    let t = &mut (*buf).tuple;
    std::ptr::copy_nonoverlapping(tuple.as_ptr(), t.t_data as *mut u8, tuple.len());
    t.t_len = tuple.len() as u32;
    t.t_self = pg_sys::ItemPointerData::default();
    t.t_self.ip_blkid.bi_hi = 0xFFFF;
    t.t_self.ip_blkid.bi_lo = 0xFFFF;
    t.t_tableOid = pg_sys::InvalidOid;
    buf
}
