//! Parallel plans over pasv tables: whether the planner may give a pasv
//! table's scans parallel workers.
//!
//! PostgreSQL's cost model prices a parallel worker as a core of its own.
//! A pasv scan already keeps about 1.6 cores busy on its own, the backend
//! and the engine thread that reads ahead for it (HOT_PATH §53), so on a
//! small machine a worker takes its core from the engine: a `count(*)`
//! over 200 000 changed rows on two vCPUs ran 30-34 ms serially against
//! 37-43 ms with the one worker the planner chose, and a `sum()` over fresh
//! rows 25-28 against 32-33 (HOT_PATH §54).
//! On a machine with fewer CPUs than `pasv.parallel_scan_min_cpus` (4 by
//! default), a pasv table gets no parallel workers (its `rel_parallel_workers`
//! is 0, as `ALTER TABLE … SET (parallel_workers = 0)` would make it),
//! unless
//! * the table sets `parallel_workers` itself (the user's choice stands), or
//! * the session steers parallel plans itself: it changed
//!   `parallel_setup_cost`, `parallel_tuple_cost` or
//!   `min_parallel_table_scan_size` from PostgreSQL's defaults, or set
//!   `debug_parallel_query`; its own cost model decides, as PostgreSQL's
//!   own tests of parallel plans expect.
//!
//! Owns the planner's `get_relation_info_hook`; calls the relcache only.

use pgrx::pg_sys;

static mut PREV_GET_RELATION_INFO: pg_sys::get_relation_info_hook_type = None;
/// The CPUs this server may run on, read once in the postmaster.
static mut CPUS: usize = 0;

/// # Safety
/// Called once from `_PG_init`, in the postmaster.
pub unsafe fn install() {
    CPUS = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    PREV_GET_RELATION_INFO = pg_sys::get_relation_info_hook;
    pg_sys::get_relation_info_hook = Some(get_relation_info);
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn get_relation_info(
    root: *mut pg_sys::PlannerInfo,
    relation: pg_sys::Oid,
    inhparent: bool,
    rel: *mut pg_sys::RelOptInfo,
) {
    if let Some(prev) = PREV_GET_RELATION_INFO {
        prev(root, relation, inhparent, rel);
    }
    let min_cpus = usize::try_from(crate::guc::PARALLEL_SCAN_MIN_CPUS.get()).unwrap_or(0);
    if (*rel).rel_parallel_workers == -1 && CPUS < min_cpus && !parallel_plans_steered() && is_pasv_table(relation) {
        (*rel).rel_parallel_workers = 0;
    }
}

/// The session steers parallel plans itself: it changed PostgreSQL's
/// parallel cost settings from their defaults (or forces parallel plans),
/// so its own model decides, as PostgreSQL's plan tests expect.
unsafe fn parallel_plans_steered() -> bool {
    /// `min_parallel_table_scan_size`'s default, 8 MB, in blocks.
    const DEFAULT_MIN_TABLE_SCAN_BLOCKS: i32 = (8 << 20) / pg_sys::BLCKSZ as i32;
    pg_sys::parallel_setup_cost != pg_sys::DEFAULT_PARALLEL_SETUP_COST
        || pg_sys::parallel_tuple_cost != pg_sys::DEFAULT_PARALLEL_TUPLE_COST
        || pg_sys::min_parallel_table_scan_size != DEFAULT_MIN_TABLE_SCAN_BLOCKS
        || pg_sys::debug_parallel_query != pg_sys::DebugParallelMode::DEBUG_PARALLEL_OFF as i32
}

/// Whether `relation` is a pasv table (the planner holds a lock on it).
unsafe fn is_pasv_table(relation: pg_sys::Oid) -> bool {
    let rel = pg_sys::RelationIdGetRelation(relation);
    if rel.is_null() {
        return false;
    }
    let pasv = super::is_pasv(rel);
    pg_sys::RelationClose(rel);
    pasv
}
