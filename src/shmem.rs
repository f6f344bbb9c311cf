//! Reserving and mapping the channel's shared memory (postmaster start and
//! every crash restart, which builds a new segment).

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
static mut PREV_SHMEM_STARTUP: pg_sys::shmem_startup_hook_type = None;

/// One slot per PGPROC: `MyProc->pgprocno` indexes the slot array.
fn layout() -> Layout {
    // SAFETY: MaxBackends and max_prepared_xacts are final once
    // shmem_request_hook runs (and in every later process).
    let nslots = unsafe {
        pg_sys::MaxBackends as usize + pg_sys::NUM_AUXILIARY_PROCS as usize + max_prepared_xacts as usize
    };
    Layout::new(nslots, crate::guc::channel_buffer_bytes())
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
    pg_sys::LWLockRelease(init_lock);
    client::install(chan);
}
