//! Linux futex wait/wake on a shared-memory `AtomicU32`, the two other
//! libc calls the channel needs, and a yield that tells whether another
//! thread wanted the core ([`yield_core`], which waiters use to stop
//! spinning). Declared by hand (a handful of stable syscalls) so the
//! extension does not add a dependency whose feature set could perturb the
//! RocksDB build graph.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

#[cfg(target_arch = "x86_64")]
const SYS_FUTEX: i64 = 202;
#[cfg(target_arch = "aarch64")]
const SYS_FUTEX: i64 = 98;

/// Shared (not FUTEX_PRIVATE_FLAG): the word lives in memory mapped by
/// several processes.
const FUTEX_WAIT: i32 = 0;
const FUTEX_WAKE: i32 = 1;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn syscall(num: i64, ...) -> i64;
    fn kill(pid: i32, sig: i32) -> i32;
}

/// Sleep while `*word == expected`, at most `timeout`. Returns on a wake,
/// a value change, a signal or the timeout; callers re-check their condition.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = Timespec { tv_sec: timeout.as_secs() as i64, tv_nsec: timeout.subsec_nanos() as i64 };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call;
    // the kernel only reads it and the timespec.
    unsafe {
        syscall(SYS_FUTEX, word.as_ptr(), FUTEX_WAIT, expected, &ts as *const Timespec, 0usize, 0u32);
    }
}

/// Wake up to `n` sleepers on `word`.
pub fn wake(word: &AtomicU32, n: i32) {
    // SAFETY: as in `wait`; FUTEX_WAKE does not dereference user memory.
    unsafe {
        syscall(SYS_FUTEX, word.as_ptr(), FUTEX_WAKE, n, 0usize, 0usize, 0u32);
    }
}

/// Whether a process with this pid exists (signal 0 probes without sending).
pub fn process_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill(pid, 0) sends nothing; it only checks existence/permission.
    let rc = unsafe { kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(1 /* EPERM: exists */)
}

/// Longest a yield may take and still count as "nothing else wanted this
/// core": a yield that returns at once costs a syscall (about 1 µs in this
/// VM); one that let another thread run took at least that thread's turn.
const FREE_YIELD: std::time::Duration = std::time::Duration::from_micros(8);

/// Give the core to any other runnable thread, and say whether none took it
/// (the yield came back at once). A waiter polls on only while this holds:
/// polling a core that a backend or an engine thread wants delays the very
/// work being waited for (TPC-B at 8 clients on 2 cores: backends spun 190 µs
/// a transaction for answers while the engine thread waited for a core).
pub fn yield_core() -> bool {
    let start = std::time::Instant::now();
    std::thread::yield_now();
    start.elapsed() < FREE_YIELD
}
