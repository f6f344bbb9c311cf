//! VACUUM, ANALYZE, index builds, and what the planner asks about size.

use super::scan::PasvScan;
use super::{cf_of, rel_name};
use crate::{engine_client, error};
use pasv_am::keys::ROWS_PER_BLOCK;
use pgrx::pg_sys;

/// VACUUM: one pass over the table's CF in batches. For each row it
/// removes versions no snapshot can see (aborted ones, and all older than
/// the newest version visible to every snapshot), removes whole rows whose
/// visible-to-all head is a tombstone (and then their index entries, through
/// each index's bulk-delete), freezes committed versions older than the
/// freeze limit, and advances relfrozenxid.
///
/// Not WAL-logged yet: pasv logs no change before the durability work
/// (DESIGN.md §4) lands.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn relation_vacuum(
    rel: pg_sys::Relation,
    params: *mut pg_sys::VacuumParams,
    bstrategy: pg_sys::BufferAccessStrategy,
) {
    warn_if_parallel_on_temp(rel, params);
    let mut cutoffs: pg_sys::VacuumCutoffs = std::mem::zeroed();
    pg_sys::vacuum_get_cutoffs(rel, params, &mut cutoffs);
    let doing = format!("vacuuming {}", rel_name(rel));
    // INDEX_CLEANUP OFF: as heap leaves dead line pointers for a later
    // VACUUM, the pass keeps the delete marker of every row it would remove,
    // so the rows' index entries keep pointing at a row a later VACUUM
    // removes with them.
    let index_cleanup = params.is_null() || (*params).index_cleanup != pg_sys::VacOptValue::VACOPTVALUE_DISABLED;
    let report = super::vacuum::vacuum_rows(rel, &cutoffs, index_cleanup, &doing);

    crate::crash_point::reach(crate::crash_point::Point::VacuumBetweenPasses);
    let verbose = !params.is_null() && (*params).options & pg_sys::VACOPT_VERBOSE != 0;
    vacuum_indexes(rel, &report, index_cleanup, bstrategy, verbose);

    // relfrozenxid is updated in place, durable at once, before VACUUM's
    // transaction commits; its messages (freezes, removals) replay only if it
    // does. So the versions it froze or removed reach disk first: a crash in
    // between must not revive an unfrozen version older than relfrozenxid,
    // whose CLOG may be truncated. Scans also removed rows, unlogged, that
    // this pass did not see (`scan_prune`: dead rows of a table without
    // indexes, moved-on chain members of one with): they reach disk before
    // relfrozenxid passes them.
    let scans_pruned = super::logs_changes(rel);
    // The pass's frozen copies and removals' markers of packed rows (and
    // the markers scans left) are folded back into their packs, before the
    // flush below writes them out: each was a RocksDB entry that every
    // scan stepped over, for good (src/ipc/HOT_PATH.md §59).
    let (groups, keys) = crate::engine_client::repack_cf(cf_of(rel)).unwrap_or_else(|e| e.raise(&doing));
    if verbose && groups > 0 {
        pgrx::info!("pasv: re-packed {groups} groups of rows of {}, folding {keys} row keys into their packs", rel_name(rel));
    }
    if report.frozen_versions > 0 || report.removed_versions > 0 || scans_pruned || groups > 0 {
        if let Err(e) = crate::engine_client::flush_cf(cf_of(rel)) {
            e.raise(&doing);
        }
    }
    crate::crash_point::reach(crate::crash_point::Point::VacuumRepacked);
    let blocks = truncate(rel, params, &report);
    let blocks = blocks.min(u64::from(u32::MAX - 1)) as pg_sys::BlockNumber;
    // The share of all-visible rows, in the same (rowid block) unit as the
    // pages: the planner costs index-only scans by it, as for heap. pasv has
    // no visibility map, so such a scan still fetches every row.
    let all_visible_blocks = if report.live_rows == 0 {
        0
    } else {
        (f64::from(blocks) * report.all_visible_rows as f64 / report.live_rows as f64).round() as pg_sys::BlockNumber
    };
    // Also where ANALYZE cannot zero it (pasv_am::visible_shares).
    if let Some(shares) = crate::shmem::visible_shares() {
        let share = if report.live_rows == 0 {
            0
        } else {
            (u64::from(pasv_am::visible_shares::ONE) * report.all_visible_rows / report.live_rows) as u32
        };
        shares.set(cf_of(rel), share);
    }
    let mut frozen_updated = false;
    let mut minmulti_updated = false;
    pg_sys::vac_update_relstats(
        rel,
        blocks,
        report.live_rows as f64,
        all_visible_blocks,
        (*(*rel).rd_rel).relhasindex,
        report.new_relfrozenxid,
        pg_sys::MultiXactId::from(0u32), // InvalidMultiXactId: leave relminmxid alone
        &mut frozen_updated,
        &mut minmulti_updated,
        false,
    );
    crate::crash_point::reach(crate::crash_point::Point::VacuumAfterRelfrozenxid);
    pg_sys::pgstat_report_vacuum((*rel).rd_id, false, report.live_rows as i64, report.removed_versions as i64);
    let message = format!(
        "pasv: vacuumed {}: {} live rows, {} dead versions and {} dead rows removed, {} versions frozen",
        rel_name(rel),
        report.live_rows,
        report.removed_versions,
        report.dead_rowids.len(),
        report.frozen_versions
    );
    if verbose {
        pgrx::info!("{message}");
    } else {
        pgrx::debug1!("{message}");
    }
}

/// VACUUM's index work, as heap's: each index's bulk-delete drops the
/// entries of the rows the pass removed, then (unless `INDEX_CLEANUP OFF`)
/// each index's cleanup runs, which is where GIN moves its pending list into
/// the tree and BRIN summarizes the block ranges filled since; and indexes
/// whose counts are exact get them recorded in `pg_class`. pasv's pass reads
/// every row, so its counts are exact.
unsafe fn vacuum_indexes(
    rel: pg_sys::Relation,
    report: &super::vacuum::VacuumReport,
    cleanup: bool,
    bstrategy: pg_sys::BufferAccessStrategy,
    verbose: bool,
) {
    if report.dead_rowids.is_empty() && !cleanup {
        return;
    }
    let mut nindexes = 0;
    let mut indexes: *mut pg_sys::Relation = std::ptr::null_mut();
    let lock = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
    pg_sys::vac_open_indexes(rel, lock, &mut nindexes, &mut indexes);
    for i in 0..nindexes.max(0) as usize {
        let index = *indexes.add(i);
        let mut info: pg_sys::IndexVacuumInfo = std::mem::zeroed();
        info.index = index;
        info.heaprel = rel;
        info.estimated_count = false;
        info.message_level = if verbose { pg_sys::INFO as i32 } else { pg_sys::DEBUG2 as i32 };
        info.num_heap_tuples = report.live_rows as f64;
        info.strategy = bstrategy;
        let mut stats: *mut pg_sys::IndexBulkDeleteResult = std::ptr::null_mut();
        if !report.dead_rowids.is_empty() {
            let state = &report.dead_rowids as *const std::collections::HashSet<u64> as *mut std::ffi::c_void;
            stats = pg_sys::index_bulk_delete(&mut info, stats, Some(rowid_removed), state);
        }
        if !cleanup {
            continue;
        }
        stats = pg_sys::index_vacuum_cleanup(&mut info, stats);
        if !stats.is_null() && !(*stats).estimated_count {
            pg_sys::vac_update_relstats(
                index,
                (*stats).num_pages,
                (*stats).num_index_tuples,
                0,
                false,
                pg_sys::InvalidTransactionId,
                pg_sys::MultiXactId::from(0u32),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                false,
            );
        }
    }
    pg_sys::vac_close_indexes(nindexes, indexes, lock);
}

/// Heap truncates when at least this many trailing pages are empty...
const REL_TRUNCATE_MINIMUM: u64 = 1000;
/// ... or at least this fraction of the table is.
const REL_TRUNCATE_FRACTION: u64 = 16;
/// How long heap waits for the AccessExclusiveLock it truncates under
/// (VACUUM_TRUNCATE_LOCK_TIMEOUT, 5 s), in polls of 50 ms.
const TRUNCATE_LOCK_POLLS: u32 = 100;
const TRUNCATE_LOCK_POLL_US: i64 = 50_000;

/// VACUUM's truncation, by heap's rules: when truncation is on (the
/// `vacuum_truncate` option, `VACUUM (TRUNCATE)`) and the pass left no row
/// in enough trailing rowid blocks, VACUUM takes an AccessExclusiveLock if
/// it gets one within 5 s (else it leaves the size as it is). Under the
/// lock the engine sets the size end to one past the highest row present
/// (rows written since the pass count), and the fork follows. Returns the
/// rowid blocks the table's rows span afterwards (what `relpages` records).
unsafe fn truncate(rel: pg_sys::Relation, params: *mut pg_sys::VacuumParams, report: &super::vacuum::VacuumReport) -> u64 {
    let (row_blocks, _) = rowid_blocks(rel);
    if !params.is_null() && (*params).truncate == pg_sys::VacOptValue::VACOPTVALUE_DISABLED {
        return row_blocks;
    }
    // The fork may be longer than the engine's size end: an insert stretches
    // it before its row is written, and an aborted insert may never be.
    let fork_blocks = pg_sys::smgrnblocks(pg_sys::RelationGetSmgr(rel), pg_sys::ForkNumber::MAIN_FORKNUM);
    let blocks = row_blocks.max(u64::from(fork_blocks));
    let freeable = blocks.saturating_sub(report.kept_end.div_ceil(ROWS_PER_BLOCK));
    if freeable == 0 || (freeable < REL_TRUNCATE_MINIMUM && freeable < blocks / REL_TRUNCATE_FRACTION) {
        return row_blocks;
    }
    let lock = pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE;
    let mut locked = false;
    for _ in 0..TRUNCATE_LOCK_POLLS {
        if pg_sys::ConditionalLockRelation(rel, lock) {
            locked = true;
            break;
        }
        pgrx::check_for_interrupts!();
        pg_sys::pg_usleep(TRUNCATE_LOCK_POLL_US);
    }
    if !locked {
        pgrx::debug1!("pasv: not truncating {}: another session holds a lock on it", rel_name(rel));
        return row_blocks;
    }
    let trimmed = match engine_client::trim_size(cf_of(rel)) {
        Ok(info) => info.size_end.div_ceil(ROWS_PER_BLOCK),
        Err(e) => e.raise(&format!("truncating {}", rel_name(rel))),
    };
    super::forklen::trim(rel, trimmed);
    pg_sys::UnlockRelation(rel, lock);
    trimmed
}

/// `VACUUM (PARALLEL n)` of a temporary table with two or more indexes:
/// heap says it vacuums them serially; so does pasv, which vacuums every
/// table serially.
unsafe fn warn_if_parallel_on_temp(rel: pg_sys::Relation, params: *mut pg_sys::VacuumParams) {
    let temp = (*(*rel).rd_rel).relpersistence as u8 == pg_sys::RELPERSISTENCE_TEMP;
    if params.is_null() || (*params).nworkers <= 0 || !temp {
        return;
    }
    if (*params).index_cleanup == pg_sys::VacOptValue::VACOPTVALUE_DISABLED {
        return;
    }
    let indexes = pg_sys::RelationGetIndexList(rel);
    let many = !indexes.is_null() && (*indexes).length > 1;
    pg_sys::list_free(indexes);
    if many {
        let name = std::ffi::CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr()).to_string_lossy();
        pgrx::warning!("disabling parallel option of vacuum on \"{name}\" --- cannot vacuum temporary tables in parallel");
    }
}

/// Index bulk-delete callback: is this TID a row VACUUM removed? Runs inside
/// index AM code: plain Rust, no PostgreSQL calls, no panics.
unsafe extern "C-unwind" fn rowid_removed(tid: pg_sys::ItemPointer, state: *mut std::ffi::c_void) -> bool {
    let removed = &*(state as *const std::collections::HashSet<u64>);
    super::rowid_from_tid(tid).is_some_and(|r| removed.contains(&r))
}

/// ANALYZE samples blocks of the main fork, which `forklen` keeps as long
/// as the rowid space: block `b` is rowids `b*291 .. b*291+290`.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn scan_analyze_next_block(
    scan: pg_sys::TableScanDesc,
    blockno: pg_sys::BlockNumber,
    _bstrategy: pg_sys::BufferAccessStrategy,
) -> bool {
    let s = &mut *(scan as *mut PasvScan);
    s.analyze_block(u64::from(blockno) * ROWS_PER_BLOCK);
    true
}

/// The block's rows whose newest version (by a creator that did not abort)
/// is a live tuple; those are sampled and counted live.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn scan_analyze_next_tuple(
    scan: pg_sys::TableScanDesc,
    _oldest_xmin: pg_sys::TransactionId,
    liverows: *mut f64,
    _deadrows: *mut f64,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    let s = &mut *(scan as *mut PasvScan);
    s.build_live = true;
    if s.next_analyzed(slot) {
        *liverows += 1.0;
        true
    } else {
        false
    }
}

/// Feed the index build callback every row some snapshot may still see
/// (CREATE INDEX holds a lock that excludes concurrent writers), as heap's
/// does under SnapshotAny: rows whose newest version (by a creator that did
/// not abort) is a tuple, alive; rows deleted or moved by a transaction not
/// older than OldestXmin, through the version below the tombstone and not
/// alive (kept out of unique checks and reltuples, as HEAPTUPLE_RECENTLY_DEAD).
/// REINDEX, and the rebuild that ends VACUUM FULL and CLUSTER, must keep
/// those reachable for snapshots taken before the delete or move.
///
/// A concurrent build (`CREATE INDEX CONCURRENTLY`, `REINDEX
/// CONCURRENTLY`) runs beside writers: like heap's, it indexes the rows
/// visible to a fresh MVCC snapshot, and [`index_validate_scan`] later adds
/// what that snapshot missed.
#[pgrx::pg_guard]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C-unwind" fn index_build_range_scan(
    table_rel: pg_sys::Relation,
    index_rel: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
    _allow_sync: bool,
    _anyvisible: bool,
    _progress: bool,
    start_blockno: pg_sys::BlockNumber,
    numblocks: pg_sys::BlockNumber,
    callback: pg_sys::IndexBuildCallback,
    callback_state: *mut std::ffi::c_void,
    scan: pg_sys::TableScanDesc,
) -> f64 {
    let Some(callback) = callback else { return 0.0 };
    let own_scan = scan.is_null();
    let concurrent = (*index_info).ii_Concurrent;
    let mut mvcc_snapshot: pg_sys::Snapshot = std::ptr::null_mut();
    let scan = if own_scan {
        let snapshot = if concurrent {
            mvcc_snapshot = pg_sys::RegisterSnapshot(pg_sys::GetTransactionSnapshot());
            mvcc_snapshot
        } else {
            &raw mut pg_sys::SnapshotAnyData
        };
        super::scan::scan_begin(
            table_rel,
            snapshot,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            pg_sys::ScanOptions::SO_TYPE_SEQSCAN,
        )
    } else {
        scan
    };
    let s = &mut *(scan as *mut PasvScan);
    if !concurrent {
        s.build_live = true;
        s.build_horizon = pg_sys::GetOldestNonRemovableTransactionId(table_rel);
    }
    if own_scan && numblocks != pg_sys::InvalidBlockNumber {
        let lo = u64::from(start_blockno) * ROWS_PER_BLOCK;
        s.stream.set_range(lo, lo + u64::from(numblocks) * ROWS_PER_BLOCK);
    }

    let mut keys = IndexKeys::new(table_rel, index_info);
    let slot = keys.slot;
    let mut reltuples = 0.0;

    while s.next_into(slot) {
        pgrx::check_for_interrupts!();
        if !keys.form(index_info) {
            continue;
        }
        // A heap-only row is indexed under its chain's root, as heap's are.
        let mut tid = (*slot).tts_tid;
        super::tid_from_rowid(s.last_root, &mut tid);
        let alive = !s.stream.recently_dead;
        callback(index_rel, &mut tid, keys.values.as_mut_ptr(), keys.isnull.as_mut_ptr(), alive, callback_state);
        if alive {
            reltuples += 1.0;
        }
    }

    if s.stream.broken_chain {
        // Older snapshots may see values of a chain that the index holds
        // only with its newest member's: as heap's, the index is used only
        // by transactions that started after this build.
        (*index_info).ii_BrokenHotChain = true;
    }
    keys.finish(index_info);
    // Like heap's, this callback ends the scan it was given (parallel builds).
    super::scan::scan_end(scan);
    if !mvcc_snapshot.is_null() {
        pg_sys::UnregisterSnapshot(mvcc_snapshot);
    }
    reltuples
}

/// The validation pass of a concurrent index build: every row visible to
/// `snapshot` whose TID the index does not hold yet (the TIDs it holds come
/// sorted in `state.tuplesort`) is inserted, with a unique check if the
/// index is unique. A row's index TID is its own, or its chain's root's
/// when it is heap-only (`pasv_am::row`), as heap's HOT chains.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn index_validate_scan(
    table_rel: pg_sys::Relation,
    index_rel: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
    snapshot: pg_sys::Snapshot,
    state: *mut pg_sys::ValidateIndexState,
) {
    let scan = super::scan::scan_begin(
        table_rel,
        snapshot,
        0,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        pg_sys::ScanOptions::SO_TYPE_SEQSCAN,
    );
    let s = &mut *(scan as *mut PasvScan);
    let mut keys = IndexKeys::new(table_rel, index_info);
    let slot = keys.slot;
    let unique_check = if (*index_info).ii_Unique {
        pg_sys::IndexUniqueCheck::UNIQUE_CHECK_YES
    } else {
        pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO
    };
    // The index's TIDs, ascending, as heap's `itemptr_encode` packs them,
    // all read first: a heap-only row's entry is its root's TID, which the
    // walk in rowid order does not meet in order (8 bytes an entry).
    let mut indexed: Vec<i64> = Vec::new();
    loop {
        let mut datum = pg_sys::Datum::from(0usize);
        let mut null = false;
        if !pg_sys::tuplesort_getdatum((*state).tuplesort, true, false, &mut datum, &mut null, std::ptr::null_mut()) {
            break;
        }
        indexed.push(datum.value() as i64);
    }

    while s.next_into(slot) {
        pgrx::check_for_interrupts!();
        (*state).htups += 1.0;
        let mut tid = (*slot).tts_tid;
        super::tid_from_rowid(s.last_root, &mut tid);
        if indexed.binary_search(&encode_tid(&tid)).is_ok() {
            continue;
        }
        if !keys.form(index_info) {
            continue;
        }
        pg_sys::index_insert(
            index_rel,
            keys.values.as_mut_ptr(),
            keys.isnull.as_mut_ptr(),
            &mut tid,
            table_rel,
            unique_check,
            false,
            index_info,
        );
        (*state).tups_inserted += 1.0;
    }

    keys.finish(index_info);
    super::scan::scan_end(scan);
}

/// A TID as one ordered integer (catalog/index.h's `itemptr_encode`).
fn encode_tid(tid: &pg_sys::ItemPointerData) -> i64 {
    let (block, offset) = pgrx::itemptr::item_pointer_get_both(*tid);
    (i64::from(block) << 16) | i64::from(offset)
}

/// What index builds and the validation pass need to compute a row's index
/// keys: a slot, an executor state for the index's expressions and
/// predicate, and the key arrays. Plain data (no destructor), so a
/// PostgreSQL ERROR may pass through its owner; its memory is the
/// statement's. [`IndexKeys::finish`] frees it.
struct IndexKeys {
    slot: *mut pg_sys::TupleTableSlot,
    estate: *mut pg_sys::EState,
    econtext: *mut pg_sys::ExprContext,
    predicate: *mut pg_sys::ExprState,
    values: [pg_sys::Datum; pg_sys::INDEX_MAX_KEYS as usize],
    isnull: [bool; pg_sys::INDEX_MAX_KEYS as usize],
}

impl IndexKeys {
    unsafe fn new(table_rel: pg_sys::Relation, index_info: *mut pg_sys::IndexInfo) -> IndexKeys {
        let slot = pg_sys::table_slot_create(table_rel, std::ptr::null_mut());
        let estate = pg_sys::CreateExecutorState();
        let econtext = pg_sys::MakePerTupleExprContext(estate);
        (*econtext).ecxt_scantuple = slot;
        IndexKeys {
            slot,
            estate,
            econtext,
            predicate: pg_sys::ExecPrepareQual((*index_info).ii_Predicate, estate),
            values: [pg_sys::Datum::from(0usize); pg_sys::INDEX_MAX_KEYS as usize],
            isnull: [false; pg_sys::INDEX_MAX_KEYS as usize],
        }
    }

    /// The keys of the row in `slot`; false if the index's predicate
    /// leaves the row out.
    unsafe fn form(&mut self, index_info: *mut pg_sys::IndexInfo) -> bool {
        pg_sys::MemoryContextReset((*self.econtext).ecxt_per_tuple_memory);
        if !self.predicate.is_null() && !pg_sys::ExecQual(self.predicate, self.econtext) {
            return false;
        }
        form_index_datum_raw(index_info, self.slot, self.estate, self.values.as_mut_ptr(), self.isnull.as_mut_ptr());
        true
    }

    unsafe fn finish(self, index_info: *mut pg_sys::IndexInfo) {
        pg_sys::ExecDropSingleTupleTableSlot(self.slot);
        pg_sys::FreeExecutorState(self.estate);
        (*index_info).ii_ExpressionsState = std::ptr::null_mut();
        (*index_info).ii_PredicateState = std::ptr::null_mut();
    }
}

// An index expression is user code: its ERROR must reach the user as
// PostgreSQL raised it. pgrx's guarded binding would re-raise it without its
// CONTEXT lines, so the build and validation passes call FormIndexDatum raw;
// nothing with a destructor is alive in them across the call.
extern "C-unwind" {
    #[link_name = "FormIndexDatum"]
    fn form_index_datum_raw(
        index_info: *mut pg_sys::IndexInfo,
        slot: *mut pg_sys::TupleTableSlot,
        estate: *mut pg_sys::EState,
        values: *mut pg_sys::Datum,
        isnull: *mut bool,
    );
}

/// Blocks the table's rows span (291 rowids a block), and one past the
/// highest rowid that may hold a row (the engine's size end: rowids handed
/// out but never written do not count), from the engine.
pub(super) unsafe fn rowid_blocks(rel: pg_sys::Relation) -> (u64, u64) {
    match engine_client::cf_info(cf_of(rel)) {
        Ok(info) => (info.size_end.div_ceil(ROWS_PER_BLOCK), info.size_end),
        Err(e) => e.raise(&format!("reading the size of {}", rel_name(rel))),
    }
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn relation_size(rel: pg_sys::Relation, fork: pg_sys::ForkNumber::Type) -> u64 {
    if fork != pg_sys::ForkNumber::MAIN_FORKNUM && fork != pg_sys::ForkNumber::InvalidForkNumber {
        return 0;
    }
    rowid_blocks(rel).0 * pg_sys::BLCKSZ as u64
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn relation_needs_toast_table(rel: pg_sys::Relation) -> bool {
    super::toast::needs_toast_table(rel)
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn relation_toast_am(_rel: pg_sys::Relation) -> pg_sys::Oid {
    pg_sys::Oid::from(pg_sys::HEAP_TABLE_AM_OID)
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn relation_fetch_toast_slice(
    _toastrel: pg_sys::Relation,
    _valueid: pg_sys::Oid,
    _attrsize: i32,
    _sliceoffset: i32,
    _slicelength: i32,
    _result: *mut pg_sys::varlena,
) {
    error::not_supported(
        "TOAST tables using pasv",
        "pasv tables keep their large values in a heap TOAST table; no TOAST table uses pasv itself.",
    );
}

/// The table's size for the planner, read from the engine at most once a
/// second per table ([`engine_client::estimated_size`]).
unsafe fn estimated_size(rel: pg_sys::Relation) -> engine_client::SizeEstimate {
    match engine_client::estimated_size(cf_of(rel)) {
        Ok(size) => size,
        Err(e) => e.raise(&format!("reading the size of {}", rel_name(rel))),
    }
}

/// Heap's per-tuple overhead (aligned tuple header and line pointer) and
/// usable bytes per page (`heapam_handler.c`): pasv reports sizes in heap's
/// units so that the planner weighs a pasv table as it would the same heap
/// table.
const HEAP_OVERHEAD_BYTES_PER_TUPLE: i32 = 24 + 4;
const HEAP_USABLE_BYTES_PER_PAGE: i32 = pg_sys::BLCKSZ as i32 - 24;

/// The planner's view of a pasv table, in heap's terms (heap is the
/// reference: the same data should get the same plans):
/// * pages: the pages a heap table would fill with the entries a sequential
///   scan steps over (every version and delete marker, like heap's dead
///   tuples), at the width the planner expects a row to have; so a table of
///   a few hot rows with many versions costs what its entries cost;
/// * tuples: from the density ANALYZE or VACUUM recorded (per rowid block,
///   the unit of `relpages` for pasv) times the rowid blocks now, never more
///   than the entries; or, never analyzed, heap's guess of full pages;
/// * heap's "never vacuumed or analyzed: at least 10 pages" rule;
/// * the all-visible share VACUUM recorded.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn relation_estimate_size(
    rel: pg_sys::Relation,
    attr_widths: *mut i32,
    pages: *mut pg_sys::BlockNumber,
    tuples: *mut f64,
    allvisfrac: *mut f64,
) {
    let size = estimated_size(rel);
    let rowid_blocks = size.rows.div_ceil(ROWS_PER_BLOCK);
    // The fork covers the rows again if a crash shortened it.
    super::forklen::cover_blocks(rel, size.size_end.div_ceil(ROWS_PER_BLOCK));
    let class = &*(*rel).rd_rel;
    let relpages = class.relpages.max(0) as f64;
    let reltuples = f64::from(class.reltuples);
    let tuple_width = pg_sys::get_rel_data_width(rel, attr_widths) + HEAP_OVERHEAD_BYTES_PER_TUPLE;
    let density = f64::from((HEAP_USABLE_BYTES_PER_PAGE / tuple_width.max(1)).max(1));
    let entries = size.entries as f64;
    let recorded = (relpages > 0.0 && reltuples >= 0.0)
        .then(|| (reltuples / relpages * rowid_blocks as f64).min(entries).round());
    let mut heap_pages = (entries.max(recorded.unwrap_or(0.0)) / density).ceil();
    // Heap's rule (PostgreSQL 16): at least 10 pages for a table never
    // vacuumed or analyzed; one that was, and is empty, is empty.
    if heap_pages < 10.0 && reltuples < 0.0 && !class.relhassubclass {
        heap_pages = 10.0;
    }
    *pages = heap_pages.min(f64::from(u32::MAX - 1)) as pg_sys::BlockNumber;
    *tuples = match recorded {
        Some(rows) => rows,
        None => (density * heap_pages).round(),
    };
    let recorded_share = if class.relallvisible > 0 && relpages > 0.0 {
        (f64::from(class.relallvisible) / relpages).min(1.0)
    } else {
        0.0
    };
    // ANALYZE sets relallvisible from the visibility map pasv does not
    // have (0): the share the last VACUUM recorded counts too.
    let vacuum_share = crate::shmem::visible_shares()
        .and_then(|s| s.get(cf_of(rel)))
        .map_or(0.0, |share| f64::from(share) / f64::from(pasv_am::visible_shares::ONE));
    *allvisfrac = recorded_share.max(vacuum_share);
}
