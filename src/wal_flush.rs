//! WAL before data, the engine worker's half (DESIGN §4): RocksDB's flush
//! threads and the engine's service threads ask for the PostgreSQL WAL to be
//! durable up to an LSN; only the engine's main thread may call `XLogFlush`
//! (DESIGN §1), so it does, and wakes them.
//!
//! Protocol: a requesting thread raises `requested` (fetch_max), sends the
//! process SIGUSR1 (every other thread blocks all signals, so the main thread
//! takes it, and its handler sets the latch), then sleeps on `generation`
//! until `flushed` covers its LSN. The main thread, after every latch wake,
//! flushes to `requested`, publishes `flushed`, bumps `generation` and wakes
//! the sleepers. A sleeper re-checks every 50 ms, so a lost signal costs a
//! delay, never a hang.

use crate::ipc::futex;
use pasv_am::wal_order::WalDurability;
use pgrx::pg_sys;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

pub struct WalFlusher {
    requested: AtomicU64,
    flushed: AtomicU64,
    generation: AtomicU32,
    pid: i32,
}

extern "C" {
    fn kill(pid: i32, sig: c_int) -> c_int;
    fn __errno_location() -> *mut c_int;
}
const SIGUSR1: c_int = 10;

impl WalFlusher {
    /// Create in the engine's main thread, and install its signal handler.
    pub fn new() -> WalFlusher {
        // SAFETY: installs a handler in this (the main) thread's process;
        // the handler only sets our latch, like PostgreSQL's own.
        unsafe {
            pg_sys::pqsignal(SIGUSR1, Some(wake_on_sigusr1));
        }
        WalFlusher {
            requested: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            generation: AtomicU32::new(0),
            // SAFETY: reading our pid.
            pid: unsafe { pg_sys::MyProcPid },
        }
    }

    /// Main thread: serve pending requests (call after every latch wake).
    pub fn serve(&self) {
        let wanted = self.requested.load(Ordering::SeqCst);
        if wanted > self.flushed.load(Ordering::SeqCst) {
            crate::crash_point::reach(crate::crash_point::Point::FlushBeginWal);
            // SAFETY: main thread of a process attached to shared memory.
            unsafe { pg_sys::XLogFlush(wanted) };
            self.publish(wanted);
        }
    }

    /// Main thread: make everything inserted so far durable (before close).
    pub fn flush_everything(&self) {
        // SAFETY: as in `serve`.
        let lsn = unsafe { crate::wal::flush_inserted() };
        self.publish(lsn.max(self.requested.load(Ordering::SeqCst)));
    }

    fn publish(&self, lsn: u64) {
        self.flushed.fetch_max(lsn, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
        futex::wake(&self.generation, i32::MAX);
    }
}

impl WalDurability for WalFlusher {
    fn ensure_durable(&self, lsn: u64) {
        // Called as a memtable flush begins (and by engine_wal's sync).
        crate::crash_point::reach(crate::crash_point::Point::FlagFlush);
        if self.flushed.load(Ordering::SeqCst) >= lsn {
            return;
        }
        self.requested.fetch_max(lsn, Ordering::SeqCst);
        loop {
            let seen = self.generation.load(Ordering::SeqCst);
            if self.flushed.load(Ordering::SeqCst) >= lsn {
                return;
            }
            // SAFETY: plain libc call; signals our own process.
            unsafe { kill(self.pid, SIGUSR1) };
            futex::wait(&self.generation, seen, Duration::from_millis(50));
        }
    }
}

unsafe extern "C-unwind" fn wake_on_sigusr1(_signal: c_int) {
    let saved = *__errno_location();
    pg_sys::SetLatch(pg_sys::MyLatch);
    *__errno_location() = saved;
}
