//! The pasv engine: the background worker that is the only process to open
//! RocksDB (`$PGDATA/pasv/`). Its main thread handles PostgreSQL signals and
//! the latch; `pasv.engine_threads` service threads answer the channel.
//!
//! Invariants: every thread is spawned, and RocksDB opened, with all signals
//! blocked, so PostgreSQL's signals (SIGTERM, SIGHUP, SIGURG for latches)
//! reach only the main thread. Service threads never call PostgreSQL.
//! A clean stop makes the WAL durable, flushes every memtable and closes
//! RocksDB (so a clean restart replays nothing).
//!
//! The main thread also: makes the WAL durable when a RocksDB flush or a
//! service thread asks (WAL before data, [`crate::wal_flush`]); marks the
//! databases to recover after a crash; and supervises one replay worker per
//! database that uses pasv ([`crate::replay`]), starting them as databases
//! appear and restarting them if they exit.

use crate::ipc::{
    client, server, DB_READY, DB_RECOVERING, ENGINE_DOWN, ENGINE_FAILED, ENGINE_READY, ENGINE_STARTING,
    ENGINE_STOPPING,
};
use crate::wal_flush::WalFlusher;
use pasv_am::engine::{Durability, Engine, EngineConfig};
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

/// Refuse a RocksDB directory that came with a base backup (`pg_basebackup`,
/// a standby's initial copy): it was copied while RocksDB wrote and
/// compacted, so it may be torn, and logical messages are no-ops in redo, so
/// nothing brought it up to date (PG16_NOTES). PostgreSQL renames the
/// backup's `backup_label` to `backup_label.old` when recovery from it ends;
/// the engine remembers the label it has run with (`pasv/backup_label.seen`),
/// so a label it has not seen next to an existing store means the store is a
/// copy.
fn check_not_a_restored_copy() -> Result<(), String> {
    let pgdata = data_dir().parent().map(PathBuf::from).unwrap_or_default();
    let label = std::fs::read(pgdata.join("backup_label.old")).ok();
    let seen_path = data_dir().join("backup_label.seen");
    let store_exists = data_dir().join("CURRENT").exists();
    let seen = std::fs::read(&seen_path).ok();
    match label {
        Some(label) if store_exists && seen.as_deref() != Some(label.as_slice()) => Err(format!(
            "the data directory was restored from a base backup (backup_label.old) that copied pasv's store {}; pasv refuses to serve it",
            data_dir().display()
        )),
        Some(label) => {
            std::fs::create_dir_all(data_dir()).map_err(|e| format!("creating {}: {e}", data_dir().display()))?;
            std::fs::write(&seen_path, label).map_err(|e| format!("writing {}: {e}", seen_path.display()))
        }
        None => Ok(()),
    }
}

/// Databases that have a pasv replication slot (`pg_replslot/pasv_<oid>`).
fn databases_with_a_pasv_slot() -> std::collections::HashSet<u32> {
    let pgdata = data_dir().parent().map(PathBuf::from).unwrap_or_default();
    let Ok(entries) = std::fs::read_dir(pgdata.join("pg_replslot")) else {
        return Default::default();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("pasv_")?.parse().ok())
        .collect()
}

/// How many SST files RocksDB may keep open in this process, after raising
/// the soft limit on open files to the hard one: the limit less what RocksDB
/// needs besides (a directory handle per column family, its MANIFEST, log,
/// OPTIONS and the files a flush or compaction writes) and PostgreSQL's own
/// files; -1 (all) when the limit is unlimited or unknown. Before, every
/// table's files stayed open under the usual soft limit of 1 024, and a
/// cluster with a hundred tables failed with "Too many open files".
fn table_file_budget() -> i32 {
    match raise_open_files_limit() {
        Some(limit) => {
            let reserve = (limit / 4).max(64);
            i32::try_from(limit.saturating_sub(reserve).max(20)).unwrap_or(i32::MAX)
        }
        None => -1,
    }
}

/// Raises this process's soft RLIMIT_NOFILE to its hard limit (only the
/// engine process: the postmaster and backends keep theirs) and returns the
/// soft limit now in force (`None`: unlimited or unknown).
#[cfg(target_os = "linux")]
fn raise_open_files_limit() -> Option<u64> {
    // Neither std nor pgrx exposes getrlimit/setrlimit; the declarations are
    // glibc's on 64-bit Linux (rlim_t is an unsigned long, RLIMIT_NOFILE 7).
    #[repr(C)]
    struct RLimit {
        cur: u64,
        max: u64,
    }
    const RLIMIT_NOFILE: std::ffi::c_int = 7;
    const RLIM_INFINITY: u64 = u64::MAX;
    extern "C" {
        fn getrlimit(resource: std::ffi::c_int, rlim: *mut RLimit) -> std::ffi::c_int;
        fn setrlimit(resource: std::ffi::c_int, rlim: *const RLimit) -> std::ffi::c_int;
    }
    let mut limit = RLimit { cur: 0, max: 0 };
    // SAFETY: `limit` is a valid, writable struct of the layout getrlimit
    // fills; the call has no other effect.
    if unsafe { getrlimit(RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    if limit.cur < limit.max {
        let raised = RLimit { cur: limit.max, max: limit.max };
        // SAFETY: as above; raising the soft limit up to the hard one needs
        // no privilege, and a refusal leaves the old limit in force.
        if unsafe { setrlimit(RLIMIT_NOFILE, &raised) } == 0 {
            limit.cur = limit.max;
        }
    }
    (limit.cur != RLIM_INFINITY).then_some(limit.cur)
}

#[cfg(not(target_os = "linux"))]
fn raise_open_files_limit() -> Option<u64> {
    None
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
        durability: crate::guc::durability().engine(),
        max_open_files: table_file_budget(),
        row_cache: crate::shmem::row_cache(),
        pack_new_rows: crate::guc::PACK_NEW_ROWS.get(),
    };
    if let Err(e) = check_not_a_restored_copy() {
        header.engine_state.store(ENGINE_FAILED, Ordering::Release);
        crate::error::raise(
            pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("pasv engine: {e}"),
            "pasv does not support base backups or standbys yet: its RocksDB copy may be torn, and nothing replays pasv's changes into it. Move pasv tables with pg_dump or COPY instead.",
        );
    }
    let started = Instant::now();
    let flusher = Arc::new(WalFlusher::new());
    let wal: Arc<dyn pasv_am::wal_order::WalDurability> = flusher.clone();
    let engine = match with_signals_blocked(|| Engine::open_with_wal(config, wal)) {
        Ok(engine) => Arc::new(engine),
        Err(e) => {
            header.engine_state.store(ENGINE_FAILED, Ordering::Release);
            crate::error::raise(
                pgrx::PgSqlErrorCode::ERRCODE_IO_ERROR,
                format!("pasv engine could not open RocksDB at {}: {e}", data_dir().display()),
                "Check the directory's permissions and free space; the engine retries every 5 seconds.",
            );
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
                        pasv_am::server::prepare_service_thread();
                        server::serve(
                            chan,
                            &stop,
                            t,
                            |req, resp| pasv_am::server::handle(&engine, req, resp),
                            || pasv_am::server::after_reply(&engine),
                        )
                    })
                    .expect("spawn pasv service thread")
            })
            .collect()
    });
    // Creates column families ahead of CREATE TABLE (pasv_am's cf_spares.rs).
    let keeper = with_signals_blocked(|| {
        let engine = Arc::clone(&engine);
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("pasv-spares".to_owned())
            .spawn(move || engine.keep_spares(&stop))
            .expect("spawn pasv spare keeper thread")
    });

    let durability = engine.durability();
    // PostgreSQL empties its unlogged relations (their indexes and TOAST
    // tables too) when it recovers from a crash; unlogged pasv tables must
    // match even if RocksDB was closed cleanly (the engine did not crash).
    // An unclean close already emptied them in `Engine::open`.
    if crate::shmem::postgres_crash_recovery() && engine.opened_clean() {
        match engine.truncate_unlogged() {
            Ok(n) => pgrx::log!("pasv engine: PostgreSQL recovered from a crash: {n} unlogged tables emptied"),
            Err(e) => pgrx::warning!("pasv engine: emptying unlogged tables after PostgreSQL's crash recovery: {e}"),
        }
    }
    if !engine.opened_clean() && durability == Durability::Unlogged {
        match engine.truncate_all() {
            Ok(n) => pgrx::log!("pasv engine: durability is unlogged and the last stop was not clean: {n} tables emptied"),
            Err(e) => pgrx::warning!("pasv engine: emptying tables after an unclean stop: {e}"),
        }
    }
    // After a crash, every database with pasv tables is recovered before
    // its backends may touch them (DESIGN §6).
    let recover = !engine.opened_clean() && matches!(durability, Durability::Pasv | Durability::Naive);
    let mut dbs: Vec<u32> = engine.list_table_cfs().iter().map(|cf| cf.db).collect();
    dbs.dedup();
    // With more databases than places, the places go first to databases
    // whose replication slot kept WAL for them: only those can have
    // unflushed commits to replay (without a slot every commit flushed).
    let protected = databases_with_a_pasv_slot();
    dbs.sort_by_key(|db| !protected.contains(db));
    for db in &dbs {
        if header.claim_db_slot(*db, if recover { DB_RECOVERING } else { DB_READY }).is_none() {
            pgrx::warning!("pasv engine: more than {} databases use pasv; database {db} gets no replay worker", crate::ipc::MAX_DATABASES);
        }
    }

    // Prepared transactions hold their row locks again before any backend
    // can lock a row (locking needs the engine ready: a row is read first).
    let prepared = crate::two_phase::restore(|xid, cf, rowid, mode| {
        engine.lock_row(cf, rowid, xid, mode, 0);
    });
    if prepared > 0 {
        pgrx::log!("pasv engine: {prepared} prepared transactions hold row locks again");
    }

    // SAFETY: reading our own pid global.
    header.engine_pid.store(unsafe { pg_sys::MyProcPid }, Ordering::Release);
    header.engine_generation.fetch_add(1, Ordering::Relaxed);
    header.engine_state.store(ENGINE_READY, Ordering::Release);
    pgrx::log!(
        "pasv engine ready: RocksDB at {} opened in {:.0} ms, {} service threads, durability {}, {}",
        data_dir().display(),
        started.elapsed().as_secs_f64() * 1000.0,
        nthreads,
        durability.name(),
        if engine.opened_clean() { "clean start" } else if recover { "recovery needed" } else { "unclean start" }
    );

    let mut workers = crate::replay::Supervisor::default();
    while crate::ipc::client::worker_wait_latch(Duration::from_millis(500)) {
        flusher.serve();
        workers.tick(header);
    }

    header.engine_state.store(ENGINE_STOPPING, Ordering::Release);
    stop.store(true, Ordering::Release);
    server::wake_all(chan);
    engine.wake_spare_keeper();
    // A service thread may be inside a flush that waits for the WAL: keep
    // serving until every thread is done.
    while threads.iter().any(|t| !t.is_finished()) {
        flusher.serve();
        crate::ipc::client::worker_wait_latch(Duration::from_millis(1));
    }
    for t in threads {
        let _ = t.join();
    }
    let _ = keeper.join();
    flusher.flush_everything();
    let engine = match Arc::try_unwrap(engine) {
        Ok(engine) => engine,
        Err(_) => pgrx::error!("pasv engine: service threads still hold the engine"),
    };
    // A database whose replay did not finish must be recovered again at the
    // next start: its store is not marked clean (DESIGN §6).
    let any_recovering = header.dbs.iter().any(|s| {
        s.db.load(Ordering::Acquire) != 0 && s.recovery.load(Ordering::Acquire) != DB_READY
    });
    if any_recovering {
        pgrx::log!("pasv engine: a database is still recovering; the store is not marked clean and recovers again at the next start");
    }
    let closing = Instant::now();
    match engine.close(!any_recovering) {
        Ok(()) => pgrx::log!(
            "pasv engine stopped: memtables flushed and RocksDB closed in {:.0} ms",
            closing.elapsed().as_secs_f64() * 1000.0
        ),
        Err(e) => pgrx::warning!("pasv engine: closing RocksDB failed: {e}"),
    }
    header.engine_state.store(ENGINE_DOWN, Ordering::Release);
}
