//! Engine side of the channel: the loop run by each engine service thread.
//!
//! Runs on plain OS threads: it must never call PostgreSQL (DESIGN.md §1,
//! invariant 6). It touches only the channel's atomics and buffers and calls
//! the handler, which is pure Rust (`pasv_am::server::handle`).

use super::{futex, Channel, CLAIMED, DONE, SUBMITTED};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How many empty polls of the slots an idle service thread makes before
/// sleeping on the doorbell (a few microseconds). Short on purpose: on a
/// 2-core machine a spinning thread takes the CPU from the backends it
/// serves (profiled: 30 µs spins cost a third of all CPU under pgbench).
const IDLE_POLLS: u32 = 64;
/// Empty polls of the one service thread allowed to wait longer (about
/// 50 µs): a backend between two requests of one statement (parse, plan,
/// execute: tens of µs) then finds it awake, instead of paying a futex
/// wake of the engine and, once its own spin ran out, one of itself
/// (session 4: 92 % of a single client's TPC-B round trips slept).
const LEADER_IDLE_POLLS: u32 = 512;
/// Upper bound on one doorbell sleep, so `stop` is noticed even without a wake.
const SLEEP_BOUND: Duration = Duration::from_millis(100);

/// Serve requests until `stop` is set. `thread_index` spreads the threads'
/// scan start points so they do not all race for the same slot.
pub fn serve(
    chan: Channel,
    stop: &AtomicBool,
    thread_index: usize,
    mut handle: impl FnMut(&[u8], &mut [u8]) -> usize,
) {
    let header = chan.header();
    let procs = chan.procs();
    let mut request = Vec::with_capacity(chan.buffer_bytes());
    let mut cursor = thread_index % procs.max(1);
    let mut idle_polls = 0u32;
    // Counted in `idle_pollers` while polling with nothing to do.
    let mut polling = false;

    while !stop.load(Ordering::Relaxed) {
        let seen = header.doorbell.load(Ordering::SeqCst);
        let mut served_any = false;
        // The main slots, and their read-ahead slots while any is submitted.
        let passes = if header.aheads_unclaimed.load(Ordering::SeqCst) > 0 { 2 } else { 1 };
        for n in 0..passes * procs {
            let main = cursor;
            cursor = if cursor + 1 == procs { 0 } else { cursor + 1 };
            let ahead = n >= procs;
            let i = if ahead { chan.ahead_slot(main) } else { main };
            let slot = chan.slot(i);
            if slot.state.load(Ordering::Relaxed) != SUBMITTED {
                continue;
            }
            // Acquire pairs with the backend's Release store of SUBMITTED:
            // the request bytes are visible once the CAS succeeds.
            if slot
                .state
                .compare_exchange(SUBMITTED, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue; // another service thread took it
            }
            if ahead {
                header.aheads_unclaimed.fetch_sub(1, Ordering::SeqCst);
            }
            let len = (slot.request_len.load(Ordering::Relaxed) as usize).min(chan.buffer_bytes());
            let buf = chan.buffer_ptr(i);
            request.clear();
            // SAFETY: in state CLAIMED this thread owns the buffer (module
            // protocol); `len` is clamped to the buffer size.
            request.extend_from_slice(unsafe { std::slice::from_raw_parts(buf, len) });
            let response = unsafe { std::slice::from_raw_parts_mut(buf, chan.buffer_bytes()) };
            if request.first() == Some(&pasv_am::protocol::PUT_BATCH_OP) {
                let delay = header.test_write_delay_us.swap(0, Ordering::Relaxed);
                if delay > 0 {
                    std::thread::sleep(Duration::from_micros(u64::from(delay)));
                }
            }
            let n = handle(&request, response);
            slot.response_len.store(n as u32, Ordering::Relaxed);
            // Release (SeqCst) publishes the response bytes to the backend's
            // Acquire load; SeqCst orders it before the `waiting` load below.
            slot.state.store(DONE, Ordering::SeqCst);
            if slot.waiting.load(Ordering::SeqCst) != 0 {
                futex::wake(&slot.state, 1);
                header.count(super::EngineStat::BackendWakes);
            }
            header.count(super::EngineStat::Served);
            served_any = true;
        }
        if served_any {
            if polling {
                header.servers.idle_pollers.fetch_sub(1, Ordering::SeqCst);
                polling = false;
            }
            idle_polls = 0;
            continue;
        }
        if !polling {
            header.servers.idle_pollers.fetch_add(1, Ordering::SeqCst);
            polling = true;
        }
        if idle_polls < IDLE_POLLS {
            idle_polls += 1;
            std::hint::spin_loop();
            continue;
        }
        // One thread at a time keeps polling for longer (the leader).
        let me = thread_index as u32 + 1;
        let leader = header.servers.spinning_server.load(Ordering::Relaxed);
        if idle_polls < LEADER_IDLE_POLLS
            && (leader == me
                || leader == 0
                    && header.servers.spinning_server.compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed).is_ok())
        {
            idle_polls += 1;
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
        header.servers.sleeping_servers.fetch_sub(1, Ordering::SeqCst);
        idle_polls = 0;
    }
    if polling {
        header.servers.idle_pollers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Wake every sleeping service thread (shutdown).
pub fn wake_all(chan: Channel) {
    let header = chan.header();
    header.doorbell.fetch_add(1, Ordering::SeqCst);
    futex::wake(&header.doorbell, i32::MAX);
}
