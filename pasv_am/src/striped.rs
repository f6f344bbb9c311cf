//! Counters in shared memory that many processes bump at once.
//!
//! One word bumped by every backend moves its cache line from core to core
//! on each increment, and every reader of a neighbouring word pays for it
//! (the row cache's hit counter shared a line with the generation word that
//! every lookup reads). A striped counter gives each process its own
//! 64-byte stripe (chosen from its pid, so sequential backends land apart);
//! readers add the stripes up.
//!
//! Plain `AtomicU64` arrays, no `align` attribute: the regions these live
//! in start cache-line aligned in PostgreSQL shared memory, and tests map
//! them on 8-aligned heap memory, where an over-aligned type would be
//! unsound to reference.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Stripes per counter set.
pub const STRIPES: usize = 16;
/// Counters per set (one stripe is one 64-byte line).
pub const COUNTERS: usize = 8;

/// [`COUNTERS`] counters, each split over [`STRIPES`] stripes.
#[repr(C)]
pub struct StripedCounters {
    stripes: [[AtomicU64; COUNTERS]; STRIPES],
}

thread_local! {
    static STRIPE: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// Threads of this process that picked a stripe (engine threads of one
/// process must not share one either).
static THREADS: AtomicUsize = AtomicUsize::new(0);

/// This thread's stripe: its process id plus its rank among the process's
/// threads, taken once.
fn my_stripe() -> usize {
    STRIPE.with(|s| {
        let mut v = s.get();
        if v == usize::MAX {
            v = (std::process::id() as usize).wrapping_add(THREADS.fetch_add(1, Ordering::Relaxed)) % STRIPES;
            s.set(v);
        }
        v
    })
}

impl StripedCounters {
    /// Adds `n` to counter `i` (< [`COUNTERS`]) in this thread's stripe.
    pub fn add(&self, i: usize, n: u64) {
        self.stripes[my_stripe()][i].fetch_add(n, Ordering::Relaxed);
    }

    /// Counter `i` summed over the stripes.
    pub fn sum(&self, i: usize) -> u64 {
        self.stripes.iter().map(|s| s[i].load(Ordering::Relaxed)).sum()
    }
}

const _: () = assert!(std::mem::size_of::<StripedCounters>() == STRIPES * 64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_what_every_thread_added() {
        let c: StripedCounters = unsafe { std::mem::zeroed() };
        std::thread::scope(|s| {
            for t in 0..5u64 {
                let c = &c;
                s.spawn(move || {
                    for _ in 0..1000 {
                        c.add(1, t + 1);
                    }
                    c.add(3, 1);
                });
            }
        });
        assert_eq!(c.sum(1), 1000 * (1 + 2 + 3 + 4 + 5));
        assert_eq!(c.sum(3), 5);
        assert_eq!(c.sum(0), 0);
    }
}
