//! WAL before data (DESIGN §4): no memtable reaches disk before the
//! PostgreSQL WAL covering every write in it is durable.
//!
//! Every write into a CF raises the CF's `max_lsn` (before the write, so a
//! flush can never see the write without its LSN). An `OnFlushBegin` event
//! listener, installed through RocksDB's C API (the Rust crate does not wrap
//! listeners), runs on RocksDB's flush thread and asks the [`WalDurability`]
//! implementation to make the WAL durable up to that CF's `max_lsn` before
//! the flush proceeds. The extension implements it by handing the request to
//! the engine worker's main thread, the only one allowed to call
//! `XLogFlush` (DESIGN §1); this module never calls PostgreSQL.
//!
//! Hand-written FFI: the three C functions below are part of RocksDB's C API
//! (`rocksdb/c.h`), linked from librocksdb-sys, which the `rocksdb` crate
//! does not re-export.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};


/// Makes PostgreSQL's WAL durable up to an LSN, from any thread.
pub trait WalDurability: Send + Sync {
    /// Returns once the WAL is flushed at least up to `lsn` (0: nothing to do).
    fn ensure_durable(&self, lsn: u64);
}

/// Size of a WAL page header (`SizeOfXLogShortPHD` on 64-bit platforms).
pub const WAL_PAGE_HEADER: u64 = 24;
/// Size of the header of a segment's first page (`SizeOfXLogLongPHD`).
pub const WAL_SEGMENT_HEADER: u64 = 40;

/// The end of the WAL inserted so far, given where the next record will
/// start (`GetXLogInsertRecPtr`): at a page boundary that position lies past
/// the next page's header, which is not written before that record is, so
/// `XLogFlush` cannot reach it; every record inserted so far ends at the
/// boundary itself.
pub fn inserted_wal_end(next_record: u64, page_size: u64, segment_size: u64) -> u64 {
    if segment_size > 0 && next_record % segment_size == WAL_SEGMENT_HEADER {
        next_record - WAL_SEGMENT_HEADER
    } else if page_size > 0 && next_record % page_size == WAL_PAGE_HEADER {
        next_record - WAL_PAGE_HEADER
    } else {
        next_record
    }
}

/// For engines outside PostgreSQL (unit tests): every LSN counts as durable.
pub struct NoWal;

impl WalDurability for NoWal {
    fn ensure_durable(&self, _lsn: u64) {}
}

/// What the listener needs to find a table CF's `max_lsn` by the RocksDB
/// name the flush reports (a `t.`/`u.` name or a bound spare's `s.` name).
pub(crate) struct LsnBook {
    pub(crate) by_name: RwLock<HashMap<String, Arc<AtomicU64>>>,
    pub(crate) wal: Arc<dyn WalDurability>,
}

impl LsnBook {
    pub(crate) fn new(wal: Arc<dyn WalDurability>) -> LsnBook {
        LsnBook { by_name: RwLock::new(HashMap::new()), wal }
    }

    pub(crate) fn register(&self, cf_name: &str, max_lsn: Arc<AtomicU64>) {
        self.by_name.write().unwrap_or_else(PoisonError::into_inner).insert(cf_name.to_owned(), max_lsn);
    }

    pub(crate) fn forget(&self, cf_name: &str) {
        self.by_name.write().unwrap_or_else(PoisonError::into_inner).remove(cf_name);
    }

    fn before_flush(&self, cf_name: &str) {
        let lsn = {
            let map = self.by_name.read().unwrap_or_else(PoisonError::into_inner);
            match map.get(cf_name) {
                Some(max_lsn) => max_lsn.load(Ordering::SeqCst),
                // meta and default carry no logged writes; a spare no table
                // holds has none; a dropped table's CF is being dropped.
                None => return,
            }
        };
        if lsn != 0 {
            self.wal.ensure_durable(lsn);
        }
    }
}

#[repr(C)]
pub(crate) struct RawOpaque {
    _private: [u8; 0],
}

pub(crate) type FlushCb = unsafe extern "C" fn(*mut c_void, *mut RawOpaque, *const RawOpaque);
pub(crate) type InfoCb = unsafe extern "C" fn(*mut c_void, *const RawOpaque);
pub(crate) type ErrorCb = unsafe extern "C" fn(*mut c_void, u32, *mut RawOpaque);

extern "C" {
    pub(crate) fn rocksdb_eventlistener_create(
        state: *mut c_void,
        destructor: Option<unsafe extern "C" fn(*mut c_void)>,
        on_flush_begin: FlushCb,
        on_flush_completed: FlushCb,
        on_compaction_begin: FlushCb,
        on_compaction_completed: FlushCb,
        on_subcompaction_begin: InfoCb,
        on_subcompaction_completed: InfoCb,
        on_external_file_ingested: FlushCb,
        on_background_error: ErrorCb,
        on_stall_conditions_changed: InfoCb,
        on_memtable_sealed: InfoCb,
    ) -> *mut RawOpaque;
    pub(crate) fn rocksdb_options_add_eventlistener(options: *mut c_void, listener: *mut RawOpaque);
    fn rocksdb_flushjobinfo_cf_name(info: *const RawOpaque, size: *mut usize) -> *const c_char;
}

// RocksDB's C wrapper calls every callback unconditionally (no null
// checks), so the events pasv does not care about get these no-ops.
pub(crate) unsafe extern "C" fn ignore_db_event(_: *mut c_void, _: *mut RawOpaque, _: *const RawOpaque) {}
pub(crate) unsafe extern "C" fn ignore_event(_: *mut c_void, _: *const RawOpaque) {}
unsafe extern "C" fn ignore_error(_: *mut c_void, _: u32, _: *mut RawOpaque) {}

unsafe extern "C" fn on_flush_begin(state: *mut c_void, _db: *mut RawOpaque, info: *const RawOpaque) {
    // SAFETY: `state` is the Arc<LsnBook> leaked in `install` (alive until the
    // destructor runs); `info` is valid for the duration of the callback.
    let book = &*(state as *const LsnBook);
    let mut len = 0usize;
    let ptr = rocksdb_flushjobinfo_cf_name(info, &mut len);
    if ptr.is_null() {
        return;
    }
    let name = std::slice::from_raw_parts(ptr as *const u8, len);
    // A panic must not cross into C++: swallow it (the flush then proceeds,
    // which is what RocksDB would do without a listener).
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if let Ok(name) = std::str::from_utf8(name) {
            book.before_flush(name);
        }
    }));
}

unsafe extern "C" fn destroy(state: *mut c_void) {
    // SAFETY: the pointer came from Arc::into_raw in `install`.
    drop(Arc::from_raw(state as *const LsnBook));
}

/// Adds the WAL-before-data listener to `options` (DB options, before open).
///
/// # Safety
/// `raw_options` must be a live `rocksdb_options_t*`.
pub(crate) unsafe fn install(raw_options: *mut c_void, book: &Arc<LsnBook>) {
    let state = Arc::into_raw(Arc::clone(book)) as *mut c_void;
    let listener = rocksdb_eventlistener_create(
        state,
        Some(destroy),
        on_flush_begin,
        ignore_db_event,
        ignore_db_event,
        ignore_db_event,
        ignore_event,
        ignore_event,
        ignore_db_event,
        ignore_error,
        ignore_event,
        ignore_event,
    );
    rocksdb_options_add_eventlistener(raw_options, listener);
}

#[cfg(test)]
mod tests {
    use super::inserted_wal_end;

    const PAGE: u64 = 8192;
    const SEGMENT: u64 = 16 << 20;

    #[test]
    fn the_inserted_end_never_lies_past_an_unwritten_page_header() {
        // Mid-page: the next record starts where the last one ended.
        assert_eq!(inserted_wal_end(0x30E_1FF0, PAGE, SEGMENT), 0x30E_1FF0);
        // At a page boundary (the failure seen: flush request 0/30E2018,
        // flushed only to 0/30E2000).
        assert_eq!(inserted_wal_end(0x30E_2018, PAGE, SEGMENT), 0x30E_2000);
        // At a segment boundary the first page has the long header.
        assert_eq!(inserted_wal_end(3 * SEGMENT + 40, PAGE, SEGMENT), 3 * SEGMENT);
        // 40 bytes into a page that does not start a segment is a real position.
        assert_eq!(inserted_wal_end(5 * PAGE + 40, PAGE, SEGMENT), 5 * PAGE + 40);
    }
}
