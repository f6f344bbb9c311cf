//! The backend ⇄ engine channel: per-backend request/response slots in one
//! shared-memory region. This module owns every raw shared-memory pointer in
//! pasv; everything else sees safe methods.
//!
//! # Layout
//! ```text
//! ChannelHeader | SlotHeader × nslots (64-byte aligned) | submitted bitmap (one 64-bit word per
//!   64 slots, each word on a cache line of its own) | main buffer × procs (buffer_bytes each,
//!   4 KiB aligned) | read-ahead buffer × procs (ahead_bytes each) | twin buffer × procs
//!   (buffer_bytes each); procs = nslots / 3
//! ```
//! Each process has three slots: its main one, whose index is its `PGPROC`
//! number (`MyProc->pgprocno`); its read-ahead slot, `procs` further on,
//! which carries only scans' read-aheads; and the main slot's *twin*,
//! `2 × procs` on, which takes the next request while the main slot's is
//! in flight (and the other way round): the *pair*. A backend never
//! competes for its slots. A read-ahead slot's buffer is larger than a main
//! one (`pasv.read_ahead_buffer_size`): a scan's batch size is its buffer's,
//! and a long scan pays the engine's per-answer costs (a claim, a wake, a
//! new RocksDB iterator position) once per batch (HOT_PATH.md §49).
//!
//! # Protocol (one request in flight per slot)
//! ```text
//!   state:  IDLE ──backend──► SUBMITTED ──engine CAS──► CLAIMED ──engine──► DONE ──backend──► (next request)
//! ```
//! * The backend writes the request into the buffer, then stores
//!   `SUBMITTED` with `Release` (pairs with the engine's `Acquire` CAS), then
//!   sets the slot's bit in the *submitted bitmap* (SeqCst `fetch_or`, after
//!   the state store), then bumps the doorbell (SeqCst) and wakes a sleeping
//!   engine thread. A set bit therefore always means one request in state
//!   `SUBMITTED` that no engine thread has taken yet.
//! * An engine thread finds work by reading the bitmap (a few words, not
//!   every slot's state), takes a request by clearing its bit (`fetch_and`;
//!   only the thread whose `fetch_and` saw the bit set goes on, and its
//!   RMW reads the backend's `fetch_or`, so the `SUBMITTED` store before it
//!   is visible), then claims the slot with a CAS `SUBMITTED → CLAIMED`
//!   (`Acquire`; it cannot fail: nobody claims without taking the bit, and
//!   the backend submits again only after `DONE`), copies the request out, writes the response into the
//!   buffer, and stores `DONE` with `Release` (pairs with the backend's
//!   `Acquire` load). It wakes the backend with a futex only if the backend
//!   announced that it sleeps (`waiting`), read after the `DONE` store (SeqCst
//!   on both sides, so one of the two always sees the other).
//! * Engine threads sleep on the doorbell with `futex_wait(doorbell, seen)`:
//!   a submit after `seen` was read changes the word and the wait returns at
//!   once, so no wake-up is lost. A submit wakes a sleeping thread only when
//!   no thread is polling (`idle_pollers`, SeqCst on both sides; a poller
//!   read `seen` before it polled, so it cannot sleep through the submit).
//! * A backend interrupted while waiting (query cancel) leaves its slot
//!   in flight; its next request queues behind that stale one (the pair,
//!   below) or waits for it, and its answer is discarded.
//! * A backend may leave a request unwaited: a *post* (a write whose outcome
//!   is decided; its answer is copied aside when its slot is needed again;
//!   `posted` is 1 so other backends' fences wait for it).
//! * The pair: a request submitted while the backend's last one is still in
//!   flight goes into the other slot of the pair *behind* it, so two posts
//!   (or a post and the call after it) are in flight at once, and the
//!   engine still serves one backend's requests one at a time, in the order
//!   they were sent. (A third request waits for the older slot's `DONE`.)
//!   ```text
//!   state:  IDLE/DONE ──backend──► QUEUED ──┬─ engine CAS, having stored DONE in the sibling ──► CLAIMED ──► DONE
//!                                           └─ backend CAS, having seen the sibling DONE ──► SUBMITTED (as above)
//!   ```
//!   The backend stores `QUEUED`, tagged with the sequence of the request
//!   it waits for (`queued_behind`; SeqCst, after the request bytes and
//!   fields, as `SUBMITTED` is stored), then loads the sibling's state
//!   (SeqCst); the engine thread that serves the sibling stores `DONE`
//!   (SeqCst), then loads the queued slot's state (SeqCst). So at least one
//!   of them sees the other's store, and whichever wins the CAS from that
//!   tagged value hands the request on: the engine thread serves it at
//!   once (Acquire CAS: the request is visible), or the backend submits it
//!   as any other (bitmap bit, doorbell). The engine's CAS expects the tag
//!   of the request it answered, so it never takes a later request queued
//!   behind a later one. A queued request is in flight for every purpose
//!   (fences, waits); nothing else ever moves a slot out of `QUEUED`.
//! * A *read-ahead* (a scan's next batch) goes into the read-ahead slot and
//!   may run beside the main slot's requests, in any order with them. That
//!   is sound only for what the reader cannot see: see
//!   `engine_client::scan_ahead`. Its answer is taken in place, or
//!   discarded when the next read-ahead is submitted.

pub mod buffered_rows;
pub mod client;
pub mod futex;
pub mod server;

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64};
use pasv_am::striped::StripedCounters;

pub const MAGIC: u64 = 0x7061_7376_6368_616e; // "pasvchan"

/// Slot states (the `state` word is also the backend's futex word).
pub const IDLE: u32 = 0;
pub const SUBMITTED: u32 = 1;
pub const CLAIMED: u32 = 2;
pub const DONE: u32 = 3;
/// Held back until the other slot of the pair is DONE (module docs): the
/// low byte of a queued slot's state; the rest is the tag of the request
/// it waits for ([`queued_behind`]).
pub const QUEUED: u32 = 4;

/// The state of a slot whose request waits for the request with sequence
/// `seq` in the other slot of its pair. The tag makes the engine's CAS
/// from it fail unless the request it just answered is that one: a
/// service thread delayed between its DONE store and its look at the
/// sibling (a futex wake, a preemption) would otherwise find a later
/// request queued behind a later one and serve it first (seen: TPC-B at 8
/// clients, a checked post's answer read from a slot reused meanwhile).
pub fn queued_behind(seq: u32) -> u32 {
    QUEUED | (seq << 8)
}

/// How many databases can use pasv at once (one replay worker and slot each).
pub const MAX_DATABASES: usize = 64;

/// Recovery states of a database ([`DbSlot::recovery`]).
pub const DB_READY: u32 = 0;
pub const DB_RECOVERING: u32 = 1;
/// Recovery failed [`MAX_RECOVERY_ATTEMPTS`] times in a row: backends get an
/// ERROR instead of waiting, until `pasv.retry_recovery()` or
/// `pasv.abandon_recovery()`.
pub const DB_RECOVERY_FAILED: u32 = 2;
pub const MAX_RECOVERY_ATTEMPTS: u32 = 3;

/// Replication slot states of a database ([`DbSlot::slot`]).
/// `SLOT_NONE`: no slot protects this database's unflushed writes (yet), so
/// every commit that wrote pasv tables flushes them first.
pub const SLOT_NONE: u32 = 0;
pub const SLOT_READY: u32 = 1;
/// Creating the slot failed (see the server log); commits flush as in NONE.
pub const SLOT_FAILED: u32 = 2;
/// The mode needs no slot (`engine_wal`, `unlogged`).
pub const SLOT_NOT_NEEDED: u32 = 3;

/// One database that uses pasv. A slot is claimed by a CAS of `db` from 0;
/// the engine's main thread starts a replay worker for each claimed slot.
#[repr(C)]
pub struct DbSlot {
    pub db: AtomicU32,
    /// [`DB_READY`] or [`DB_RECOVERING`]; set by the engine at start, cleared
    /// by the replay worker. Backends wait while it is RECOVERING.
    pub recovery: AtomicU32,
    pub slot: AtomicU32,
    /// The replay worker's pid, 0 when none runs.
    pub worker_pid: AtomicI32,
    /// 1 while DROP DATABASE of `db` runs: the worker leaves and is not restarted.
    pub dropping: AtomicU32,
    /// The global DPP last computed by the worker (0: none yet).
    pub global_dpp: AtomicU64,
    /// Recovery attempts that failed in a row.
    pub recovery_failures: AtomicU32,
}

/// Engine states as seen by backends.
pub const ENGINE_DOWN: u32 = 0;
pub const ENGINE_STARTING: u32 = 1;
pub const ENGINE_READY: u32 = 2;
pub const ENGINE_STOPPING: u32 = 3;
pub const ENGINE_FAILED: u32 = 4;

/// The header's words that change at a high rate each sit on a cache line
/// of their own (`OwnLine`): a word bumped by every submit (the doorbell)
/// or every call (`waiting_calls`) on the line of a word every poll or
/// submit reads made each of those reads a cache miss.
#[repr(C)]
pub struct ChannelHeader {
    pub magic: u64,
    pub nslots: u32,
    pub buffer_bytes: u32,
    pub ahead_bytes: u32,
    pub engine_state: AtomicU32,
    pub engine_pid: AtomicI32,
    /// Bumped by every submit; engine threads sleep on it.
    pub doorbell: OwnLine<AtomicU32>,
    /// How the service threads wait, written as they go idle or busy and
    /// read by every submit.
    pub servers: OwnLine<ServerStates>,
    /// How backends wait, written around every call.
    pub waiters: OwnLine<WaiterStates>,
    /// Incremented each time an engine finishes starting (diagnostics).
    pub engine_generation: AtomicU64,
    /// Engine-side counters (`pasv.engine_stats()`, [`EngineStat`]), since
    /// the postmaster mapped the region.
    pub engine_stats: StripedCounters,
    /// Databases using pasv (durability bookkeeping, DESIGN §5-6).
    pub dbs: [DbSlot; MAX_DATABASES],
    /// 1 while a process claims a database slot.
    pub db_claim_lock: AtomicU32,
    /// Test hook (`pasv.test_delay_next_write`): microseconds the engine
    /// holds the next `PutBatch` before applying it; taken (reset) by it.
    pub test_write_delay_us: AtomicU32,
    /// Armed crash points ([`crate::crash_point`]): hits left + 1, 0 disarmed.
    pub crash_points: [AtomicU32; crate::crash_point::COUNT],
}

impl ChannelHeader {
    /// The slot of database `db`, if it has one.
    pub fn db_slot(&self, db: u32) -> Option<&DbSlot> {
        self.dbs.iter().find(|s| s.db.load(std::sync::atomic::Ordering::Acquire) == db)
    }

    /// The slot of database `db`, claiming a free one if needed (`None`: all
    /// taken). Claims are rare (a database's first pasv table) and serialised
    /// by `db_claim_lock`, so one database never gets two slots.
    pub fn claim_db_slot(&self, db: u32, recovery: u32) -> Option<&DbSlot> {
        use std::sync::atomic::Ordering;
        if let Some(slot) = self.db_slot(db) {
            return Some(slot);
        }
        while self.db_claim_lock.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::thread::yield_now();
        }
        let claimed = self.db_slot(db).or_else(|| {
            let slot = self.dbs.iter().find(|s| s.db.load(Ordering::Acquire) == 0)?;
            slot.recovery.store(recovery, Ordering::Release);
            slot.slot.store(SLOT_NONE, Ordering::Release);
            slot.dropping.store(0, Ordering::Release);
            slot.worker_pid.store(0, Ordering::Release);
            slot.global_dpp.store(0, Ordering::Release);
            slot.recovery_failures.store(0, Ordering::Release);
            // Release: the fields above are visible to whoever finds `db`.
            slot.db.store(db, Ordering::Release);
            Some(slot)
        });
        self.db_claim_lock.store(0, Ordering::Release);
        claimed
    }

    /// Forget database `db` (it was dropped).
    pub fn release_db_slot(&self, db: u32) {
        use std::sync::atomic::Ordering;
        if let Some(slot) = self.db_slot(db) {
            slot.db.store(0, Ordering::Release);
        }
    }
}

#[repr(C, align(64))]
pub struct SlotHeader {
    pub state: AtomicU32,
    /// 1 while the owning backend sleeps in `futex_wait(state)`.
    pub waiting: AtomicU32,
    pub request_len: AtomicU32,
    pub response_len: AtomicU32,
    pub owner_pid: AtomicI32,
    /// Bumped by every submit, before the state becomes SUBMITTED (so a
    /// fence can tell a new request from the one it waits for).
    pub seq: AtomicU32,
    /// 1 when the request in the slot was posted (nobody waits for its
    /// answer): the requests a fence waits for.
    pub posted: AtomicU32,
    /// New rows the owning backend holds unsent (main slots only; see
    /// `buffered_rows`).
    pub buffered: buffered_rows::BufferedRows,
    /// What the processes that owned this slot asked of the engine. Written
    /// only by the owning backend (Relaxed: counters, read for diagnostics).
    pub stats: SlotStats,
}

/// Request kinds counted apart: the `op` byte of a request (1..=31).
pub const REQUEST_KINDS: usize = 32;

/// Per-slot counters, cumulative over the processes that owned the slot
/// (`pasv.channel_stats()` sums them; a backend subtracts what it found at
/// its first request to see its own).
#[repr(C)]
pub struct SlotStats {
    /// Requests waited for, by kind.
    pub calls: [AtomicU64; REQUEST_KINDS],
    /// Requests posted without waiting for the answer, by kind.
    pub posted: [AtomicU64; REQUEST_KINDS],
    /// Waits that went to sleep (futex) because the answer took longer than
    /// the spin, by kind of the request waited for.
    pub slept: [AtomicU64; REQUEST_KINDS],
    pub bytes_sent: [AtomicU64; REQUEST_KINDS],
    pub bytes_received: [AtomicU64; REQUEST_KINDS],
    /// Submits that had to wait for an earlier (posted or cancelled) request.
    pub waited_for_previous: AtomicU64,
    /// Read-aheads nobody took: the next one was submitted first.
    pub ahead_discarded: AtomicU64,
}

/// One request kind's counters: calls, posted, slept, bytes sent, bytes received.
pub type KindStats = [u64; 5];

impl SlotStats {
    pub fn snapshot(&self) -> Vec<KindStats> {
        use std::sync::atomic::Ordering::Relaxed;
        (0..REQUEST_KINDS)
            .map(|k| {
                [
                    self.calls[k].load(Relaxed),
                    self.posted[k].load(Relaxed),
                    self.slept[k].load(Relaxed),
                    self.bytes_sent[k].load(Relaxed),
                    self.bytes_received[k].load(Relaxed),
                ]
            })
            .collect()
    }
}

/// What the service threads are doing, as submits need to know.
#[repr(C)]
pub struct ServerStates {
    /// Number of engine threads asleep on the doorbell (a wake is needed only then).
    pub sleeping_servers: AtomicU32,
    /// The service thread (index + 1, 0: none) that polls longest before
    /// sleeping (`server::LEADER_MAX_SPIN`, adaptive).
    pub spinning_server: AtomicU32,
    /// Service threads polling the slots with nothing to do: while one is,
    /// a submit needs no wake (the doorbell still catches a poller that is
    /// just going to sleep: it waits only if the doorbell did not move).
    pub idle_pollers: AtomicU32,
}

/// How many backends wait for answers, and how.
#[repr(C)]
pub struct WaiterStates {
    /// Backends spinning past the short spin for an answer (at most one
    /// does: `client::wait_done`).
    pub long_spinners: AtomicU32,
    /// Backends waiting for the answer to a call right now.
    pub waiting_calls: AtomicU32,
}

/// A value alone on its 64-byte cache line.
#[repr(C, align(64))]
pub struct OwnLine<T>(pub T);

impl<T> std::ops::Deref for OwnLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Engine-side counters in [`ChannelHeader::engine_stats`].
#[derive(Clone, Copy)]
pub enum EngineStat {
    /// Requests served.
    Served,
    /// Times a service thread found nothing to do and slept on the doorbell.
    Sleeps,
    /// Futex wakes of a service thread by a submitting backend.
    DoorbellWakes,
    /// Futex wakes of a backend sleeping for its answer.
    BackendWakes,
    /// Yields of a polling service thread.
    PollYields,
    /// Of those, yields in which another thread took the core.
    BusyYields,
}

impl ChannelHeader {
    pub fn count(&self, stat: EngineStat) {
        self.engine_stats.add(stat as usize, 1);
    }

    pub fn engine_stat(&self, stat: EngineStat) -> u64 {
        self.engine_stats.sum(stat as usize)
    }
}

pub const BUFFER_ALIGN: usize = 4096;

fn align_up(n: usize, a: usize) -> usize {
    n.div_ceil(a) * a
}

/// Byte offsets of the parts of the region, shared by the size computation
/// (at shmem request time) and the accessors.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub nslots: usize,
    /// A main slot's buffer.
    pub buffer_bytes: usize,
    /// A read-ahead slot's buffer.
    pub ahead_bytes: usize,
    pub slots_offset: usize,
    pub submitted_offset: usize,
    pub buffers_offset: usize,
    pub total: usize,
}

impl Layout {
    pub fn new(nslots: usize, buffer_bytes: usize, ahead_bytes: usize) -> Layout {
        let slots_offset = align_up(std::mem::size_of::<ChannelHeader>(), 64);
        let submitted_offset = slots_offset + nslots * std::mem::size_of::<SlotHeader>();
        let submitted_bytes = nslots.div_ceil(64) * std::mem::size_of::<OwnLine<AtomicU64>>();
        let buffers_offset = align_up(submitted_offset + submitted_bytes, BUFFER_ALIGN);
        let procs = nslots / 3;
        let total = buffers_offset + procs * (2 * buffer_bytes + ahead_bytes) + BUFFER_ALIGN;
        Layout { nslots, buffer_bytes, ahead_bytes, slots_offset, submitted_offset, buffers_offset, total }
    }
}

/// A view of the mapped channel region. Copyable: it is two numbers and a
/// pointer into shared memory that lives as long as the postmaster's segment
/// (every process that holds one is a child of that postmaster).
#[derive(Clone, Copy)]
pub struct Channel {
    base: *mut u8,
    layout: Layout,
}

// SAFETY: the region is process-shared memory that outlives every thread of
// the engine; all shared fields are atomics, and buffer access follows the
// slot protocol above (exactly one side owns a buffer in each state).
unsafe impl Send for Channel {}
unsafe impl Sync for Channel {}

impl Channel {
    /// # Safety
    /// `base` must point to a region of at least `layout.total` bytes that
    /// stays mapped for the life of the process, aligned to 4 KiB after
    /// `layout.buffers_offset` rounding (see [`Channel::init`]).
    pub unsafe fn from_raw(base: *mut u8, layout: Layout) -> Channel {
        Channel { base, layout }
    }

    /// Initialise a freshly allocated region (postmaster, shmem startup).
    ///
    /// # Safety
    /// As [`Channel::from_raw`]; no other process may use the region yet.
    pub unsafe fn init(base: *mut u8, layout: Layout) -> Channel {
        std::ptr::write_bytes(base, 0, layout.buffers_offset);
        let header = base as *mut ChannelHeader;
        (*header).magic = MAGIC;
        (*header).nslots = layout.nslots as u32;
        (*header).buffer_bytes = layout.buffer_bytes as u32;
        (*header).ahead_bytes = layout.ahead_bytes as u32;
        Channel { base, layout }
    }

    pub fn header(&self) -> &ChannelHeader {
        // SAFETY: the region starts with an initialised ChannelHeader.
        unsafe { &*(self.base as *const ChannelHeader) }
    }

    pub(crate) fn base_ptr(&self) -> *mut u8 {
        self.base
    }

    pub fn nslots(&self) -> usize {
        self.layout.nslots
    }

    /// Processes with slots: each has a main slot below this number, a
    /// read-ahead slot at [`Channel::ahead_slot`] and the main slot's twin
    /// at [`Channel::twin_slot`].
    pub fn procs(&self) -> usize {
        self.layout.nslots / 3
    }

    /// The read-ahead slot of the process whose main slot is `i`.
    pub fn ahead_slot(&self, i: usize) -> usize {
        i + self.procs()
    }

    /// The twin of main slot `i`: the other slot of its pair.
    pub fn twin_slot(&self, i: usize) -> usize {
        i + 2 * self.procs()
    }

    /// The other slot of slot `i`'s pair, if `i` is a main slot or a twin
    /// (read-ahead slots have none).
    pub fn sibling(&self, i: usize) -> Option<usize> {
        let procs = self.procs();
        match i / procs.max(1) {
            0 => Some(i + 2 * procs),
            2 => Some(i - 2 * procs),
            _ => None,
        }
    }

    /// The size of a main slot's buffer: one request, or one answer to it.
    pub fn buffer_bytes(&self) -> usize {
        self.layout.buffer_bytes
    }

    /// The size of a read-ahead slot's buffer: one read-ahead's answer.
    pub fn ahead_bytes(&self) -> usize {
        self.layout.ahead_bytes
    }

    /// The size of slot `i`'s buffer.
    pub fn buffer_len(&self, i: usize) -> usize {
        if (self.procs()..2 * self.procs()).contains(&i) {
            self.layout.ahead_bytes
        } else {
            self.layout.buffer_bytes
        }
    }

    pub fn slot(&self, i: usize) -> &SlotHeader {
        assert!(i < self.layout.nslots, "slot {i} out of range");
        // SAFETY: in range; slot headers are initialised (zeroed) atomics.
        unsafe {
            &*(self.base.add(self.layout.slots_offset + i * std::mem::size_of::<SlotHeader>())
                as *const SlotHeader)
        }
    }

    /// Words of the submitted bitmap: bit `i % 64` of word `i / 64` is set
    /// while slot `i` holds a request no engine thread has taken yet.
    pub fn submitted_words(&self) -> usize {
        self.layout.nslots.div_ceil(64)
    }

    pub fn submitted_word(&self, w: usize) -> &AtomicU64 {
        assert!(w < self.submitted_words(), "bitmap word {w} out of range");
        // SAFETY: in range; the bitmap lies before `buffers_offset`, which
        // `init` zeroes, and holds only atomics.
        let line = unsafe {
            &*(self.base.add(self.layout.submitted_offset + w * std::mem::size_of::<OwnLine<AtomicU64>>())
                as *const OwnLine<AtomicU64>)
        };
        &line.0
    }

    /// Raw pointer to slot `i`'s buffer. Who may read or write it depends on
    /// the slot's state (see the module docs), so only the protocol code in
    /// `client` and `server` dereferences it.
    pub(crate) fn buffer_ptr(&self, i: usize) -> *mut u8 {
        assert!(i < self.layout.nslots, "slot {i} out of range");
        let procs = self.procs();
        let (main, ahead) = (self.layout.buffer_bytes, self.layout.ahead_bytes);
        let offset = if i < procs {
            i * main
        } else if i < 2 * procs {
            procs * main + (i - procs) * ahead
        } else {
            procs * (main + ahead) + (i - 2 * procs) * main
        };
        // SAFETY: in range of the region computed by Layout.
        unsafe { self.base.add(self.layout.buffers_offset + offset) }
    }
}
