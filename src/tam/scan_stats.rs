//! The cumulative statistics heap's scans keep (pgstat.h's counting macros,
//! not in pgrx's bindings): `pg_stat_*_tables.seq_scan`, `seq_tup_read`,
//! `last_seq_scan`, the tuples a bitmap scan fetched, and
//! `pg_statio_*_tables.heap_blks_hit`, where pasv counts one block for each
//! rowid block (291 rowids) a scan returns rows from (it reads no buffers).

use pgrx::pg_sys;

/// The relation's pending counters, if statistics are collected for it
/// (`pgstat_should_count_relation`).
#[inline]
unsafe fn counts(rel: pg_sys::Relation) -> Option<&'static mut pg_sys::PgStat_TableCounts> {
    if (*rel).pgstat_info.is_null() {
        if !(*rel).pgstat_enabled {
            return None;
        }
        pg_sys::pgstat_assoc_relation(rel);
        if (*rel).pgstat_info.is_null() {
            return None;
        }
    }
    Some(&mut (*(*rel).pgstat_info).counts)
}

/// A scan of `flags` starts (or starts over): sequential scans count one.
///
/// # Safety
/// `rel` is an open relation.
pub unsafe fn scan_started(rel: pg_sys::Relation, flags: u32) {
    if flags & pg_sys::ScanOptions::SO_TYPE_SEQSCAN != 0 {
        if let Some(c) = counts(rel) {
            c.numscans += 1;
        }
    }
}

/// The rowid block a scan counted last: `[lo, hi)` (empty, all zero, before
/// the first). A row of the same block is told by two compares, without a
/// division by the block's 291 rowids.
#[derive(Clone, Copy, Default)]
pub struct CountedBlock {
    lo: u64,
    hi: u64,
}

/// A scan of `flags` returns the row at `rowid`; `last` is the rowid block
/// it counted last.
///
/// # Safety
/// `rel` is an open relation.
#[inline]
pub unsafe fn row_returned(rel: pg_sys::Relation, flags: u32, rowid: u64, last: &mut CountedBlock) {
    use pg_sys::ScanOptions::*;
    let returned = flags & (SO_TYPE_SEQSCAN | SO_TYPE_SAMPLESCAN | SO_TYPE_TIDRANGESCAN) != 0;
    let fetched = flags & SO_TYPE_BITMAPSCAN != 0;
    if !returned && !fetched {
        return;
    }
    let Some(c) = counts(rel) else { return };
    if returned {
        c.tuples_returned += 1;
    } else {
        c.tuples_fetched += 1;
    }
    if rowid < last.lo || rowid >= last.hi {
        let lo = rowid - rowid % pasv_am::keys::ROWS_PER_BLOCK;
        *last = CountedBlock { lo, hi: lo.saturating_add(pasv_am::keys::ROWS_PER_BLOCK) };
        c.blocks_fetched += 1;
        c.blocks_hit += 1;
    }
}
