//! The pasv engine: the background worker that is the only process to open
//! RocksDB (`$PGDATA/pasv/`). Its main thread handles PostgreSQL signals and
//! the latch; `pasv.engine_threads` service threads answer the channel.
//!
//! Invariants: every thread is spawned, and RocksDB opened, with all signals
//! blocked, so PostgreSQL's signals (SIGTERM, SIGHUP, SIGURG for latches)
//! reach only the main thread. Service threads never call PostgreSQL.
//! A clean stop flushes every memtable and closes RocksDB.

use crate::ipc::{client, server, ENGINE_DOWN, ENGINE_FAILED, ENGINE_READY, ENGINE_STARTING, ENGINE_STOPPING};
use pasv_am::engine::{Engine, EngineConfig};
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::pg_sys;
use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Register the engine worker (from `_PG_init`, during preload).
pub fn register() {
    BackgroundWorkerBuilder::new("pasv engine")
        .set_type("pasv engine")
        .set_function("pasv_engine_main")
        .set_library("pasv")
        .enable_shmem_access(None)
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(5)))
        .load();
}

/// glibc's sigset_t (1024 bits).
#[repr(C)]
struct SigSet([u64; 16]);
extern "C" {
    fn sigfillset(set: *mut SigSet) -> i32;
    fn pthread_sigmask(how: i32, set: *const SigSet, old: *mut SigSet) -> i32;
}
const SIG_SETMASK: i32 = 2;

/// Run `f` with every signal blocked in the calling thread; threads it
/// spawns inherit the blocked mask. The previous mask is restored after.
fn with_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    let mut all = SigSet([0; 16]);
    let mut old = SigSet([0; 16]);
    // SAFETY: plain libc calls on stack-owned sigsets.
    unsafe {
        sigfillset(&mut all);
        pthread_sigmask(SIG_SETMASK, &all, &mut old);
    }
    let r = f();
    // SAFETY: as above; restores the main thread's mask.
    unsafe {
        pthread_sigmask(SIG_SETMASK, &old, std::ptr::null_mut());
    }
    r
}

fn data_dir() -> PathBuf {
    // SAFETY: DataDir is set before any background worker starts.
    let dir = unsafe { CStr::from_ptr(pg_sys::DataDir) };
    PathBuf::from(dir.to_string_lossy().into_owned()).join("pasv")
}

#[pgrx::pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pasv_engine_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let Some(chan) = client::channel() else {
        pgrx::error!("pasv engine: channel shared memory is not mapped");
    };
    let header = chan.header();
    header.engine_state.store(ENGINE_STARTING, Ordering::Release);

    let config = EngineConfig {
        path: data_dir(),
        memtable_budget_bytes: crate::guc::MEMTABLE_BUDGET_MB.get() as usize * 1024 * 1024,
        block_cache_bytes: crate::guc::BLOCK_CACHE_MB.get() as usize * 1024 * 1024,
        background_jobs: 2,
    };
    let started = Instant::now();
    let engine = match with_signals_blocked(|| Engine::open(config)) {
        Ok(engine) => Arc::new(engine),
        Err(e) => {
            header.engine_state.store(ENGINE_FAILED, Ordering::Release);
            pgrx::ereport!(
                pgrx::PgLogLevel::ERROR,
                pgrx::PgSqlErrorCode::ERRCODE_IO_ERROR,
                format!("pasv engine could not open RocksDB at {}: {e}", data_dir().display()),
                "Check the directory's permissions and free space; the engine retries every 5 seconds."
            );
            unreachable!()
        }
    };

    let stop = Arc::new(AtomicBool::new(false));
    let nthreads = crate::guc::ENGINE_THREADS.get().max(1) as usize;
    let threads: Vec<_> = with_signals_blocked(|| {
        (0..nthreads)
            .map(|t| {
                let engine = Arc::clone(&engine);
                let stop = Arc::clone(&stop);
                std::thread::Builder::new()
                    .name(format!("pasv-serve-{t}"))
                    .spawn(move || {
                        server::serve(chan, &stop, t, |req, resp| pasv_am::server::handle(&engine, req, resp))
                    })
                    .expect("spawn pasv service thread")
            })
            .collect()
    });

    // SAFETY: reading our own pid global.
    header.engine_pid.store(unsafe { pg_sys::MyProcPid }, Ordering::Release);
    header.engine_generation.fetch_add(1, Ordering::Relaxed);
    header.engine_state.store(ENGINE_READY, Ordering::Release);
    pgrx::log!(
        "pasv engine ready: RocksDB at {} opened in {:.0} ms, {} service threads",
        data_dir().display(),
        started.elapsed().as_secs_f64() * 1000.0,
        nthreads
    );

    while BackgroundWorker::wait_latch(Some(Duration::from_secs(1))) {}

    header.engine_state.store(ENGINE_STOPPING, Ordering::Release);
    stop.store(true, Ordering::Release);
    server::wake_all(chan);
    for t in threads {
        let _ = t.join();
    }
    let engine = match Arc::try_unwrap(engine) {
        Ok(engine) => engine,
        Err(_) => pgrx::error!("pasv engine: service threads still hold the engine"),
    };
    let closing = Instant::now();
    match engine.close() {
        Ok(()) => pgrx::log!(
            "pasv engine stopped: memtables flushed and RocksDB closed in {:.0} ms",
            closing.elapsed().as_secs_f64() * 1000.0
        ),
        Err(e) => pgrx::warning!("pasv engine: closing RocksDB failed: {e}"),
    }
    header.engine_state.store(ENGINE_DOWN, Ordering::Release);
}
