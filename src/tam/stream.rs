//! A forward stream of rows (rowid groups of versions) over a range of one
//! table CF, fetched from the engine in batches.
//!
//! Memory: the batch buffer and its entry index (about 140 kB with the
//! default channel buffer) are lent from a small per-backend pool kept in
//! `TopMemoryContext` and given back by [`RowStream::free`]; at the abort
//! of the top-level transaction, which ends every scan, whatever is still
//! lent (an ERROR skipped `scan_end`) is taken back. Before, every scan
//! and index scan palloc'd them afresh: a `malloc` above glibc's trim
//! threshold, so each point select grew and shrank the heap with `brk`
//! and faulted its pages in again (perf, pgbench `-S`: the kernel's
//! memory-map work about 5 % of the backends' time). Streams beyond the
//! pool's size palloc in the context current at creation (the scan's), so
//! an ERROR leaks nothing. The stream is a plain `#[repr(C)]` struct with
//! no Rust-owned fields for the same reason.
//!
//! A batch may end in the middle of a rowid's versions. Such a group is
//! never resolved from a partial view: the next batch restarts at the
//! rowid's first (newest) key.

use super::visibility::{self, Reader};
use crate::engine_client;
use pasv_am::keys::{self, ROW_KEY_LEN};
use pasv_am::protocol::{self, CfRef};
use pasv_am::row::RowHeader;
use pgrx::pg_sys;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};

#[repr(C)]
#[derive(Clone, Copy)]
struct EntryPos {
    rowid: u64,
    version: u32,
    value_off: u32,
    value_len: u32,
}

#[repr(C)]
pub struct RowStream {
    pub cf: CfRef,
    /// Next key to fetch from, and the exclusive end of the range.
    next_start: [u8; ROW_KEY_LEN],
    end: [u8; ROW_KEY_LEN],
    buf: *mut u8,
    buf_cap: usize,
    index: *mut EntryPos,
    index_cap: usize,
    /// Entries in the current batch, and the cursor into them.
    count: usize,
    pos: usize,
    /// The engine may have more entries after this batch.
    more: bool,
    /// The row being examined (its newest versions seen, none visible yet).
    group: Option<u64>,
    /// The last row decided: its remaining (older) versions are skipped.
    decided: Option<u64>,
    /// Dirty snapshots: an in-progress deleter of the current row.
    pending_delete: pg_sys::TransactionId,
    /// The oldest version of the current row seen so far.
    group_last_version: u32,
    /// The first (newest) version of the current row this stream read.
    group_first_version: u32,
    /// The row locks' write epoch loaded before the current batch was read
    /// (`crate::row_locks::write_epoch`), and before the read-ahead in
    /// flight was asked for.
    batch_write_epoch: u64,
    ahead_write_epoch: u64,
    /// The current row was already read on past its first answer.
    rewound: bool,
    /// Set by readers that must report serializable rw-conflicts.
    pub ssi_rel: pg_sys::Relation,
    /// Index builds (`Reader::Build`): the row just returned is deleted or
    /// moved for newer snapshots but still visible to older ones.
    pub recently_dead: bool,
    /// Newest versions asked per row (see `fetch`).
    per_row: u32,
    /// Index fetches: the horizon test that finds rows dead to every
    /// snapshot (heap's `all_dead`, which lets the index kill its entry);
    /// null when nobody asks.
    pub dead_test: *mut pg_sys::GlobalVisState,
    /// Rows of the current range found dead to every snapshot, as bits
    /// over the first 64 rowids from `dead_base`.
    dead_base: u64,
    dead_bits: u64,
    /// Rows of the current range with at least one version read, as bits
    /// over the same 64 rowids.
    seen_bits: u64,
    /// Every version of the current row seen so far has a creator that
    /// aborted (or crashed).
    newer_aborted: bool,
    /// The reader of the current `next_row` uses an MVCC snapshot, so a
    /// one-row read may be answered from the row cache, and a range may be
    /// read ahead.
    mvcc: bool,
    /// The reader of the current `next_row` may have its range read ahead
    /// (`may_read_ahead`): an MVCC snapshot, or ANALYZE's or an index
    /// build's reader. None of them reads a write this backend makes while
    /// it reads (its earlier writes were applied by the first, synchronous
    /// batch), and for another backend's write a batch read ahead is as
    /// good as one read a moment later: it races with the reader either way.
    reads_ahead: bool,
    /// The current one-row range may be answered from the row cache by any
    /// reader: its caller fenced (`RowStream::cache_after_fence`).
    fenced: bool,
    /// The range spans more than one row.
    wide: bool,
    /// The range is an index fetch's window of rows read ahead
    /// (`set_window`): rows the row cache holds are taken from it one by
    /// one instead of asking the engine for the window.
    window: bool,
    /// Batches fetched since the range was set.
    batches: u32,
    /// The row cache answered for the current window's last row read.
    window_hit_last: bool,
    /// The read-ahead in flight (`engine_client::scan_ahead`): its ticket
    /// (0: none), and the start and per-row limit it asked with (its answer
    /// is used only if the stream asks for exactly that next).
    ahead: u64,
    ahead_start: [u8; ROW_KEY_LEN],
    ahead_per_row: u32,
    /// A read-ahead of this range was displaced by another stream's (two
    /// scans advancing in turn, as in a merge join): reading ahead here
    /// wastes the engine's work, so the stream stops doing it.
    ahead_displaced: bool,
    /// `buf` and `index` are lent from the pool ([`lend_buffers`]).
    pooled: bool,
    /// Entries the next read-ahead may bring: twice the last batch's, so
    /// batches grow from the channel buffer's size to the read-ahead
    /// buffer's (a scan that stops early, under a LIMIT, has the engine
    /// read at most about what it read itself).
    ahead_entries: u32,
    /// Which rows found dead to every snapshot (with `dead_test`) are
    /// removed when the stream reaches its end (`scan_prune`).
    pub prune: super::scan_prune::Prune,
    /// Index fetches and bitmap scans, which arrive at a chain's root: a
    /// root whose visible version redirects is returned as such
    /// ([`Row::redirect`]) instead of passed over as deleted.
    pub follow_redirects: bool,
    /// Index fetches (with `dead_test`): the versions of a root below a
    /// redirect every snapshot sees are noted for removal
    /// (`scan_prune::note_root_version`), as heap prunes a HOT chain's
    /// page when it reads it.
    pub prune_roots: bool,
    /// Following a chain from member to member (`fetch::member_row`): a
    /// member whose visible version moved it on within the chain is
    /// returned as a redirect to the next member, as a root's is.
    pub follow_hot_moves: bool,
    /// Bitmap scans: heap-only rows are passed over (their roots, which the
    /// bitmap holds, lead to them).
    pub skip_heap_only: bool,
    /// Index builds (`Reader::Build`): a row moved to a heap-only version
    /// that some snapshot may still see as it was was met, so the index,
    /// which holds only the chain's newest values, must not serve older
    /// snapshots (heap's broken HOT chain: `indcheckxmin`).
    pub broken_chain: bool,
    /// The last creator's visibility this stream asked about.
    memo: visibility::MvccMemo,
}

/// Buffer sets (a batch buffer and its entry index) the pool holds at most,
/// lent or spare: a query rarely runs more streams at once.
const POOL_SIZE: usize = 4;

/// One stream's buffers, allocated in `TopMemoryContext` by the pool: a
/// batch buffer of `cap` bytes and its entry index.
#[derive(Clone, Copy)]
struct Buffers {
    cap: usize,
    buf: *mut u8,
    index: *mut EntryPos,
}

thread_local! {
    /// The pool: buffer sets spare, and those lent to live streams.
    static POOL: std::cell::RefCell<(Vec<Buffers>, Vec<Buffers>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Buffers of `buf_cap` bytes for a stream: a spare set of that size, a
/// new set while the pool has fewer than [`POOL_SIZE`] of it, else `None`
/// (the caller pallocs its own). Two sizes are asked for: the channel
/// buffer's, and the read-ahead buffer's for a stream that reads ahead.
///
/// # Safety
/// Backend; `index_cap` is the same for every call with one `buf_cap` (the
/// buffer sizes are fixed at server start).
unsafe fn lend_buffers(buf_cap: usize, index_cap: usize) -> Option<Buffers> {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let (spare, lent) = &mut *p;
        let of_size = |sets: &Vec<Buffers>| sets.iter().filter(|set| set.cap == buf_cap).count();
        let set = match spare.iter().rposition(|set| set.cap == buf_cap) {
            Some(i) => spare.swap_remove(i),
            None if of_size(spare) + of_size(lent) < POOL_SIZE => Buffers {
                cap: buf_cap,
                buf: pg_sys::MemoryContextAlloc(pg_sys::TopMemoryContext, buf_cap) as *mut u8,
                index: pg_sys::MemoryContextAlloc(pg_sys::TopMemoryContext, index_cap * std::mem::size_of::<EntryPos>())
                    as *mut EntryPos,
            },
            None => return None,
        };
        lent.push(set);
        Some(set)
    })
}

/// A stream gives its pooled buffers back.
fn return_buffers(buf: *mut u8) {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if let Some(i) = p.1.iter().position(|set| set.buf == buf) {
            let set = p.1.swap_remove(i);
            p.0.push(set);
        }
    });
}

/// Entries a batch of `buf_cap` bytes can hold at most.
fn index_capacity(buf_cap: usize) -> usize {
    buf_cap / protocol::entry_encoded_len(ROW_KEY_LEN, 0) + 1
}

/// At the abort of the top-level transaction every stream is dead (their
/// scans' memory goes with it, and `free` is never called for a scan an
/// ERROR ended): the buffers still lent become spare.
pub fn reclaim_buffers_at_abort() {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let lent = std::mem::take(&mut p.1);
        p.0.extend(lent);
    });
}

/// The row an MVCC scan or fetch handed out last, while the bytes it points
/// to (in that stream's buffer) are still there.
///
/// The executor fetches the old row of every UPDATE again by TID with
/// SnapshotAny right after its scan returned it (PG16 `ExecModifyTable`);
/// heap answers with the version at that TID, the one the scan saw. This
/// answers the same without a round trip. Valid only until any stream
/// fetches, restarts or frees (the epoch), a row lock is taken (a lock may
/// lead to a newer version: EvalPlanQual), or the (sub)transaction ends.
#[derive(Clone, Copy)]
struct LastRow {
    cf: CfRef,
    rowid: u64,
    creator: u64,
    tuple: *mut u8,
    tuple_len: usize,
    epoch: u64,
    /// The version handed out, if it was the row's newest when read (none
    /// newer was stored then), with the row locks' write epoch loaded
    /// before that read: see [`last_row_newest`].
    newest: Option<(u32, u64)>,
}

/// The epoch and the last row. A plain static of atomics rather than a
/// thread-local: a scan sets the row once a row it returns, and a
/// thread-local in a shared library costs a `__tls_get_addr` call each
/// time (about 5 % of a sequential scan's backend time). Only a backend's
/// main thread uses it (scans run nowhere else), so relaxed loads and
/// stores see each other in order; the atomics only keep it sound.
struct Last {
    epoch: AtomicU64,
    /// The fields of the [`LastRow`], valid when `set`.
    set: AtomicBool,
    cf: AtomicU64,
    rowid: AtomicU64,
    creator: AtomicU64,
    tuple: AtomicPtr<u8>,
    tuple_len: AtomicUsize,
    row_epoch: AtomicU64,
    /// `LastRow::newest`'s version (`NOT_NEWEST`: none) and write epoch.
    newest_version: AtomicU64,
    newest_write_epoch: AtomicU64,
}

const NOT_NEWEST: u64 = u64::MAX;

static LAST: Last = Last {
    epoch: AtomicU64::new(0),
    set: AtomicBool::new(false),
    cf: AtomicU64::new(0),
    rowid: AtomicU64::new(0),
    creator: AtomicU64::new(0),
    tuple: AtomicPtr::new(std::ptr::null_mut()),
    tuple_len: AtomicUsize::new(0),
    row_epoch: AtomicU64::new(0),
    newest_version: AtomicU64::new(NOT_NEWEST),
    newest_write_epoch: AtomicU64::new(0),
};

impl Last {
    fn store(&self, row: LastRow) {
        self.cf.store(u64::from(row.cf.db) << 32 | u64::from(row.cf.rel), Relaxed);
        self.rowid.store(row.rowid, Relaxed);
        self.creator.store(row.creator, Relaxed);
        self.tuple.store(row.tuple, Relaxed);
        self.tuple_len.store(row.tuple_len, Relaxed);
        self.row_epoch.store(row.epoch, Relaxed);
        let (version, write_epoch) = row.newest.map_or((NOT_NEWEST, 0), |(v, w)| (u64::from(v), w));
        self.newest_version.store(version, Relaxed);
        self.newest_write_epoch.store(write_epoch, Relaxed);
        self.set.store(true, Relaxed);
    }

    fn load(&self) -> Option<LastRow> {
        if !self.set.load(Relaxed) {
            return None;
        }
        let cf = self.cf.load(Relaxed);
        let version = self.newest_version.load(Relaxed);
        Some(LastRow {
            cf: CfRef { db: (cf >> 32) as u32, rel: cf as u32 },
            rowid: self.rowid.load(Relaxed),
            creator: self.creator.load(Relaxed),
            tuple: self.tuple.load(Relaxed),
            tuple_len: self.tuple_len.load(Relaxed),
            epoch: self.row_epoch.load(Relaxed),
            newest: u32::try_from(version).ok().map(|v| (v, self.newest_write_epoch.load(Relaxed))),
        })
    }
}

fn bump_epoch() {
    LAST.epoch.fetch_add(1, Relaxed);
}

/// The last row handed out and the current epoch.
fn last_and_epoch() -> (Option<LastRow>, u64) {
    (LAST.load(), LAST.epoch.load(Relaxed))
}

/// Forget the last row handed out (see [`LastRow`]).
pub fn forget_last_row() {
    LAST.set.store(false, Relaxed);
}

/// The row of `cf` at `rowid` as the last MVCC scan or fetch handed it out,
/// if nothing has happened since that could change or free it.
pub fn last_row(cf: CfRef, rowid: u64) -> Option<Row> {
    let (last, epoch) = last_and_epoch();
    let last = last?;
    (last.cf == cf && last.rowid == rowid && last.epoch == epoch).then_some(Row {
        rowid,
        creator: last.creator,
        tuple: last.tuple,
        tuple_len: last.tuple_len,
        root: rowid,
        redirect: None,
    })
}

/// The row the last MVCC scan or fetch handed out, as [`last_row`], if it
/// is `cf`'s `rowid` and was the row's newest stored version when read:
/// its version number, a copy of its stored value (header and tuple) and
/// the row locks' write epoch loaded before the read.
/// A writer that then gets the row's lock with that epoch and finds it
/// unchanged (`crate::row_locks::lock`) need not read the row again.
pub fn last_row_newest(cf: CfRef, rowid: u64) -> Option<(u32, Vec<u8>, u64)> {
    let (last, epoch) = last_and_epoch();
    let last = last?;
    let (version, write_epoch) = last.newest?;
    if last.cf != cf || last.rowid != rowid || last.epoch != epoch {
        return None;
    }
    // SAFETY: the tuple follows its header in the stream's buffer, which
    // the unchanged epoch says is still there.
    let value = unsafe {
        std::slice::from_raw_parts(last.tuple.sub(pasv_am::row::HEADER_LEN), last.tuple_len + pasv_am::row::HEADER_LEN)
    };
    Some((version, value.to_vec(), write_epoch))
}

/// A resolved row: the visible version's tuple bytes (inside the stream's
/// buffer, valid until the next fetch).
pub struct Row {
    pub rowid: u64,
    /// The visible version's creator (FullTransactionId).
    pub creator: u64,
    pub tuple: *mut u8,
    pub tuple_len: usize,
    /// The rowid the row's index entries point at: its chain's root for a
    /// heap-only row (`pasv_am::row`), else `rowid`.
    pub root: u64,
    /// With [`RowStream::follow_redirects`]: the row is a root whose visible
    /// version points at the newest member of its chain, this rowid (no
    /// tuple: `tuple` is null).
    pub redirect: Option<u64>,
}

impl RowStream {
    /// # Safety
    /// Allocates in `CurrentMemoryContext`; must run in a backend.
    pub unsafe fn new(cf: CfRef) -> RowStream {
        Self::with_buffers(cf, true)
    }

    /// A stream that lives as long as the backend (allocated in
    /// `TopMemoryContext`, never freed): its buffers are its own, never the
    /// pool's, which takes back what is lent at every abort.
    ///
    /// # Safety
    /// As [`RowStream::new`], with `TopMemoryContext` current.
    pub unsafe fn new_permanent(cf: CfRef) -> RowStream {
        Self::with_buffers(cf, false)
    }

    unsafe fn with_buffers(cf: CfRef, from_pool: bool) -> RowStream {
        let buf_cap = crate::ipc::client::buffer_bytes().unwrap_or(64 * 1024);
        let index_cap = index_capacity(buf_cap);
        let (lo, hi) = keys::row_range(0, keys::MAX_ROWID + 1);
        let lent = if from_pool { lend_buffers(buf_cap, index_cap) } else { None };
        let Buffers { buf, index, .. } = lent.unwrap_or_else(|| Buffers {
            cap: buf_cap,
            buf: pg_sys::palloc(buf_cap) as *mut u8,
            index: pg_sys::palloc(index_cap * std::mem::size_of::<EntryPos>()) as *mut EntryPos,
        });
        RowStream {
            cf,
            next_start: lo,
            end: hi,
            buf,
            buf_cap,
            index,
            index_cap,
            count: 0,
            pos: 0,
            more: true,
            group: None,
            decided: None,
            pending_delete: pg_sys::InvalidTransactionId,
            group_last_version: 0,
            group_first_version: 0,
            batch_write_epoch: 0,
            ahead_write_epoch: 0,
            rewound: false,
            ssi_rel: std::ptr::null_mut(),
            recently_dead: false,
            per_row: 1,
            dead_test: std::ptr::null_mut(),
            dead_base: 0,
            dead_bits: 0,
            seen_bits: 0,
            newer_aborted: false,
            mvcc: false,
            reads_ahead: false,
            fenced: false,
            wide: true,
            window: false,
            batches: 0,
            window_hit_last: false,
            ahead: 0,
            ahead_start: lo,
            ahead_per_row: 0,
            ahead_displaced: false,
            pooled: lent.is_some(),
            ahead_entries: 0,
            prune: super::scan_prune::Prune::Nothing,
            follow_redirects: false,
            prune_roots: false,
            follow_hot_moves: false,
            skip_heap_only: false,
            broken_chain: false,
            memo: visibility::MvccMemo::EMPTY,
        }
    }

    /// # Safety
    /// The stream must not be used afterwards.
    pub unsafe fn free(&mut self) {
        bump_epoch();
        if self.pooled {
            return_buffers(self.buf);
            self.buf = std::ptr::null_mut();
            self.index = std::ptr::null_mut();
            return;
        }
        if !self.buf.is_null() {
            pg_sys::pfree(self.buf as *mut _);
            self.buf = std::ptr::null_mut();
        }
        if !self.index.is_null() {
            pg_sys::pfree(self.index as *mut _);
            self.index = std::ptr::null_mut();
        }
    }

    /// Restart the stream on rowids `[lo, hi)`.
    pub fn set_range(&mut self, lo: u64, hi: u64) {
        bump_epoch();
        let hi = hi.min(keys::MAX_ROWID + 1);
        let (start, end) = keys::row_range(lo.min(hi), hi);
        self.next_start = start;
        self.end = end;
        self.count = 0;
        self.pos = 0;
        self.more = lo < hi;
        // One row (a fetch by TID): its newest version is often not the
        // one the snapshot sees when the row is hot (session 4: TPC-B at 8
        // clients fetched every hot row twice, rewinding); a few versions
        // cost the same seek.
        self.per_row = if hi == lo.saturating_add(1) { pasv_am::row_cache::PER_ROW } else { 1 };
        self.group = None;
        self.decided = None;
        self.rewound = false;
        self.dead_base = lo;
        self.dead_bits = 0;
        self.seen_bits = 0;
        self.wide = hi > lo.saturating_add(1);
        self.window = false;
        self.batches = 0;
        self.window_hit_last = false;
        self.ahead = 0; // abandoned: the next read-ahead discards its answer
        self.ahead_displaced = false;
        self.fenced = false;
    }

    /// Whether the current range's last batch is in hand: nothing more to
    /// fetch for it (unless a row still undecided at its end asks for older
    /// versions) and no read-ahead in flight.
    pub fn range_fetched(&self) -> bool {
        !self.more && self.ahead == 0 && self.count > 0
    }

    /// Read ahead the first batch of `[lo, hi)`, the range this stream will
    /// be continued on ([`RowStream::continue_range`]) once the current one
    /// ends: a parallel scan's next chunk. Only where a read-ahead of the
    /// current range would be allowed (`fetch`: an MVCC reader past its
    /// first synchronous batches, so every earlier write of this backend
    /// was applied); otherwise nothing is asked.
    pub fn read_ahead_range(&mut self, lo: u64, hi: u64) -> Result<(), crate::error::CallError> {
        if !self.may_read_ahead() || self.ahead != 0 {
            return Ok(());
        }
        let (start, end) = keys::row_range(lo.min(hi), hi.min(keys::MAX_ROWID + 1));
        // The first batch of a wide range asks for one version a row
        // (`set_range`), and as many entries as the last read-ahead (none
        // yet: as many as the buffer holds; the chunk bounds it).
        self.read_ahead(start, &end, 1)
    }

    /// Go on to `[lo, hi)` as the same scan: as [`RowStream::set_range`],
    /// but the read-ahead of its first batch
    /// ([`RowStream::read_ahead_range`]) is kept, and so is the count of
    /// batches, so the new range reads ahead from its first batch on.
    pub fn continue_range(&mut self, lo: u64, hi: u64) {
        let (ahead, ahead_start, ahead_per_row, batches) = (self.ahead, self.ahead_start, self.ahead_per_row, self.batches);
        self.set_range(lo, hi);
        self.batches = batches;
        if ahead != 0 && ahead_start == self.next_start && ahead_per_row == self.per_row {
            self.ahead = ahead;
        }
    }

    /// Let a non-MVCC reader of the one-row range just set (a unique
    /// check's dirty snapshot, an index's deletion check) take the row
    /// cache's answer, once its caller has run `ipc::client::fence_others`:
    /// every write other backends posted before is then applied to RocksDB
    /// and, before its answer, to the cache; this backend's own are sent
    /// and waited for by `cached_row`; so the cached answer is what the
    /// engine would read (src/ipc/HOT_PATH.md §48). Rows still in another
    /// backend's buffer are in neither: a caller that must see them looks
    /// them up itself, as the unique check's fetch does before its fence.
    pub fn cache_after_fence(&mut self) {
        self.fenced = true;
    }

    /// Restart the stream on an index fetch's read-ahead window `[lo, hi)`:
    /// rows the row cache holds are taken from it one by one, and a wider
    /// read asks for two versions a row, so that the engine can cache each
    /// row it reads (`pasv_am::row_cache::window_read`).
    pub fn set_window(&mut self, lo: u64, hi: u64) {
        self.set_range(lo, hi);
        self.window = true;
        if self.wide {
            self.per_row = pasv_am::row_cache::WINDOW_PER_ROW;
        }
    }

    /// Whether `rowid`, in the range the stream was last set to (its first
    /// 64 rowids), was found dead to every snapshot by the rows read since:
    /// every version's creator aborted, or the version that decides it is a
    /// delete (or move) committed before every running transaction's
    /// snapshot. A row with no versions at all is never reported: its
    /// writer's posted request may not have been applied yet.
    pub fn known_dead(&self, rowid: u64) -> bool {
        self.range_bit(rowid).is_some_and(|bit| self.dead_bits & bit != 0)
    }

    /// Whether `rowid`, in the first 64 rowids of the range the stream was
    /// last set to and already passed by it, had no version at all. Not
    /// enough to call it dead: its writer may hold it in its buffer, or
    /// have posted it unapplied (`tam/fetch.rs::never_written_for_good`).
    pub fn no_versions(&self, rowid: u64) -> bool {
        self.range_bit(rowid).is_some_and(|bit| self.seen_bits & bit == 0)
    }

    /// `rowid`'s bit in `dead_bits` and `seen_bits`, if it is one of the
    /// first 64 rowids of the range.
    fn range_bit(&self, rowid: u64) -> Option<u64> {
        let offset = rowid.checked_sub(self.dead_base)?;
        (offset < 64).then(|| 1 << offset)
    }

    fn mark_dead(&mut self, rowid: u64) {
        if let Some(bit) = self.range_bit(rowid) {
            self.dead_bits |= bit;
        }
    }

    /// The current row ended undecided (no version visible): dead to all if
    /// every version was seen and every creator aborted.
    fn close_undecided(&mut self) {
        if let Some(rowid) = self.group {
            if !self.dead_test.is_null() && self.newer_aborted && self.group_last_version == 0 {
                self.mark_dead(rowid);
            }
        }
    }

    /// The buffers become the read-ahead buffer's size (a read-ahead's
    /// answer may be that large), from the pool or, for a stream with
    /// buffers of its own, in their memory context. Only between batches:
    /// the current batch's bytes are not kept.
    unsafe fn grow_buffers(&mut self) {
        let Some(cap) = crate::ipc::client::ahead_bytes().filter(|&cap| cap > self.buf_cap) else { return };
        let index_cap = index_capacity(cap);
        if self.pooled {
            // The small set goes back; with no big one to lend, this
            // stream's own buffers come from the current context.
            return_buffers(self.buf);
            let set = lend_buffers(cap, index_cap);
            self.pooled = set.is_some();
            let Buffers { buf, index, .. } = set.unwrap_or_else(|| Buffers {
                cap,
                buf: pg_sys::palloc(cap) as *mut u8,
                index: pg_sys::palloc(index_cap * std::mem::size_of::<EntryPos>()) as *mut EntryPos,
            });
            self.buf = buf;
            self.index = index;
        } else {
            self.buf = pg_sys::repalloc(self.buf.cast(), cap) as *mut u8;
            self.index = pg_sys::repalloc(self.index.cast(), index_cap * std::mem::size_of::<EntryPos>()) as *mut EntryPos;
        }
        self.buf_cap = cap;
        self.index_cap = index_cap;
    }

    /// Fetch the next batch from `next_start`.
    unsafe fn fetch(&mut self, doing: &str) {
        bump_epoch();
        if self.ahead != 0 {
            self.grow_buffers();
        }
        // Before anything is read: a row lock granted later compares it
        // with the end of the row's last writer (`last_row_newest`).
        let write_epoch = crate::row_locks::write_epoch();
        // SAFETY: buf has buf_cap bytes, allocated in new().
        let dest = std::slice::from_raw_parts_mut(self.buf, self.buf_cap);
        // One version per row on ranges: the newest decides nearly always;
        // the stream asks for a row's older versions only while it is
        // undecided. A single row gets a few at once (`set_range`).
        // MVCC readers of one row try the row cache first (row_cache.rs),
        // and so do index fetches' windows, row by row.
        let (cache_row, in_window) = match pasv_am::row_cache::cached_read(&self.next_start, &self.end, self.per_row, 0) {
            Some(rowid) => (Some(rowid), false),
            None => (self.window_row(), self.window),
        };
        let cached: Option<engine_client::ScanCopied> = match cache_row {
            Some(rowid) if self.mvcc || self.fenced => match engine_client::cached_row(self.cf, rowid, dest) {
                Ok(c) => {
                    if in_window && c.is_some() {
                        // The window's next rows are likely cached too.
                        engine_client::prefetch_cached_after(self.cf, rowid);
                    }
                    c.filter(|c| !in_window || has_entries(&dest[..c.len]))
                }
                Err(e) => e.raise(doing),
            },
            _ => None,
        };
        // A window's row from the cache (or a row it missed right after a
        // row it answered, read alone: the rows after it are likely cached
        // too; a second miss in a row reads the rest of the window, which
        // fills the cache): the window goes on after it.
        let mut window_hit = in_window && cached.is_some();
        let after_hit = std::mem::replace(&mut self.window_hit_last, window_hit);
        self.batch_write_epoch = write_epoch;
        let copied = match cached {
            Some(c) => c,
            None => match self.take_ahead(dest, doing) {
                Some(c) => {
                    self.batch_write_epoch = self.ahead_write_epoch;
                    c
                }
                None => {
                    let alone = match cache_row {
                        Some(rowid) if in_window && after_hit => {
                            let (start, end) = keys::row_range(rowid, rowid + 1);
                            Some(self.read(&start, &end, pasv_am::row_cache::PER_ROW, dest, doing)).filter(|c| has_entries(&dest[..c.len]))
                        }
                        _ => None,
                    };
                    window_hit |= alone.is_some();
                    alone.unwrap_or_else(|| self.read(&self.next_start, &self.end, self.per_row, dest, doing))
                }
            },
        };
        let bytes = std::slice::from_raw_parts(self.buf as *const u8, copied.len);
        // One pass: each entry is checked as it is indexed.
        let mut answer = match protocol::entries_cursor(bytes) {
            Ok(Some(answer)) => answer,
            Ok(None) => crate::error::CallError::Unexpected("Scan").raise(doing),
            Err(e) => crate::error::CallError::Protocol(e.to_string()).raise(doing),
        };
        let mut n = 0;
        let mut last = None;
        while n < self.index_cap {
            let (key, value_off, value) = match answer.next_entry() {
                Ok(Some(entry)) => entry,
                Ok(None) => break,
                Err(e) => crate::error::CallError::Protocol(e.to_string()).raise(doing),
            };
            let Some((rowid, version)) = keys::decode_row_key(key) else { continue };
            *self.index.add(n) = EntryPos { rowid, version, value_off: value_off as u32, value_len: value.len() as u32 };
            last = Some((rowid, version));
            n += 1;
        }
        self.count = n;
        self.pos = 0;
        self.more = (answer.more() || n < answer.len() || window_hit) && n > 0;
        if let Some((rowid, version)) = last {
            if let Some(next) = super::versions::key_after(rowid, version) {
                self.next_start = next;
            } else {
                self.more = false;
            }
        }
        self.batches += 1;
        // From the second batch on (a LIMIT often stops within the first;
        // and the first, read synchronously, applied this backend's earlier
        // writes: see `scan_ahead`), the engine reads the next batch while
        // this one is worked through.
        if self.more && self.may_read_ahead() {
            self.ahead_entries = u32::try_from(n).unwrap_or(u32::MAX).saturating_mul(2).max(1);
            let (start, end) = (self.next_start, self.end);
            if let Err(e) = self.read_ahead(start, &end, self.per_row) {
                e.raise(doing);
            }
        }
    }

    /// Whether a read-ahead may be asked for now (`fetch`'s rule): a reader
    /// that may read ahead (`reads_ahead`), of a range, not a window, past
    /// its first two batches (the first, read synchronously, applied this
    /// backend's earlier writes: see `engine_client::scan_ahead`), whose
    /// read-aheads were not displaced by another stream's.
    fn may_read_ahead(&self) -> bool {
        self.reads_ahead && self.wide && !self.window && self.batches >= 2 && !self.ahead_displaced
    }

    /// Ask the engine for `[start, end)` with `per_row` versions a row and
    /// at most `ahead_entries` entries, into the read-ahead slot; the
    /// stream takes the answer when it next asks for exactly `start`.
    fn read_ahead(&mut self, start: [u8; ROW_KEY_LEN], end: &[u8], per_row: u32) -> Result<(), crate::error::CallError> {
        self.ahead_write_epoch = crate::row_locks::write_epoch();
        self.ahead = engine_client::scan_ahead(self.cf, &start, end, per_row, self.ahead_entries)?;
        self.ahead_start = start;
        self.ahead_per_row = per_row;
        Ok(())
    }

    /// `[start, end)` with `per_row` versions a row from the engine, into `dest`.
    fn read(&self, start: &[u8], end: &[u8], per_row: u32, dest: &mut [u8], doing: &str) -> engine_client::ScanCopied {
        match engine_client::scan_into(self.cf, start, end, 0, per_row, dest) {
            Ok(c) => c,
            Err(e) => e.raise(doing),
        }
    }

    /// In an index fetch's window, the row the next fetch starts with, if it
    /// starts with a row's newest version: the row cache may answer for it
    /// (a one-row answer; the window goes on after it).
    fn window_row(&self) -> Option<u64> {
        if !self.window {
            return None;
        }
        let (rowid, version) = keys::decode_row_key(&self.next_start)?;
        (version == u32::MAX && keys::row_key(rowid, u32::MAX) < self.end).then_some(rowid)
    }

    /// The answer of the read-ahead in flight, copied into `dest`, if it
    /// asked for what the stream needs now.
    fn take_ahead(&mut self, dest: &mut [u8], doing: &str) -> Option<engine_client::ScanCopied> {
        let ticket = std::mem::take(&mut self.ahead);
        if ticket == 0 || self.ahead_start != self.next_start || self.ahead_per_row != self.per_row {
            return None; // a rewind moved the start: it is abandoned
        }
        match engine_client::take_scan_ahead(ticket, dest) {
            Ok(None) => {
                self.ahead_displaced = true;
                None
            }
            Ok(taken) => taken,
            Err(e) => e.raise(doing),
        }
    }

    /// The next row with a version visible to `reader`, skipping rows whose
    /// visible version is a tombstone or that have none.
    ///
    /// Versions are examined one at a time, so a row's chain may span
    /// batches; once a row is decided, its older versions are skipped (and
    /// not fetched, when they would fill the rest of the batch).
    ///
    /// # Safety
    /// Backend inside a transaction; `reader`'s snapshot valid.
    pub unsafe fn next_row(&mut self, reader: Reader, doing: &str) -> Option<Row> {
        let skip_tombstones = visibility::skips_tombstones(reader);
        self.mvcc = visibility::is_mvcc(reader);
        self.reads_ahead = self.mvcc || matches!(reader, Reader::BuildLive | Reader::Build(_));
        loop {
            if self.pos >= self.count {
                if !self.more && !self.read_on_undecided() {
                    self.close_undecided();
                    self.end_reached(doing);
                    return None;
                }
                self.fetch(doing);
                if self.count == 0 && !self.read_on_undecided() {
                    self.close_undecided();
                    self.end_reached(doing);
                    return None;
                }
                if self.count == 0 {
                    continue;
                }
            }
            let e = *self.index.add(self.pos);
            if self.decided == Some(e.rowid) {
                self.pos += 1;
                continue;
            }
            let value = std::slice::from_raw_parts(self.buf.add(e.value_off as usize), e.value_len as usize);
            let (header, tuple) = match RowHeader::decode(value) {
                Ok(decoded) => decoded,
                Err(err) => crate::error::raise(
                    pgrx::PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                    format!("pasv: {doing}: bad row header at rowid {}: {err}", e.rowid),
                    "The table's RocksDB data is damaged; restore from a backup.",
                ),
            };
            // An MVCC snapshot's answer has no side effect, so it is asked
            // here, once; other readers ask below, after `begin_row`.
            let mvcc_visible = self.mvcc && visibility::creator_visible_memo(&header, reader, &mut self.memo);
            if mvcc_visible && self.group.is_none() && header.flags & !pasv_am::row::FLAG_FROZEN == 0 {
                return Some(self.decide_plain(e, &header, tuple));
            }
            if self.group != Some(e.rowid) {
                if self.read_on_undecided() {
                    continue;
                }
                self.close_undecided();
                // First version (the newest) of a new row.
                self.group = Some(e.rowid);
                self.group_first_version = e.version;
                if let Some(bit) = self.range_bit(e.rowid) {
                    self.seen_bits |= bit;
                }
                self.newer_aborted = true;
                self.pending_delete = pg_sys::InvalidTransactionId;
                self.recently_dead = false;
                visibility::begin_row(reader);
            }
            self.pos += 1;
            self.rewound = false;
            self.group_last_version = e.version;
            let visible = if self.mvcc { mvcc_visible } else { visibility::creator_visible_memo(&header, reader, &mut self.memo) };
            if !visible {
                if !self.dead_test.is_null() && self.newer_aborted && !visibility::creator_aborted(&header) {
                    self.newer_aborted = false;
                }
                if let Reader::Snapshot(snap) = reader {
                    if super::ssi::conflict_out_needed(self.ssi_rel, snap) {
                        super::ssi::conflict_out(self.ssi_rel, header.xid, snap);
                    }
                }
                continue;
            }
            if let Some(deleter) = visibility::dirty_pending_delete(&header, reader) {
                // Dirty snapshots: a delete in progress leaves the previous
                // version visible, with the deleter reported in xmax.
                self.pending_delete = deleter;
                self.newer_aborted = false;
                continue;
            }
            if header.is_tombstone() && skip_tombstones {
                continue; // SnapshotAny: the newest tuple-bearing version
            }
            if let Reader::Build(horizon) = reader {
                if header.is_tombstone() && !visibility::dead_to_all(&header, horizon) {
                    if header.is_hot() {
                        // Moved within a chain: the index holds the chain
                        // once, through its newest member.
                        self.broken_chain = true;
                    } else {
                        // Deleted or moved, but a snapshot older than the
                        // horizon still sees the version below: index that
                        // one, not alive.
                        self.recently_dead = true;
                        continue;
                    }
                }
            }
            // This version decides the row.
            self.decided = Some(e.rowid);
            self.group = None;
            if self.prune_roots && self.mvcc && !self.dead_test.is_null() && header.is_redirect() && visibility::removable(&header, self.dead_test) {
                self.note_dead_below(e.rowid);
            }
            if self.pending_delete != pg_sys::InvalidTransactionId {
                if let Reader::Snapshot(snap) = reader {
                    (*snap).xmax = self.pending_delete;
                }
            }
            self.skip_rest_of(e.rowid);
            if header.is_redirect() || self.follow_hot_moves && header.is_hot() {
                // A root whose chain lives on (never dead by itself), or a
                // member that moved on within its chain, for a follower.
                if self.follow_redirects || self.follow_hot_moves {
                    return Some(Row {
                        creator: header.xid,
                        rowid: e.rowid,
                        tuple: std::ptr::null_mut(),
                        tuple_len: 0,
                        root: e.rowid,
                        redirect: Some(header.moved_to),
                    });
                }
                continue;
            }
            if header.is_heap_only() && self.skip_heap_only {
                continue;
            }
            if header.is_tombstone() {
                if !self.dead_test.is_null() && self.newer_aborted && visibility::removable(&header, self.dead_test) {
                    self.mark_dead(e.rowid);
                    if self.prune.removes(&header) {
                        super::scan_prune::note(self.cf, e.rowid, self.group_first_version);
                    }
                }
                continue;
            }
            let row = Row {
                creator: header.xid,
                rowid: e.rowid,
                tuple: tuple.as_ptr() as *mut u8,
                tuple_len: tuple.len(),
                root: header.root().unwrap_or(e.rowid),
                redirect: None,
            };
            if self.mvcc {
                self.remember_last(&row, e.version);
            }
            return Some(row);
        }
    }

    /// The next row when it is the common case `decide_plain` handles (the
    /// current entry is the first version read of a plain row visible to
    /// `reader`, an MVCC snapshot), decided and returned without the rest
    /// of `next_row`; `None` (nothing consumed) otherwise, or when the
    /// batch is used up: the caller then asks `next_row`. A sequential
    /// scan's rows are nearly all such; this path spares them `next_row`'s
    /// per-call setup and the scan's general step around it (HOT_PATH §54).
    ///
    /// # Safety
    /// As `next_row`.
    #[inline]
    pub unsafe fn next_plain(&mut self, reader: Reader) -> Option<Row> {
        if self.pos >= self.count || self.group.is_some() || !visibility::is_mvcc(reader) {
            return None;
        }
        let e = *self.index.add(self.pos);
        if self.decided == Some(e.rowid) {
            return None;
        }
        let value = std::slice::from_raw_parts(self.buf.add(e.value_off as usize), e.value_len as usize);
        // A bad header goes to `next_row`, which raises.
        let (header, tuple) = RowHeader::decode(value).ok()?;
        if header.flags & !pasv_am::row::FLAG_FROZEN != 0 || !visibility::creator_visible_memo(&header, reader, &mut self.memo) {
            return None;
        }
        Some(self.decide_plain(e, &header, tuple))
    }

    /// The common case of a scan, decided without the general rules of
    /// `next_row`: entry `e` (at `pos`, with `header` and `tuple`) is the
    /// first version read of a row (no row undecided before it), plain (no
    /// flag but frozen: no delete, move or chain) and visible to the MVCC
    /// snapshot. The stream is left as `next_row` leaves it for such a row
    /// (what `dead_test` and the SSI checks look at, invisible versions
    /// and tombstones, is not met).
    ///
    /// # Safety
    /// As `next_row`.
    unsafe fn decide_plain(&mut self, e: EntryPos, header: &RowHeader, tuple: &[u8]) -> Row {
        if let Some(bit) = self.range_bit(e.rowid) {
            self.seen_bits |= bit;
        }
        self.group_first_version = e.version;
        self.group_last_version = e.version;
        self.newer_aborted = true;
        self.pending_delete = pg_sys::InvalidTransactionId;
        self.recently_dead = false;
        self.rewound = false;
        self.pos += 1;
        self.decided = Some(e.rowid);
        self.skip_rest_of(e.rowid);
        let row = Row {
            creator: header.xid,
            rowid: e.rowid,
            tuple: tuple.as_ptr() as *mut u8,
            tuple_len: tuple.len(),
            root: e.rowid,
            redirect: None,
        };
        self.remember_last(&row, e.version);
        row
    }

    /// `row`, just returned to an MVCC reader, becomes the last row (see
    /// [`LastRow`]); `version` is the version it was read as.
    fn remember_last(&self, row: &Row, version: u32) {
        LAST.store(LastRow {
            cf: self.cf,
            rowid: row.rowid,
            creator: row.creator,
            tuple: row.tuple,
            tuple_len: row.tuple_len,
            epoch: LAST.epoch.load(Relaxed),
            newest: (version == self.group_first_version).then_some((version, self.batch_write_epoch)),
        });
    }

    /// The range is read to its end: remove the dead rows found, if asked.
    fn end_reached(&mut self, doing: &str) {
        if self.prune != super::scan_prune::Prune::Nothing {
            super::scan_prune::send(self.cf, doing);
        }
    }

    /// The current row is undecided and the engine returned only its newest
    /// version(s): arrange for the next fetch to read on into its older
    /// ones (once per answer; if none come back, it has no visible
    /// version). True when a fetch is due.
    fn read_on_undecided(&mut self) -> bool {
        match self.group {
            Some(row) if !self.rewound && self.group_last_version > 0 => {
                // A rewind costs a round trip: once one was needed (hot
                // rows updated under this snapshot), ask for a few versions
                // per row for the rest of the scan.
                self.per_row = self.per_row.max(4);
                self.next_start = keys::row_key(row, self.group_last_version - 1);
                self.pos = self.count;
                self.more = true;
                self.rewound = true;
                true
            }
            _ => false,
        }
    }

    /// The version of `rowid` just decided (at `pos - 1`) is visible to
    /// every snapshot: note the older versions of it this batch holds for
    /// removal. Only keys read are removed, none blind; older ones a
    /// batch did not bring wait for a later read or VACUUM.
    fn note_dead_below(&self, rowid: u64) {
        let mut at = self.pos;
        while at < self.count {
            // SAFETY: `at < count`, entries the last fetch indexed.
            let e = unsafe { *self.index.add(at) };
            if e.rowid != rowid {
                break;
            }
            super::scan_prune::note_root_version(self.cf, rowid, e.version);
            at += 1;
        }
    }

    /// If the rest of this batch holds only older versions of `rowid`,
    /// resume the next fetch at the following row instead of reading them.
    /// A read-ahead in flight already starts within the row: it is kept,
    /// and the older versions it brings are passed over as decided.
    unsafe fn skip_rest_of(&mut self, rowid: u64) {
        if self.count > 0 && self.more && (*self.index.add(self.count - 1)).rowid == rowid && rowid < keys::MAX_ROWID {
            if self.ahead == 0 {
                self.next_start = keys::row_key(rowid + 1, u32::MAX);
            }
            self.pos = self.count;
        }
    }
}

/// Whether an encoded `Entries` answer says it holds at least one entry
/// (`fetch` checks them as it reads them).
fn has_entries(answer: &[u8]) -> bool {
    matches!(protocol::entries_cursor(answer), Ok(Some(cursor)) if !cursor.is_empty())
}
