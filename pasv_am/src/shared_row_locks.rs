//! Row locks in shared memory: the table backends take and release row locks
//! in without asking the engine.
//!
//! Why: a row lock used to be a round trip to the engine's lock table
//! ([`crate::row_locks`]), and every UPDATE, DELETE and `SELECT … FOR
//! UPDATE` of a row paid one (TPC-B: 3 of its 6 waited round trips; TPC-C:
//! 16 of 21). Here a lock is a few atomics under a bucket's spin lock, and
//! the row's versions come from the row cache when it holds them. The
//! measurements are in `src/ipc/HOT_PATH.md`.
//!
//! Layout (one region, placed in PostgreSQL shared memory by the extension,
//! or on the heap in tests): a header, then a power of two of buckets. A row
//! `(cf, rowid)` has one bucket: runs of [`RUN`] consecutive rowids hash to
//! runs of consecutive buckets ([`SharedRowLocks::bucket_of`]). A bucket
//! has [`ENTRIES`] entries, one per `(row, holder)`, and a spin lock word.
//! All shared words are atomics; entries are read and written only under
//! their bucket's lock.
//!
//! The engine's table stays, for what does not fit: a bucket that is full
//! **spills**. Its `spill` count says how many engine-held locks (granted or
//! being asked for) name rows of the bucket; while it is above zero every new
//! grant in the bucket (a new holding, or an upgrade) is the engine's, and
//! the caller asks the engine after checking the bucket. So a
//! transaction that locks a million rows degrades to the engine's table
//! instead of failing, and a bucket's rows go back to shared memory when its
//! spilled locks are released.
//!
//! Invariants:
//! * A row's holders in shared memory are entries of its own bucket; each
//!   `(row, xid)` at most once, with the strongest mode granted. Shared is
//!   compatible with Shared; Exclusive with nothing held by another
//!   transaction; a transaction never conflicts with itself.
//! * No holding is added to a bucket whose `spill` is above zero: the check
//!   and the addition happen under the bucket's lock, and a caller raises
//!   `spill` under the same lock, after finding no conflicting holding here,
//!   before it asks the engine. Hence an engine grant never overlaps a
//!   conflicting shared-memory holding, and the two tables together grant
//!   what one table would.
//! * `spill` is lowered once for each raise: at once when the engine refused
//!   or the lock was already held there, else when the holder releases its
//!   engine locks.
//! * Holders are top-level transaction ids, never 0 (0 marks a free entry).
//!   A holder removes its own entries when its transaction ends; `evict`
//!   removes an ended holder's entry for one row (a waiter taking over).
//! * The **write epoch** counts the ends of exclusive holdings (release,
//!   eviction) and of spills, the only ways another transaction's write of
//!   a row can have ended; a bucket remembers the epoch of its last such
//!   end, set under its lock before the holding disappears. A writer ends
//!   its holding only after the engine applied its writes (`row_locks`,
//!   backend side), so a reader that loaded the epoch as `seen` before it
//!   asked the engine for a row, and is later granted the row's lock in a
//!   bucket whose last end is not above `seen`, read the row as it is now
//!   ([`SharedRowLocks::lock_unchanged_since`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::protocol::{CfRef, LockMode};
use crate::region::{power_of_two_fit, Stamp};
use crate::striped::StripedCounters;

/// Entries per bucket.
pub const ENTRIES: usize = 8;

/// Consecutive rowids placed in consecutive buckets ([`SharedRowLocks::bucket_of`]).
/// A bucket's first touch is a cache and TLB miss (the region is
/// megabytes); a statement that locks the rows a scan hands it (UPDATE or
/// DELETE of many rows) meets rowids in ascending order, and with rows
/// hashed one by one it paid that miss for every row: 18 % of the
/// backend's time in a DELETE of every tenth row (`HOT_PATH.md` §56).
/// Each bucket still gets one rowid in [`RUN`] of every run hashed to it,
/// so rows spread over the buckets as evenly as before. (Neighbouring
/// buckets may share a cache line at their edge; padding buckets to 256
/// bytes put every lock word in a quarter of the cache's sets and measured
/// slower.)
const RUN: usize = 16;

/// In an entry's `mode` word, beside the [`LockMode`]: the holder wrote the row.
const WROTE: u32 = 0x100;

const MAGIC: u64 = 0x7061_7376_524c_0001; // "pasvRL" v1

#[repr(C)]
struct Header {
    /// The bucket count.
    stamp: Stamp,
    /// The write epoch (module invariants).
    write_epoch: AtomicU64,
    _pad: [AtomicU64; 5],
    /// Grants made here ([`GRANTED`]), and requests sent on to the engine
    /// because their bucket was full or spilled ([`SPILLED`]): counters for
    /// `pasv.engine_stats()`, striped (every lock bumps one).
    counters: StripedCounters,
}

const GRANTED: usize = 0;
const SPILLED: usize = 1;

/// One `(row, holder)`: free when `xid` is 0.
#[repr(C)]
struct Entry {
    rowid: AtomicU64,
    cf_db: AtomicU32,
    cf_rel: AtomicU32,
    xid: AtomicU32,
    mode: AtomicU32,
}

#[repr(C)]
struct Bucket {
    /// 0 free, 1 held (a spin lock; the critical sections are a few loads).
    lock: AtomicU32,
    /// Engine-held locks on rows of this bucket (see the module invariants).
    spill: AtomicU32,
    /// The write epoch of the last end of an exclusive holding or of a
    /// spill here (written under `lock`).
    ended: AtomicU64,
    entries: [Entry; ENTRIES],
}

/// The answer to [`SharedRowLocks::lock`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Held here now; `already` when this transaction held at least `mode`.
    Granted { already: bool },
    /// Another transaction holds a conflicting lock here: wait for it to
    /// end, then ask again evicting it.
    Conflict { holder: u32 },
    /// Ask the engine's table. `spill` of `bucket` was raised for the
    /// request: call [`SharedRowLocks::unspill`] once for it when the engine
    /// refused or answered "already held", else when the transaction
    /// releases its engine locks.
    Engine { bucket: u32 },
}

/// Counters since the server started.
#[derive(Clone, Copy, Debug, Default)]
pub struct LockStats {
    pub granted: u64,
    pub spilled: u64,
}

/// A handle on a formatted region (a pointer: cheap to copy).
#[derive(Clone, Copy)]
pub struct SharedRowLocks {
    base: *mut u8,
    buckets: usize,
}

// SAFETY: every shared word is an atomic; the handle is a pointer into a
// region that outlives every process using it.
unsafe impl Send for SharedRowLocks {}
unsafe impl Sync for SharedRowLocks {}

/// Bytes of a region with `buckets` buckets.
pub const fn region_bytes(buckets: usize) -> usize {
    std::mem::size_of::<Header>() + buckets * std::mem::size_of::<Bucket>()
}

/// Buckets for a server with `processes` backends: a power of two, about
/// 256 buckets (2 048 entries) a process.
pub fn buckets_for(processes: usize) -> usize {
    (processes.max(1) * 256).next_power_of_two()
}

impl SharedRowLocks {
    /// Formats a zeroed, 8-aligned region of `bytes` bytes; `None` if it is
    /// too small for one bucket.
    ///
    /// # Safety
    /// `base` points to `bytes` writable, zeroed, 8-aligned bytes that live
    /// as long as every handle made from them.
    pub unsafe fn format(base: *mut u8, bytes: usize) -> Option<SharedRowLocks> {
        let buckets = power_of_two_fit(bytes, std::mem::size_of::<Header>(), std::mem::size_of::<Bucket>())?;
        let locks = SharedRowLocks { base, buckets };
        locks.header().stamp.mark(MAGIC, buckets);
        Some(locks)
    }

    /// A handle on a region [`SharedRowLocks::format`] prepared.
    ///
    /// # Safety
    /// As for `format`, for a region formatted before.
    pub unsafe fn attach(base: *mut u8) -> Option<SharedRowLocks> {
        let buckets = (*(base as *const Header)).stamp.count(MAGIC)?;
        Some(SharedRowLocks { base, buckets })
    }

    fn header(&self) -> &Header {
        // SAFETY: the region starts with a Header (format's contract).
        unsafe { &*(self.base as *const Header) }
    }

    fn bucket(&self, i: usize) -> &Bucket {
        debug_assert!(i < self.buckets);
        // SAFETY: `i` < buckets, and the buckets follow the header.
        unsafe { &*((self.base.add(std::mem::size_of::<Header>()) as *const Bucket).add(i)) }
    }

    /// The bucket of row `(cf, rowid)`: a run of [`RUN`] consecutive rowids
    /// hashes to a run of as many consecutive buckets, one row each.
    pub fn bucket_of(&self, cf: CfRef, rowid: u64) -> u32 {
        let run = RUN.min(self.buckets);
        let first = (crate::keys::row_hash(cf.db, cf.rel, rowid / RUN as u64) as usize).wrapping_mul(run);
        (first.wrapping_add(rowid as usize % run) & (self.buckets - 1)) as u32
    }

    /// Asks for `mode` on row `(cf, rowid)` for top-level transaction `xid`
    /// (not 0). `evict` (0: none) names a transaction known to have ended:
    /// its holding of this row is removed first.
    pub fn lock(&self, cf: CfRef, rowid: u64, xid: u32, mode: LockMode, evict: u32) -> Outcome {
        self.lock_unchanged_since(cf, rowid, xid, mode, evict, None).0
    }

    /// The write epoch now (module invariants): load it before asking the
    /// engine for rows whose lock may follow.
    pub fn write_epoch(&self) -> u64 {
        self.header().write_epoch.load(Ordering::SeqCst)
    }

    /// As [`SharedRowLocks::lock`]; with `seen` (a [`write_epoch`] loaded
    /// before the caller read the row), also whether a new grant here found
    /// no exclusive holding (nor spill) of the row's bucket ended since:
    /// then no other transaction can have written the row after that read.
    ///
    /// [`write_epoch`]: SharedRowLocks::write_epoch
    pub fn lock_unchanged_since(
        &self,
        cf: CfRef,
        rowid: u64,
        xid: u32,
        mode: LockMode,
        evict: u32,
        seen: Option<u64>,
    ) -> (Outcome, bool) {
        debug_assert!(xid != 0);
        let b = self.bucket_of(cf, rowid);
        let bucket = self.bucket(b as usize);
        let _guard = BucketGuard::lock(bucket);
        let mut mine: Option<&Entry> = None;
        let mut free: Option<&Entry> = None;
        for e in &bucket.entries {
            let holder = e.xid.load(Ordering::Relaxed);
            if holder == 0 {
                free = free.or(Some(e));
                continue;
            }
            if !e.names(cf, rowid) {
                continue;
            }
            if holder == evict && evict != xid {
                if e.mode() == LockMode::Exclusive {
                    self.end_exclusive(bucket);
                }
                e.xid.store(0, Ordering::Relaxed);
                free = free.or(Some(e));
            } else if holder == xid {
                mine = Some(e);
            } else if mode == LockMode::Exclusive || e.mode() == LockMode::Exclusive {
                return (Outcome::Conflict { holder }, false);
            }
        }
        if let Some(e) = mine {
            if e.mode() >= mode {
                return (Outcome::Granted { already: true }, false);
            }
        }
        if bucket.spill.load(Ordering::Relaxed) > 0 || (mine.is_none() && free.is_none()) {
            bucket.spill.fetch_add(1, Ordering::Relaxed);
            self.header().counters.add(SPILLED, 1);
            return (Outcome::Engine { bucket: b }, false);
        }
        let unchanged = mine.is_none() && seen.is_some_and(|s| bucket.ended.load(Ordering::Relaxed) <= s);
        match mine {
            // Shared upgraded to Exclusive in place.
            Some(e) => e.mode.store(mode as u32, Ordering::Relaxed),
            None => {
                let e = free.expect("a free entry (checked above)");
                e.rowid.store(rowid, Ordering::Relaxed);
                e.cf_db.store(cf.db, Ordering::Relaxed);
                e.cf_rel.store(cf.rel, Ordering::Relaxed);
                e.mode.store(mode as u32, Ordering::Relaxed);
                e.xid.store(xid, Ordering::Relaxed);
            }
        }
        self.header().counters.add(GRANTED, 1);
        (Outcome::Granted { already: false }, unchanged)
    }

    /// Record, under `bucket`'s lock, that an exclusive holding (or a
    /// spill) of it ends: before the holding disappears (module invariants).
    fn end_exclusive(&self, bucket: &Bucket) {
        let epoch = self.header().write_epoch.fetch_add(1, Ordering::SeqCst) + 1;
        bucket.ended.store(epoch, Ordering::Relaxed);
    }

    /// Whether `xid` holds row `(cf, rowid)` Exclusive here; if so, the
    /// holding is marked as having a write of the row that the engine may not
    /// have applied yet (see [`SharedRowLocks::writer`]).
    pub fn note_write(&self, cf: CfRef, rowid: u64, xid: u32) -> bool {
        let bucket = self.bucket(self.bucket_of(cf, rowid) as usize);
        let _guard = BucketGuard::lock(bucket);
        for e in &bucket.entries {
            if e.xid.load(Ordering::Relaxed) == xid && e.names(cf, rowid) {
                if e.mode() != LockMode::Exclusive {
                    return false;
                }
                e.mode.fetch_or(WROTE, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// The transaction other than `me` that holds row `(cf, rowid)`
    /// Exclusive here and wrote it ([`SharedRowLocks::note_write`]), if any:
    /// a unique check must wait for it, as heap's waits for a deleter or
    /// updater in progress, even before the engine has the write.
    pub fn writer(&self, cf: CfRef, rowid: u64, me: u32) -> Option<u32> {
        let bucket = self.bucket(self.bucket_of(cf, rowid) as usize);
        let _guard = BucketGuard::lock(bucket);
        bucket.entries.iter().find_map(|e| {
            let holder = e.xid.load(Ordering::Relaxed);
            (holder != 0 && holder != me && e.names(cf, rowid) && e.mode.load(Ordering::Relaxed) & WROTE != 0).then_some(holder)
        })
    }

    /// Removes `xid`'s holding of row `(cf, rowid)`, if any.
    pub fn release(&self, cf: CfRef, rowid: u64, xid: u32) {
        let bucket = self.bucket(self.bucket_of(cf, rowid) as usize);
        let _guard = BucketGuard::lock(bucket);
        for e in &bucket.entries {
            if e.xid.load(Ordering::Relaxed) == xid && e.names(cf, rowid) {
                if e.mode() == LockMode::Exclusive {
                    self.end_exclusive(bucket);
                }
                e.xid.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Lowers `bucket`'s spill count once (see [`Outcome::Engine`]).
    pub fn unspill(&self, bucket: u32) {
        let bucket = self.bucket(bucket as usize);
        let _guard = BucketGuard::lock(bucket);
        let before = bucket.spill.load(Ordering::Relaxed);
        debug_assert!(before > 0);
        // The engine-held lock may have covered a write of a row here.
        self.end_exclusive(bucket);
        bucket.spill.store(before.saturating_sub(1), Ordering::Relaxed);
    }

    /// The holders of row `(cf, rowid)` here (tests, diagnostics).
    pub fn holders(&self, cf: CfRef, rowid: u64) -> Vec<(u32, LockMode)> {
        let bucket = self.bucket(self.bucket_of(cf, rowid) as usize);
        let _guard = BucketGuard::lock(bucket);
        bucket
            .entries
            .iter()
            .filter(|e| e.xid.load(Ordering::Relaxed) != 0 && e.names(cf, rowid))
            .map(|e| (e.xid.load(Ordering::Relaxed), e.mode()))
            .collect()
    }

    pub fn stats(&self) -> LockStats {
        let h = self.header();
        LockStats { granted: h.counters.sum(GRANTED), spilled: h.counters.sum(SPILLED) }
    }
}

impl Entry {
    fn names(&self, cf: CfRef, rowid: u64) -> bool {
        self.rowid.load(Ordering::Relaxed) == rowid
            && self.cf_rel.load(Ordering::Relaxed) == cf.rel
            && self.cf_db.load(Ordering::Relaxed) == cf.db
    }

    fn mode(&self) -> LockMode {
        LockMode::from_u8((self.mode.load(Ordering::Relaxed) & !WROTE) as u8).unwrap_or(LockMode::Exclusive)
    }
}

/// A bucket's spin lock, held while the guard lives. Nothing inside can
/// fail or wait, so a process never leaves it locked except by dying, and
/// PostgreSQL rebuilds shared memory after a backend dies.
struct BucketGuard<'a>(&'a Bucket);

impl<'a> BucketGuard<'a> {
    fn lock(bucket: &'a Bucket) -> BucketGuard<'a> {
        let mut spins: u32 = 0;
        while bucket.lock.compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            spins = spins.wrapping_add(1);
            if spins % 128 == 0 {
                // The holder may have been descheduled: let it run.
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        BucketGuard(bucket)
    }
}

impl Drop for BucketGuard<'_> {
    fn drop(&mut self) {
        self.0.lock.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row_locks::RowLockTable;
    use std::collections::HashMap;
    use LockMode::{Exclusive, Shared};

    const T: CfRef = CfRef { db: 5, rel: 16384 };

    /// A table of `buckets` buckets on the heap (u64s keep it 8-aligned).
    struct Region(#[allow(dead_code)] Vec<u64>, SharedRowLocks); // the Vec keeps the memory alive

    fn table(buckets: usize) -> Region {
        let bytes = region_bytes(buckets);
        let mut mem = vec![0u64; bytes.div_ceil(8)];
        // SAFETY: zeroed, aligned, owned by the Region for the test's length.
        let locks = unsafe { SharedRowLocks::format(mem.as_mut_ptr() as *mut u8, bytes) }.unwrap();
        Region(mem, locks)
    }

    #[test]
    fn modes_conflict_as_row_locks_do() {
        let r = table(4);
        let l = &r.1;
        assert_eq!(l.lock(T, 1, 100, Shared, 0), Outcome::Granted { already: false });
        assert_eq!(l.lock(T, 1, 101, Shared, 0), Outcome::Granted { already: false });
        assert_eq!(l.lock(T, 1, 100, Exclusive, 0), Outcome::Conflict { holder: 101 });
        assert_eq!(l.lock(T, 1, 100, Exclusive, 101), Outcome::Granted { already: false }, "evicted, upgraded");
        assert_eq!(l.holders(T, 1), vec![(100, Exclusive)]);
        assert_eq!(l.lock(T, 1, 100, Shared, 0), Outcome::Granted { already: true });
        assert_eq!(l.lock(T, 1, 102, Shared, 0), Outcome::Conflict { holder: 100 });
        assert_eq!(l.lock(CfRef { db: 5, rel: 1 }, 1, 102, Exclusive, 0), Outcome::Granted { already: false });
        // A write under the lock is what a unique check waits for.
        assert_eq!(l.writer(T, 1, 102), None);
        assert!(!l.note_write(T, 1, 102), "102 does not hold it");
        assert!(l.note_write(T, 1, 100));
        assert_eq!(l.writer(T, 1, 102), Some(100));
        assert_eq!(l.writer(T, 1, 100), None, "not for its own writes");
        assert_eq!(l.lock(T, 1, 100, Exclusive, 0), Outcome::Granted { already: true });
        assert_eq!(l.holders(T, 1), vec![(100, Exclusive)]);
        l.release(T, 1, 100);
        assert_eq!(l.lock(T, 1, 102, Exclusive, 0), Outcome::Granted { already: false });
        assert_eq!(l.stats().spilled, 0);
    }

    #[test]
    fn a_run_of_rowids_takes_a_run_of_buckets() {
        let r = table(1024);
        let l = &r.1;
        let first = l.bucket_of(T, 3 * RUN as u64);
        for i in 0..RUN as u64 {
            assert_eq!(l.bucket_of(T, 3 * RUN as u64 + i), first + i as u32);
        }
        assert_ne!(l.bucket_of(T, 0), l.bucket_of(CfRef { db: 5, rel: 16385 }, 0), "tables hash apart");
        // Runs hash apart: 65 536 rows give every bucket 64 on average.
        let mut rows = vec![0u32; 1024];
        for rowid in 0..65_536u64 {
            rows[l.bucket_of(T, rowid) as usize] += 1;
        }
        let (least, most) = (rows.iter().min().copied().unwrap(), rows.iter().max().copied().unwrap());
        assert!(least >= 24 && most <= 112, "rows a bucket between {least} and {most}");
        // Fewer buckets than a run: each row of a run its own bucket still.
        let small = table(4);
        let buckets: Vec<u32> = (8..12).map(|rowid| small.1.bucket_of(T, rowid)).collect();
        assert_eq!(buckets, vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_full_bucket_spills_and_refills() {
        let r = table(1);
        let l = &r.1;
        for rowid in 0..ENTRIES as u64 {
            assert_eq!(l.lock(T, rowid, 100, Exclusive, 0), Outcome::Granted { already: false });
        }
        // Full: the next new holding goes to the engine, and so does every
        // new grant while that one is held there.
        assert_eq!(l.lock(T, 99, 100, Exclusive, 0), Outcome::Engine { bucket: 0 });
        l.release(T, 0, 100);
        assert_eq!(l.lock(T, 98, 101, Exclusive, 0), Outcome::Engine { bucket: 0 });
        l.unspill(0); // the engine refused 101
        // Holdings here still conflict, and are still "already held".
        assert_eq!(l.lock(T, 1, 101, Shared, 0), Outcome::Conflict { holder: 100 });
        assert_eq!(l.lock(T, 1, 100, Exclusive, 0), Outcome::Granted { already: true });
        l.unspill(0); // 100 released its engine locks
        assert_eq!(l.lock(T, 98, 101, Exclusive, 0), Outcome::Granted { already: false });
        assert_eq!(l.stats().spilled, 2);
    }

    #[test]
    fn the_write_epoch_tells_whether_a_row_can_have_changed() {
        let r = table(1);
        let l = &r.1;
        let unchanged = |rowid, xid, seen| l.lock_unchanged_since(T, rowid, xid, Exclusive, 0, Some(seen)).1;
        let seen = l.write_epoch();
        assert!(unchanged(1, 100, seen), "nothing ended since");
        assert!(!l.lock_unchanged_since(T, 1, 100, Exclusive, 0, Some(seen)).1, "already held: not a new grant");
        assert!(!l.lock_unchanged_since(T, 2, 100, Exclusive, 0, None).1, "no epoch seen");
        // A shared holding ending is no write.
        assert_eq!(l.lock(T, 3, 101, Shared, 0), Outcome::Granted { already: false });
        l.release(T, 3, 101);
        assert!(unchanged(4, 102, seen));
        // An exclusive holding ending in the bucket: any row of it may have changed.
        l.release(T, 1, 100);
        assert!(!unchanged(5, 103, seen));
        let seen = l.write_epoch();
        assert!(unchanged(6, 103, seen), "read after the end");
        // An ended holder evicted by the next locker counts as an end.
        assert_eq!(l.lock_unchanged_since(T, 6, 104, Exclusive, 103, Some(seen)), (Outcome::Granted { already: false }, false));
        // So does the end of a spill (an engine-held lock may have written).
        for (rowid, xid) in [(2, 100), (4, 102), (5, 103), (6, 104)] {
            l.release(T, rowid, xid);
        }
        for rowid in 10..10 + ENTRIES as u64 {
            l.lock(T, rowid, 105, Shared, 0);
        }
        let seen = l.write_epoch();
        assert!(matches!(l.lock(T, 99, 105, Exclusive, 0), Outcome::Engine { .. }));
        l.unspill(0);
        l.release(T, 10, 105);
        assert!(!unchanged(20, 106, seen));
        l.release(T, 20, 106);
        let before = l.write_epoch();
        assert!(unchanged(21, 106, before));
    }

    /// Random lock, release and end-of-transaction steps against the engine's
    /// table as the model: the two tables together grant what the model grants.
    #[test]
    fn agrees_with_the_engine_table() {
        let mut seed: u64 = 0x5eed;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let r = table(4); // 32 entries for 24 rows: buckets fill and spill often
        let shared = &r.1;
        let mut model = RowLockTable::new();
        let mut engine = RowLockTable::new();
        // Per transaction: rows held here, buckets spilled for it.
        let mut held: HashMap<u32, Vec<u64>> = HashMap::new();
        let mut spilled: HashMap<u32, Vec<u32>> = HashMap::new();
        for _ in 0..20_000 {
            let xid = 1 + next(6) as u32;
            if next(10) == 0 {
                // The transaction ends.
                for rowid in held.remove(&xid).unwrap_or_default() {
                    shared.release(T, rowid, xid);
                }
                engine.release(xid);
                for b in spilled.remove(&xid).unwrap_or_default() {
                    shared.unspill(b);
                }
                model.release(xid);
                continue;
            }
            let rowid = next(24);
            let mode = if next(2) == 0 { Shared } else { Exclusive };
            let expected = model.lock(T, rowid, xid, mode, 0);
            let granted = match shared.lock(T, rowid, xid, mode, 0) {
                Outcome::Granted { already } => {
                    if !already {
                        held.entry(xid).or_default().push(rowid);
                    }
                    true
                }
                Outcome::Conflict { .. } => false,
                Outcome::Engine { bucket } => {
                    let o = engine.lock(T, rowid, xid, mode, 0);
                    if o.granted && !o.already_held {
                        spilled.entry(xid).or_default().push(bucket);
                    } else {
                        shared.unspill(bucket);
                    }
                    o.granted
                }
            };
            assert_eq!(granted, expected.granted, "xid {xid} row {rowid} {mode:?}");
        }
        assert!(shared.stats().spilled > 100, "the test must exercise spilling: {:?}", shared.stats());
        assert!(shared.stats().granted > 100, "and granting here: {:?}", shared.stats());
    }

    #[test]
    fn concurrent_exclusive_requests_grant_exactly_one() {
        for round in 0..50u64 {
            let r = table(64);
            let l = r.1;
            let granted = AtomicU32::new(0);
            std::thread::scope(|s| {
                for xid in 1..=4u32 {
                    let granted = &granted;
                    s.spawn(move || {
                        if matches!(l.lock(T, round, xid, Exclusive, 0), Outcome::Granted { .. }) {
                            granted.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            });
            assert_eq!(granted.load(Ordering::Relaxed), 1);
        }
    }
}

