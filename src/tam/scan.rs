//! Sequential, parallel, TID-range and bitmap scans of a pasv table.
//!
//! A scan walks rowid ranges of the table's CF through a [`RowStream`].
//! Parallel scans share an atomic cursor in the DSM: each participant takes
//! the next chunk of rowids, so every row is returned by exactly one of them.

use super::stream::{Row, RowStream};
use super::visibility::Reader;
use super::{cf_of, describe_row, rel_name, store_in_slot};
use crate::engine_client;
use pasv_am::keys::{MAX_ROWID, ROWS_PER_BLOCK};
use pgrx::pg_sys;
use std::sync::atomic::{AtomicU64, Ordering};

/// Rowids handed to a parallel participant at a time (64 "blocks"). A
/// chunk is a range of its own: its first two answers are read
/// synchronously, only the later ones ahead (`RowStream::fetch`). With 16
/// blocks (about 1 700 rows of a bulk-loaded table, three answers), a
/// parallel sum() over 200 000 packed rows took 58 ms; with 64 (about ten
/// answers a chunk) 41-47 ms, still slower than serially (23 ms) on two
/// vCPUs, where two backends and the engine's threads contend
/// (HOT_PATH §46).
const PARALLEL_CHUNK: u64 = 64 * ROWS_PER_BLOCK;

#[repr(C)]
pub struct PasvScan {
    pub base: pg_sys::TableScanDescData,
    pub stream: RowStream,
    /// Index builds and ANALYZE read every version whose creator did not abort.
    pub build_live: bool,
    /// Index builds: heap's OldestXmin (`Reader::Build`); invalid otherwise.
    pub build_horizon: pg_sys::TransactionId,
    /// The rowid that index entries of the row handed out last point at
    /// (its chain's root when it is heap-only).
    pub last_root: u64,
    /// The rowid range of a non-parallel scan (whole table, TID range, or
    /// one bitmap block).
    range_lo: u64,
    range_hi: u64,
    /// The rowid block last counted in the statistics.
    stats_block: super::scan_stats::CountedBlock,
    /// Parallel scans: the chunk `[lo, hi)` taken before the current one
    /// ended, whose first batch is read ahead (`hi == 0`: none).
    next_chunk_lo: u64,
    next_chunk_hi: u64,
    tuple: pg_sys::HeapTupleData,
    /// Bitmap scans: -2 when not a bitmap scan; for the current block, -1
    /// when lossy, else the number of exact offsets at `bm_offsets`.
    bm_ntuples: i32,
    bm_index: i32,
    bm_offsets: *const pg_sys::OffsetNumber,
    /// Bitmap scans: the block's first row, read by `scan_bitmap_next_block`
    /// to say whether the block has one (heap's says no for a block without
    /// a visible row, and EXPLAIN ANALYZE counts only the others), returned
    /// by the next `next_into`.
    bm_pending: Option<Row>,
    /// TABLESAMPLE: rowid blocks in the table (0 until known), the current
    /// block, and one row read ahead of the sampling method's offsets.
    sample_nblocks: u32,
    sample_block: pg_sys::BlockNumber,
    ahead_valid: bool,
    ahead_rowid: u64,
    ahead_tuple: *mut u8,
    ahead_len: usize,
    sample_block_done: bool,
    /// Sequential and TID-range scans: the rowid of the row returned last,
    /// if the last call returned one (else the scan is at its start or
    /// end, and either direction begins afresh, as heap's does).
    at_row: bool,
    cur_rowid: u64,
    /// A backward step moved the stream away from `cur_rowid`: the next
    /// forward call repositions it.
    moved_back: bool,
    /// The row a backward step returns, copied out of the stream's buffer
    /// (palloc'd in the scan's context, grown as needed).
    back_copy: *mut u8,
    back_cap: usize,
    /// TID scans: the rowid blocks the table spans, read from the engine at
    /// the first TID checked after the scan began or restarted (as heap's
    /// `rs_nblocks`, the size at scan start).
    tid_blocks: Option<u64>,
    /// ANALYZE: the rows `[lo, hi)` of the block being sampled; the stream
    /// runs on to `end` (a window of `window` blocks, doubled while sampled
    /// blocks follow each other), and the first row past the block waits
    /// in `pending` for the next one.
    analyze: AnalyzeWindow,
}

/// Where ANALYZE's sampling stands (see [`PasvScan::analyze`]).
#[derive(Default)]
struct AnalyzeWindow {
    lo: u64,
    hi: u64,
    end: u64,
    window: u64,
    pending: Option<Row>,
}

/// Blocks an ANALYZE window may grow to: a table whose every block is
/// sampled is read in a few large requests rather than one a block.
const MAX_ANALYZE_WINDOW: u64 = 256;

/// Exact bitmap blocks with at most this many offsets are read row by row.
const BITMAP_ROW_READS: i32 = 16;

/// Rowids a backward step looks at first, below the current row; each empty
/// window makes the next one four times larger.
const BACKWARD_WINDOW: u64 = 64;

#[repr(C)]
pub struct PasvParallelScan {
    base: pg_sys::ParallelTableScanDescData,
    next_rowid: AtomicU64,
    end_rowid: u64,
}

impl PasvScan {
    pub fn reader(&self) -> Reader {
        if self.build_live && self.build_horizon != pg_sys::InvalidTransactionId {
            Reader::Build(self.build_horizon)
        } else if self.build_live {
            Reader::BuildLive
        } else {
            Reader::Snapshot(self.base.rs_snapshot)
        }
    }

    fn parallel(&self) -> Option<&PasvParallelScan> {
        let p = self.base.rs_parallel as *const PasvParallelScan;
        // SAFETY: rs_parallel, when set, is the DSM area our
        // parallelscan_initialize filled.
        unsafe { p.as_ref() }
    }

    /// The next visible row, stored in `slot`. False at the end.
    ///
    /// # Safety
    /// A scan begun by `scan_begin`, in a backend inside a transaction.
    pub unsafe fn next_into(&mut self, slot: *mut pg_sys::TupleTableSlot) -> bool {
        let Some(row) = self.bm_pending.take().or_else(|| self.next_visible()) else {
            return false;
        };
        self.emit(&row, slot);
        true
    }

    /// ANALYZE: sample rows `[lo, lo + ROWS_PER_BLOCK)` next. A block that
    /// starts where the last one ended, inside the stream's window, is read
    /// on from the same stream; otherwise a window starts at it, twice as
    /// long as the last one when the block follows it (so sampling every
    /// block costs a few large reads, and sampling sparse blocks reads
    /// one block a request, as before).
    pub fn analyze_block(&mut self, lo: u64) {
        let a = &mut self.analyze;
        let follows = a.window > 0 && lo == a.hi;
        if !(follows && lo < a.end) {
            a.window = if follows { (a.window * 2).min(MAX_ANALYZE_WINDOW) } else { 1 };
            a.end = lo.saturating_add(a.window * ROWS_PER_BLOCK).min(MAX_ROWID + 1);
            a.pending = None;
            self.stream.set_range(lo, a.end);
        }
        a.lo = lo;
        a.hi = lo.saturating_add(ROWS_PER_BLOCK);
    }

    /// ANALYZE: the block's next row, stored in `slot`; false (and the slot
    /// cleared) after its last.
    ///
    /// # Safety
    /// As `next_into`, after [`PasvScan::analyze_block`].
    pub unsafe fn next_analyzed(&mut self, slot: *mut pg_sys::TupleTableSlot) -> bool {
        loop {
            let Some(row) = self.analyze.pending.take().or_else(|| self.next_visible()) else {
                pg_sys::ExecClearTuple(slot);
                return false;
            };
            if row.rowid < self.analyze.lo {
                continue;
            }
            if row.rowid >= self.analyze.hi {
                // The next block's first row: its tuple stays in the
                // stream's buffer, which moves only when the stream reads.
                self.analyze.pending = Some(row);
                pg_sys::ExecClearTuple(slot);
                return false;
            }
            self.emit(&row, slot);
            return true;
        }
    }

    /// Hand `row` out in `slot`.
    unsafe fn emit(&mut self, row: &Row, slot: *mut pg_sys::TupleTableSlot) {
        let rel = self.base.rs_rd;
        self.cur_rowid = row.rowid;
        self.last_root = row.root;
        super::scan_stats::row_returned(rel, self.base.rs_flags, row.rowid, &mut self.stats_block);
        describe_row(rel, row, &mut self.tuple);
        store_in_slot(&mut self.tuple, slot);
    }

    /// The next row the scan returns (in its bitmap block, parallel chunk or
    /// range), its tuple in the stream's buffer until the stream moves.
    unsafe fn next_visible(&mut self) -> Option<Row> {
        loop {
            let reader = self.reader();
            if let Some(row) = self.stream.next_row(reader, "scanning") {
                if self.next_chunk_hi == 0 && self.stream.range_fetched() {
                    self.take_next_chunk();
                }
                if self.bm_ntuples >= 0 && !self.bm_by_row() && !self.bitmap_wants(row.rowid) {
                    continue;
                }
                if let Some(member) = row.redirect {
                    // A bitmap holds chains' roots: the row is the member
                    // the root leads to, kept in the scan's own copy.
                    let Some(found) = super::fetch::member_row(self.base.rs_rd, member, reader) else { continue };
                    self.keep_copy(&found);
                    return Some(Row { tuple: self.back_copy, ..found });
                }
                return Some(row);
            }
            if self.bm_by_row() && self.bm_index < self.bm_ntuples {
                // The next exact offset, as a one-row read.
                let offset = u64::from(*self.bm_offsets.add(self.bm_index as usize));
                self.bm_index += 1;
                if (1..=ROWS_PER_BLOCK).contains(&offset) {
                    let rowid = self.range_lo + offset - 1;
                    self.stream.set_range(rowid, rowid + 1);
                }
                continue;
            }
            if self.bm_ntuples != -2 {
                // Bitmap block done: the executor moves to the next block.
                return None;
            }
            self.parallel()?;
            if self.next_chunk_hi != 0 {
                let (lo, hi) = (self.next_chunk_lo, std::mem::take(&mut self.next_chunk_hi));
                self.stream.continue_range(lo, hi);
                continue;
            }
            let (lo, hi) = self.claim_chunk()?;
            self.stream.set_range(lo, hi);
        }
    }

    /// A parallel scan's next chunk of rowids from the shared cursor, or
    /// `None` when the table is done (or the scan is not parallel).
    fn claim_chunk(&self) -> Option<(u64, u64)> {
        let p = self.parallel()?;
        let lo = p.next_rowid.fetch_add(PARALLEL_CHUNK, Ordering::Relaxed);
        (lo < p.end_rowid).then(|| (lo, (lo + PARALLEL_CHUNK).min(p.end_rowid)))
    }

    /// A parallel participant whose stream holds its chunk's last batch
    /// takes its next chunk now and has the engine read that chunk's first
    /// batch while this one is worked through (without it, every chunk
    /// began with a waited read: HOT_PATH.md §49).
    fn take_next_chunk(&mut self) {
        let Some((lo, hi)) = self.claim_chunk() else { return };
        self.next_chunk_lo = lo;
        self.next_chunk_hi = hi;
        if let Err(e) = self.stream.read_ahead_range(lo, hi) {
            e.raise("scanning");
        }
    }

    /// As `next_into`, clearing the slot at the end (what the executor expects).
    ///
    /// # Safety
    /// As `next_into`.
    pub unsafe fn next_or_clear(&mut self, slot: *mut pg_sys::TupleTableSlot) -> bool {
        if self.next_into(slot) {
            true
        } else {
            pg_sys::ExecClearTuple(slot);
            false
        }
    }

    /// One step of a scan in `direction` (sequential and TID-range scans).
    ///
    /// Backward: the row before the current one (the last one, at the
    /// scan's start or end), found by scanning forward through windows of
    /// rowids below it and keeping the last visible row; forward after that
    /// resumes right after the row returned. Costs one round trip per step
    /// where rows are dense; backward scans serve cursors (`FETCH BACKWARD`,
    /// `SCROLL`) and `ORDER BY ctid DESC`, not bulk reads.
    ///
    /// # Safety
    /// As `next_into`.
    unsafe fn step(&mut self, direction: pg_sys::ScanDirection::Type, slot: *mut pg_sys::TupleTableSlot) -> bool {
        if direction != pg_sys::ScanDirection::BackwardScanDirection {
            // A serial scan's plain row (not a bitmap's, nor a parallel
            // participant's, which check their block or chunk a row).
            if !self.moved_back && self.bm_ntuples == -2 && self.base.rs_parallel.is_null() && !self.build_live {
                if let Some(row) = self.stream.next_plain(Reader::Snapshot(self.base.rs_snapshot)) {
                    self.emit(&row, slot);
                    self.at_row = true;
                    return true;
                }
            }
            if self.moved_back {
                let from = if self.at_row { self.cur_rowid + 1 } else { self.range_lo };
                self.stream.set_range(from, self.range_hi);
                self.moved_back = false;
            }
            self.at_row = self.next_or_clear(slot);
            return self.at_row;
        }
        if !self.base.rs_parallel.is_null() {
            crate::error::not_supported(
                "backward parallel scans",
                "PostgreSQL never plans one; this is a bug in pasv or in the caller.",
            );
        }
        self.moved_back = true;
        let hi = if self.at_row {
            self.cur_rowid
        } else {
            self.range_hi.min(super::maintenance::rowid_blocks(self.base.rs_rd).1)
        };
        self.at_row = self.last_visible_below(hi);
        if self.at_row {
            let row = Row { rowid: self.cur_rowid, creator: 0, tuple: self.back_copy, tuple_len: self.tuple.t_len as usize, root: self.cur_rowid, redirect: None };
            describe_row(self.base.rs_rd, &row, &mut self.tuple);
            store_in_slot(&mut self.tuple, slot);
        } else {
            pg_sys::ExecClearTuple(slot);
        }
        self.at_row
    }

    /// Finds the highest visible row in `[range_lo, hi)`, copies it to
    /// `back_copy` (its length in `tuple.t_len`) and its rowid to
    /// `cur_rowid`. False if there is none.
    unsafe fn last_visible_below(&mut self, mut hi: u64) -> bool {
        let mut window = BACKWARD_WINDOW;
        while hi > self.range_lo {
            let lo = hi.saturating_sub(window).max(self.range_lo);
            self.stream.set_range(lo, hi);
            let mut found = false;
            while let Some(row) = self.stream.next_row(self.reader(), "scanning backward") {
                self.keep_copy(&row);
                found = true;
            }
            if found {
                return true;
            }
            hi = lo;
            window = window.saturating_mul(4);
        }
        false
    }

    /// Copies `row`'s tuple to `back_copy`, growing it in the scan's context.
    unsafe fn keep_copy(&mut self, row: &super::stream::Row) {
        if row.tuple_len > self.back_cap {
            let context = pg_sys::GetMemoryChunkContext(self as *mut PasvScan as *mut std::ffi::c_void);
            if !self.back_copy.is_null() {
                pg_sys::pfree(self.back_copy as *mut std::ffi::c_void);
            }
            let cap = row.tuple_len.next_power_of_two().max(256);
            self.back_copy = pg_sys::MemoryContextAlloc(context, cap) as *mut u8;
            self.back_cap = cap;
        }
        std::ptr::copy_nonoverlapping(row.tuple, self.back_copy, row.tuple_len);
        self.tuple.t_len = row.tuple_len as u32;
        self.cur_rowid = row.rowid;
    }

    /// An exact bitmap block with few offsets: each is read as one row (the
    /// row cache answers it) instead of reading the whole rowid block.
    fn bm_by_row(&self) -> bool {
        (0..=BITMAP_ROW_READS).contains(&self.bm_ntuples)
    }

    /// Exact bitmap pages: whether `rowid`'s offset is among the page's
    /// offsets (both ascend, so a moving cursor suffices).
    unsafe fn bitmap_wants(&mut self, rowid: u64) -> bool {
        let offset = (rowid % ROWS_PER_BLOCK + 1) as u16;
        let offsets = self.bm_offsets;
        while self.bm_index < self.bm_ntuples && *offsets.add(self.bm_index as usize) < offset {
            self.bm_index += 1;
        }
        self.bm_index < self.bm_ntuples && *offsets.add(self.bm_index as usize) == offset
    }
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn scan_begin(
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    nkeys: i32,
    key: *mut pg_sys::ScanKeyData,
    pscan: pg_sys::ParallelTableScanDesc,
    flags: u32,
) -> pg_sys::TableScanDesc {
    if nkeys > 0 {
        crate::error::not_supported(
            "scan keys in table scans",
            "pasv tables cannot be system catalogs; the executor never passes scan keys to user tables.",
        );
    }
    pg_sys::RelationIncrementReferenceCount(rel);
    let scan = pg_sys::palloc0(std::mem::size_of::<PasvScan>()) as *mut PasvScan;
    let s = &mut *scan;
    s.base.rs_rd = rel;
    s.base.rs_snapshot = snapshot;
    s.base.rs_nkeys = nkeys;
    s.base.rs_key = key;
    s.base.rs_flags = flags;
    s.base.rs_parallel = pscan;
    std::ptr::write(&mut s.stream, RowStream::new(cf_of(rel)));
    s.stream.ssi_rel = rel;
    if flags & (pg_sys::ScanOptions::SO_TYPE_SEQSCAN | pg_sys::ScanOptions::SO_TYPE_SAMPLESCAN | pg_sys::ScanOptions::SO_TYPE_BITMAPSCAN | pg_sys::ScanOptions::SO_TYPE_TIDRANGESCAN) != 0 {
        // heapam locks the whole relation for sequential scans; pasv does
        // the same for bitmap and TID-range scans (coarser, still correct).
        super::ssi::lock_relation(rel, snapshot);
    }
    if pscan.is_null() {
        s.stream.prune = super::scan_prune::may_prune(rel, snapshot, flags);
        if s.stream.prune != super::scan_prune::Prune::Nothing {
            s.stream.dead_test = pg_sys::GlobalVisTestFor(rel);
        }
    }
    s.bm_ntuples = -2;
    s.sample_block = pg_sys::InvalidBlockNumber;
    super::scan_stats::scan_started(rel, flags);
    std::ptr::write(&mut s.tid_blocks, None);
    std::ptr::write(&mut s.bm_pending, None);
    std::ptr::write(&mut s.analyze, AnalyzeWindow::default());
    if pscan.is_null() {
        s.range_lo = 0;
        s.range_hi = MAX_ROWID + 1;
    } else {
        // Participants take chunks from the shared cursor as they go.
        s.range_lo = 0;
        s.range_hi = 0;
    }
    s.stream.set_range(s.range_lo, s.range_hi);
    scan as pg_sys::TableScanDesc
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn scan_end(scan: pg_sys::TableScanDesc) {
    let s = &mut *(scan as *mut PasvScan);
    s.stream.free();
    if !s.back_copy.is_null() {
        pg_sys::pfree(s.back_copy as *mut std::ffi::c_void);
    }
    pg_sys::RelationDecrementReferenceCount(s.base.rs_rd);
    if s.base.rs_flags & pg_sys::ScanOptions::SO_TEMP_SNAPSHOT != 0 {
        pg_sys::UnregisterSnapshot(s.base.rs_snapshot);
    }
    pg_sys::pfree(scan as *mut _);
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn scan_rescan(
    scan: pg_sys::TableScanDesc,
    _key: *mut pg_sys::ScanKeyData,
    set_params: bool,
    allow_strat: bool,
    allow_sync: bool,
    allow_pagemode: bool,
) {
    let s = &mut *(scan as *mut PasvScan);
    if set_params {
        use pg_sys::ScanOptions::*;
        let mut f = s.base.rs_flags & !(SO_ALLOW_STRAT | SO_ALLOW_SYNC | SO_ALLOW_PAGEMODE);
        if allow_strat {
            f |= SO_ALLOW_STRAT;
        }
        if allow_sync {
            f |= SO_ALLOW_SYNC;
        }
        if allow_pagemode {
            f |= SO_ALLOW_PAGEMODE;
        }
        s.base.rs_flags = f;
    }
    s.stream.set_range(s.range_lo, s.range_hi);
    // A chunk taken ahead belongs to the parallel scan being restarted.
    s.next_chunk_hi = 0;
    s.at_row = false;
    s.moved_back = false;
    s.tid_blocks = None;
    s.bm_pending = None;
    s.analyze = AnalyzeWindow::default();
    s.stats_block = super::scan_stats::CountedBlock::default();
    super::scan_stats::scan_started(s.base.rs_rd, s.base.rs_flags);
}

/// Whether `tid` may name a row of the scanned table: its block lies within
/// the rowid blocks the table spanned when the scan began (heap's test:
/// a TID past the end is invalid, e.g. for `currtid2` and TID scans).
///
/// # Safety
/// A scan begun by `scan_begin`, in a backend inside a transaction.
pub unsafe fn tid_within_table(scan: pg_sys::TableScanDesc, rowid: u64) -> bool {
    let s = &mut *(scan as *mut PasvScan);
    let blocks = match s.tid_blocks {
        Some(blocks) => blocks,
        None => {
            let blocks = super::maintenance::rowid_blocks(s.base.rs_rd).0;
            s.tid_blocks = Some(blocks);
            blocks
        }
    };
    rowid / ROWS_PER_BLOCK < blocks
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn scan_getnextslot(
    scan: pg_sys::TableScanDesc,
    direction: pg_sys::ScanDirection::Type,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    let s = &mut *(scan as *mut PasvScan);
    s.step(direction, slot)
}

/// TID range scans: restrict the scan to rowids between two TIDs
/// (inclusive), clamping offsets outside 1..=291 like heap does.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn scan_set_tidrange(
    scan: pg_sys::TableScanDesc,
    mintid: pg_sys::ItemPointer,
    maxtid: pg_sys::ItemPointer,
) {
    let s = &mut *(scan as *mut PasvScan);
    let (min_block, min_off) = pgrx::itemptr::item_pointer_get_both(*mintid);
    let (max_block, max_off) = pgrx::itemptr::item_pointer_get_both(*maxtid);
    let block_start = |b: u32| u64::from(b) * ROWS_PER_BLOCK;
    let lo = match min_off {
        0 => block_start(min_block),
        o if u64::from(o) > ROWS_PER_BLOCK => block_start(min_block) + ROWS_PER_BLOCK,
        o => block_start(min_block) + u64::from(o) - 1,
    };
    let hi = match max_off {
        0 => block_start(max_block),
        o if u64::from(o) > ROWS_PER_BLOCK => block_start(max_block) + ROWS_PER_BLOCK,
        o => block_start(max_block) + u64::from(o),
    };
    s.range_lo = lo;
    s.range_hi = hi.max(lo);
    s.stream.set_range(s.range_lo, s.range_hi);
    s.at_row = false;
    s.moved_back = false;
}

// ---------------------------------------------------------------------------
// Parallel scans
// ---------------------------------------------------------------------------

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn parallelscan_estimate(_rel: pg_sys::Relation) -> pg_sys::Size {
    std::mem::size_of::<PasvParallelScan>()
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn parallelscan_initialize(
    rel: pg_sys::Relation,
    pscan: pg_sys::ParallelTableScanDesc,
) -> pg_sys::Size {
    let p = pscan as *mut PasvParallelScan;
    (*p).base.phs_relid = (*rel).rd_id;
    (*p).base.phs_syncscan = false;
    // Every row visible to the scan's snapshot got its rowid before the
    // snapshot was taken, so the engine's next rowid now bounds the scan.
    let info = match engine_client::cf_info(cf_of(rel)) {
        Ok(info) => info,
        Err(e) => e.raise(&format!("starting a parallel scan of {}", rel_name(rel))),
    };
    std::ptr::write(&mut (*p).next_rowid, AtomicU64::new(0));
    (*p).end_rowid = info.next_rowid;
    std::mem::size_of::<PasvParallelScan>()
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn parallelscan_reinitialize(
    _rel: pg_sys::Relation,
    pscan: pg_sys::ParallelTableScanDesc,
) {
    let p = pscan as *mut PasvParallelScan;
    (*p).next_rowid.store(0, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------
// Bitmap scans
// ---------------------------------------------------------------------------

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn scan_bitmap_next_block(
    scan: pg_sys::TableScanDesc,
    tbmres: *mut pg_sys::TBMIterateResult,
) -> bool {
    let s = &mut *(scan as *mut PasvScan);
    let block = u64::from((*tbmres).blockno);
    s.range_lo = block * ROWS_PER_BLOCK;
    s.range_hi = s.range_lo + ROWS_PER_BLOCK;
    s.bm_ntuples = (*tbmres).ntuples.max(-1);
    s.bm_index = 0;
    // The bitmap's TIDs are chains' roots: heap-only rows are reached
    // through them, never on their own.
    s.stream.follow_redirects = true;
    s.stream.skip_heap_only = true;
    s.bm_offsets = (*tbmres).offsets.as_ptr();
    // A few exact offsets (an UPDATE ... WHERE key = $1 planned as a bitmap
    // scan, TPC-B's tellers and branches): one-row reads, which the row
    // cache answers without a round trip; the block's other rows are not
    // read at all. Otherwise the whole block in one read.
    if s.bm_by_row() {
        s.stream.set_range(s.range_lo, s.range_lo);
    } else {
        s.stream.set_range(s.range_lo, s.range_hi);
    }
    s.bm_pending = s.next_visible();
    s.bm_pending.is_some()
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn scan_bitmap_next_tuple(
    scan: pg_sys::TableScanDesc,
    _tbmres: *mut pg_sys::TBMIterateResult,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    let s = &mut *(scan as *mut PasvScan);
    s.next_or_clear(slot)
}

// ---------------------------------------------------------------------------
// TABLESAMPLE
// ---------------------------------------------------------------------------

/// The sampling method picks a rowid block (291 rowids), or the scan walks
/// them in order when the method has no block chooser (BERNOULLI).
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn scan_sample_next_block(
    scan: pg_sys::TableScanDesc,
    scanstate: *mut pg_sys::SampleScanState,
) -> bool {
    let s = &mut *(scan as *mut PasvScan);
    let rel = s.base.rs_rd;
    if s.sample_nblocks == 0 {
        let blocks = super::maintenance::rowid_blocks(rel).0;
        s.sample_nblocks = blocks.min(u64::from(u32::MAX - 1)) as u32;
    }
    let tsm = (*scanstate).tsmroutine;
    let block = match (*tsm).NextSampleBlock {
        Some(next) => next(scanstate, s.sample_nblocks),
        None if s.sample_block == pg_sys::InvalidBlockNumber => 0,
        None => s.sample_block + 1,
    };
    if block == pg_sys::InvalidBlockNumber || block >= s.sample_nblocks {
        s.sample_block = pg_sys::InvalidBlockNumber;
        return false;
    }
    s.sample_block = block;
    s.range_lo = u64::from(block) * ROWS_PER_BLOCK;
    s.range_hi = s.range_lo + ROWS_PER_BLOCK;
    s.stream.set_range(s.range_lo, s.range_hi);
    s.ahead_valid = false;
    s.sample_block_done = false;
    true
}

/// The next sampled row of the current block: the method names offsets in
/// ascending order; rows come from the block in rowid order.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn scan_sample_next_tuple(
    scan: pg_sys::TableScanDesc,
    scanstate: *mut pg_sys::SampleScanState,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    let s = &mut *(scan as *mut PasvScan);
    let rel = s.base.rs_rd;
    let tsm = (*scanstate).tsmroutine;
    let Some(next_offset) = (*tsm).NextSampleTuple else {
        pg_sys::ExecClearTuple(slot);
        return false;
    };
    let block_start = u64::from(s.sample_block) * ROWS_PER_BLOCK;
    loop {
        let offset = next_offset(scanstate, s.sample_block, ROWS_PER_BLOCK as pg_sys::OffsetNumber);
        if offset == pg_sys::InvalidOffsetNumber {
            pg_sys::ExecClearTuple(slot);
            return false;
        }
        let wanted = block_start + u64::from(offset) - 1;
        // Read ahead until a row at or past the wanted rowid. When the block
        // has no more rows, keep asking for offsets anyway: the sampling
        // method resets its per-block state only when it runs out of them.
        while !s.sample_block_done && (!s.ahead_valid || s.ahead_rowid < wanted) {
            match s.stream.next_row(s.reader(), "sampling") {
                Some(row) => {
                    s.ahead_valid = true;
                    s.ahead_rowid = row.rowid;
                    s.ahead_tuple = row.tuple;
                    s.ahead_len = row.tuple_len;
                }
                None => {
                    s.ahead_valid = false;
                    s.sample_block_done = true;
                }
            }
        }
        if s.sample_block_done {
            continue;
        }
        if s.ahead_rowid == wanted {
            s.ahead_valid = false;
            let row = Row { rowid: wanted, creator: 0, tuple: s.ahead_tuple, tuple_len: s.ahead_len, root: wanted, redirect: None };
            describe_row(rel, &row, &mut s.tuple);
            store_in_slot(&mut s.tuple, slot);
            return true;
        }
        // No visible row at that offset: ask for the next one.
    }
}
