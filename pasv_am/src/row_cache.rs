//! The row cache: recent answers to one-row reads, in memory that the
//! engine writes and every backend reads without asking the engine.
//!
//! What is cached is the engine's exact answer (an encoded `Entries`
//! response) to the read a backend's fetch by TID makes: the newest
//! [`PER_ROW`] versions of one row of one table CF. A backend that finds the
//! answer here decides visibility on it exactly as on the engine's, so no
//! round trip is made for a point select or an index fetch of a cached row.
//! The design and its measurements are in `src/ipc/HOT_PATH.md`.
//!
//! Layout (one region, placed in PostgreSQL shared memory by the extension,
//! or on the heap in tests): a header, then `sets` sets. A row has two
//! candidate sets: its home, which the [`GROUP`] rows of its group share (so
//! a range's answers lie in a few pages), and a spill set for when the home
//! has no room ([`RowCache::places`]); a set has [`WAYS`] ways of
//! [`WAY_BYTES`] bytes, and an answer occupies a run of consecutive ways
//! whose first way's head describes it.
//!
//! Replacement (CLOCK): a lookup that returns an answer sets its head's
//! reference bit (once; the only word a reader writes). An answer a read
//! asked for is installed referenced; others (changes, new rows, a miss's
//! warmed run) unreferenced. In a full set, a fill or a change evicts from
//! the hand on, clearing the bits of the referenced answers it passes; a
//! warmed run and a bulk batch's new rows take only free ways and those of
//! unreferenced answers, and clear nothing.
//!
//! Who writes: only engine threads, each change of a set under the set's
//! lock bit (readers' reference bits aside). Readers (backends) take no lock: every head is a seqlock (odd
//! while its way run is being written) and a reader that sees the sequence
//! change discards what it copied. All shared words are atomics.
//!
//! Invariants (why an answer found here is one the engine could give now):
//! * The engine changes a row in RocksDB first and in the cache second
//!   (merging the change into the cached answer, or dropping it), before it
//!   acknowledges the write. A reader that must see the write (its writer
//!   committed, which drains first, or it is the writer, which waits for
//!   its posted writes first) therefore finds the new answer or none.
//! * A fill (caching the answer of a read that missed) takes a ticket (the
//!   versions of the row's two sets) before reading RocksDB and installs
//!   into a set only if that set's version is unchanged: every write raises
//!   the versions of both of its row's sets, so an answer read before a
//!   write is never installed after it, in either set. A row may be cached
//!   in both sets (two fills); every write changes both copies.
//! * Truncating or copying a CF, and creating one for a relfilenumber a
//!   dropped CF used, raise the cache's generation (after the change); an
//!   answer of an older generation is never returned. A relfilenumber
//!   reused by a new incarnation therefore never sees the old one's rows.
//!   (Dropping alone raises nothing: nobody asks for a dropped CF's rows.
//!   The CF goes into a ring of recent drops instead, whose answers a
//!   writer sweeps from a set it finds full, so their ways serve again.)
//! * A fill never caches a row that has no versions. A row that was never
//!   written (a rowid reserved by a backend, read through a stale TID or a
//!   TID scan) therefore has no answer here, and a new row's first write
//!   has nothing to invalidate: a writer may leave it out of the cache
//!   without touching its set (bulk inserts do: engine/put_batch.rs).
//! * A cached answer is a prefix of the row's versions, newest first: when
//!   `complete` it holds every version; otherwise older ones may exist in
//!   RocksDB and the reader asks the engine for them as it would have.
//!   An answer is made complete without reading RocksDB only for a new row
//!   (a live write of its version 0 alone, unfrozen: engine/put_batch.rs),
//!   and a read that stops short of a row's versions says so (`more`), even
//!   when deleted versions lie between them (engine/scan.rs).

use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::keys::{decode_row_key, ROW_KEY_LEN};
use crate::region::Stamp;
use crate::striped::StripedCounters;
use crate::protocol::{decode_response, CfRef, Response, ScanWriter, RESPONSE_HEADER_LEN};

/// Versions per row a one-row read asks for (the backend's fetch by TID).
pub const PER_ROW: u32 = 4;
/// Versions per row an index fetch's read-ahead window asks for: a row with
/// one version is then known complete, and is cached so.
pub const WINDOW_PER_ROW: u32 = 2;
/// Rows of the largest read-ahead window that fills the cache.
pub const MAX_WINDOW_ROWS: u64 = 64;
/// Ways per set. Large sets overflow far less often than small ones with
/// the same bytes in all (rows hash to sets at random: with 16 ways, 2 % of
/// a 1 M-row table that fits did not, and each such row cost a round trip
/// per read).
pub const WAYS: usize = 64;
/// Consecutive rowids placed together ([`RowCache::places`]).
const RUN: u64 = 64;
/// Consecutive rowids that share a home set ([`RowCache::places`]). Four,
/// not eight: a set then holds parts of twice as many runs, so the rows
/// that land on it vary less; with a table filling 60 % of the ways, 2.3 %
/// of its rows spill (8: 6.6 %) and 0.2 % find no room (8: 0.9 %), and a
/// range read's lookups nothing prefetched are that much rarer
/// (`a_table_that_fills_most_of_the_cache_stays_at_home`; HOT_PATH.md §62).
const GROUP: u64 = 4;
/// Free ways a set needs for a miss to warm its run
/// ([`RowCache::run_to_warm`]).
const WARM_ROOM: usize = 8;
/// Bytes per way.
pub const WAY_BYTES: usize = 128;
const WAY_WORDS: usize = WAY_BYTES / 8;
/// Largest answer the cache holds.
pub const MAX_ANSWER: usize = 16 * WAY_BYTES;

const MAGIC: u64 = 0x7061_7376_5243_0001; // "pasvRC" v1

/// Header: magic, set count and generation on one line that every lookup
/// reads and hardly anyone writes, then the counters, striped: a lookup
/// bumps one, and one word bumped by every backend on the generation's
/// line made each lookup a cache miss (`crate::striped`).
#[repr(C)]
struct Header {
    /// The set count.
    stamp: Stamp,
    generation: AtomicU64,
    _pad: [AtomicU64; 5],
    /// Lookups that found an answer ([`HITS`]), lookups that did not
    /// ([`MISSES`]), answers installed by fills ([`FILLS`]): counters for
    /// `pasv.row_cache_stats()`.
    counters: StripedCounters,
    /// Tables dropped so far ([`RowCache::forget_cf`]); engine DDL only
    /// writes it, under the engine's DDL lock.
    drops: AtomicU64,
    _pad_drops: [AtomicU64; 7],
    /// The last [`DROPPED_RING`] of them (their `cf_word`s, drop `d` at
    /// `d % DROPPED_RING`; 0 when taken back by a create): their answers
    /// are never asked for again, and a set that looks full sweeps them
    /// (`store_in`).
    dropped: [AtomicU64; DROPPED_RING],
}

/// Dropped tables remembered for sweeping (older ones' answers leave by
/// replacement only, as every answer did before).
const DROPPED_RING: usize = 64;

const HITS: usize = 0;
const MISSES: usize = 1;
const FILLS: usize = 2;

/// The cache's counters since the server started.
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub fills: u64,
    pub sets: u64,
}

/// The head of a way: describes the answer starting at this way.
#[repr(C)]
struct Head {
    /// Seqlock: odd while the run of ways starting here is written.
    seq: AtomicU64,
    rowid: AtomicU64,
    /// `db << 32 | rel`.
    cf: AtomicU64,
    /// Generation (low 32 bits) ‖ length (16 bits) ‖ ways (8) ‖ flags (8).
    meta: AtomicU64,
}

const FLAG_VALID: u64 = 1;
const FLAG_COMPLETE: u64 = 2;
/// Set by a lookup that returned the answer (the only bit a reader
/// writes, with `fetch_or`; it makes no head valid), and when a read that
/// asked for the row installs it; cleared by the replacement hand as it
/// passes (`RowCache::clock_victim`). A reader's bit may land on the next
/// answer of the way or be lost to a writer's store: it is a hint.
const FLAG_REFERENCED: u64 = 4;

/// Where an answer being stored may go when its set has no free run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Placement {
    /// The ways of answers not referenced since the hand last passed them,
    /// looking a few positions ahead: rows nobody asked for yet (a miss's
    /// run, a bulk batch's new rows).
    Unreferenced,
    /// Anywhere: the hand gives each referenced answer a second chance.
    Any,
    /// Free ways only (or those of answers a sweep finds stale): a row's
    /// first choice between its two sets evicts nothing.
    Free,
}

fn pack_meta(generation: u64, len: usize, ways: usize, complete: bool, referenced: bool) -> u64 {
    (generation & 0xFFFF_FFFF) << 32
        | (len as u64 & 0xFFFF) << 16
        | (ways as u64 & 0xFF) << 8
        | FLAG_VALID
        | if complete { FLAG_COMPLETE } else { 0 }
        | if referenced { FLAG_REFERENCED } else { 0 }
}

struct Meta {
    generation: u32,
    len: usize,
    ways: usize,
    valid: bool,
    complete: bool,
    referenced: bool,
}

fn unpack_meta(meta: u64) -> Meta {
    Meta {
        generation: (meta >> 32) as u32,
        len: ((meta >> 16) & 0xFFFF) as usize,
        ways: ((meta >> 8) & 0xFF) as usize,
        valid: meta & FLAG_VALID != 0,
        complete: meta & FLAG_COMPLETE != 0,
        referenced: meta & FLAG_REFERENCED != 0,
    }
}

#[repr(C)]
struct Set {
    /// Bit 0: locked by an engine thread; the rest: the set's version,
    /// raised by every write (not by fills).
    lock: AtomicU64,
    /// Next way the replacement hand (CLOCK: second chance for answers
    /// referenced since it last passed) looks at.
    hand: AtomicU64,
    /// The ways some valid answer covers, as bits (way `w` at bit `w`):
    /// what a writer needs to place an answer and to find what it evicts,
    /// without reading every head in use (32 lines for a full set; a bulk
    /// insert spent half of the engine's time there). Writers only, under
    /// the set lock, kept with the heads by `store` and `invalidate`.
    occupied: AtomicU64,
    /// The generation whose stale answers were last swept from this set
    /// (see `store_in`). Writers only, under the set lock.
    swept: AtomicU64,
    /// The header's `drops` when this set's answers of dropped tables were
    /// last swept. Writers only, under the set lock.
    swept_drops: AtomicU64,
    _pad: [AtomicU64; 3],
    /// Per way, the tag ([`tag_of`]) of the row whose answer starts there, 0
    /// when none does: a lookup reads these two lines and then only the
    /// heads whose tag matches, not all of them (32 lines; a lookup was
    /// bound by such cache misses). Written under the set lock; to readers
    /// a hint only, the head decides.
    /// Four 16-bit tags a word, way `w` in word `w / 4` at bits `16 * (w % 4)`.
    tags: [AtomicU64; WAYS / 4],
    heads: [Head; WAYS],
    data: [AtomicU64; WAYS * WAY_WORDS],
}

/// Bytes a cache with `sets` sets occupies.
pub const fn region_bytes(sets: usize) -> usize {
    std::mem::size_of::<Header>() + sets * std::mem::size_of::<Set>()
}

/// Sets that fit in `bytes` (0 when too small for one).
pub const fn sets_for(bytes: usize) -> usize {
    bytes.saturating_sub(std::mem::size_of::<Header>()) / std::mem::size_of::<Set>()
}

/// A handle on a cache region. Copyable; the region outlives every handle
/// (shared memory lives as long as the server; tests keep the Vec).
#[derive(Clone, Copy)]
pub struct RowCache {
    base: *const u8,
    sets: usize,
}

impl std::fmt::Debug for RowCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RowCache({} sets)", self.sets)
    }
}

// SAFETY: every access to the region goes through atomics.
unsafe impl Send for RowCache {}
unsafe impl Sync for RowCache {}

/// What a fill needs to install its answer (see the module invariants).
#[derive(Clone, Copy, Debug)]
pub struct Ticket {
    tag: u16,
    generation: u64,
    /// Per candidate set (home, then spill): its index and version, `None`
    /// while a write held it.
    sets: [Option<(usize, u64)>; 2],
}

/// Where a row's answer may be: its home set (shared with the rows of its
/// group), else its spill set, and its tag in either.
#[derive(Clone, Copy)]
struct Places {
    home: usize,
    spill: usize,
    tag: u16,
}

impl Places {
    /// The candidate sets, home first, each once.
    fn sets(&self) -> impl Iterator<Item = usize> {
        let spill = (self.spill != self.home).then_some(self.spill);
        std::iter::once(self.home).chain(spill)
    }
}

/// One row's operation from a write: a put of `value` at `key`, or a delete.
pub struct RowOp<'a> {
    pub key: &'a [u8],
    pub value: Option<&'a [u8]>,
}

impl RowCache {
    /// Formats `bytes` of zeroed, 8-aligned memory at `base` as an empty cache.
    ///
    /// # Safety
    /// `base` is valid for `bytes` bytes, 8-aligned, zeroed, and outlives
    /// every handle; no one else uses it.
    pub unsafe fn format(base: *mut u8, bytes: usize) -> Option<RowCache> {
        let sets = sets_for(bytes);
        if sets == 0 || base as usize % 8 != 0 {
            return None;
        }
        let header = &*(base as *const Header);
        header.generation.store(1, Ordering::Relaxed);
        header.stamp.mark(MAGIC, sets);
        Some(RowCache { base, sets })
    }

    /// A handle on a region [`RowCache::format`] made.
    ///
    /// # Safety
    /// As for `format`, and the region was formatted.
    pub unsafe fn attach(base: *const u8) -> Option<RowCache> {
        let sets = (*(base as *const Header)).stamp.count(MAGIC)?;
        Some(RowCache { base, sets })
    }

    fn header(&self) -> &Header {
        // SAFETY: format/attach checked the region.
        unsafe { &*(self.base as *const Header) }
    }

    fn set(&self, index: usize) -> &Set {
        // SAFETY: index < sets; the region holds `sets` sets after the header.
        unsafe { &*(self.base.add(std::mem::size_of::<Header>() + index * std::mem::size_of::<Set>()) as *const Set) }
    }

    /// The two sets row `rowid` of `cf` may be cached in, and its tag.
    ///
    /// Home: the [`GROUP`] consecutive rowids of a group share one set, the
    /// groups of a run of [`RUN`] rowids adjacent sets from one the run's
    /// hash picks. A range read then finds a group's answers in one set's
    /// few pages: with a set of its own per row, every row of a range was
    /// a TLB miss or two on its first touch, a third of the gap between a
    /// 100-row range sum and heap's (HOT_PATH.md §61).
    /// Spill: the rows of a run in consecutive sets from one a second hash
    /// of the run picks, a row a set, as every row was placed before.
    /// Groups make sets fill unevenly (a set's groups are about
    /// Poisson-distributed: with eight rows a group, at half occupancy a
    /// tenth of the sets could not hold theirs, and the rows they pushed
    /// out were round trips), so an answer goes home while its home has
    /// room and to its spill set otherwise; readers look in both, writers
    /// change both.
    ///
    /// A run's first set is its hash scaled to the set count
    /// (multiply-shift), and only a run that passes the last set divides.
    fn places(&self, cf: CfRef, rowid: u64) -> Places {
        let run = crate::keys::row_hash(cf.db, cf.rel, rowid / RUN);
        Places {
            home: self.run_set(run, rowid % RUN / GROUP),
            spill: self.run_set(run.rotate_left(32), rowid % RUN),
            tag: tag_of(crate::keys::row_hash(cf.db, cf.rel, rowid)),
        }
    }

    /// Set `offset` of a run whose hash is `hash`.
    fn run_set(&self, hash: u64, offset: u64) -> usize {
        let sets = self.sets as u64;
        let mut index = ((u128::from(hash) * u128::from(sets)) >> 64) as u64 + offset;
        if index >= sets {
            index -= sets;
            if index >= sets {
                index %= sets; // fewer sets than a run's rows (small caches)
            }
        }
        index as usize
    }

    /// Counts a lookup's outcome.
    pub fn note(&self, hit: bool) {
        self.header().counters.add(if hit { HITS } else { MISSES }, 1);
    }

    pub fn stats(&self) -> CacheStats {
        let h = self.header();
        CacheStats {
            hits: h.counters.sum(HITS),
            misses: h.counters.sum(MISSES),
            fills: h.counters.sum(FILLS),
            sets: self.sets as u64,
        }
    }

    /// Table `cf` was dropped: its answers will never be asked for again.
    /// They are swept from a set when it next looks full to a writer
    /// (`store_in`), so a bulk load gets them without evicting anything
    /// (before, a dropped table's answers kept their ways until replaced:
    /// a TPC-C load after the bulk benchmark's dropped tables found no room
    /// and started with a fifth of its rows uncached). Engine DDL only,
    /// one caller at a time (the engine's DDL lock).
    pub fn forget_cf(&self, cf: CfRef) {
        let h = self.header();
        let d = h.drops.load(Ordering::Relaxed);
        h.dropped[d as usize % DROPPED_RING].store(cf_word(cf), Ordering::Relaxed);
        // Release: a writer that sees the new count sees the entry.
        h.drops.store(d + 1, Ordering::Release);
    }

    /// Table `cf` exists again (a relfilenumber reused; its old answers are
    /// retired by a new generation): it is no longer a dropped table whose
    /// answers may be swept. Engine DDL only, as [`RowCache::forget_cf`].
    pub fn unforget_cf(&self, cf: CfRef) {
        let word = cf_word(cf);
        for entry in &self.header().dropped {
            // A writer sweeping with the old entry at this moment drops a
            // few of the new table's answers: misses, never wrong answers.
            let _ = entry.compare_exchange(word, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Raises the generation: every answer cached so far is stale (a CF was
    /// truncated or filled by a copy, or created for a dropped CF's
    /// relfilenumber; a drop alone only goes into the ring of drops).
    pub fn new_generation(&self) {
        self.header().generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Copies the cached answer for row `rowid` of `cf` into `out` and
    /// returns its length, or `None` (not cached, being changed, or larger
    /// than `out`). Lock-free; any thread or process.
    pub fn lookup(&self, cf: CfRef, rowid: u64, out: &mut [u8]) -> Option<usize> {
        self.lookup_answer(cf, rowid, out).map(|(len, _)| len)
    }

    /// For the engine's read of a row it just locked: the newest `max`
    /// versions of row `rowid` of `cf` from its cached answer, pushed into
    /// the empty `out`, and whether more may follow (what the engine's own
    /// read with `max_entries = max` would answer). `None` (and `out`
    /// possibly changed) when the cache cannot tell: not cached, or an
    /// incomplete answer with fewer than `max` versions.
    ///
    /// Sound under the lock: every write of the row by an earlier holder was
    /// acknowledged, hence merged here, before that holder released it; a
    /// backend's own earlier writes were answered before this request ran.
    pub fn read_versions(&self, cf: CfRef, rowid: u64, max: usize, out: &mut ScanWriter<'_>) -> Option<bool> {
        self.versions(cf, rowid, max, |key, value| out.try_push(key, value))
    }

    /// [`RowCache::read_versions`] handing each `(key, value)` to `push`
    /// (false: it has no room, and the answer is `None`). Backends call it for
    /// a row they locked in shared memory ([`crate::shared_row_locks`]),
    /// sound for the same reason.
    pub fn versions(&self, cf: CfRef, rowid: u64, max: usize, mut push: impl FnMut(&[u8], &[u8]) -> bool) -> Option<bool> {
        let mut buf = [0u8; MAX_ANSWER];
        let (len, complete) = self.lookup_answer(cf, rowid, &mut buf)?;
        let (entries, _) = entries_of(&buf[..len])?;
        let more = if entries.len() >= max {
            true
        } else if complete {
            false
        } else {
            return None;
        };
        for (key, value) in entries.iter().take(max) {
            if !push(key, value) {
                return None;
            }
        }
        Some(more)
    }

    /// Warms the caches for lookups of the rows after `rowid` of `cf`, for a
    /// reader that walks ascending rowids (an index fetch window): the
    /// lines row `rowid + 1`'s answer lies in (its head and data, found
    /// through its tag words, which the call before warmed), and the tag
    /// words of row `rowid + 2`. A lookup otherwise waits for three cache
    /// misses in a row, tags, head, data (perf of the 100-row range sum:
    /// 17 % of all CPU in `lookup_answer`, nearly all of it on those three
    /// loads). Prefetches never fault and change nothing.
    pub fn prefetch_after(&self, cf: CfRef, rowid: u64) {
        let next = self.places(cf, rowid.wrapping_add(1));
        let set = self.set(next.home);
        for way in ways_in(ways_tagged(set, next.tag)) {
            prefetch_line(&set.heads[way]);
            // Most answers take one or two ways of two lines each.
            for line in 0..4 {
                if let Some(word) = set.data.get(way * WAY_WORDS + line * 8) {
                    prefetch_line(word);
                }
            }
        }
        let tags = &self.set(self.places(cf, rowid.wrapping_add(2)).home).tags;
        prefetch_line(&tags[0]);
        prefetch_line(&tags[tags.len() - 1]);
    }

    /// Warms the lines a later [`RowCache::write_new_if_room`] of row
    /// `rowid` of `cf` touches, for a writer that stores ascending rowids (a
    /// bulk batch's new rows), in two steps a few rows apart: the far step
    /// brings the set's lock and way words and its tag words; the near step
    /// reads the ways in use (which the far step warmed) and brings the
    /// head and first data lines of the free way the store will take. A
    /// store otherwise waits for four or five cache misses in a row (perf of
    /// a COPY: `store_in` 10 % of all CPU, a third of the engine's share).
    /// Prefetches never fault and change nothing; the unlocked read of the
    /// ways in use is a hint only.
    pub fn prefetch_store(&self, cf: CfRef, rowid: u64, near: bool) {
        let set = self.set(self.places(cf, rowid).home);
        if !near {
            prefetch_line(&set.lock);
            prefetch_line(&set.tags[0]);
            prefetch_line(&set.tags[set.tags.len() - 1]);
            return;
        }
        if let Some(way) = free_run(set.occupied.load(Ordering::Relaxed), 1) {
            prefetch_line(&set.heads[way]);
            for line in 0..2 {
                if let Some(word) = set.data.get(way * WAY_WORDS + line * 8) {
                    prefetch_line(word);
                }
            }
        }
    }

    /// [`RowCache::lookup`], with whether the answer holds every version.
    fn lookup_answer(&self, cf: CfRef, rowid: u64, out: &mut [u8]) -> Option<(usize, bool)> {
        let generation = self.header().generation.load(Ordering::Acquire) as u32;
        let places = self.places(cf, rowid);
        places.sets().find_map(|index| self.lookup_in(self.set(index), cf, rowid, places.tag, generation, out))
    }

    /// [`RowCache::lookup_answer`] in one of the row's sets.
    fn lookup_in(&self, set: &Set, cf: CfRef, rowid: u64, tag: u16, generation: u32, out: &mut [u8]) -> Option<(usize, bool)> {
        let cf_word = cf_word(cf);
        for way in ways_in(ways_tagged(set, tag)) {
            let head = &set.heads[way];
            if head.rowid.load(Ordering::Relaxed) != rowid {
                continue;
            }
            let seq = head.seq.load(Ordering::Acquire);
            if seq & 1 == 1 {
                return None;
            }
            let meta = unpack_meta(head.meta.load(Ordering::Relaxed));
            if !meta.valid
                || head.rowid.load(Ordering::Relaxed) != rowid
                || head.cf.load(Ordering::Relaxed) != cf_word
                || meta.generation != generation
                || meta.len > out.len()
                || way + meta.ways > WAYS
                || meta.len > meta.ways * WAY_BYTES
            {
                continue;
            }
            copy_out(set, way, meta.len, out);
            fence(Ordering::Acquire);
            if head.seq.load(Ordering::Relaxed) != seq {
                return None;
            }
            if !meta.referenced {
                // Once per pass of the hand, so a hot row's line is not
                // written by every reader.
                head.meta.fetch_or(FLAG_REFERENCED, Ordering::Relaxed);
            }
            return Some((meta.len, meta.complete));
        }
        None
    }

    /// Before reading row `rowid` of `cf` from RocksDB to answer a one-row
    /// read: the ticket its answer is installed with. `None` while writes
    /// hold both of the row's sets (the read may overlap them; nothing is
    /// cached).
    pub fn ticket(&self, cf: CfRef, rowid: u64) -> Option<Ticket> {
        let places = self.places(cf, rowid);
        let generation = self.header().generation.load(Ordering::SeqCst);
        let mut sets = [None; 2];
        for (slot, index) in sets.iter_mut().zip(places.sets()) {
            let version = self.set(index).lock.load(Ordering::SeqCst);
            *slot = (version & 1 == 0).then_some((index, version));
        }
        sets.iter().any(Option::is_some).then_some(Ticket { tag: places.tag, generation, sets })
    }

    /// Installs `answer` (an encoded `Entries` response to a read of the
    /// newest [`PER_ROW`] versions of row `rowid` of `cf`, read after
    /// `ticket` was taken), unless a write into the set came between.
    pub fn fill(&self, ticket: Ticket, cf: CfRef, rowid: u64, answer: &[u8]) {
        self.fill_in(ticket, cf, rowid, answer, Placement::Any);
    }

    /// [`RowCache::fill`] with `placement`; an answer placed anywhere was
    /// asked for, and starts referenced.
    fn fill_in(&self, ticket: Ticket, cf: CfRef, rowid: u64, answer: &[u8], placement: Placement) {
        let Some((entries, more)) = entries_of(answer) else { return };
        let complete = !more && entries.len() < PER_ROW as usize;
        if answer.len() > MAX_ANSWER || entries.is_empty() {
            return; // no versions: see the module's invariants
        }
        if self.header().generation.load(Ordering::SeqCst) != ticket.generation {
            return; // a CF changed under the read: the answer may be stale
        }
        let cached = |&(index, _): &(usize, u64)| self.find(self.set(index), cf, rowid, ticket.tag, ticket.generation as u32).is_some();
        if ticket.sets.iter().flatten().any(cached) {
            return; // a hint (unlocked); checked again under each set's lock
        }
        let asked = placement == Placement::Any;
        // Free ways at home, else free ways in the spill set, else home as
        // `placement` allows: two choices keep evictions rare where one
        // set alone would overflow. Each set is checked against its own
        // version: a write changes both of the row's sets, so one that came
        // after the ticket fails the check of whichever set the answer
        // would go to. (Held in a set of the ticket's, an answer a write
        // later meets there is merged as any cached answer.)
        let candidates = ticket.sets.iter().flatten();
        let attempts = candidates.clone().map(|&c| (c, Placement::Free)).chain(candidates.take(1).map(|&c| (c, placement)));
        for ((index, version), here) in attempts {
            let set = self.set(index);
            if set.lock.compare_exchange(version, version | 1, Ordering::SeqCst, Ordering::Relaxed).is_err() {
                continue;
            }
            let found = self.find(set, cf, rowid, ticket.tag, ticket.generation as u32).is_some();
            let stored = !found && self.store_in(set, cf, rowid, ticket.tag, ticket.generation, answer, complete, here, asked);
            set.lock.store(version, Ordering::SeqCst);
            if stored {
                self.header().counters.add(FILLS, 1);
            }
            if found || stored {
                return;
            }
        }
    }

    /// After a one-row read of row `rowid` of `cf` missed the cache: the
    /// run of rows around it (`[lo, hi)`, the [`RUN`] rowids placed in
    /// adjacent sets) worth reading to cache them too, if the run's sets
    /// have room. Heap reads a page of rows on a miss, so a freshly started
    /// server warms by pages; one row per miss left pasv's cache cold for
    /// a long time after a restart (TPC-B: a miss a transaction for
    /// minutes). The run's rows take free ways, or the ways of answers
    /// nobody read since the hand last passed them: a cache full of rows
    /// nobody reads any more (an earlier workload's, a dropped table's)
    /// warms as an empty one does, while rows that are being read are not
    /// churned. With neither, nothing is read. (Session 24: the TPC-C-like
    /// mix after other work had filled the cache missed 4.24 times a
    /// transaction, its own load never cached; 0.09 on an empty cache.)
    pub fn run_to_warm(&self, cf: CfRef, rowid: u64) -> Option<(u64, u64)> {
        let lo = rowid - rowid % RUN;
        let hi = lo.checked_add(RUN)?;
        let probe = if rowid + 1 < hi { rowid + 1 } else { lo };
        let room = |index: usize| {
            let set = self.set(index);
            let used = set.occupied.load(Ordering::Relaxed).count_ones() as usize;
            used + WARM_ROOM <= WAYS || unreferenced_ways(set, WARM_ROOM) >= WARM_ROOM
        };
        self.places(cf, probe).sets().any(room).then_some((lo, hi))
    }

    /// Before a window read of rows `[lo, hi)` of `cf` (at most
    /// [`MAX_WINDOW_ROWS`]): a ticket for each row, in `out[..hi - lo]`.
    pub fn window_tickets(&self, cf: CfRef, lo: u64, hi: u64, out: &mut [Option<Ticket>; MAX_WINDOW_ROWS as usize]) {
        for (i, ticket) in out.iter_mut().enumerate().take((hi - lo) as usize) {
            *ticket = self.ticket(cf, lo + i as u64);
        }
    }

    /// Installs each row of `answer` (an encoded `Entries` response to a
    /// window read of rows from `lo` with `per_row` versions each, read after
    /// `tickets` were taken) as that row's own answer, as [`RowCache::fill`]
    /// would the row's one-row read. A row is complete when the answer holds
    /// fewer than `per_row` of its versions and goes on past it.
    pub fn fill_window(&self, tickets: &[Option<Ticket>], cf: CfRef, lo: u64, per_row: u32, answer: &[u8]) {
        self.fill_window_in(tickets, cf, lo, per_row, answer, Placement::Any);
    }

    /// [`RowCache::fill_window`] into free ways and those of unreferenced
    /// answers only: for rows nobody asked for yet
    /// ([`RowCache::run_to_warm`]), which must not push out rows being read.
    pub fn warm_window(&self, tickets: &[Option<Ticket>], cf: CfRef, lo: u64, per_row: u32, answer: &[u8]) {
        self.fill_window_in(tickets, cf, lo, per_row, answer, Placement::Unreferenced);
    }

    fn fill_window_in(&self, tickets: &[Option<Ticket>], cf: CfRef, lo: u64, per_row: u32, answer: &[u8], placement: Placement) {
        let Some((entries, more)) = entries_of(answer) else { return };
        let mut buf = [0u8; MAX_ANSWER];
        let mut rest = &entries[..];
        while let Some(&(first, _)) = rest.first() {
            let Some((rowid, _)) = decode_row_key(first) else { return };
            let n = rest.iter().take_while(|(key, _)| decode_row_key(key).is_some_and(|(r, _)| r == rowid)).count();
            let (row, after) = rest.split_at(n);
            rest = after;
            let complete = n < per_row as usize && !(rest.is_empty() && more);
            let ticket = rowid.checked_sub(lo).and_then(|i| tickets.get(i as usize)).copied().flatten();
            if let (Some(ticket), Some(len)) = (ticket, encode_answer(row, !complete, &mut buf)) {
                self.fill_in(ticket, cf, rowid, &buf[..len], placement);
            }
        }
    }

    /// After `ops` (all of row `rowid` of `cf`) were written to RocksDB and
    /// before the write is acknowledged: merges them into the cached answer,
    /// or caches the row when `fresh` (its only version is the one `ops`
    /// puts: a new row), or drops what no longer holds.
    pub fn write(&self, cf: CfRef, rowid: u64, ops: &[RowOp<'_>], fresh: bool) {
        self.write_in(cf, rowid, ops, fresh, true);
    }

    /// [`RowCache::write`] of a heap-only chain member's tombstone, which
    /// moves its row on to a newer member: the merged answer loses its
    /// reference bit, so it is among the first the hand evicts. Index
    /// fetches reach the row through its root's redirect, which now names
    /// the new member; only readers whose snapshots predate the move (an
    /// updater about to wait for the mover's row lock) still read this
    /// member, and they find it while it stays. Keeping the bit kept every
    /// member a hot row ever had for a second pass of the hand, at the
    /// cost of rows being read (HOT_PATH.md §51).
    pub fn write_moved_on(&self, cf: CfRef, rowid: u64, ops: &[RowOp<'_>]) {
        self.write_in(cf, rowid, ops, false, false);
    }

    fn write_in(&self, cf: CfRef, rowid: u64, ops: &[RowOp<'_>], fresh: bool, keep_reference: bool) {
        // Both sets, home first, each under its lock: an answer may be in
        // either (or, filled twice, in both), and a fill with a ticket from
        // before this write must fail in either (the module's invariants).
        let places = self.places(cf, rowid);
        // A new row goes where there is room, home first; with none in
        // either, home (evicting).
        let to_spill = fresh && !has_room(self.set(places.home)) && has_room(self.set(places.spill));
        let to = if to_spill { places.spill } else { places.home };
        for index in places.sets() {
            self.write_in_set(self.set(index), cf, rowid, places.tag, ops, fresh && index == to, keep_reference);
        }
    }

    /// [`RowCache::write_in`] in one of the row's sets (`fresh`: the new
    /// row's answer goes here).
    #[allow(clippy::too_many_arguments)]
    fn write_in_set(&self, set: &Set, cf: CfRef, rowid: u64, tag: u16, ops: &[RowOp<'_>], fresh: bool, keep_reference: bool) {
        let version = lock(set);
        let generation = self.header().generation.load(Ordering::SeqCst);
        SCRATCH.with(|scratch| {
            // Per engine thread, not zeroed per call: every row of a bulk
            // insert comes through here.
            let (old, new) = &mut *scratch.borrow_mut();
            let found = self.find(set, cf, rowid, tag, generation as u32);
            // A changed row keeps its reference bit: an update of a row
            // being read is no reason to evict it first.
            let mut referenced = false;
            let merged = match found {
                Some(way) => {
                    let head = &set.heads[way];
                    let meta = unpack_meta(head.meta.load(Ordering::Relaxed));
                    referenced = meta.referenced && keep_reference;
                    copy_out(set, way, meta.len, &mut old[..]);
                    self.invalidate(set, way);
                    merge(&old[..meta.len], meta.complete, ops, &mut new[..])
                }
                None if fresh => match ops {
                    [RowOp { key, value: Some(value) }] => encode(&[(key, value)], &mut new[..]).map(|len| (len, true)),
                    _ => None,
                },
                None => None,
            };
            if let Some((len, complete)) = merged {
                self.store_in(set, cf, rowid, tag, generation, &new[..len], complete, Placement::Any, referenced);
            }
        });
        set.lock.store(version + 2, Ordering::SeqCst);
    }

    /// A new row's only version (`key`, `value`), written by a bulk insert:
    /// cached where its set has free ways or answers nobody read since the
    /// hand last passed them (an earlier load's rows, rows gone cold),
    /// never evicting one being read (a load leaves a busy cache's hot rows
    /// alone, as heap's bulk-write ring keeps a COPY from evicting
    /// shared_buffers). Free ways only left every table loaded after the
    /// cache first filled up cold, whatever the rows filling it were
    /// (HOT_PATH.md §49). A new row has no answer to invalidate (fills
    /// never cache a row without versions), so nothing else is done.
    pub fn write_new_if_room(&self, cf: CfRef, rowid: u64, key: &[u8], value: &[u8]) {
        let places = self.places(cf, rowid);
        SCRATCH.with(|scratch| {
            let (_, answer) = &mut *scratch.borrow_mut();
            let Some(len) = encode(&[(key, value)], &mut answer[..]) else { return };
            let attempts = places.sets().map(|index| (index, Placement::Free)).chain([(places.home, Placement::Unreferenced)]);
            for (index, placement) in attempts {
                let set = self.set(index);
                let version = lock(set);
                let generation = self.header().generation.load(Ordering::SeqCst);
                let stored = self.store_in(set, cf, rowid, places.tag, generation, &answer[..len], true, placement, false);
                set.lock.store(version + 2, Ordering::SeqCst);
                if stored {
                    return;
                }
            }
        });
    }

    /// The way whose valid answer is row `rowid` (tagged `tag`) of `cf` in
    /// `generation`.
    fn find(&self, set: &Set, cf: CfRef, rowid: u64, tag: u16, generation: u32) -> Option<usize> {
        let cf_word = cf_word(cf);
        ways_in(ways_tagged(set, tag)).find(|&way| {
            let head = &set.heads[way];
            let meta = unpack_meta(head.meta.load(Ordering::Relaxed));
            meta.valid
                && meta.generation == generation
                && head.rowid.load(Ordering::Relaxed) == rowid
                && head.cf.load(Ordering::Relaxed) == cf_word
        })
    }

    /// Marks every answer of a table dropped before the `drops`-th drop
    /// (and remembered) gone. Caller holds the set lock.
    fn sweep_dropped(&self, set: &Set, drops: u64) {
        let ring = &self.header().dropped;
        let mut words = [0u64; DROPPED_RING];
        let mut n = 0;
        for entry in ring.iter().take((drops as usize).min(DROPPED_RING)) {
            let word = entry.load(Ordering::Relaxed);
            if word != 0 {
                words[n] = word;
                n += 1;
            }
        }
        if n == 0 {
            return;
        }
        for way in ways_in(ways_in_use(set)) {
            let cf = set.heads[way].cf.load(Ordering::Relaxed);
            if words[..n].contains(&cf) {
                self.invalidate(set, way);
            }
        }
    }

    /// Marks every answer of a generation other than `generation` gone.
    /// Caller holds the set lock.
    fn sweep_stale(&self, set: &Set, generation: u32) {
        for way in ways_in(ways_in_use(set)) {
            if unpack_meta(set.heads[way].meta.load(Ordering::Relaxed)).generation != generation {
                self.invalidate(set, way);
            }
        }
    }

    /// Marks the answer starting at `way` gone. Caller holds the set lock.
    fn invalidate(&self, set: &Set, way: usize) {
        let head = &set.heads[way];
        let covered = unpack_meta(head.meta.load(Ordering::Relaxed)).ways;
        let occupied = set.occupied.load(Ordering::Relaxed);
        set.occupied.store(occupied & !run_mask(way, covered), Ordering::Relaxed);
        let seq = head.seq.load(Ordering::Relaxed);
        head.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        head.meta.store(0, Ordering::Relaxed);
        set_tag(set, way, 0);
        head.seq.store(seq + 2, Ordering::Release);
    }

    /// Where the replacement hand puts an answer of `ways` ways in the full
    /// `set`: the first run from the hand that no referenced answer
    /// overlaps. With [`Placement::Any`] each referenced answer the hand
    /// meets loses its bit and is passed (CLOCK's second chance), so a run
    /// is always found within a turn. With [`Placement::Unreferenced`] the
    /// hand only looks, [`WARM_ROOM`] positions ahead at most, and clears
    /// nothing: rows nobody asked for never age the rows being read.
    /// Caller holds the set lock.
    fn clock_victim(&self, set: &Set, ways: usize, placement: Placement) -> Option<usize> {
        let ages = placement == Placement::Any;
        let tries = match placement {
            Placement::Any => WAYS + 1,
            Placement::Unreferenced => WARM_ROOM,
            Placement::Free => return None,
        };
        let mut at = set.hand.load(Ordering::Relaxed) as usize;
        for _ in 0..tries {
            let start = run_from(at, ways);
            let mut referenced = 0u64;
            for way in ways_in(overlapping(set, start, ways)) {
                if unpack_meta(set.heads[way].meta.load(Ordering::Relaxed)).referenced {
                    referenced |= 1 << way;
                }
            }
            if referenced == 0 {
                set.hand.store(((start + ways) % WAYS) as u64, Ordering::Relaxed);
                return Some(start);
            }
            if ages {
                for way in ways_in(referenced) {
                    set.heads[way].meta.fetch_and(!FLAG_REFERENCED, Ordering::Relaxed);
                }
            }
            // On past the last of them.
            let last = 63 - referenced.leading_zeros() as usize;
            let covered = unpack_meta(set.heads[last].meta.load(Ordering::Relaxed)).ways.max(1);
            at = (last + covered) % WAYS;
            if ages {
                set.hand.store(at as u64, Ordering::Relaxed);
            }
        }
        // Readers set bits again as fast as the hand clears them: plain FIFO.
        ages.then(|| {
            let start = run_from(set.hand.load(Ordering::Relaxed) as usize, ways);
            set.hand.store(((start + ways) % WAYS) as u64, Ordering::Relaxed);
            start
        })
    }

    /// Writes `answer` into a run of ways, where `placement` allows (else
    /// nothing is stored: false), evicting what overlaps it; `referenced` is its
    /// starting reference bit. Caller holds the set lock.
    #[allow(clippy::too_many_arguments)]
    fn store_in(
        &self,
        set: &Set,
        cf: CfRef,
        rowid: u64,
        tag: u16,
        generation: u64,
        answer: &[u8],
        complete: bool,
        placement: Placement,
        referenced: bool,
    ) -> bool {
        let ways = answer.len().div_ceil(WAY_BYTES).max(1);
        if answer.len() > MAX_ANSWER {
            return false;
        }
        let mut free = free_run(set.occupied.load(Ordering::Relaxed), ways);
        if free.is_none() && set.swept.load(Ordering::Relaxed) != generation {
            // Answers of older generations (before a CF was created or
            // dropped: every DDL) are never returned again, but they held
            // their ways until evicted, and a bulk batch, which only takes
            // free ways, found no room after any DDL. Swept once per
            // generation per set, when the set first looks full.
            self.sweep_stale(set, generation as u32);
            set.swept.store(generation, Ordering::Relaxed);
            free = free_run(set.occupied.load(Ordering::Relaxed), ways);
        }
        if free.is_none() {
            // Acquire pairs with `forget_cf`'s Release: the entries of the
            // drops counted are there.
            let drops = self.header().drops.load(Ordering::Acquire);
            if set.swept_drops.load(Ordering::Relaxed) != drops {
                self.sweep_dropped(set, drops);
                set.swept_drops.store(drops, Ordering::Relaxed);
                free = free_run(set.occupied.load(Ordering::Relaxed), ways);
            }
        }
        let start = match free {
            Some(start) => start,
            None => match self.clock_victim(set, ways, placement) {
                Some(start) => start,
                None => return false,
            },
        };
        for way in ways_in(overlapping(set, start, ways)) {
            self.invalidate(set, way);
        }
        let head = &set.heads[start];
        let seq = head.seq.load(Ordering::Relaxed);
        head.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        head.rowid.store(rowid, Ordering::Relaxed);
        head.cf.store(cf_word(cf), Ordering::Relaxed);
        copy_in(set, start, answer);
        head.meta.store(pack_meta(generation, answer.len(), ways, complete, referenced), Ordering::Relaxed);
        set_tag(set, start, tag);
        set.occupied.store(set.occupied.load(Ordering::Relaxed) | run_mask(start, ways), Ordering::Relaxed);
        head.seq.store(seq + 2, Ordering::Release);
        true
    }
}

thread_local! {
    /// `write`'s and `write_new_if_room`'s buffers, per engine thread and not
    /// zeroed per call (every row of a bulk insert comes through one of
    /// them): the cached answer and the new one.
    static SCRATCH: std::cell::RefCell<(Box<[u8; MAX_ANSWER]>, Box<[u8; MAX_ANSWER]>)> =
        std::cell::RefCell::new((Box::new([0; MAX_ANSWER]), Box::new([0; MAX_ANSWER])));
}

/// The ways of `set` whose tag is `tag`, as bits of a mask (way `w` at bit
/// `w`). Every lookup and prefetch of a row asks it, so it compares sixteen
/// tags at once: the lane-by-lane loop of [`ways_tagged_portable`] was about
/// half of `lookup_answer` and `prefetch_after` in a range sum whose rows
/// were all in the CPU's caches (HOT_PATH.md §60).
#[cfg(target_arch = "x86_64")]
fn ways_tagged(set: &Set, tag: u16) -> u64 {
    use std::arch::x86_64::{_mm_cmpeq_epi16, _mm_movemask_epi8, _mm_packs_epi16, _mm_set1_epi16, _mm_set_epi64x};
    let mut mask = 0u64;
    // Four tag words are sixteen ways. Each word is read by an atomic load
    // (a writer may store it meanwhile: a tag is a hint, the head decides);
    // the vector work is on registers only.
    for (i, words) in set.tags.chunks_exact(4).enumerate() {
        let w = |j: usize| words[j].load(Ordering::Relaxed) as i64;
        // SAFETY: SSE2 is part of the x86_64 baseline, and these intrinsics
        // touch no memory. `packs` turns each 16-bit lane's all-ones or zero
        // into one byte of the same sign, in way order (the low word's four
        // lanes first), and `movemask` takes one bit per byte.
        let bits = unsafe {
            let pattern = _mm_set1_epi16(tag as i16);
            let low = _mm_cmpeq_epi16(_mm_set_epi64x(w(1), w(0)), pattern);
            let high = _mm_cmpeq_epi16(_mm_set_epi64x(w(3), w(2)), pattern);
            _mm_movemask_epi8(_mm_packs_epi16(low, high))
        };
        mask |= u64::from(bits as u16) << (16 * i);
    }
    mask
}

#[cfg(not(target_arch = "x86_64"))]
fn ways_tagged(set: &Set, tag: u16) -> u64 {
    ways_tagged_portable(set, tag)
}

/// [`ways_tagged`] one word at a time: four tags compared per word load.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn ways_tagged_portable(set: &Set, tag: u16) -> u64 {
    const LANE_LOW: u64 = 0x0001_0001_0001_0001;
    const LANE_HIGH: u64 = 0x8000_8000_8000_8000;
    let pattern = u64::from(tag) * LANE_LOW;
    let mut mask = 0u64;
    for (i, word) in set.tags.iter().enumerate() {
        let x = word.load(Ordering::Relaxed) ^ pattern;
        // The high bit of each lane of x that is zero, and of no other.
        let zero = !(((x & !LANE_HIGH) + !LANE_HIGH) | x) & LANE_HIGH;
        // Lane l's bit (at 16 l + 15) becomes bit l.
        let lanes = (zero >> 15 & 1) | (zero >> 30 & 2) | (zero >> 45 & 4) | (zero >> 60 & 8);
        mask |= lanes << (4 * i);
    }
    mask
}

/// The ways of `set` where an answer starts (a valid head has a tag, and
/// only a valid one: `store` and `invalidate` keep them together under the
/// set lock), as bits of a mask. For writers, which hold the lock.
fn ways_in_use(set: &Set) -> u64 {
    const ALL_WAYS: u64 = u64::MAX >> (64 - WAYS);
    !ways_tagged(set, 0) & ALL_WAYS
}

/// Asks the CPU to bring the cache line holding `at` closer; a hint that
/// never faults (no-op where there is no such instruction).
#[inline(always)]
fn prefetch_line<T>(at: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch only hints the cache; it reads nothing the
    // program sees and never faults, and `at` is a valid reference anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>((at as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// The ways whose bits are set in `mask`, lowest first.
fn ways_in(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let way = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            way
        })
    })
}

/// Sets way `way`'s tag. Caller holds the set lock (the only writer).
fn set_tag(set: &Set, way: usize, tag: u16) {
    let word = &set.tags[way / 4];
    let shift = 16 * (way % 4);
    let old = word.load(Ordering::Relaxed);
    word.store(old & !(0xFFFF << shift) | u64::from(tag) << shift, Ordering::Relaxed);
}

/// A row's tag in its set: 16 bits of its hash the set index does not
/// depend on much, never 0 (a free way).
fn tag_of(hash: u64) -> u16 {
    (hash >> 48) as u16 | 1
}

fn cf_word(cf: CfRef) -> u64 {
    u64::from(cf.db) << 32 | u64::from(cf.rel)
}

/// Takes the set's lock bit; returns the version it held.
fn lock(set: &Set) -> u64 {
    let mut spins = 0u32;
    loop {
        let version = set.lock.load(Ordering::Relaxed);
        if version & 1 == 0
            && set
                .lock
                .compare_exchange_weak(version, version | 1, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
        {
            return version;
        }
        // Held by another engine thread for a copy of at most 2 kB.
        spins += 1;
        if spins % 64 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// First run of `ways` consecutive ways not in `occupied`.
fn free_run(occupied: u64, ways: usize) -> Option<usize> {
    // Bit w of `free` stays set iff ways w .. w + k are all free; bits shifted
    // in from above way 63 count as occupied, so no run wraps.
    let mut free = !occupied;
    for k in 1..ways {
        free &= !occupied >> k;
    }
    (free != 0).then(|| free.trailing_zeros() as usize)
}

/// Whether `set` has a free run of ways for a small answer (a hint:
/// unlocked).
fn has_room(set: &Set) -> bool {
    free_run(set.occupied.load(Ordering::Relaxed), 2).is_some()
}

/// Bits `[start, start + ways)`.
fn run_mask(start: usize, ways: usize) -> u64 {
    let bits = if ways >= 64 { u64::MAX } else { (1u64 << ways) - 1 };
    bits << start
}

/// Where a run of `ways` ways from position `at` starts: `at`, or way 0
/// when the run would pass the set's last way (runs never wrap).
fn run_from(at: usize, ways: usize) -> usize {
    if at + ways > WAYS { 0 } else { at }
}

/// The ways where the answers overlapping `[start, start + ways)` start:
/// those starting in it, and the one covering `start` from before it.
/// For writers, which hold the lock.
fn overlapping(set: &Set, start: usize, ways: usize) -> u64 {
    let starts = ways_in_use(set);
    let mut found = starts & run_mask(start, ways);
    if set.occupied.load(Ordering::Relaxed) & (1 << start) != 0 && starts & (1 << start) == 0 {
        // Answers are contiguous runs: the nearest start below covers it.
        let below = starts & ((1u64 << start) - 1);
        found |= 1 << (63 - below.leading_zeros());
    }
    found
}

/// Ways of `set` held by answers not referenced since the hand passed
/// them, counted up to `enough` (from the hand on). Unlocked: a hint.
fn unreferenced_ways(set: &Set, enough: usize) -> usize {
    let hand = set.hand.load(Ordering::Relaxed) as usize % WAYS;
    let starts = ways_in_use(set).rotate_right(hand as u32);
    let mut count = 0;
    for offset in ways_in(starts) {
        let meta = unpack_meta(set.heads[(offset + hand) % WAYS].meta.load(Ordering::Relaxed));
        if meta.valid && !meta.referenced {
            count += meta.ways.max(1);
            if count >= enough {
                break;
            }
        }
    }
    count
}

/// Copies the `len` bytes stored from way `way` of `set` into `out`.
/// Whole words are copied as words and the tail once: a copy of a length
/// the compiler cannot see was a `memcpy` call for every 8 bytes (perf of
/// the 100-row range sum: `memmove` and its PLT stub a tenth of the
/// backend's time).
fn copy_out(set: &Set, way: usize, len: usize, out: &mut [u8]) {
    let words = &set.data[way * WAY_WORDS..][..len.div_ceil(8)];
    let (whole, tail) = out[..len].split_at_mut(len & !7);
    for (bytes, word) in whole.chunks_exact_mut(8).zip(words) {
        bytes.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
    }
    if !tail.is_empty() {
        tail.copy_from_slice(&words[len / 8].load(Ordering::Relaxed).to_le_bytes()[..tail.len()]);
    }
}

/// Stores `answer` into `set` from way `way` on, as [`copy_out`] reads it.
fn copy_in(set: &Set, way: usize, answer: &[u8]) {
    let words = &set.data[way * WAY_WORDS..][..answer.len().div_ceil(8)];
    let whole = answer.chunks_exact(8);
    let tail = whole.remainder();
    for (bytes, word) in whole.zip(words) {
        word.store(u64::from_le_bytes(bytes.try_into().expect("chunks of 8")), Ordering::Relaxed);
    }
    if !tail.is_empty() {
        let mut last = [0u8; 8];
        last[..tail.len()].copy_from_slice(tail);
        words[answer.len() / 8].store(u64::from_le_bytes(last), Ordering::Relaxed);
    }
}

/// The entries and `more` of an encoded `Entries` answer.
fn entries_of(answer: &[u8]) -> Option<(Vec<(&[u8], &[u8])>, bool)> {
    match decode_response(answer) {
        Ok(Response::Entries { more, batch }) => Some((batch.iter().collect(), more)),
        _ => None,
    }
}

/// Encodes `entries` as a complete `Entries` answer into `out`.
fn encode(entries: &[(&[u8], &[u8])], out: &mut [u8]) -> Option<usize> {
    encode_answer(entries, false, out)
}

/// Encodes `entries` as an `Entries` answer with `more` into `out`.
fn encode_answer(entries: &[(&[u8], &[u8])], more: bool, out: &mut [u8]) -> Option<usize> {
    let mut writer = ScanWriter::new(out, 0);
    for (key, value) in entries {
        if !writer.try_push(key, value) {
            return None;
        }
    }
    Some(writer.finish(more))
}

/// The cached answer `old` with `ops` applied, re-encoded into `out`:
/// `(length, complete)`, or `None` when what remains is not a valid answer.
fn merge(old: &[u8], complete: bool, ops: &[RowOp<'_>], out: &mut [u8]) -> Option<(usize, bool)> {
    let (mut entries, _) = entries_of(old)?;
    for op in ops {
        // An incomplete answer left with no version no longer says which
        // version is the row's newest.
        if op.key.len() != ROW_KEY_LEN || !complete && entries.is_empty() {
            return None;
        }
        entries.retain(|(key, _)| *key != op.key);
        if let Some(value) = op.value {
            // A version older than the oldest cached one of an incomplete
            // answer stays out: the prefix ends where it ended.
            let oldest = entries.last().map(|(key, _)| *key);
            if complete || oldest.is_none_or(|oldest| op.key < oldest) {
                entries.push((op.key, value));
            }
        }
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    }
    let mut complete = complete;
    if entries.len() > PER_ROW as usize {
        entries.truncate(PER_ROW as usize);
        complete = false;
    }
    if entries.is_empty() && !complete {
        return None;
    }
    // Older versions go first when the answer does not fit.
    let mut keep = entries.len();
    loop {
        if let Some(len) = encode(&entries[..keep], out).filter(|&len| len <= MAX_ANSWER) {
            return (keep > 0 || complete).then_some((len, complete && keep == entries.len()));
        }
        if keep == 0 {
            return None;
        }
        keep -= 1;
        complete = false;
    }
}

/// Whether a read of `[start, end)` with `per_row` and `max_entries` is an
/// index fetch's read-ahead window (`src/tam/fetch.rs`), which fills the
/// cache row by row ([`RowCache::fill_window`]): the rowids `[lo, hi)` it
/// spans. A window reads fewer than [`PER_ROW`] versions of each row, from
/// its newest, and at most [`MAX_WINDOW_ROWS`] rows.
pub fn window_read(start: &[u8], end: &[u8], per_row: u32, max_entries: u32) -> Option<(u64, u64)> {
    if max_entries != 0 || per_row == 0 || per_row >= PER_ROW {
        return None;
    }
    let (lo, version) = decode_row_key(start)?;
    let (hi, end_version) = decode_row_key(end)?;
    (version == u32::MAX && end_version == u32::MAX && hi > lo.checked_add(1)? && hi - lo <= MAX_WINDOW_ROWS).then_some((lo, hi))
}

/// Whether a read of `[start, end)` with `per_row` and `max_entries` is the
/// one-row read the cache answers, and of which row.
pub fn cached_read(start: &[u8], end: &[u8], per_row: u32, max_entries: u32) -> Option<u64> {
    if per_row != PER_ROW || max_entries != 0 {
        return None;
    }
    let (rowid, version) = decode_row_key(start)?;
    let (end_rowid, end_version) = decode_row_key(end)?;
    (version == u32::MAX && end_version == u32::MAX && end_rowid == rowid.checked_add(1)?).then_some(rowid)
}

const _: () = assert!(MAX_ANSWER <= u16::MAX as usize && RESPONSE_HEADER_LEN < WAY_BYTES);
// A tag mask fits a u64; sets and the header are whole cache lines (the
// region starts on one).
const _: () = assert!(WAYS <= 64 && WAYS % 4 == 0 && RUN == MAX_WINDOW_ROWS);
const _: () = assert!(std::mem::size_of::<Set>() % 64 == 0 && std::mem::size_of::<Header>() % 64 == 0);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::row_key;
    use std::collections::BTreeMap;

    const T: CfRef = CfRef { db: 5, rel: 16384 };

    /// A cache of `sets` sets on the heap (u64s keep it 8-aligned).
    struct Region(#[allow(dead_code)] Vec<u64>, RowCache); // the Vec keeps the memory alive

    fn cache(sets: usize) -> Region {
        let (mem, cache) = crate::engine::test_support::heap_row_cache(sets);
        Region(mem, cache)
    }

    /// A miss warms its run while the run's sets have room, or answers
    /// nobody read since the hand passed them: a full cache of rows being
    /// read is not churned by reads nobody asked for, one of rows nobody
    /// reads any more warms as an empty one.
    #[test]
    fn a_run_is_warmed_into_room_or_over_unread_answers() {
        let r = cache(1);
        let c = r.1;
        assert_eq!(c.run_to_warm(T, 70), Some((64, 128)));
        let value = vec![7u8; 40];
        let mut rowid = 1000;
        while c.set(0).occupied.load(Ordering::Relaxed) != u64::MAX {
            c.write(T, rowid, &[RowOp { key: &row_key(rowid, 0), value: Some(&value) }], true);
            rowid += 1;
            assert!(rowid <= 1000 + WAYS as u64, "the set fills");
        }
        // Full of rows written, never read: they give way.
        assert_eq!(c.run_to_warm(T, 70), Some((64, 128)));
        // Read, every one of them: a full set of rows being read does not.
        for r in 1000..rowid {
            assert!(get(&c, r).is_some());
        }
        assert_eq!(c.run_to_warm(T, 70), None);
        // A warm window finds no way, so every row being read stays.
        let answer_of = |rowids: std::ops::Range<u64>| {
            answer(&rowids.map(|r| (row_key(r, 0), value.clone())).collect::<Vec<_>>(), false)
        };
        let mut tickets = [None; MAX_WINDOW_ROWS as usize];
        c.window_tickets(T, 64, 128, &mut tickets);
        c.warm_window(&tickets, T, 64, WINDOW_PER_ROW, &answer_of(64..128));
        assert!((64..128).all(|r| get(&c, r).is_none()), "no read row was pushed out");
        assert!((1000..rowid).all(|r| get(&c, r).is_some()));
    }

    /// The rows of a group share a home set and the next group has the next
    /// one; a row whose home is full goes to its spill set, where lookups
    /// find it and writes change it, and a fill whose ticket predates a
    /// write (which changes both sets) installs in neither.
    #[test]
    fn a_row_spills_when_its_home_is_full_and_stays_exact_there() {
        let r = cache(256);
        let c = r.1;
        let group = |rowid: u64| (rowid / GROUP) * GROUP..(rowid / GROUP + 1) * GROUP;
        // A row whose two sets differ (the hashes pick them apart).
        let q = (0..4096u64).find(|&rowid| c.places(T, rowid).home != c.places(T, rowid).spill).unwrap();
        let p = c.places(T, q);
        assert!(group(q).all(|rowid| c.places(T, rowid).home == p.home), "a group shares its home set");
        let next = group(q).end;
        if next % RUN != 0 {
            assert_eq!(c.places(T, next).home, (p.home + 1) % 256, "the next group of the run has the next set");
        }
        // Fill the home set with another table's answers.
        let other = CfRef { db: 5, rel: 16385 };
        let generation = c.header().generation.load(Ordering::SeqCst);
        let home = c.set(p.home);
        let version = lock(home);
        let filler = answer(&[(row_key(1, 0), vec![1u8; 40])], false);
        let mut n = 0u64;
        while c.store_in(home, other, n, tag_of(n), generation, &filler, true, Placement::Free, true) {
            n += 1;
            assert!(n <= WAYS as u64, "a set holds {WAYS} ways");
        }
        home.lock.store(version + 2, Ordering::SeqCst);
        assert_eq!(home.occupied.load(Ordering::Relaxed), u64::MAX);
        let row = |rowid: u64, version: u32| answer(&[(row_key(rowid, version), vec![version as u8; 150])], false);
        let in_set = |index: usize, rowid: u64| c.find(c.set(index), T, rowid, c.places(T, rowid).tag, generation as u32).is_some();
        // A fill: the home set is full of answers being read, the spill set
        // has room.
        let ticket = c.ticket(T, q).unwrap();
        c.fill(ticket, T, q, &row(q, 0));
        assert!(in_set(p.spill, q) && !in_set(p.home, q), "the answer went to the spill set");
        assert_eq!(versions(&get(&c, q).unwrap()).len(), 1);
        // A write is merged there.
        c.write(T, q, &[put(&row_key(q, 1), &[1u8; 150])], false);
        let seen: Vec<u32> = versions(&get(&c, q).unwrap()).iter().map(|v| v.1).collect();
        assert_eq!(seen, vec![1, 0], "the write reached the spilled answer");
        // A fill read before a write installs nowhere; one read after does.
        let q2 = group(q).find(|&rowid| rowid != q && c.places(T, rowid).spill != p.home).unwrap();
        let stale = c.ticket(T, q2).unwrap();
        c.write(T, q2, &[put(&row_key(q2, 0), &[0u8; 150])], false);
        c.fill(stale, T, q2, &row(q2, 7));
        assert_eq!(get(&c, q2), None, "an answer read before a write was installed after it");
        let fresh = c.ticket(T, q2).unwrap();
        c.fill(fresh, T, q2, &row(q2, 0));
        assert!(get(&c, q2).is_some());
        assert_eq!(home.occupied.load(Ordering::Relaxed), u64::MAX, "the full home set kept its answers");
    }

    /// Groups are small enough for a set's share of them to vary little: a
    /// table whose rows fill 60 % of the cache's ways (two ways a row, as
    /// a pgbench account's answer takes), filled in random order as reads
    /// miss, keeps nearly every row at home, where a range read's
    /// prefetches find it, spills under 4 % of them and leaves under
    /// 0.5 % uncached (eight rows a group: 6.6 % and 0.9 %).
    #[test]
    fn a_table_that_fills_most_of_the_cache_stays_at_home() {
        const SETS: usize = 2048;
        let r = cache(SETS);
        let c = r.1;
        let rows = (SETS * WAYS * 6 / 10 / 2) as u64;
        let generation = c.header().generation.load(Ordering::SeqCst) as u32;
        // Reads miss in an order unrelated to the rowids.
        let mut order: Vec<u64> = (0..rows).collect();
        let mut next = crate::engine::test_support::xorshift(0x9e37_79b9_7f4a_7c15);
        for i in (1..order.len()).rev() {
            order.swap(i, next(i as u64 + 1) as usize);
        }
        for &rowid in &order {
            let ticket = c.ticket(T, rowid).unwrap();
            c.fill(ticket, T, rowid, &answer(&[(row_key(rowid, 0), vec![3u8; 150])], false));
        }
        let (mut home, mut spilled) = (0u64, 0u64);
        for rowid in 0..rows {
            let p = c.places(T, rowid);
            if c.find(c.set(p.home), T, rowid, p.tag, generation).is_some() {
                home += 1;
            } else if c.find(c.set(p.spill), T, rowid, p.tag, generation).is_some() {
                spilled += 1;
            }
        }
        let uncached = rows - home - spilled;
        assert!(spilled * 25 < rows, "{spilled} of {rows} rows spilled");
        assert!(uncached * 200 < rows, "{uncached} of {rows} rows found no room");
    }

    /// The hand gives a referenced answer a second chance: fills that evict
    /// push out the answers nobody read before one that was read, and an
    /// answer read again after the hand passed it survives another turn.
    #[test]
    fn eviction_passes_over_answers_that_were_read() {
        let r = cache(1);
        let c = r.1;
        let value = vec![9u8; 40];
        for rowid in 0..WAYS as u64 {
            c.write(T, rowid, &[RowOp { key: &row_key(rowid, 0), value: Some(&value) }], true);
        }
        assert_eq!(c.set(0).occupied.load(Ordering::Relaxed), u64::MAX);
        let hot = [3u64, 17, 40, 63];
        for &rowid in &hot {
            assert!(get(&c, rowid).is_some());
        }
        // As many fills of new rows as there are unread answers.
        let fill = |rowid: u64| {
            let ticket = c.ticket(T, rowid).unwrap();
            c.fill(ticket, T, rowid, &answer(&[(row_key(rowid, 0), value.clone())], false));
        };
        for rowid in 1000..1000 + (WAYS - hot.len()) as u64 {
            fill(rowid);
        }
        for &rowid in &hot {
            assert!(get(&c, rowid).is_some(), "row {rowid} was read, and stays");
        }
        assert!((0..WAYS as u64).filter(|r| !hot.contains(r)).all(|r| get(&c, r).is_none()));
        // The hand cleared the hot rows' bits as it passed; reading row 17
        // again sets its bit, and it outlives the next turn's fills, which
        // were not read (a fill was asked for: it starts referenced once).
        assert!(get(&c, 17).is_some());
        for rowid in 2000..2000 + 2 * WAYS as u64 {
            fill(rowid);
            assert!(get(&c, 17).is_some() || rowid >= 2000 + WAYS as u64, "row 17 survives the turn after its read");
        }
        assert_occupancy_matches_heads(c.set(0), 0);
    }

    /// Prefetching for a store changes nothing: every row answers as before
    /// and every set holds the same ways, full sets and empty ones alike.
    #[test]
    fn prefetch_store_changes_nothing() {
        let r = cache(4);
        let c = r.1;
        let value = vec![3u8; 40];
        for rowid in 0..200u64 {
            c.write_new_if_room(T, rowid, &row_key(rowid, 0), &value);
        }
        let state = |c: &RowCache| {
            let answers: Vec<Option<Vec<u8>>> = (0..400u64)
                .map(|rowid| {
                    let mut out = [0u8; 4096];
                    c.lookup(T, rowid, &mut out).map(|n| out[..n].to_vec())
                })
                .collect();
            let ways: Vec<u64> = (0..4).map(|i| c.set(i).occupied.load(Ordering::Relaxed)).collect();
            (answers, ways)
        };
        let before = state(&c);
        assert!(before.0.iter().any(Option::is_some) && before.0.iter().any(Option::is_none));
        for rowid in 0..400 {
            c.prefetch_store(T, rowid, false);
            c.prefetch_store(T, rowid, true);
        }
        assert_eq!(before, state(&c));
    }

    fn answer(entries: &[([u8; ROW_KEY_LEN], Vec<u8>)], more: bool) -> Vec<u8> {
        let mut out = vec![0u8; 8192];
        let mut w = ScanWriter::new(&mut out, 0);
        for (k, v) in entries {
            assert!(w.try_push(k, v));
        }
        let len = w.finish(more);
        out.truncate(len);
        out
    }

    fn versions(bytes: &[u8]) -> Vec<(u64, u32, Vec<u8>)> {
        let (entries, _) = entries_of(bytes).unwrap();
        entries
            .iter()
            .map(|(k, v)| {
                let (r, ver) = decode_row_key(k).unwrap();
                (r, ver, v.to_vec())
            })
            .collect()
    }

    fn get(c: &RowCache, rowid: u64) -> Option<Vec<u8>> {
        let mut out = vec![0u8; 4096];
        c.lookup(T, rowid, &mut out).map(|n| out[..n].to_vec())
    }

    fn put<'a>(key: &'a [u8], value: &'a [u8]) -> RowOp<'a> {
        RowOp { key, value: Some(value) }
    }

    /// A bulk load into a full set takes the ways of answers nobody read
    /// since the hand passed them (here the load's own earlier rows and
    /// an earlier load's unread ones), never those of answers being read.
    /// Before, it took free ways only: a table loaded into a full cache
    /// stayed cold.
    #[test]
    fn a_bulk_load_takes_the_ways_of_unread_answers() {
        let r = cache(1);
        let c = r.1;
        let other = CfRef { db: 5, rel: 16385 };
        let row = b"a row of forty bytes, or about that long";
        for rowid in 0..200 {
            c.write_new_if_room(T, rowid, &row_key(rowid, 0), row);
        }
        // Read the last fifty rows loaded (which sets their bits).
        let read: Vec<u64> = (150..200).filter(|&r| get(&c, r).is_some()).collect();
        assert_eq!(read.len(), 50, "the newest rows of a load are cached");
        for rowid in 1000..1200 {
            c.write_new_if_room(other, rowid, &row_key(rowid, 0), row);
        }
        let loaded = (1000..1200).filter(|&r| c.lookup(other, r, &mut [0u8; 4096]).is_some()).count();
        assert!(loaded > 0, "the second load took no way of the first one's unread rows");
        assert!(read.iter().all(|&r| get(&c, r).is_some()), "a row being read was evicted by a bulk load");
        assert_occupancy_matches_heads(c.set(0), 0);
    }

    /// A dropped table's answers are swept when a writer finds their set
    /// full; a table created again under the same (db, rel) is live again,
    /// and its answers stay.
    #[test]
    fn a_dropped_tables_answers_are_swept_when_their_set_is_full() {
        let r = cache(1);
        let c = r.1;
        let other = CfRef { db: 5, rel: 16385 };
        let fill = |cf: CfRef, from: u64| {
            for rowid in from..from + 200 {
                c.write_new_if_room(cf, rowid, &row_key(rowid, 0), b"a row of forty bytes, or about that long");
            }
            (from..from + 200).filter(|&r| c.lookup(cf, r, &mut [0u8; 4096]).is_some()).count()
        };
        let held = fill(T, 0);
        assert!(held > 0 && held < 200, "the set took some rows ({held})");
        c.forget_cf(T);
        c.unforget_cf(T);
        assert_eq!(fill(other, 1000), 0, "a table created again keeps its answers");
        // A load keeps its newest rows (each later row takes the ways of
        // the earliest unread one), and the lookups above read them all.
        assert!(get(&c, 199).is_some(), "its answers are still there");
        c.forget_cf(T);
        assert_eq!(fill(other, 2000), held, "a dropped table's ways go to the next rows");
        assert_eq!(get(&c, 199), None);
    }

    #[test]
    fn a_filled_answer_is_returned_until_a_new_generation() {
        let r = cache(4);
        let c = r.1;
        let a = answer(&[(row_key(7, 1), b"one".to_vec()), (row_key(7, 0), b"zero".to_vec())], false);
        let t = c.ticket(T, 7).unwrap();
        c.fill(t, T, 7, &a);
        assert_eq!(get(&c, 7), Some(a.clone()));
        assert_eq!(get(&c, 8), None);
        let mut other = vec![0u8; 4096];
        assert_eq!(c.lookup(CfRef { db: 5, rel: 16385 }, 7, &mut other), None);
        // Too small a buffer is a miss, not a partial copy.
        assert_eq!(c.lookup(T, 7, &mut [0u8; 8]), None);
        c.new_generation();
        assert_eq!(get(&c, 7), None);
        let s = c.stats();
        assert_eq!((s.fills, s.sets), (1, 4));
    }

    #[test]
    fn a_window_read_fills_each_row_it_holds() {
        let r = cache(64);
        let c = r.1;
        assert_eq!(window_read(&row_key(10, u32::MAX), &row_key(14, u32::MAX), WINDOW_PER_ROW, 0), Some((10, 14)));
        // One-row reads, reads of all versions, and reads from within a row are not windows.
        assert_eq!(window_read(&row_key(10, u32::MAX), &row_key(11, u32::MAX), WINDOW_PER_ROW, 0), None);
        assert_eq!(window_read(&row_key(10, u32::MAX), &row_key(14, u32::MAX), PER_ROW, 0), None);
        assert_eq!(window_read(&row_key(10, 3), &row_key(14, u32::MAX), WINDOW_PER_ROW, 0), None);
        assert_eq!(window_read(&row_key(0, u32::MAX), &row_key(MAX_WINDOW_ROWS + 1, u32::MAX), 1, 0), None);
        let mut tickets = [None; MAX_WINDOW_ROWS as usize];
        c.window_tickets(T, 10, 14, &mut tickets);
        // Row 10: one version, complete. Row 11: two versions (per_row),
        // maybe more. Row 12: no versions. Row 13: last, and the answer was
        // cut short after it.
        let a = answer(
            &[
                (row_key(10, 0), b"ten".to_vec()),
                (row_key(11, 5), b"eleven-5".to_vec()),
                (row_key(11, 4), b"eleven-4".to_vec()),
                (row_key(13, 0), b"thirteen".to_vec()),
            ],
            true,
        );
        c.fill_window(&tickets, T, 10, WINDOW_PER_ROW, &a);
        let all = |rowid: u64, max: usize| {
            let mut got = Vec::new();
            c.versions(T, rowid, max, |k, v| {
                got.push((decode_row_key(k).unwrap().1, v.to_vec()));
                true
            })
            .map(|more| (got, more))
        };
        assert_eq!(all(10, 4), Some((vec![(0, b"ten".to_vec())], false)));
        assert_eq!(all(11, 2), Some((vec![(5, b"eleven-5".to_vec()), (4, b"eleven-4".to_vec())], true)));
        assert_eq!(all(11, 3), None, "row 11 may have older versions");
        assert_eq!(get(&c, 12), None);
        assert_eq!(all(13, 2), None, "row 13 was cut short");
        assert_eq!(all(13, 1), Some((vec![(0, b"thirteen".to_vec())], true)));

        // A write into a row's set after the tickets were taken keeps the
        // window's (possibly older) answer out.
        let r = cache(1);
        let c = r.1;
        c.window_tickets(T, 10, 14, &mut tickets);
        c.write(T, 99, &[put(&row_key(99, 0), b"x")], true);
        c.fill_window(&tickets, T, 10, WINDOW_PER_ROW, &a);
        assert_eq!(get(&c, 10), None);
        assert!(get(&c, 99).is_some());
    }

    #[test]
    fn a_fill_whose_read_may_predate_a_write_is_not_installed() {
        let r = cache(1);
        let c = r.1;
        let old = answer(&[(row_key(3, 0), b"old".to_vec())], false);
        let t = c.ticket(T, 3).unwrap();
        // A write into the set (even of another row) after the ticket.
        c.write(T, 9, &[put(&row_key(9, 1), b"x")], false);
        c.fill(t, T, 3, &old);
        assert_eq!(get(&c, 3), None);
        // A DDL after the ticket too.
        let t = c.ticket(T, 3).unwrap();
        c.new_generation();
        c.fill(t, T, 3, &old);
        assert_eq!(get(&c, 3), None);
        // Nothing in between: installed.
        let t = c.ticket(T, 3).unwrap();
        c.fill(t, T, 3, &old);
        assert_eq!(get(&c, 3), Some(old));
    }

    #[test]
    fn writes_merge_into_cached_answers() {
        let r = cache(2);
        let c = r.1;
        let t = c.ticket(T, 1).unwrap();
        c.fill(t, T, 1, &answer(&[(row_key(1, 1), b"b".to_vec()), (row_key(1, 0), b"a".to_vec())], false));
        let k2 = row_key(1, 2);
        let k0 = row_key(1, 0);
        // A new head and the removal of the oldest version in one write.
        c.write(T, 1, &[put(&k2, b"c"), RowOp { key: &k0, value: None }], false);
        let got = versions(&get(&c, 1).unwrap());
        assert_eq!(got, vec![(1, 2, b"c".to_vec()), (1, 1, b"b".to_vec())]);
        // More than PER_ROW versions: the oldest fall out of the answer.
        for v in 3..8u32 {
            let k = row_key(1, v);
            c.write(T, 1, &[put(&k, b"n")], false);
        }
        let got: Vec<u32> = versions(&get(&c, 1).unwrap()).iter().map(|x| x.1).collect();
        assert_eq!(got, vec![7, 6, 5, 4]);
        // An incomplete answer that loses every version is dropped, not
        // left claiming the row has none.
        let keys: Vec<_> = (4..8).map(|v| row_key(1, v)).collect();
        let deletes: Vec<_> = keys.iter().map(|k| RowOp { key: k, value: None }).collect();
        c.write(T, 1, &deletes, false);
        assert_eq!(get(&c, 1), None);
    }

    #[test]
    fn a_locked_read_is_answered_like_the_engines() {
        let r = cache(2);
        let c = r.1;
        let read = |max: usize| {
            let mut out = vec![0u8; 4096];
            let mut w = ScanWriter::new(&mut out, max as u32);
            let more = c.read_versions(T, 6, max, &mut w)?;
            let len = w.finish(more);
            Some((versions(&out[..len]).iter().map(|x| x.1).collect::<Vec<_>>(), more))
        };
        assert_eq!(read(2), None);
        let (k0, k1) = (row_key(6, 0), row_key(6, 1));
        c.write(T, 6, &[put(&k0, b"a")], true);
        c.write(T, 6, &[put(&k1, b"b")], false);
        // Complete: fewer versions than asked, nothing more; as many: more.
        assert_eq!(read(4), Some((vec![1, 0], false)));
        assert_eq!(read(2), Some((vec![1, 0], true)));
        assert_eq!(read(1), Some((vec![1], true)));
        // Incomplete (only a prefix cached): only a read it covers.
        let t = c.ticket(T, 7).unwrap();
        let four: Vec<_> = (0..4u32).rev().map(|v| (row_key(7, v), b"x".to_vec())).collect();
        c.fill(t, T, 7, &answer(&four, false));
        let kill: Vec<_> = (2..4u32).map(|v| row_key(7, v)).collect();
        c.write(T, 7, &[RowOp { key: &kill[0], value: None }, RowOp { key: &kill[1], value: None }], false);
        let mut out = vec![0u8; 4096];
        let mut w = ScanWriter::new(&mut out, 4);
        assert_eq!(c.read_versions(T, 7, 4, &mut w), None);
    }

    #[test]
    fn only_fresh_rows_are_cached_by_a_write() {
        let r = cache(2);
        let c = r.1;
        let k = row_key(4, 0);
        c.write(T, 4, &[put(&k, b"new")], false);
        assert_eq!(get(&c, 4), None);
        c.write(T, 4, &[put(&k, b"new")], true);
        assert_eq!(versions(&get(&c, 4).unwrap()), vec![(4, 0, b"new".to_vec())]);
        // A complete answer whose only version goes: the row has none.
        c.write(T, 4, &[RowOp { key: &k, value: None }], false);
        assert_eq!(versions(&get(&c, 4).unwrap()), vec![]);
    }

    #[test]
    fn a_row_without_versions_is_not_cached_by_a_fill() {
        let r = cache(1);
        let c = r.1;
        let t = c.ticket(T, 9).unwrap();
        c.fill(t, T, 9, &answer(&[], false));
        assert_eq!(get(&c, 9), None, "a later first write of row 9 may leave the cache alone");
    }

    #[test]
    fn answers_too_large_are_not_cached_and_large_ones_span_ways() {
        let r = cache(1);
        let c = r.1;
        let big = answer(&[(row_key(2, 0), vec![7u8; MAX_ANSWER])], false);
        let t = c.ticket(T, 2).unwrap();
        c.fill(t, T, 2, &big);
        assert_eq!(get(&c, 2), None);
        let wide = answer(&[(row_key(2, 0), vec![7u8; 1000])], false);
        let t = c.ticket(T, 2).unwrap();
        c.fill(t, T, 2, &wide);
        assert_eq!(get(&c, 2), Some(wide));
    }

    /// `copy_in` and `copy_out` move whole words and a tail: answers of
    /// every length, so every tail length, come back byte for byte, also
    /// in ways a longer answer held before.
    #[test]
    fn answers_of_every_length_come_back_byte_for_byte() {
        let r = cache(1);
        let c = r.1;
        for len in (0..300).chain([1000, 1001, 1007]) {
            let rowid = 10 + len as u64;
            let value: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let a = answer(&[(row_key(rowid, 0), value)], false);
            let t = c.ticket(T, rowid).unwrap();
            c.fill(t, T, rowid, &a);
            assert_eq!(get(&c, rowid), Some(a), "value of {len} bytes");
        }
    }

    #[test]
    fn tag_words_find_exactly_the_ways_with_a_tag() {
        let r = cache(1);
        let set = r.1.set(0);
        let mut plain = [0u16; WAYS];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..5_000 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let way = (seed >> 33) as usize % WAYS;
            // Few distinct tags, so matches are common, and 0 (free) often.
            let tag = [0u16, 1, 3, 0x8001, 0xFFFF, 0x7FFF][(seed >> 20) as usize % 6];
            set_tag(set, way, tag);
            plain[way] = tag;
            let probe = [1u16, 3, 0x8001, 0xFFFF, 0x7FFF][step % 5];
            let want = plain.iter().enumerate().filter(|(_, &t)| t == probe).fold(0u64, |m, (w, _)| m | 1 << w);
            assert_eq!(ways_tagged(set, probe), want, "tag {probe:#x} at step {step}");
            assert_eq!(ways_tagged_portable(set, probe), want, "portable, tag {probe:#x} at step {step}");
        }
    }

    /// A set's occupancy mask is exactly the ways its valid answers cover,
    /// and no two answers overlap.
    fn assert_occupancy_matches_heads(set: &Set, step: u32) {
        let mut covered = 0u64;
        for way in 0..WAYS {
            let meta = unpack_meta(set.heads[way].meta.load(Ordering::Relaxed));
            if meta.valid {
                let run = run_mask(way, meta.ways);
                assert_eq!(covered & run, 0, "answers overlap at way {way}, step {step}");
                covered |= run;
            }
        }
        assert_eq!(set.occupied.load(Ordering::Relaxed), covered, "occupancy at step {step}");
    }

    #[test]
    fn free_run_finds_the_lowest_run_and_never_wraps() {
        assert_eq!(free_run(0, 1), Some(0));
        assert_eq!(free_run(0b1011, 1), Some(2));
        assert_eq!(free_run(0b1011, 2), Some(4));
        assert_eq!(free_run(u64::MAX, 1), None);
        assert_eq!(free_run(u64::MAX >> 1, 1), Some(63));
        assert_eq!(free_run(u64::MAX >> 1, 2), None, "a run may not wrap past way 63");
        assert_eq!(free_run(!(0xF << 20), 4), Some(20));
        assert_eq!(free_run(!(0xF << 20), 5), None);
        assert_eq!(run_mask(60, 4), 0xF << 60);
    }

    /// Random writes and fills of many rows through one small cache, against
    /// a model of RocksDB: every answer found is the newest versions of its
    /// row, in order, and empty only when the row has none.
    #[test]
    fn random_workload_never_returns_a_wrong_answer() {
        let r = cache(2);
        let c = r.1;
        let mut model: BTreeMap<u64, BTreeMap<u32, Vec<u8>>> = BTreeMap::new();
        let mut next = crate::engine::test_support::xorshift(0x1234_5678_9abc_def0);
        let mut hits = 0;
        for step in 0..20_000u32 {
            let rowid = next(240); // far more than the two sets hold
            let chain = model.entry(rowid).or_default();
            match next(4) {
                0 => {
                    // A fill: the engine's answer (newest PER_ROW versions).
                    let t = c.ticket(T, rowid).unwrap();
                    let entries: Vec<_> =
                        chain.iter().rev().take(PER_ROW as usize).map(|(v, val)| (row_key(rowid, *v), val.clone())).collect();
                    c.fill(t, T, rowid, &answer(&entries, false));
                }
                1 | 2 => {
                    // A new version (a new row at version 0), sometimes pruning the oldest.
                    let v = chain.keys().next_back().map_or(0, |v| v + 1);
                    let value = vec![(step % 251) as u8; 1 + next(300) as usize];
                    let key = row_key(rowid, v);
                    let prune = chain.len() > 1 && next(2) == 0;
                    let oldest = chain.keys().next().copied();
                    let fresh = chain.is_empty();
                    chain.insert(v, value.clone());
                    let dkey = oldest.map(|o| row_key(rowid, o));
                    let mut ops = vec![put(&key, &value)];
                    if prune {
                        chain.remove(&oldest.unwrap());
                        ops.push(RowOp { key: dkey.as_ref().unwrap(), value: None });
                    }
                    c.write(T, rowid, &ops, fresh);
                }
                _ => {
                    // VACUUM removes every version but the newest.
                    let keep = chain.keys().next_back().copied();
                    let gone: Vec<u32> = chain.keys().copied().filter(|v| Some(*v) != keep).collect();
                    let keys: Vec<_> = gone.iter().map(|v| row_key(rowid, *v)).collect();
                    for v in &gone {
                        chain.remove(v);
                    }
                    let ops: Vec<_> = keys.iter().map(|k| RowOp { key: k, value: None }).collect();
                    if !ops.is_empty() {
                        c.write(T, rowid, &ops, false);
                    }
                }
            }
            for index in 0..2 {
                assert_occupancy_matches_heads(c.set(index), step);
            }
            for (rowid, chain) in &model {
                if let Some(bytes) = get(&c, *rowid) {
                    hits += 1;
                    let got = versions(&bytes);
                    let want: Vec<_> = chain.iter().rev().take(got.len()).map(|(v, val)| (*rowid, *v, val.clone())).collect();
                    assert_eq!(got, want, "row {rowid} at step {step}");
                    assert!(!got.is_empty() || chain.is_empty(), "row {rowid}: empty answer for a row with versions");
                }
            }
        }
        assert!(hits > 1000, "the cache answered only {hits} lookups");
    }

    /// Readers racing a writer never see a torn answer: every version's
    /// value repeats its version number.
    #[test]
    fn readers_never_see_a_torn_answer() {
        let r = cache(1);
        let c = r.1;
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let mut out = vec![0u8; 4096];
                    let mut seen = 0u32;
                    while !stop.load(Ordering::Relaxed) && seen < 2_000_000 {
                        seen += 1;
                        if let Some(n) = c.lookup(T, 1, &mut out) {
                            for (_, v, value) in versions(&out[..n]) {
                                assert!(value.iter().all(|&b| b == v as u8), "torn value for version {v}");
                            }
                        }
                    }
                });
            }
            for v in 0..20_000u32 {
                let key = row_key(1, v);
                let value = vec![v as u8; 40 + (v as usize % 700)];
                let old = v.checked_sub(2).map(|o| row_key(1, o));
                let mut ops = vec![put(&key, &value)];
                if let Some(old) = &old {
                    ops.push(RowOp { key: old, value: None });
                }
                c.write(T, 1, &ops, v == 0);
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
}
