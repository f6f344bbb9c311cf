//! The log (DESIGN.md §4): every change pasv makes to a column family is
//! first written to PostgreSQL's WAL as a *transactional* logical message
//! with prefix `pasv`, carrying the exact keys and values — the encoded
//! `PutBatch` request itself (an empty value deletes a key). Messages of
//! aborted (sub)transactions are dropped by logical decoding; replaying the
//! committed ones in commit order rebuilds what a crash lost (`replay/`).
//! Not in `unlogged` mode, which logs nothing.

use pgrx::pg_sys;
use std::ffi::{c_char, CStr};

/// The prefix of every pasv message (what the output plugin filters on).
pub const PREFIX: &CStr = c"pasv";

// Called only through pg_guard_ffi_boundary: an ERROR inside becomes a Rust
// panic that unwinds these frames, then an ERROR again at pasv's edge.
extern "C-unwind" {
    // replication/message.h; not in pgrx's PG16 bindings.
    fn LogLogicalMessage(
        prefix: *const c_char,
        message: *const c_char,
        size: usize,
        transactional: bool,
    ) -> pg_sys::XLogRecPtr;
}

/// Log one change batch (an encoded `PutBatch`) in the current transaction,
/// before it is sent to the engine. Assigns a transaction id if needed.
///
/// # Safety
/// Backend inside a transaction.
pub unsafe fn log_change(encoded_put_batch: &[u8]) -> pg_sys::XLogRecPtr {
    pg_sys::ffi::pg_guard_ffi_boundary(|| {
        LogLogicalMessage(PREFIX.as_ptr(), encoded_put_batch.as_ptr() as *const c_char, encoded_put_batch.len(), true)
    })
}

/// Make the flushed WAL end at least a page past its current end, by
/// logging (non-transactionally, ignored by decoding) padding and flushing it.
///
/// Why: after a crash that cut a record spanning a page boundary, the next
/// page starts with an "overwrite contrecord". A decoder that reaches the cut
/// record asks for that whole page, and `read_local_xlog_page` waits until
/// WAL is flushed that far, which an idle server (all backends waiting for
/// recovery) never does. Recovery pads first, then decodes.
///
/// # Safety
/// Backend or worker inside a transaction.
pub unsafe fn pad_past_current_page() {
    const PAD: [u8; 3 * 8192] = [0; 3 * 8192];
    pg_sys::ffi::pg_guard_ffi_boundary(|| {
        let lsn = LogLogicalMessage(c"pasv_pad".as_ptr(), PAD.as_ptr() as *const c_char, PAD.len(), false);
        pg_sys::XLogFlush(lsn);
    });
}

/// The end of the WAL inserted so far: a position `XLogFlush` can reach
/// (not `GetXLogInsertRecPtr` itself, which at a page boundary lies past an
/// unwritten page header; see `pasv_am::wal_order::inserted_wal_end`).
pub fn inserted_end() -> pg_sys::XLogRecPtr {
    // SAFETY: plain reads of WAL state and of a setting.
    let (next, segment) = unsafe { (pg_sys::GetXLogInsertRecPtr(), pg_sys::wal_segment_size as u64) };
    pasv_am::wal_order::inserted_wal_end(next, u64::from(pg_sys::XLOG_BLCKSZ), segment)
}

/// Make every WAL record inserted so far durable; returns where that ends.
///
/// # Safety
/// A process attached to shared memory (not a non-main thread).
pub unsafe fn flush_inserted() -> pg_sys::XLogRecPtr {
    let end = inserted_end();
    pg_sys::ffi::pg_guard_ffi_boundary(|| pg_sys::XLogFlush(end));
    end
}
