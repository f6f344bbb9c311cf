//! Engine side of the channel: the loop run by each engine service thread.
//!
//! Runs on plain OS threads: it must never call PostgreSQL (DESIGN.md §1,
//! invariant 6). It touches only the channel's atomics and buffers and calls
//! the handler, which is pure Rust (`pasv_am::server::handle`).

use super::{futex, queued_behind, Channel, CLAIMED, DONE, SUBMITTED};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Longest poll of an idle service thread before it sleeps on the doorbell.
/// Only one thread at a time (the leader) may poll this long, and only
/// while its idle periods show that it pays (`AdaptiveSpin`; the others
/// stop at [`FOLLOWER_MAX_SPIN`]): a backend
/// between two requests of one statement (parse, plan, execute: tens of
/// µs) or of two transactions then finds a thread awake instead of paying a
/// futex wake of the engine and, once its own spin ran out, one of itself
/// (session 4: 92 % of a single client's TPC-B round trips slept).
const LEADER_MAX_SPIN: Duration = Duration::from_micros(500);
/// Longest poll of the other threads while no leader polls (within the
/// same adaptive limit); while one does, they sleep after their first clock
/// read and a submit that finds nobody polling wakes one: on a 2-core
/// machine a polling thread takes the CPU from the backends it serves.
const FOLLOWER_MAX_SPIN: Duration = Duration::from_micros(50);
/// Shortest poll: what the adaptive limit can fall to.
const MIN_SPIN: Duration = Duration::from_micros(4);
/// Idle polls between two clock reads (a poll reads a few bitmap words).
const POLLS_PER_CLOCK_READ: u32 = 16;
/// Yields in a row that let another thread run after which a polling
/// thread sleeps: one alone happens at a single client too (its pgbench
/// wants the core now and then), where polling pays.
const BUSY_YIELDS: u32 = 3;
/// Upper bound on one doorbell sleep, so `stop` is noticed even without a wake.
const SLEEP_BOUND: Duration = Duration::from_millis(100);

/// Serve requests until `stop` is set, calling `after_reply` after each
/// answer is published (work the backend need not wait for).
/// `thread_index` spreads the threads' start points in the submitted bitmap
/// so they do not all race for the same slots.
pub fn serve(
    chan: Channel,
    stop: &AtomicBool,
    thread_index: usize,
    mut handle: impl FnMut(&[u8], &mut [u8]) -> usize,
    mut after_reply: impl FnMut(),
) {
    let header = chan.header();
    let words = chan.submitted_words();
    let mut request = Vec::with_capacity(chan.buffer_bytes().max(chan.ahead_bytes()));
    let mut first_word = thread_index % words;
    let mut idle_polls = 0u32;
    let mut idle_since: Option<Instant> = None;
    let mut spin = AdaptiveSpin::new();
    // Yields in a row that another thread took the core in.
    let mut busy_yields = 0u32;
    // Counted in `idle_pollers` while polling with nothing to do.
    let mut polling = false;

    while !stop.load(Ordering::Relaxed) {
        let seen = header.doorbell.load(Ordering::SeqCst);
        let mut served_any = false;
        for k in 0..words {
            let w = if first_word + k < words { first_word + k } else { first_word + k - words };
            let word = chan.submitted_word(w);
            let mut bits = word.load(Ordering::Relaxed);
            while bits != 0 {
                let bit = bits & bits.wrapping_neg();
                bits &= bits - 1;
                // Only the thread whose fetch_and finds the bit set takes
                // the request; its RMW reads the backend's fetch_or, so the
                // SUBMITTED store and the request bytes are visible.
                if word.fetch_and(!bit, Ordering::SeqCst) & bit == 0 {
                    continue; // another service thread took it
                }
                let mut next = claim(chan, w * 64 + bit.trailing_zeros() as usize);
                // The request queued behind the one served, if any, follows
                // at once (ipc module docs: the pair).
                while let Some(i) = next {
                    next = serve_claimed(chan, i, &mut request, &mut handle);
                    after_reply();
                }
                served_any = true;
            }
        }
        first_word = if first_word + 1 == words { 0 } else { first_word + 1 };
        if served_any {
            if polling {
                header.servers.idle_pollers.fetch_sub(1, Ordering::SeqCst);
                polling = false;
            }
            if let Some(since) = idle_since.take() {
                spin.idle_ended(since.elapsed());
            }
            idle_polls = 0;
            busy_yields = 0;
            continue;
        }
        if !polling {
            header.servers.idle_pollers.fetch_add(1, Ordering::SeqCst);
            polling = true;
        }
        idle_polls = idle_polls.wrapping_add(1);
        if idle_polls % POLLS_PER_CLOCK_READ != 0 {
            std::hint::spin_loop();
            continue;
        }
        let idle_for = idle_since.get_or_insert_with(Instant::now).elapsed();
        // A polling thread gives its core to whatever else is runnable
        // there (a backend, or another service thread with a request):
        // with more runnable threads than cores a pure spin starved them
        // (perf, a DELETE of 100 000 of 1 M rows: `serve`'s polling 16 % of
        // all samples while the backend waited 42 % of its time). With
        // nothing else runnable the yield returns at once; when it did not,
        // polling takes a core that a backend wants (TPC-B at 8 clients on
        // 2 cores: the service threads' polls and yields were 10 % of all
        // CPU): the thread sleeps, and the next submit wakes one.
        header.count(super::EngineStat::PollYields);
        busy_yields = if super::futex::yield_core() {
            0
        } else {
            header.count(super::EngineStat::BusyYields);
            busy_yields + 1
        };
        let core_free = busy_yields < BUSY_YIELDS;
        // One thread at a time keeps polling for longer (the leader).
        let me = thread_index as u32 + 1;
        let leader = header.servers.spinning_server.load(Ordering::Relaxed);
        if core_free && leader == 0 && idle_for < spin.limit().min(FOLLOWER_MAX_SPIN) {
            continue;
        }
        if core_free
            && idle_for < spin.limit()
            && (leader == me
                || leader == 0
                    && header.servers.spinning_server.compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed).is_ok())
        {
            std::hint::spin_loop();
            continue;
        }
        if leader == me {
            header.servers.spinning_server.store(0, Ordering::Relaxed);
        }
        header.servers.idle_pollers.fetch_sub(1, Ordering::SeqCst);
        polling = false;
        header.servers.sleeping_servers.fetch_add(1, Ordering::SeqCst);
        header.count(super::EngineStat::Sleeps);
        // A submit after `seen` changed the doorbell: the wait returns at once.
        futex::wait(&header.doorbell, seen, SLEEP_BOUND);
        busy_yields = 0;
        header.servers.sleeping_servers.fetch_sub(1, Ordering::SeqCst);
        // The idle period goes on (`idle_since` stays) until work is found:
        // its whole length is what a longer poll would have had to cover.
        idle_polls = 0;
    }
    if polling {
        header.servers.idle_pollers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long a service thread polls before it sleeps (the leader up to the
/// limit, the others up to [`FOLLOWER_MAX_SPIN`] within it), adapted to
/// the idle periods the thread has seen: a poll pays only when work comes before it ends, and costs
/// a core meanwhile. Work that came within [`LEADER_MAX_SPIN`] of going
/// idle (found polling, or found right after a wake) stretches the limit
/// to 1.5 times that gap; an idle period longer than that halves it, down
/// to [`MIN_SPIN`]. So a client whose requests follow each other every few
/// hundred µs (TPC-B: five posted writes a transaction) finds a thread
/// awake, and read-mostly work whose rare requests come milliseconds apart
/// (range sums served from the row cache) stops paying a polling core.
/// Measurements, and the variants that lost, in `HOT_PATH.md` §21.
struct AdaptiveSpin {
    limit: Duration,
}

impl AdaptiveSpin {
    fn new() -> AdaptiveSpin {
        AdaptiveSpin { limit: LEADER_MAX_SPIN }
    }

    fn limit(&self) -> Duration {
        self.limit
    }

    /// An idle period of length `gap` ended with work found.
    fn idle_ended(&mut self, gap: Duration) {
        self.limit = if gap <= LEADER_MAX_SPIN {
            self.limit.max(gap + gap / 2).min(LEADER_MAX_SPIN)
        } else {
            (self.limit / 2).max(MIN_SPIN)
        };
    }
}

/// Claim slot `i`, whose bit this thread took from the submitted bitmap.
fn claim(chan: Channel, i: usize) -> Option<usize> {
    // Acquire pairs with the backend's Release store of SUBMITTED. The CAS
    // cannot fail (module protocol: a set bit is one unclaimed request);
    // if it ever did, the request would be someone else's to serve.
    let claimed = chan.slot(i).state.compare_exchange(SUBMITTED, CLAIMED, Ordering::Acquire, Ordering::Relaxed);
    debug_assert!(claimed.is_ok(), "slot {i} had its submitted bit without being SUBMITTED");
    claimed.is_ok().then_some(i)
}

/// Run the request of slot `i`, which this thread claimed, and publish the
/// answer; then claim the request queued behind it in the other slot of
/// the pair, if there is one, and return that slot.
fn serve_claimed(
    chan: Channel,
    i: usize,
    request: &mut Vec<u8>,
    handle: &mut impl FnMut(&[u8], &mut [u8]) -> usize,
) -> Option<usize> {
    let header = chan.header();
    let slot = chan.slot(i);
    // Written before the request was handed over (SUBMITTED, or the tagged
    // QUEUED this thread took): the request's own sequence.
    let seq = slot.seq.load(Ordering::Relaxed);
    let len = (slot.request_len.load(Ordering::Relaxed) as usize).min(chan.buffer_len(i));
    let buf = chan.buffer_ptr(i);
    request.clear();
    // SAFETY: in state CLAIMED this thread owns the buffer (module
    // protocol); `len` is clamped to the buffer size.
    request.extend_from_slice(unsafe { std::slice::from_raw_parts(buf, len) });
    let response = unsafe { std::slice::from_raw_parts_mut(buf, chan.buffer_len(i)) };
    if request.first().is_some_and(|&op| pasv_am::protocol::is_write_op(op)) {
        let delay = header.test_write_delay_us.swap(0, Ordering::Relaxed);
        if delay > 0 {
            std::thread::sleep(Duration::from_micros(u64::from(delay)));
        }
    }
    let n = handle(request, response);
    slot.response_len.store(n as u32, Ordering::Relaxed);
    // Release (SeqCst) publishes the response bytes to the backend's
    // Acquire load; SeqCst orders it before the `waiting` load below.
    slot.state.store(DONE, Ordering::SeqCst);
    if slot.waiting.load(Ordering::SeqCst) != 0 {
        futex::wake(&slot.state, 1);
        header.count(super::EngineStat::BackendWakes);
    }
    header.count(super::EngineStat::Served);
    // After the SeqCst DONE store: a backend that queued a request behind
    // this one and did not see DONE is seen here (module docs: the pair).
    // Acquire pairs with its QUEUED store, so the request is visible.
    // Only a request queued behind this one: the tag is this request's
    // sequence (`super::queued_behind`).
    let sibling = chan.sibling(i)?;
    let behind_me = queued_behind(seq);
    let queued = chan.slot(sibling).state.load(Ordering::SeqCst) == behind_me
        && chan.slot(sibling).state.compare_exchange(behind_me, CLAIMED, Ordering::Acquire, Ordering::Relaxed).is_ok();
    queued.then_some(sibling)
}

/// Wake every sleeping service thread (shutdown).
pub fn wake_all(chan: Channel) {
    let header = chan.header();
    header.doorbell.fetch_add(1, Ordering::SeqCst);
    futex::wake(&header.doorbell, i32::MAX);
}
