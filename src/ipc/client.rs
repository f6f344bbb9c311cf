//! Backend side of the channel: submit one request from this process's slot
//! and wait for the answer.
//!
//! Errors are returned, not raised: callers in commit/abort callbacks must
//! never ERROR, so only the SQL-facing edge (`crate::engine_client`) turns a
//! [`ChannelError`] into an `ereport`. The one exception is a pending query
//! cancel or terminate, processed by `CHECK_FOR_INTERRUPTS` while waiting
//! (held off inside commit/abort, where PostgreSQL holds interrupts).

use super::{futex, queued_behind, Channel, DONE, ENGINE_FAILED, ENGINE_READY, IDLE, SUBMITTED};
use pgrx::pg_sys;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a backend spins for an answer before sleeping on its slot:
/// an awake engine answers a point request in 1-3 µs.
const ANSWER_SPIN: Duration = Duration::from_micros(10);
/// How long the one backend allowed to (see `wait_done`) spins in all.
const LONG_ANSWER_SPIN: Duration = Duration::from_micros(120);
/// How long the long spin spins between two yields.
const YIELD_EVERY: Duration = Duration::from_micros(4);
/// Upper bound on one futex sleep: interrupts and engine death are checked
/// at least this often.
const WAIT_BOUND: Duration = Duration::from_millis(10);

#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("pasv is not loaded through shared_preload_libraries")]
    NotPreloaded,
    #[error("the pasv engine is not running")]
    EngineDown,
    #[error("the pasv engine failed to start")]
    EngineFailed,
    #[error("the pasv engine did not become ready within {0} s")]
    StartTimeout(u64),
    #[error("this process has no pasv channel slot")]
    NoSlot,
    #[error("request of {needed} bytes does not fit the channel buffer of {available} bytes")]
    RequestTooLarge { needed: usize, available: usize },
}

// The channel mapped by this process: set by the postmaster's shmem startup
// hook (again after each crash restart, which maps a new segment) and
// inherited by every child through fork.
static BASE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static NSLOTS: AtomicUsize = AtomicUsize::new(0);
static BUFFER_BYTES: AtomicUsize = AtomicUsize::new(0);
static AHEAD_BYTES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Which slot of this process's pair took its last request (0: the main
    // slot, 1: its twin).
    static LATEST: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    // Requests posted with `post_checked` whose answers are still in their
    // slots, oldest first: (slot, ticket). At most one a slot of the pair.
    static CHECKED: std::cell::RefCell<VecDeque<(usize, u64)>> = const { std::cell::RefCell::new(VecDeque::new()) };
    // Answers of checked posts copied aside (their slot was needed for the
    // next request before anybody asked), oldest first.
    static KEPT: std::cell::RefCell<VecDeque<Vec<u8>>> = const { std::cell::RefCell::new(VecDeque::new()) };
    // The ticket (and request kind) of the read-ahead (`post_ahead`) whose
    // answer is still in this process's read-ahead slot; ticket 0 when none
    // is: the next read-ahead displaces it.
    static AHEAD: std::cell::Cell<(u64, usize)> = const { std::cell::Cell::new((0, 0)) };
    static LAST_TICKET: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    // What this process's slots had counted before its first request (the
    // slots' earlier owners), so a backend can tell its own round trips.
    static BASELINE: std::cell::RefCell<Option<Vec<super::KindStats>>> = const { std::cell::RefCell::new(None) };
}

/// What process `i`'s three slots have counted, by request kind.
fn own_slots_stats(chan: &Channel, i: usize) -> Vec<super::KindStats> {
    let [main, ahead, twin] = [i, chan.ahead_slot(i), chan.twin_slot(i)].map(|j| chan.slot(j).stats.snapshot());
    (0..main.len()).map(|k| std::array::from_fn(|j| main[k][j] + ahead[k][j] + twin[k][j])).collect()
}

/// This process's own channel counters (its slots', minus earlier owners').
pub fn my_stats() -> Option<Vec<super::KindStats>> {
    let chan = channel()?;
    let now = own_slots_stats(&chan, my_slot(&chan).ok()?);
    let base = BASELINE.with(|b| b.borrow().clone()).unwrap_or_else(|| now.clone());
    Some(now.iter().zip(&base).map(|(n, b)| std::array::from_fn(|j| n[j].saturating_sub(b[j]))).collect())
}

pub fn install(chan: Channel) {
    NSLOTS.store(chan.nslots(), Ordering::Relaxed);
    BUFFER_BYTES.store(chan.buffer_bytes(), Ordering::Relaxed);
    AHEAD_BYTES.store(chan.ahead_bytes(), Ordering::Relaxed);
    BASE.store(chan.base_ptr(), Ordering::Release);
}

pub fn channel() -> Option<Channel> {
    let base = BASE.load(Ordering::Acquire);
    if base.is_null() {
        return None;
    }
    let layout = super::Layout::new(
        NSLOTS.load(Ordering::Relaxed),
        BUFFER_BYTES.load(Ordering::Relaxed),
        AHEAD_BYTES.load(Ordering::Relaxed),
    );
    // SAFETY: `base` was mapped by the shmem startup hook with this layout.
    Some(unsafe { Channel::from_raw(base, layout) })
}

pub(super) fn my_slot(chan: &Channel) -> Result<usize, ChannelError> {
    // SAFETY: MyProc is set for every process attached to shared memory
    // (backends and background workers) before any of our code can run.
    let procno = unsafe {
        if pg_sys::MyProc.is_null() {
            return Err(ChannelError::NoSlot);
        }
        (*pg_sys::MyProc).pgprocno
    };
    if procno < 0 || procno as usize >= chan.procs() {
        return Err(ChannelError::NoSlot);
    }
    Ok(procno as usize)
}

/// The engine is up right now (no waiting): for commit and abort
/// callbacks, which must not wait for an engine that may never come back
/// (a dead postmaster ends the process, and exiting there PANICs).
pub fn engine_up_now() -> bool {
    channel().is_some_and(|chan| engine_alive(&chan))
}

fn engine_alive(chan: &Channel) -> bool {
    let h = chan.header();
    h.engine_state.load(Ordering::Acquire) == ENGINE_READY
        && futex::process_alive(h.engine_pid.load(Ordering::Acquire))
}

/// Wait (interruptibly, bounded by `pasv.engine_start_timeout`) until the
/// engine is ready: right after server start or a crash restart it may still
/// be opening RocksDB.
pub(crate) fn wait_engine_ready(chan: &Channel) -> Result<(), ChannelError> {
    let h = chan.header();
    if h.engine_state.load(Ordering::Acquire) == ENGINE_READY {
        return Ok(());
    }
    let timeout = crate::guc::engine_start_timeout();
    let start = Instant::now();
    let mut logged = false;
    loop {
        match h.engine_state.load(Ordering::Acquire) {
            ENGINE_READY => return Ok(()),
            ENGINE_FAILED => return Err(ChannelError::EngineFailed),
            _ => {}
        }
        // A pasv worker asked to stop (the server shuts down, the engine
        // with it) must not hold the shutdown up waiting for the engine.
        // Backends never see the flag; SIGTERM ends their wait in `nap`.
        // SAFETY: plain read of a backend global.
        let is_worker = unsafe { !pg_sys::MyBgworkerEntry.is_null() };
        if is_worker && worker_stop_requested() {
            return Err(ChannelError::EngineDown);
        }
        if start.elapsed() >= timeout {
            return Err(ChannelError::StartTimeout(timeout.as_secs()));
        }
        if !logged {
            pgrx::log!("pasv: waiting for the pasv engine to start");
            logged = true;
        }
        nap(10);
    }
}

// A pasv background worker was asked to stop. Sticky: pgrx's own flag is
// reset by every read, and a stop seen deep inside one wait must still end
// the worker's main loop (a lost SIGTERM held a shutdown up for 60 s).
static STOP_REQUESTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this background worker got SIGTERM (or lost its postmaster).
pub fn worker_stop_requested() -> bool {
    if !STOP_REQUESTED.load(Ordering::Relaxed) && pgrx::bgworkers::BackgroundWorker::sigterm_received() {
        STOP_REQUESTED.store(true, Ordering::Relaxed);
    }
    STOP_REQUESTED.load(Ordering::Relaxed)
}

/// pgrx's `BackgroundWorker::wait_latch` with the sticky stop flag: false
/// once the worker must stop.
pub fn worker_wait_latch(timeout: Duration) -> bool {
    if !pgrx::bgworkers::BackgroundWorker::wait_latch(Some(timeout)) {
        STOP_REQUESTED.store(true, Ordering::Relaxed);
    }
    !STOP_REQUESTED.load(Ordering::Relaxed)
}

/// Sleep on this process's latch for up to `ms`, then serve interrupts
/// (query cancel, terminate). Ends the process if the postmaster died.
pub(crate) fn nap(ms: i64) {
    // SAFETY: plain latch wait on this process's latch; WL_EXIT_ON_PM_DEATH
    // ends the process if the postmaster dies.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pgrx::check_for_interrupts!();
}

/// Spin until `slot` is DONE (true) or `until` has passed since `start`
/// (false). The clock is read every 64 polls only.
fn spin_until_done(slot: &super::SlotHeader, start: Instant, until: Duration) -> bool {
    let mut spins: u32 = 0;
    loop {
        if slot.state.load(Ordering::Acquire) == DONE {
            return true;
        }
        spins = spins.wrapping_add(1);
        if spins % 64 == 0 && start.elapsed() >= until {
            return false;
        }
        std::hint::spin_loop();
    }
}

/// [`spin_until_done`] in short stretches with a yield between them,
/// stopping early (false) once a yield shows that another thread wanted
/// the core: that thread may be the engine's, with the answer.
fn spin_while_core_free(slot: &super::SlotHeader, start: Instant, until: Duration) -> bool {
    // Bounded by `until`: every turn spins or reads the clock.
    loop {
        if spin_until_done(slot, Instant::now(), YIELD_EVERY) {
            return true;
        }
        if start.elapsed() >= until || !futex::yield_core() {
            return slot.state.load(Ordering::Acquire) == DONE;
        }
    }
}

/// Wait until slot `i` is DONE; whether the wait slept.
fn wait_done(chan: &Channel, i: usize) -> Result<bool, ChannelError> {
    let slot = chan.slot(i);
    let start = Instant::now();
    if spin_until_done(slot, start, ANSWER_SPIN) {
        return Ok(false);
    }
    // A backend that is the only one waiting for the engine spins on for a
    // slow answer (a point read takes the engine 10-30 µs): a futex sleep
    // and wake costs more than that on this kind of machine (session 4:
    // 100 µs per index fetch, 77 % slept). With others waiting too, the
    // cores are busy and spinning would take them from the engine's threads
    // (select-only with 2 clients fell from 6 500 to 2 500 TPS).
    let h = chan.header();
    if h.waiters.waiting_calls.load(Ordering::Relaxed) <= 1 {
        let first = h.waiters.long_spinners.fetch_add(1, Ordering::SeqCst) == 0;
        let answered = first && spin_while_core_free(slot, start, LONG_ANSWER_SPIN);
        h.waiters.long_spinners.fetch_sub(1, Ordering::SeqCst);
        if answered {
            return Ok(false);
        }
    }
    loop {
        slot.waiting.store(1, Ordering::SeqCst);
        let seen = slot.state.load(Ordering::SeqCst);
        if seen != DONE {
            futex::wait(&slot.state, seen, WAIT_BOUND);
        }
        slot.waiting.store(0, Ordering::SeqCst);
        if slot.state.load(Ordering::Acquire) == DONE {
            return Ok(true);
        }
        pgrx::check_for_interrupts!();
        if !engine_alive(chan) {
            return Err(ChannelError::EngineDown);
        }
    }
}

/// One round trip. `fill` writes the request into the slot buffer and
/// returns its length; `read` receives the response bytes. Neither may make
/// another channel call (the buffer is the slot's only one). A request
/// this backend posted before and the engine has not applied yet is applied
/// first: the call goes into the other slot of the pair, behind it.
pub fn call<R>(
    fill: impl FnOnce(&mut [u8]) -> Result<usize, ChannelError>,
    read: impl FnOnce(&[u8]) -> R,
) -> Result<R, ChannelError> {
    let chan = channel().ok_or(ChannelError::NotPreloaded)?;
    let me = my_slot(&chan)?;
    wait_engine_ready(&chan)?;
    let (i, kind) = submit_main(&chan, me, fill, Submit::Call)?;
    answer(&chan, i, kind, read)
}

/// Wait for slot `i`'s answer to a request of `kind` and hand it to `read`
/// inside the slot buffer, counting bytes and sleeps.
fn answer<R>(chan: &Channel, i: usize, kind: usize, read: impl FnOnce(&[u8]) -> R) -> Result<R, ChannelError> {
    let waiting = &chan.header().waiters.waiting_calls;
    waiting.fetch_add(1, Ordering::Relaxed);
    let slept = wait_done(chan, i);
    waiting.fetch_sub(1, Ordering::Relaxed);
    let slept = slept?;
    let slot = chan.slot(i);
    let n = (slot.response_len.load(Ordering::Relaxed) as usize).min(chan.buffer_len(i));
    let stats = &slot.stats;
    stats.bytes_received[kind].fetch_add(n as u64, Ordering::Relaxed);
    if slept {
        stats.slept[kind].fetch_add(1, Ordering::Relaxed);
    }
    // SAFETY: DONE: the engine is finished with the buffer (Acquire in
    // wait_done), and no later request was submitted.
    let answer = unsafe { std::slice::from_raw_parts(chan.buffer_ptr(i), n) };
    Ok(read(answer))
}

/// Submit a read whose answer this backend will probably want next (a
/// scan's next batch) into its read-ahead slot and go on: the engine reads
/// while the backend works on what it has, and while its main slot's
/// requests run. Returns the ticket to claim the answer with
/// [`take_ahead`]. The answer stays in the slot until the next read-ahead
/// (of any stream of this backend), which waits for it and discards it.
pub fn post_ahead(fill: impl FnOnce(&mut [u8]) -> Result<usize, ChannelError>) -> Result<u64, ChannelError> {
    let chan = channel().ok_or(ChannelError::NotPreloaded)?;
    let i = chan.ahead_slot(my_slot(&chan)?);
    wait_engine_ready(&chan)?;
    if AHEAD.with(|a| a.get()).0 != 0 {
        chan.slot(i).stats.ahead_discarded.fetch_add(1, Ordering::Relaxed);
    }
    note_first_request(&chan)?;
    if in_flight(&chan, i) {
        chan.slot(i).stats.waited_for_previous.fetch_add(1, Ordering::Relaxed);
        wait_done(&chan, i)?;
    }
    let kind = fill_slot(&chan, i, fill, Submit::Ahead)?;
    publish(&chan, i);
    let ticket = next_ticket();
    AHEAD.with(|a| a.set((ticket, kind)));
    Ok(ticket)
}

/// The answer to read-ahead `ticket`, waited for if still in flight and
/// handed to `read` inside the slot buffer; `None` when another read-ahead
/// displaced it (or it was taken already).
pub fn take_ahead<R>(ticket: u64, read: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, ChannelError> {
    let (outstanding, kind) = AHEAD.with(|a| a.get());
    if ticket == 0 || outstanding != ticket {
        return Ok(None);
    }
    AHEAD.with(|a| a.set((0, 0)));
    let chan = channel().ok_or(ChannelError::NotPreloaded)?;
    let i = chan.ahead_slot(my_slot(&chan)?);
    answer(&chan, i, kind, read).map(Some)
}

/// Submit a request and do not wait for its answer (fire and forget): for
/// requests whose outcome the backend does not need, like the flush flags and
/// row-lock release after a commit. The engine serves this backend's
/// requests in the order it sent them (module docs: the pair). Never waits
/// for an engine that is not running (it is used in commit callbacks, which
/// must not block on a dead postmaster).
pub fn post(fill: impl FnOnce(&mut [u8]) -> Result<usize, ChannelError>) -> Result<(), ChannelError> {
    let chan = channel().ok_or(ChannelError::NotPreloaded)?;
    let me = my_slot(&chan)?;
    if !engine_alive(&chan) {
        return Err(ChannelError::EngineDown);
    }
    submit_main(&chan, me, fill, Submit::Post).map(|_| ())
}

/// Submit a request whose answer matters but need not be waited for now
/// (a write whose outcome is decided: pipelining). Its answer is kept for
/// [`take_posted_answers`]. Requests of one backend still run in order, so
/// the backend's later reads see the write. Returns the post's ticket
/// (tickets grow with every post).
pub fn post_checked(fill: impl FnOnce(&mut [u8]) -> Result<usize, ChannelError>) -> Result<u64, ChannelError> {
    let chan = channel().ok_or(ChannelError::NotPreloaded)?;
    let me = my_slot(&chan)?;
    wait_engine_ready(&chan)?;
    let (i, _) = submit_main(&chan, me, fill, Submit::Post)?;
    let ticket = next_ticket();
    CHECKED.with(|c| c.borrow_mut().push_back((i, ticket)));
    Ok(ticket)
}

/// Hand the answers of this backend's checked posts to `each`, oldest
/// first, as far as they are applied (all of them, waiting, when `wait`);
/// returns the ticket of the oldest one still in flight, if any.
pub fn take_posted_answers(wait: bool, mut each: impl FnMut(&[u8])) -> Result<Option<u64>, ChannelError> {
    if CHECKED.with(|c| c.borrow().is_empty()) && KEPT.with(|k| k.borrow().is_empty()) {
        return Ok(None);
    }
    let chan = channel().ok_or(ChannelError::NotPreloaded)?;
    if wait {
        // The pair's requests are applied in order: the newest is the last.
        if let Some((i, _)) = CHECKED.with(|c| c.borrow().back().copied()) {
            wait_done(&chan, i)?;
        }
    }
    keep_done_answers(&chan);
    KEPT.with(|k| {
        for answer in k.borrow_mut().drain(..) {
            each(&answer);
        }
    });
    Ok(CHECKED.with(|c| c.borrow().front().map(|&(_, ticket)| ticket)))
}

/// Whether a request posted now would be served at once: this backend's
/// pair has no request in flight.
pub fn post_is_free() -> bool {
    let Some(chan) = channel() else { return false };
    let Ok(me) = my_slot(&chan) else { return false };
    !in_flight(&chan, me) && !in_flight(&chan, chan.twin_slot(me))
}

/// Wait until this backend's pair has no request in flight (its posted
/// writes are applied), keeping checked posts' answers for
/// [`take_posted_answers`]. Never ERRORs (abort callbacks call it, with
/// interrupts held): false when the engine is not running or no channel is
/// mapped.
pub fn settle() -> bool {
    let Some(chan) = channel() else { return false };
    let Ok(me) = my_slot(&chan) else { return false };
    for i in [me, chan.twin_slot(me)] {
        if in_flight(&chan, i) && wait_done(&chan, i).is_err() {
            return false;
        }
    }
    keep_done_answers(&chan);
    true
}

/// Forget checked posts' answers (the transaction aborted: whatever it
/// wrote is dead).
pub fn forget_posted_answer() {
    CHECKED.with(|c| c.borrow_mut().clear());
    KEPT.with(|k| k.borrow_mut().clear());
}

/// Copy aside the answers of the checked posts that are applied. They are
/// the oldest ones (the pair's requests are applied in order), and a slot
/// about to take a new request holds no answer after this.
fn keep_done_answers(chan: &Channel) {
    CHECKED.with(|c| {
        let mut checked = c.borrow_mut();
        while let Some(&(i, _)) = checked.front() {
            if in_flight(chan, i) {
                break;
            }
            checked.pop_front();
            let n = (chan.slot(i).response_len.load(Ordering::Relaxed) as usize).min(chan.buffer_len(i));
            // SAFETY: DONE (Acquire in `in_flight`): this backend owns the buffer.
            let answer = unsafe { std::slice::from_raw_parts(chan.buffer_ptr(i), n) }.to_vec();
            KEPT.with(|k| k.borrow_mut().push_back(answer));
        }
    });
}

/// Whether slot `i` holds a request the engine has not answered yet.
fn in_flight(chan: &Channel, i: usize) -> bool {
    is_in_flight(chan.slot(i).state.load(Ordering::Acquire))
}

/// Whether a slot in `state` holds an unanswered request (submitted,
/// queued or claimed).
fn is_in_flight(state: u32) -> bool {
    state != IDLE && state != DONE
}

/// A new ticket for a read-ahead or a checked post (they grow, never 0).
fn next_ticket() -> u64 {
    LAST_TICKET.with(|t| {
        t.set(t.get() + 1);
        t.get()
    })
}

/// How a request is submitted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Submit {
    /// Waited for now ([`call`]).
    Call,
    /// Not waited for: a write or a notice ([`post`], [`post_checked`]).
    /// Fences of other backends wait for it.
    Post,
    /// A read-ahead ([`post_ahead`]) into the read-ahead slot: not waited
    /// for now, and no fence waits for it (it writes nothing).
    Ahead,
}

/// Before this process's first request: note what its slots counted for
/// earlier owners, and wait for requests an earlier owner left in flight
/// in its pair (they were sent before anything this process sends).
fn note_first_request(chan: &Channel) -> Result<(), ChannelError> {
    if BASELINE.with(|b| b.borrow().is_some()) {
        return Ok(());
    }
    let me = my_slot(chan)?;
    BASELINE.with(|b| *b.borrow_mut() = Some(own_slots_stats(chan, me)));
    for i in [me, chan.twin_slot(me)] {
        if in_flight(chan, i) {
            chan.slot(i).stats.waited_for_previous.fetch_add(1, Ordering::Relaxed);
            wait_done(chan, i)?;
        }
    }
    Ok(())
}

/// Write a request into this backend's pair (main slot `me` and its twin)
/// and hand it to the engine; returns the slot it went into and the
/// request's kind (its op byte). Into the slot of the last request if that
/// one is answered; else into the other slot, queued behind it (module
/// docs: the pair), after that slot's own earlier request is answered.
fn submit_main(
    chan: &Channel,
    me: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<usize, ChannelError>,
    how: Submit,
) -> Result<(usize, usize), ChannelError> {
    note_first_request(chan)?;
    let pair = [me, chan.twin_slot(me)];
    let latest = LATEST.with(|l| l.get());
    let (at, behind) = if in_flight(chan, pair[latest]) {
        let older = pair[1 - latest];
        if in_flight(chan, older) {
            chan.slot(older).stats.waited_for_previous.fetch_add(1, Ordering::Relaxed);
            wait_done(chan, older)?;
        }
        (1 - latest, Some(pair[latest]))
    } else {
        (latest, None)
    };
    let i = pair[at];
    keep_done_answers(chan);
    let kind = fill_slot(chan, i, fill, how)?;
    LATEST.with(|l| l.set(at));
    let slot = chan.slot(i);
    if let Some(ahead) = behind {
        // SeqCst store, then SeqCst load of the sibling: see the module
        // docs (the engine thread that stores its DONE loads this state
        // after it, so one of the two sees the other).
        // This backend wrote `ahead`'s sequence: its own store.
        let queued = queued_behind(chan.slot(ahead).seq.load(Ordering::Relaxed));
        slot.state.store(queued, Ordering::SeqCst);
        let ahead_done = chan.slot(ahead).state.load(Ordering::SeqCst) == DONE;
        if !ahead_done || slot.state.compare_exchange(queued, SUBMITTED, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            return Ok((i, kind)); // the engine takes it when it answers `ahead`
        }
        ring(chan, i);
    } else {
        publish(chan, i);
    }
    Ok((i, kind))
}

/// Write a request into slot `i`, which this backend owns (no request in
/// flight), with its counters and fields; returns its kind (op byte). The
/// caller then publishes it.
fn fill_slot(
    chan: &Channel,
    i: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<usize, ChannelError>,
    how: Submit,
) -> Result<usize, ChannelError> {
    let slot = chan.slot(i);
    // SAFETY: the slot is IDLE or DONE, so this backend owns the buffer.
    let out = unsafe { std::slice::from_raw_parts_mut(chan.buffer_ptr(i), chan.buffer_len(i)) };
    let len = fill(out)?;
    let kind = usize::from(out[0]) % super::REQUEST_KINDS;
    let stats = &slot.stats;
    if how == Submit::Call { &stats.calls[kind] } else { &stats.posted[kind] }.fetch_add(1, Ordering::Relaxed);
    stats.bytes_sent[kind].fetch_add(len as u64, Ordering::Relaxed);
    slot.request_len.store(len as u32, Ordering::Relaxed);
    slot.posted.store(u32::from(how == Submit::Post), Ordering::SeqCst);
    slot.seq.fetch_add(1, Ordering::SeqCst);
    // SAFETY: reading our own pid global.
    slot.owner_pid.store(unsafe { pg_sys::MyProcPid }, Ordering::Relaxed);
    Ok(kind)
}

/// Hand slot `i`'s filled request to the engine: SUBMITTED, its bit in the
/// submitted bitmap, the doorbell, and a wake if every service thread sleeps.
fn publish(chan: &Channel, i: usize) {
    // Release: the request bytes become visible to the engine's Acquire CAS.
    chan.slot(i).state.store(SUBMITTED, Ordering::SeqCst);
    ring(chan, i);
}

/// Slot `i` is SUBMITTED: set its bit, ring the doorbell, wake a service
/// thread if none is awake to see it.
fn ring(chan: &Channel, i: usize) {
    let h = chan.header();
    // After the state: an engine thread that takes the bit sees SUBMITTED.
    chan.submitted_word(i / 64).fetch_or(1 << (i % 64), Ordering::SeqCst);
    h.doorbell.fetch_add(1, Ordering::SeqCst);
    if h.servers.sleeping_servers.load(Ordering::SeqCst) > 0 && h.servers.idle_pollers.load(Ordering::SeqCst) == 0 {
        futex::wake(&h.doorbell, 1);
        h.count(super::EngineStat::DoorbellWakes);
    }
}

/// Wait until every request other backends had posted and not yet seen
/// answered when this was called has been answered. A fetch through a
/// non-MVCC snapshot (a unique check) fences first: a writer posts its row
/// (or its tombstone, under the row lock) before it inserts the index entry
/// that leads here or returns, so after the fence the fetch sees it.
pub fn fence_others() -> Result<(), ChannelError> {
    let chan = channel().ok_or(ChannelError::NotPreloaded)?;
    let me = my_slot(&chan).ok();
    let mut in_flight: Vec<(usize, u32)> = (0..chan.nslots())
        .filter(|&j| Some(j) != me)
        .filter_map(|j| {
            let slot = chan.slot(j);
            // Sequence first: a request submitted after this read has a
            // newer sequence, and one answered before it left the state.
            let seq = slot.seq.load(Ordering::SeqCst);
            let in_flight = is_in_flight(slot.state.load(Ordering::SeqCst));
            (in_flight && slot.posted.load(Ordering::SeqCst) != 0).then_some((j, seq))
        })
        .collect();
    let start = Instant::now();
    while !in_flight.is_empty() {
        in_flight.retain(|&(j, seq)| {
            let slot = chan.slot(j);
            slot.seq.load(Ordering::SeqCst) == seq && is_in_flight(slot.state.load(Ordering::SeqCst))
        });
        if in_flight.is_empty() {
            break;
        }
        if start.elapsed() < ANSWER_SPIN {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_micros(50));
            pgrx::check_for_interrupts!();
            if !engine_alive(&chan) {
                return Err(ChannelError::EngineDown);
            }
        }
    }
    Ok(())
}

/// Size of a main slot's buffer (the largest request, and the largest
/// answer to a waited call), or None when the channel is not mapped.
pub fn buffer_bytes() -> Option<usize> {
    channel().map(|c| c.buffer_bytes())
}

/// Size of a read-ahead slot's buffer (the largest answer to
/// [`post_ahead`]), or None when the channel is not mapped.
pub fn ahead_bytes() -> Option<usize> {
    channel().map(|c| c.ahead_bytes())
}
