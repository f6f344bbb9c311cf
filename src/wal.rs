//! The log (DESIGN.md §4): every change pasv makes to a column family is
//! first written to PostgreSQL's WAL as a *transactional* logical message
//! with prefix `pasv`, carrying the exact keys and values — the encoded
//! `PutBatch` request in its compact WAL form (an empty value deletes a
//! key; `pasv_am::protocol::wal_form`), followed by the
//! batch's logical notes when it has any (`src/logical/`). Messages of
//! aborted (sub)transactions are dropped by logical decoding; replaying the
//! committed ones in commit order rebuilds what a crash lost (`replay/`).
//! Not in `unlogged` mode, which logs nothing.
//!
//! Also the two WAL rules a backend obeys around engine writes: a new CF
//! incarnation is created at a durable WAL position ([`creation_point`]),
//! and in `engine_wal` mode the writing xid is durable in PostgreSQL's WAL
//! before RocksDB's WAL holds its rows ([`xid_logged_before_engine_wal`]).

use crate::guc::{self, DurabilityMode};
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

/// `xl_logical_message` up to its payload (replication/message.h; not in
/// pgrx's PG16 bindings): `SizeOfLogicalMessage` is 24 bytes. Written here,
/// read back by `logical::decode`.
#[repr(C)]
pub(crate) struct LogicalMessageHeader {
    pub(crate) db_id: pg_sys::Oid,
    pub(crate) transactional: bool,
    pub(crate) prefix_size: usize,
    pub(crate) message_size: usize,
}

const _: () = assert!(std::mem::size_of::<LogicalMessageHeader>() == 24);

/// `RM_LOGICALMSG_ID`'s only record type.
const XLOG_LOGICAL_MESSAGE: u8 = 0;

/// Log one change batch (an encoded `PutBatch`) in the current transaction,
/// before it is sent to the engine, followed by its logical notes (see
/// `pasv_am::protocol::logical_notes`; empty for most batches). Assigns a
/// transaction id if needed. The batch is logged in its compact form
/// (`pasv_am::protocol::wal_form`: about a third of a TPC-B transaction's
/// WAL was the channel's alignment and fixed-width fields), which every
/// reader expands back (`pasv_am::protocol::expand`). The record is the one
/// `LogLogicalMessage` writes for a transactional message whose payload is
/// both parts; they are registered apart, so the notes are not copied.
///
/// # Safety
/// Backend inside a transaction.
pub unsafe fn log_change(encoded_put_batch: &[u8], notes: &[u8]) -> pg_sys::XLogRecPtr {
    COMPACT.with(|buf| {
        let mut buf = buf.borrow_mut();
        let payload = if pasv_am::protocol::compact(encoded_put_batch, &mut buf) {
            &buf[..]
        } else {
            encoded_put_batch
        };
        log_payload(payload, notes)
    })
}

thread_local! {
    /// The compact form of the batch being logged (`pasv_am::protocol::compact`),
    /// kept between calls so that logging allocates only when a batch is
    /// larger than every one before.
    static COMPACT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Logs one message: `payload` (a change batch in the WAL's form) ‖ `notes`.
unsafe fn log_payload(payload: &[u8], notes: &[u8]) -> pg_sys::XLogRecPtr {
    pg_sys::ffi::pg_guard_ffi_boundary(|| {
        pg_sys::GetCurrentTransactionId();
        let prefix = PREFIX.to_bytes_with_nul();
        let mut header = LogicalMessageHeader {
            db_id: pg_sys::MyDatabaseId,
            transactional: true,
            prefix_size: prefix.len(),
            message_size: payload.len() + notes.len(),
        };
        pg_sys::XLogBeginInsert();
        pg_sys::XLogRegisterData(&raw mut header as *mut c_char, std::mem::size_of::<LogicalMessageHeader>() as u32);
        pg_sys::XLogRegisterData(prefix.as_ptr() as *mut c_char, prefix.len() as u32);
        pg_sys::XLogRegisterData(payload.as_ptr() as *mut c_char, payload.len() as u32);
        if !notes.is_empty() {
            pg_sys::XLogRegisterData(notes.as_ptr() as *mut c_char, notes.len() as u32);
        }
        pg_sys::XLogSetRecordFlags(pg_sys::XLOG_INCLUDE_ORIGIN as u8);
        pg_sys::XLogInsert(pg_sys::RmgrIds::RM_LOGICALMSG_ID as u8, XLOG_LOGICAL_MESSAGE)
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

/// The creation point of a new CF incarnation: the end of the WAL inserted
/// so far, made durable. Every message logged before it (a reused
/// relfilenumber's past, rows emptied by a TRUNCATE in the creating
/// transaction) ends at or below it; every later one ends above it (replay
/// compares a message's record end, `replay::plugin`).
pub fn creation_point() -> u64 {
    if !guc::durability().replays() {
        return 0;
    }
    // SAFETY: a backend.
    unsafe { flush_inserted() }
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
