//! Writes through RocksDB's write stalls: wait out the ordinary ones, fail
//! at once on the stop that only free disk space can end.
//!
//! Owns [`Engine::write_batch`], the one way the engine writes, and the
//! event listener that remembers RocksDB's last unresolved background error.
//!
//! Why: when a memtable flush fails for lack of disk space, RocksDB stops
//! writes and waits (without a timeout) for its own recovery, which polls
//! for free space. A backend's INSERT then hung inside the engine instead of
//! getting PostgreSQL's "disk full" error (`tests/disk_full.sh`, 3 of 5 runs
//! in session 6). Every write therefore asks RocksDB not to wait
//! (`no_slowdown`): a stall comes back as `Incomplete`. While a background
//! error is unresolved, the write fails with that error's text (ENOSPC:
//! SQLSTATE 53100 in the backend). Otherwise a stop is waited out by
//! retrying after short sleeps, and a slowdown by writing again without
//! `no_slowdown`, so RocksDB paces it as it would have.
//!
//! Invariants:
//! * A background error is unresolved from RocksDB's `OnBackgroundError`
//!   until a flush completes (RocksDB's recovery ends with one, and no
//!   flush completes while the disk is full).
//! * A write is retried only while nothing was written: a stall refuses the
//!   whole batch before applying any of it.

use std::ffi::{c_char, c_void, CStr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rocksdb::{AsColumnFamilyRef, ErrorKind, WriteBatch};

use super::{Engine, EngineError};
use crate::wal_order::{
    ignore_db_event, ignore_event, rocksdb_eventlistener_create, rocksdb_options_add_eventlistener,
    RawOpaque,
};

/// Longest sleep between two tries of a stalled write.
const MAX_STALL_SLEEP: Duration = Duration::from_millis(8);

/// RocksDB's last background error, while no flush has completed since.
#[derive(Default)]
pub(crate) struct BackgroundError {
    unresolved: Mutex<Option<String>>,
}

impl BackgroundError {
    fn set(&self, message: String) {
        *self.unresolved.lock().unwrap_or_else(PoisonError::into_inner) = Some(message);
    }

    fn clear(&self) {
        self.unresolved.lock().unwrap_or_else(PoisonError::into_inner).take();
    }

    pub(crate) fn current(&self) -> Option<String> {
        self.unresolved.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

extern "C" {
    fn rocksdb_status_ptr_get_error(status: *mut RawOpaque, errptr: *mut *mut c_char);
    fn rocksdb_free(ptr: *mut c_void);
}

unsafe extern "C" fn on_background_error(state: *mut c_void, _reason: u32, status: *mut RawOpaque) {
    // SAFETY: `state` is the Arc leaked in `install`; `status` is valid for
    // the duration of the callback. No panic may cross into C++.
    let errors = &*(state as *const BackgroundError);
    let mut message: *mut c_char = std::ptr::null_mut();
    rocksdb_status_ptr_get_error(status, &mut message);
    if message.is_null() {
        return; // an OK status: nothing to remember
    }
    let text = CStr::from_ptr(message).to_string_lossy().into_owned();
    rocksdb_free(message as *mut c_void);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| errors.set(text)));
}

unsafe extern "C" fn on_flush_completed(state: *mut c_void, _db: *mut RawOpaque, _info: *const RawOpaque) {
    let errors = &*(state as *const BackgroundError);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| errors.clear()));
}

unsafe extern "C" fn destroy(state: *mut c_void) {
    // SAFETY: the pointer came from Arc::into_raw in `install`.
    drop(Arc::from_raw(state as *const BackgroundError));
}

/// Adds the listener that keeps `errors` current to `raw_options` (DB
/// options, before open).
///
/// # Safety
/// `raw_options` must be a live `rocksdb_options_t*`.
pub(super) unsafe fn install(raw_options: *mut c_void, errors: &Arc<BackgroundError>) {
    let state = Arc::into_raw(Arc::clone(errors)) as *mut c_void;
    let listener = rocksdb_eventlistener_create(
        state,
        Some(destroy),
        ignore_db_event,
        on_flush_completed,
        ignore_db_event,
        ignore_db_event,
        ignore_event,
        ignore_event,
        ignore_db_event,
        on_background_error,
        ignore_event,
        ignore_event,
    );
    rocksdb_options_add_eventlistener(raw_options, listener);
}

impl Engine {
    /// Writes the batch `build` makes (it is called again for each retry),
    /// waiting out ordinary write stalls; `context` names the write in an
    /// error. Fails at once when RocksDB stopped writes after a background
    /// error that has not been resolved (a full disk).
    pub(super) fn write_batch(
        &self,
        build: impl Fn() -> WriteBatch,
        context: impl Fn() -> String,
    ) -> Result<(), EngineError> {
        let mut sleep = Duration::from_micros(250);
        loop {
            match self.db.write_opt(build(), &self.write_options) {
                Err(e) if e.kind() == ErrorKind::Incomplete => {
                    if let Some(reason) = self.background_error.current() {
                        return Err(EngineError::WritesStopped {
                            context: context(),
                            reason,
                        });
                    }
                    if self.writes_stopped() {
                        // A stop (too many memtables or L0 files): RocksDB's
                        // own flushes and compactions end it, or a background
                        // error comes, which the next try reports.
                        std::thread::sleep(sleep);
                        sleep = (sleep * 2).min(MAX_STALL_SLEEP);
                        continue;
                    }
                    // A slowdown: RocksDB paces the write itself (with
                    // `no_slowdown` a delayed write would never go through).
                    // The one case left to wait on is a stop that begins
                    // and fails for lack of space during this very write.
                    return self
                        .db
                        .write_opt(build(), &self.paced_write_options)
                        .map_err(|source| EngineError::RocksDb { context: context(), source });
                }
                result => {
                    return result.map_err(|source| EngineError::RocksDb {
                        context: context(),
                        source,
                    })
                }
            }
        }
    }

    /// [`Engine::write_batch`] of one key.
    pub(super) fn write_one(
        &self,
        cf: &impl AsColumnFamilyRef,
        key: &[u8],
        value: &[u8],
        context: impl Fn() -> String,
    ) -> Result<(), EngineError> {
        self.write_batch(
            || {
                let mut batch = WriteBatch::default();
                batch.put_cf(cf, key, value);
                batch
            },
            context,
        )
    }

    /// Whether RocksDB stops writes now (as opposed to slowing them down).
    fn writes_stopped(&self) -> bool {
        matches!(self.db.property_int_value("rocksdb.is-write-stopped"), Ok(Some(n)) if n > 0)
    }
}
