//! Reserving and mapping the channel's shared memory (postmaster start and
//! every crash restart, which builds a new segment), and noting at that
//! moment whether PostgreSQL is about to run crash recovery.

use crate::ipc::{client, Channel, Layout};
use pgrx::pg_sys;
use std::ffi::c_int;

extern "C" {
    // twophase.h; not in pgrx's PG16 bindings.
    static max_prepared_xacts: c_int;
}

/// Index of AddinShmemInitLock in MainLWLockArray (lwlocknames.txt, PG16).
const ADDIN_SHMEM_INIT_LOCK: usize = 21;

static mut PREV_SHMEM_REQUEST: pg_sys::shmem_request_hook_type = None;

/// Set by the postmaster when it builds shared memory, inherited by every
/// process it forks: this start of PostgreSQL runs crash recovery, which
/// empties unlogged relations (`ResetUnloggedRelations`: heap's tables,
/// every index, TOAST tables). The engine empties unlogged pasv tables then
/// too, even when RocksDB itself was closed cleanly (the engine closes
/// cleanly when the postmaster dies under it, e.g. `kill -9` of the
/// postmaster, yet PostgreSQL recovers from a crash on the next start).
static POSTGRES_CRASH_RECOVERY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this start of PostgreSQL ran crash recovery (see above).
pub fn postgres_crash_recovery() -> bool {
    POSTGRES_CRASH_RECOVERY.load(std::sync::atomic::Ordering::Relaxed)
}

/// `DBState` in `pg_control` after a clean shutdown (`DB_SHUTDOWNED`).
const DB_SHUTDOWNED: i32 = 1;

/// Reads `state` from `global/pg_control` (the postmaster's working
/// directory is the data directory): anything but a clean shutdown means
/// the startup process will recover (at a crash restart the file still
/// says "in production"). Unreadable: assume a crash, the safe side
/// (unlogged tables come back empty).
fn pg_control_says_crashed() -> bool {
    // ControlFileData: system_identifier u64, pg_control_version u32,
    // catalog_version_no u32, then state (an enum, i32).
    let mut head = [0u8; 20];
    let read = std::fs::File::open("global/pg_control").and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut head)
    });
    match read {
        Ok(()) => i32::from_ne_bytes([head[16], head[17], head[18], head[19]]) != DB_SHUTDOWNED,
        Err(_) => true,
    }
}
static mut PREV_SHMEM_STARTUP: pg_sys::shmem_startup_hook_type = None;

/// Three slots per PGPROC: `MyProc->pgprocno` indexes the main slots, the
/// read-ahead slots follow them (`ipc::Channel::ahead_slot`), then the main
/// slots' twins (`ipc::Channel::twin_slot`).
fn layout() -> Layout {
    // SAFETY: MaxBackends and max_prepared_xacts are final once
    // shmem_request_hook runs (and in every later process).
    let nslots = unsafe {
        pg_sys::MaxBackends as usize + pg_sys::NUM_AUXILIARY_PROCS as usize + max_prepared_xacts as usize
    };
    Layout::new(3 * nslots, crate::guc::channel_buffer_bytes(), crate::guc::read_ahead_buffer_bytes())
}

/// # Safety
/// Called once from `_PG_init` while shared_preload_libraries are loaded.
pub unsafe fn install_hooks() {
    PREV_SHMEM_REQUEST = pg_sys::shmem_request_hook;
    pg_sys::shmem_request_hook = Some(shmem_request);
    PREV_SHMEM_STARTUP = pg_sys::shmem_startup_hook;
    pg_sys::shmem_startup_hook = Some(shmem_startup);
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    if let Some(prev) = PREV_SHMEM_REQUEST {
        prev();
    }
    pg_sys::RequestAddinShmemSpace(layout().total);
    pg_sys::RequestAddinShmemSpace(row_locks_bytes());
    pg_sys::RequestAddinShmemSpace(VISIBLE_SHARES_BYTES);
    if row_cache_bytes() > 0 {
        pg_sys::RequestAddinShmemSpace(row_cache_bytes());
    }
}

/// Bytes of the row cache region (`pasv.row_cache_size`; 0: none).
fn row_cache_bytes() -> usize {
    let bytes = crate::guc::ROW_CACHE_MB.get().max(0) as usize * 1024 * 1024;
    pasv_am::row_cache::region_bytes(pasv_am::row_cache::sets_for(bytes))
}

/// Bytes of the shared row lock table (pasv_am::shared_row_locks), sized
/// by the number of processes that can hold row locks.
fn row_locks_bytes() -> usize {
    // SAFETY: MaxBackends and max_prepared_xacts are final once
    // shmem_request_hook runs (and in every later process).
    let processes = unsafe { pg_sys::MaxBackends as usize + max_prepared_xacts as usize };
    pasv_am::shared_row_locks::region_bytes(pasv_am::shared_row_locks::buckets_for(processes))
}

/// Where the shared row lock table lives in this process (set at every
/// shared memory build); null before.
static ROW_LOCKS: std::sync::atomic::AtomicPtr<u8> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// The shared row lock table (`None` only outside a preloaded server).
pub fn row_locks() -> Option<pasv_am::shared_row_locks::SharedRowLocks> {
    let base = ROW_LOCKS.load(std::sync::atomic::Ordering::Relaxed);
    // SAFETY: set to a formatted region of this server's shared memory.
    (!base.is_null()).then(|| unsafe { pasv_am::shared_row_locks::SharedRowLocks::attach(base) }).flatten()
}

/// Bytes of the planner's all-visible shares (pasv_am::visible_shares):
/// 8 192 tables' slots.
const VISIBLE_SHARES_BYTES: usize = pasv_am::visible_shares::region_bytes(8192);

/// Where the all-visible shares live in this process; null before.
static VISIBLE_SHARES: std::sync::atomic::AtomicPtr<u8> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// The tables' all-visible shares (`None` only outside a preloaded server).
pub fn visible_shares() -> Option<pasv_am::visible_shares::VisibleShares> {
    let base = VISIBLE_SHARES.load(std::sync::atomic::Ordering::Relaxed);
    // SAFETY: set to a formatted region of this server's shared memory.
    (!base.is_null()).then(|| unsafe { pasv_am::visible_shares::VisibleShares::attach(base) }).flatten()
}

/// Where the row cache lives in this process (set at every shared memory
/// build, inherited by the processes the postmaster forks); null: none.
static ROW_CACHE: std::sync::atomic::AtomicPtr<u8> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// The row cache (pasv_am::row_cache), if `pasv.row_cache_size` gave one.
pub fn row_cache() -> Option<pasv_am::row_cache::RowCache> {
    let base = ROW_CACHE.load(std::sync::atomic::Ordering::Relaxed);
    // SAFETY: set to a formatted region of this server's shared memory.
    (!base.is_null()).then(|| unsafe { pasv_am::row_cache::RowCache::attach(base) }).flatten()
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    if let Some(prev) = PREV_SHMEM_STARTUP {
        prev();
    }
    let layout = layout();
    // AddinShmemInitLock is a macro in C: MainLWLockArray[21].
    let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(ADDIN_SHMEM_INIT_LOCK)).lock;
    pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
    let mut found = false;
    let base = pg_sys::ShmemInitStruct(c"pasv channel".as_ptr(), layout.total, &mut found) as *mut u8;
    let chan = if found { Channel::from_raw(base, layout) } else { Channel::init(base, layout) };
    init_region(c"pasv row locks", row_locks_bytes(), &ROW_LOCKS, |base, bytes| {
        pasv_am::shared_row_locks::SharedRowLocks::format(base, bytes);
    });
    init_region(c"pasv visible shares", VISIBLE_SHARES_BYTES, &VISIBLE_SHARES, |base, bytes| {
        pasv_am::visible_shares::VisibleShares::format(base, bytes);
    });
    let cache_bytes = row_cache_bytes();
    if cache_bytes > 0 {
        init_region(c"pasv row cache", cache_bytes, &ROW_CACHE, |base, bytes| {
            pasv_am::row_cache::RowCache::format(base, bytes);
        });
    }
    if !pg_sys::IsUnderPostmaster {
        POSTGRES_CRASH_RECOVERY.store(pg_control_says_crashed(), std::sync::atomic::Ordering::Relaxed);
    }
    pg_sys::LWLockRelease(init_lock);
    client::install(chan);
}

/// Map the named region of `bytes` bytes of PostgreSQL shared memory into
/// `at`, zeroing and formatting it with `format` when this shared-memory
/// build creates it (the caller holds AddinShmemInitLock).
///
/// # Safety
/// Called from `shmem_startup` only; `format` accepts a zeroed, 8-aligned
/// region of `bytes` bytes.
unsafe fn init_region(
    name: &std::ffi::CStr,
    bytes: usize,
    at: &std::sync::atomic::AtomicPtr<u8>,
    format: impl FnOnce(*mut u8, usize),
) {
    let mut found = false;
    let base = pg_sys::ShmemInitStruct(name.as_ptr(), bytes, &mut found) as *mut u8;
    if !found {
        std::ptr::write_bytes(base, 0, bytes);
        format(base, bytes);
    }
    at.store(base, std::sync::atomic::Ordering::Relaxed);
}
