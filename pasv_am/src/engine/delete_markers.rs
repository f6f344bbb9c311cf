//! Keeping delete markers from slowing reads down.
//!
//! Writers and VACUUM remove dead versions with deletes, and scans of
//! tables without indexes remove whole dead rows (`src/tam/scan_prune.rs`).
//! A delete does not free its key: the marker and the version it hides stay
//! in the memtable, then in SST files, until a compaction drops both, and
//! every iterator that passes them steps over each one. A small table
//! updated row by row gathers thousands of them in a memtable that the
//! shared budget never makes large enough to flush.
//!
//! Two RocksDB mechanisms bound that, set on every CF's options:
//! * an iterator step that walks very many hidden entries in the active
//!   memtable makes RocksDB flush that memtable
//!   (`memtable_op_scan_flush_trigger`); such a flush is an ordinary one:
//!   the flush listener still waits for the WAL that covers it;
//! * an SST file with many delete markers is marked for compaction, which
//!   drops them with the versions they hide
//!   (`CompactOnDeletionCollectorFactory`).
//!
//! RocksDB 11's `min_tombstones_for_range_conversion` (a run of deleted
//! keys recorded as one range delete) is left off: it made such scans
//! slower (HOT_PATH.md §36).
//!
//! May call RocksDB's C API; nothing else.

use rocksdb::Options;
use std::ffi::c_void;

/// Hidden entries of the active memtable one iterator step may walk before
/// RocksDB flushes that memtable. 4 096 (session 21) let a hot row's pruned
/// chain members pile up to a few thousand keys between flushes, each
/// walked by every sequential scan of the table (TPC-C-like with prepared
/// statements right after its load: 340 transactions a second at 4 096,
/// 783 at 256, 747 at 64; session 25, HOT_PATH.md §41). Only a CF whose
/// scans meet that many deleted keys in a row is flushed, and only its own
/// memtable.
const SCAN_FLUSH_TRIGGER: u32 = 256;
/// An SST file with at least `DELETES_IN_WINDOW` deletes among any
/// `DELETE_WINDOW` consecutive entries, or deletes making at least
/// `DELETE_RATIO` of its entries, is compacted.
const DELETE_WINDOW: usize = 1024;
const DELETES_IN_WINDOW: usize = 512;
const DELETE_RATIO: f64 = 0.5;

extern "C" {
    fn rocksdb_options_set_memtable_op_scan_flush_trigger(options: *mut c_void, value: u32);
}

/// Set both mechanisms on `options` (the options every CF is opened or
/// created with).
pub(super) fn configure(options: &mut Options) {
    use rocksdb::AsRawPtr;
    // SAFETY: `options` is alive for the call; the setter only stores a
    // field of the options object.
    unsafe {
        rocksdb_options_set_memtable_op_scan_flush_trigger(options.as_raw_ptr() as *mut c_void, SCAN_FLUSH_TRIGGER);
    }
    options.add_compact_on_deletion_collector_factory(DELETE_WINDOW, DELETES_IN_WINDOW, DELETE_RATIO);
}
