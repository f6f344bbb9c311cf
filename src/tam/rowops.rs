//! UPDATE, DELETE and row locks (`SELECT ... FOR UPDATE/SHARE`, EvalPlanQual).
//!
//! Write order for an existing row (DESIGN.md §3): take the engine row lock,
//! read the version chain, decide, then write version head+1 (or, when an
//! indexed column changes, a new row plus a "moved" tombstone).
//!
//! A row keeps all its versions under one rowid, so a TID does not say which
//! version the executor saw. That version is the one visible to the
//! operation's snapshot: if the chain's head (newest version whose creator
//! did not abort) is newer, the row was changed concurrently (TM_Updated /
//! TM_Deleted), exactly where heap finds a committed xmax. The one exception
//! is a row this transaction had already locked before the call: nobody
//! could change it since, and EvalPlanQual relies on updating the head it
//! locked through `tuple_lock(FIND_LAST_VERSION)`.

use crate::logical::notes;
use super::visibility::{self, creator_of, Creator, Reader};
use super::modify::{check_row_size, stored_value};
use super::{cf_of, rel_name, rowid_from_tid, tid_from_rowid};
use crate::{engine_client, error};
use pasv_am::keys::{self, ROW_KEY_LEN};
use pasv_am::protocol::{BatchBuilder, CfRef, LockMode};
use pasv_am::row::{heap_only_link, RowHeader, FLAG_BOOKKEEPING, FLAG_HEAP_ONLY, FLAG_HOT, FLAG_MOVED, FLAG_ROOT, FLAG_TOMBSTONE, HEADER_LEN, REDIRECT_FLAGS};
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

extern "C" {
    // utils/datum.h; not in pgrx's PG16 bindings.
    fn datumIsEqual(value1: pg_sys::Datum, value2: pg_sys::Datum, typbyval: bool, typlen: i32) -> bool;
}

const INVALID_COMMAND_ID: pg_sys::CommandId = u32::MAX;

#[derive(Clone)]
struct Version {
    version: u32,
    header: RowHeader,
    creator: Creator,
    /// The tuple (empty for tombstones), copied out of the engine's answer.
    tuple: Vec<u8>,
}

/// The newest versions of one row (down to the first whose creator did not
/// abort, and one more), newest first. Older versions are left to the next
/// update's pruning or VACUUM.
#[derive(Clone)]
struct Chain {
    versions: Vec<Version>,
    /// Only the head is known, from the scan that found the row
    /// ([`Chain::from_scan`]): older versions were not read.
    head_only: bool,
    /// Where the versions came from (an error's DETAIL says it).
    source: &'static str,
}

impl Chain {
    unsafe fn read(cf: CfRef, rowid: u64, doing: &str) -> Chain {
        let (start, end) = keys::row_range(rowid, rowid + 1);
        let mut chain = Chain { versions: Vec::new(), head_only: false, source: "the engine" };
        // Two entries a page: the head and the one after it are all an
        // update needs; reading exactly that never steps over the delete
        // markers pruning leaves behind a row's live versions.
        super::versions::walk(cf, start, end, 2, doing, |v| chain.push(v.version, v.header, v.value));
        chain
    }

    /// The chain from the versions a granted row lock brought back, if they
    /// hold all a writer needs (else read it with [`Chain::read`]).
    /// (`rel` names the table in an error.)
    unsafe fn from_lock(versions: &[(Vec<u8>, Vec<u8>)], more: bool, rel: pg_sys::Relation) -> Option<Chain> {
        let mut chain = Chain { versions: Vec::new(), head_only: false, source: "the row lock's answer" };
        for (key, value) in versions {
            let (rowid, version) = keys::decode_row_key(key)?;
            let header = locked_row_header(value, rowid, rel);
            if !chain.push(version, header, value) {
                return Some(chain);
            }
        }
        (!more).then_some(chain)
    }

    /// The chain of a row whose lock vouched that nothing changed it since
    /// the scan read `value`, its newest version `version`
    /// (`stream::last_row_newest`): all a writer needs but for pruning,
    /// which then removes the version just below a head every snapshot
    /// sees ([`Chain::dead_versions`]). `None` if the version's creator
    /// aborted (older versions decide then: read them).
    unsafe fn from_scan(rowid: u64, version: u32, value: &[u8], rel: pg_sys::Relation) -> Option<Chain> {
        let header = locked_row_header(value, rowid, rel);
        let mut chain = Chain { versions: Vec::new(), head_only: true, source: "the scan" };
        chain.push(version, header, value);
        (chain.head() == Some(0)).then_some(chain)
    }

    /// Add the next older version; false once the chain has all it needs
    /// (down to the first version whose creator did not abort, and one more).
    unsafe fn push(&mut self, version: u32, header: RowHeader, value: &[u8]) -> bool {
        let creator = creator_of(&header);
        self.versions.push(Version {
            version,
            header,
            creator,
            tuple: value.get(HEADER_LEN..).unwrap_or_default().to_vec(),
        });
        self.head().is_none_or(|h| self.versions.len() < h + 2)
    }

    /// Index of the newest version whose creator did not abort.
    fn head(&self) -> Option<usize> {
        self.versions.iter().position(|v| v.creator != Creator::Aborted)
    }

    /// Index of the version visible to `reader`.
    unsafe fn visible(&self, reader: Reader) -> Option<usize> {
        visibility::begin_row(reader);
        self.versions.iter().position(|v| visibility::creator_visible(&v.header, reader))
    }

    /// The next version number for this row.
    fn next_version(&self) -> u32 {
        self.versions.first().map(|v| v.version + 1).unwrap_or(0)
    }

    /// A heap tuple describing version `i` (pointing into the chain).
    unsafe fn tuple(&self, rel: pg_sys::Relation, rowid: u64, i: usize) -> pg_sys::HeapTupleData {
        let v = &self.versions[i];
        let mut t: pg_sys::HeapTupleData = std::mem::zeroed();
        t.t_len = v.tuple.len() as u32;
        t.t_data = v.tuple.as_ptr() as *mut pg_sys::HeapTupleHeaderData;
        t.t_tableOid = (*rel).rd_id;
        tid_from_rowid(rowid, &mut t.t_self);
        t
    }

    /// Keys of versions no snapshot can see any more: those whose creator
    /// aborted, and all older than the newest version visible to every
    /// snapshot (heap's pruning, done while the row lock is held).
    unsafe fn dead_versions(&self, rel: pg_sys::Relation) -> Vec<u32> {
        // heap's pruning test: cached horizons, no proc-array scan per row.
        let vis = pg_sys::GlobalVisTestFor(rel);
        let all_visible = self.versions.iter().position(|v| {
            v.creator == Creator::Committed
                && (v.header.is_frozen()
                    || pg_sys::GlobalVisTestIsRemovableXid(vis, pg_sys::TransactionId::from(v.header.xid as u32)))
        });
        let mut dead: Vec<u32> = self
            .versions
            .iter()
            .enumerate()
            .filter(|(i, v)| v.creator == Creator::Aborted || all_visible.is_some_and(|k| *i > k))
            .map(|(_, v)| v.version)
            .collect();
        // A head every snapshot sees makes the versions below it dead;
        // unread, the one just below is removed blind (versions are
        // numbered one after another, and each update removes the one
        // below the head it replaces, so that is the one usually left).
        if self.head_only && all_visible == Some(0) {
            if let Some(below) = self.versions[0].version.checked_sub(1) {
                dead.push(below);
            }
        }
        dead
    }
}

/// The header of a stored version of row `rowid` of `rel` that a lock
/// brought or vouched for; ERROR (DATA_CORRUPTED) if it does not decode.
unsafe fn locked_row_header(value: &[u8], rowid: u64, rel: pg_sys::Relation) -> RowHeader {
    match RowHeader::decode(value) {
        Ok((h, _)) => h,
        Err(e) => error::raise(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("pasv: locking a row of {}: bad row header at rowid {rowid}: {e}", rel_name(rel)),
            "The table's RocksDB data is damaged; restore from a backup.",
        ),
    }
}

/// The chain `tuple_lock` read under an exclusive row lock it granted
/// (EvalPlanQual locks the latest version, then the executor fetches it
/// again with SnapshotAny and updates or deletes it). While this
/// transaction holds the lock no other writer can change the row, so the
/// re-fetch and the update answer from it: two round trips fewer for every
/// contended update (session 4: TPC-B at 8 clients). Taken by the next
/// update or delete of any row, cleared by the next `tuple_lock` and at
/// (sub)transaction end.
struct LockedChain {
    cf: CfRef,
    rowid: u64,
    xid: u32,
    chain: Chain,
}

thread_local! {
    static LOCKED_CHAIN: std::cell::RefCell<Option<LockedChain>> = const { std::cell::RefCell::new(None) };
}

/// Forget the chain of the last `tuple_lock` (see [`LockedChain`]).
pub(super) fn forget_locked_chain() {
    LOCKED_CHAIN.with(|l| l.borrow_mut().take());
}

/// Forget the last deleted row (see [`DeletedRow`]).
pub(super) fn forget_deleted_row() {
    DELETED_ROW.with(|d| d.borrow_mut().take());
}

/// The row the last `tuple_delete` deleted, with the chain it read under
/// the lock: the executor fetches it again with SnapshotAny in the same
/// command (RETURNING, AFTER ROW DELETE triggers, foreign keys' among
/// them), and what that fetch returns is the version the delete ended.
/// Answered from here, not read again from the engine after the buffered
/// delete was sent (TPC-C-like Delivery, perf: 16 % of its backend time).
/// Valid only in the deleting command of the deleting transaction (a
/// later command, or a rolled-back subtransaction's, has another command
/// id), where nothing can change the row again.
struct DeletedRow {
    cf: CfRef,
    rowid: u64,
    xid: u32,
    cid: pg_sys::CommandId,
    chain: Chain,
    head: usize,
}

thread_local! {
    static DELETED_ROW: std::cell::RefCell<Option<DeletedRow>> = const { std::cell::RefCell::new(None) };
}

/// SnapshotAny re-fetch of the row this command just deleted (see
/// [`DeletedRow`]). False if it is not that row.
pub(super) unsafe fn deleted_row_into_slot(rel: pg_sys::Relation, rowid: u64, slot: *mut pg_sys::TupleTableSlot) -> bool {
    let cf = cf_of(rel);
    let xid = u32::from(pg_sys::GetTopTransactionIdIfAny());
    let cid = pg_sys::GetCurrentCommandId(false);
    DELETED_ROW.with(|d| {
        let d = d.borrow();
        match d.as_ref() {
            Some(x) if x.cf == cf && x.rowid == rowid && x.xid == xid && xid != 0 && x.cid == cid => {
                store_copy_marked(&x.chain, rel, rowid, x.head, slot, super::Xmax::Deleted);
                true
            }
            _ => false,
        }
    })
}

/// The chain `tuple_lock` left for row `rowid` of `cf` under this
/// transaction's exclusive lock, if any (taken: a write follows).
unsafe fn take_locked_chain(cf: CfRef, rowid: u64) -> Option<Chain> {
    let locked = LOCKED_CHAIN.with(|l| l.borrow_mut().take())?;
    let xid = u32::from(pg_sys::GetTopTransactionIdIfAny());
    (locked.cf == cf && locked.rowid == rowid && locked.xid == xid && xid != 0).then_some(locked.chain)
}

/// SnapshotAny re-fetch of the row `tuple_lock` just locked: its head, from
/// the chain read under the lock. False if there is none to answer from.
pub(super) unsafe fn locked_head_into_slot(rel: pg_sys::Relation, rowid: u64, slot: *mut pg_sys::TupleTableSlot) -> bool {
    let cf = cf_of(rel);
    let xid = u32::from(pg_sys::GetTopTransactionIdIfAny());
    LOCKED_CHAIN.with(|l| {
        let l = l.borrow();
        let Some(locked) = l.as_ref().filter(|x| x.cf == cf && x.rowid == rowid && x.xid == xid && xid != 0) else {
            return false;
        };
        match locked.chain.head() {
            Some(h) if !locked.chain.versions[h].header.is_tombstone() => {
                let exclusive = super::Xmax::Locked(pg_sys::LockTupleMode::LockTupleExclusive);
                store_copy_marked(&locked.chain, rel, rowid, h, slot, exclusive);
                true
            }
            _ => false,
        }
    })
}

/// What to do when another transaction holds the row lock.
#[derive(Clone, Copy)]
enum OnConflict {
    Wait,
    Skip,
    Error,
    /// `wait = false` of tuple_update/tuple_delete: report BeingModified.
    Report,
}

enum LockResult {
    /// Locked; whether this transaction already held it before this call,
    /// and the row's chain read under the lock if it was asked for and the
    /// lock's answer held all of it.
    Held { already: bool, chain: Option<Chain> },
    /// Not locked: the holder (Skip/Report).
    Busy { holder: u32 },
}

/// Take the row lock for this transaction (`crate::row_locks`), waiting on the holder
/// through PostgreSQL's lock manager so the deadlock detector sees the wait.
unsafe fn lock_row(
    rel: pg_sys::Relation,
    cf: CfRef,
    rowid: u64,
    mode: LockMode,
    on_conflict: OnConflict,
    oper: pg_sys::XLTW_Oper::Type,
    read_chain: bool,
) -> LockResult {
    let xid = u32::from(super::top_xid());
    // The row as the scan that found it read it, if that was its newest
    // version: enough for the writer when the lock shows nobody can have
    // written it since (no round trip for the row's versions).
    let scanned = if read_chain { super::stream::last_row_newest(cf, rowid) } else { None };
    // What the scan handed out may be superseded once locked (EvalPlanQual).
    super::stream::forget_last_row();
    let mut evict = 0u32;
    let mut tid: pg_sys::ItemPointerData = std::mem::zeroed();
    tid_from_rowid(rowid, &mut tid);
    // Each retry follows a wait for a transaction that has ended by then, so
    // the loop ends when the lock frees; a stuck engine errors out.
    // Enough for a chain whose newest version an aborted transaction wrote
    // (that version, the head, one more: `Chain::push`); with two, such a
    // row fell back to `Chain::read`, two waited scans (TPC-C-like's
    // rolled-back new_order leaves them on stock rows, HOT_PATH §47-48).
    let read = if read_chain { 3 } else { 0 };
    let seen = scanned.as_ref().map(|&(_, _, write_epoch)| write_epoch);
    loop {
        let outcome = match crate::row_locks::lock(cf, rowid, xid, mode, evict, read, seen) {
            Ok(o) => o,
            Err(e) => e.raise(&format!("locking a row of {}", rel_name(rel))),
        };
        if outcome.granted {
            let chain = match &scanned {
                Some((version, value, _)) if outcome.unchanged => Chain::from_scan(rowid, *version, value, rel),
                _ if read_chain => Chain::from_lock(&outcome.versions, outcome.more, rel),
                _ => None,
            };
            return LockResult::Held { already: outcome.already_held, chain };
        }
        let holder = pg_sys::TransactionId::from(outcome.holder);
        match on_conflict {
            OnConflict::Wait => pg_sys::XactLockTableWait(holder, rel, &mut tid, oper),
            OnConflict::Skip | OnConflict::Report => {
                if !pg_sys::ConditionalXactLockTableWait(holder) {
                    return LockResult::Busy { holder: outcome.holder };
                }
            }
            OnConflict::Error => {
                if !pg_sys::ConditionalXactLockTableWait(holder) {
                    error::raise(
                        PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
                        format!("could not obtain lock on row in relation {}", rel_name(rel)),
                        "Another transaction holds a lock on the row; retry, or drop NOWAIT to wait for it.",
                    );
                }
            }
        }
        // The holder has ended: its locks are stale even if its release failed.
        evict = outcome.holder;
    }
}

/// The exclusive row lock an UPDATE or DELETE needs, with the row's chain:
/// from the last `tuple_lock` when it locked this very row (EvalPlanQual,
/// ON CONFLICT DO UPDATE; then also `true`), else from the engine.
unsafe fn lock_for_write(
    rel: pg_sys::Relation,
    cf: CfRef,
    rowid: u64,
    on_conflict: OnConflict,
    oper: pg_sys::XLTW_Oper::Type,
) -> (LockResult, bool) {
    match take_locked_chain(cf, rowid) {
        // Held since tuple_lock; the chain read under it is still the row's.
        Some(chain) => {
            super::stream::forget_last_row();
            (LockResult::Held { already: true, chain: Some(chain) }, true)
        }
        None => (lock_row(rel, cf, rowid, LockMode::Exclusive, on_conflict, oper, true), false),
    }
}

/// Read the chain under the row lock, waiting out an in-progress creator of
/// the head (only possible for rows whose creator holds no lock: a fresh
/// insert reached through a moved row).
///
/// `doing` ("updating") and the table's name say what failed in an error;
/// spelled out only when the chain must be read (not for every row).
unsafe fn read_locked_chain(rel: pg_sys::Relation, cf: CfRef, rowid: u64, doing: &str, mut first: Option<Chain>) -> Chain {
    let mut tid: pg_sys::ItemPointerData = std::mem::zeroed();
    tid_from_rowid(rowid, &mut tid);
    loop {
        let chain = first.take().unwrap_or_else(|| Chain::read(cf, rowid, &format!("{doing} {}", rel_name(rel))));
        match chain.head() {
            Some(h) if chain.versions[h].creator == Creator::InProgress => {
                let xid = pg_sys::TransactionId::from(chain.versions[h].header.xid as u32);
                pg_sys::XactLockTableWait(xid, rel, &mut tid, pg_sys::XLTW_Oper::XLTW_FetchUpdated);
            }
            _ => return chain,
        }
    }
}

/// An UPDATE or DELETE found, under the row lock, no version of the row
/// it was sent to that a live transaction created: heap's "attempted to
/// update/delete invisible tuple" (it raises that error itself; the
/// executor has no case for `TM_Invisible` and would say only
/// "unrecognized status"). The DETAIL lists what the chain read held.
unsafe fn invisible_row(rel: pg_sys::Relation, rowid: u64, chain: &Chain, what: &str) -> ! {
    let version = |version: u32, header: &RowHeader, creator: Creator| {
        format!("v{version} xid {} {creator:?} flags {:#x}", header.xid, header.flags)
    };
    let describe = |versions: &[String]| if versions.is_empty() { "none".to_string() } else { versions.join(", ") };
    let versions: Vec<String> = chain.versions.iter().map(|v| version(v.version, &v.header, v.creator)).collect();
    // What RocksDB holds now, every version (the chain may have come from
    // the row cache or a lock's answer): tells a stale copy from a lost version.
    let mut stored: Vec<String> = Vec::new();
    let (start, end) = keys::row_range(rowid, rowid + 1);
    super::versions::walk(cf_of(rel), start, end, 0, "reading an invisible row", |v| {
        stored.push(version(v.version, &v.header, creator_of(&v.header)));
        true
    });
    error::raise_with_detail(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("attempted to {what} invisible tuple"),
        format!(
            "pasv table {}, rowid {rowid}: no live version under the row lock (read from {}: {}; stored: {}).",
            rel_name(rel),
            chain.source,
            describe(&versions),
            describe(&stored)
        ),
        "Retry the transaction. If it recurs, report it as a pasv bug with this detail.",
    )
}

fn fill_tmfd(tmfd: *mut pg_sys::TM_FailureData, ctid_rowid: u64, xmax: u64, cmax: pg_sys::CommandId) {
    // SAFETY: tmfd comes from the executor and is valid for writes.
    unsafe {
        tid_from_rowid(ctid_rowid, &mut (*tmfd).ctid);
        (*tmfd).xmax = pg_sys::TransactionId::from(xmax as u32);
        (*tmfd).cmax = cmax;
    }
}

/// The outcome of checking a locked chain for a modification.
enum Check {
    /// Modify the head (index into the chain).
    Proceed(usize),
    Result(pg_sys::TM_Result::Type),
}

/// Decide whether this command may modify the row (heap's
/// HeapTupleSatisfiesUpdate, adapted to version chains).
unsafe fn check_modifiable(
    chain: &Chain,
    rowid: u64,
    cid: pg_sys::CommandId,
    snapshot: pg_sys::Snapshot,
    crosscheck: pg_sys::Snapshot,
    already_locked: bool,
    tmfd: *mut pg_sys::TM_FailureData,
) -> Check {
    use pg_sys::TM_Result::*;
    let Some(h) = chain.head() else { return Check::Result(TM_Invisible) };
    let head = &chain.versions[h];
    if head.creator == Creator::Current && head.header.cid >= cid {
        fill_tmfd(tmfd, rowid, head.header.xid, head.header.cid);
        return Check::Result(TM_SelfModified);
    }
    let seen = !snapshot.is_null() && chain.visible(Reader::Snapshot(snapshot)) == Some(h);
    if seen || already_locked || head.creator == Creator::Current {
        if head.header.is_tombstone() {
            fill_tmfd(tmfd, rowid, head.header.xid, INVALID_COMMAND_ID);
            return Check::Result(TM_Deleted);
        }
        if !crosscheck.is_null() && chain.visible(Reader::Snapshot(crosscheck)) != Some(h) {
            fill_tmfd(tmfd, rowid, head.header.xid, INVALID_COMMAND_ID);
            return Check::Result(TM_Updated);
        }
        return Check::Proceed(h);
    }
    // Changed by a transaction that committed after the snapshot.
    if head.header.is_moved() {
        fill_tmfd(tmfd, head.header.moved_to, head.header.xid, INVALID_COMMAND_ID);
        Check::Result(TM_Updated)
    } else if head.header.is_tombstone() {
        fill_tmfd(tmfd, rowid, head.header.xid, INVALID_COMMAND_ID);
        Check::Result(TM_Deleted)
    } else {
        fill_tmfd(tmfd, rowid, head.header.xid, INVALID_COMMAND_ID);
        Check::Result(TM_Updated)
    }
}

/// Which index columns an UPDATE changes, as heap asks it for HOT.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum IndexedChange {
    /// None: the row keeps its rowid and no index gets an entry.
    None,
    /// Only columns of summarizing indexes (BRIN): the row keeps its rowid
    /// and those indexes add the new values to its range.
    Summarized,
    /// A column some other index depends on: the row moves to a new rowid
    /// and every index gets an entry for it.
    Other,
}

/// Whether the new tuple changes a column some index depends on, and
/// whether the table has summarizing indexes.
unsafe fn indexed_columns_change(
    rel: pg_sys::Relation,
    old: &mut pg_sys::HeapTupleData,
    slot: *mut pg_sys::TupleTableSlot,
) -> (IndexedChange, bool) {
    if !(*(*rel).rd_rel).relhasindex {
        return (IndexedChange::None, false);
    }
    let attrs = pg_sys::RelationGetIndexAttrBitmap(rel, pg_sys::IndexAttrBitmapKind::INDEX_ATTR_BITMAP_HOT_BLOCKING);
    let summarized = pg_sys::RelationGetIndexAttrBitmap(rel, pg_sys::IndexAttrBitmapKind::INDEX_ATTR_BITMAP_SUMMARIZED);
    let summarizing = !summarized.is_null();
    if attrs.is_null() && summarized.is_null() {
        return (IndexedChange::None, false);
    }
    let desc = (*rel).rd_att;
    let natts = (*desc).natts as usize;
    let mut old_values = vec![pg_sys::Datum::from(0usize); natts];
    let mut old_nulls = vec![false; natts];
    pg_sys::heap_deform_tuple(old, desc, old_values.as_mut_ptr(), old_nulls.as_mut_ptr());
    pg_sys::slot_getallattrs(slot);
    let any_changed = |set: *mut pg_sys::Bitmapset| {
        let mut member = -1;
        loop {
            member = pg_sys::bms_next_member(set, member);
            if member < 0 {
                return false;
            }
            let attnum = member + pg_sys::FirstLowInvalidHeapAttributeNumber;
            if attnum <= 0 || attnum as usize > natts {
                // A system column (only ctid/oid could be here): treat as changed.
                if attnum <= 0 {
                    return true;
                }
                continue;
            }
            let i = attnum as usize - 1;
            let new_null = *(*slot).tts_isnull.add(i);
            let new_value = *(*slot).tts_values.add(i);
            let att = (*desc).attrs.as_ptr().add(i);
            let changed = if old_nulls[i] || new_null {
                old_nulls[i] != new_null
            } else {
                !datumIsEqual(old_values[i], new_value, (*att).attbyval, (*att).attlen as i32)
            };
            if changed {
                return true;
            }
        }
    };
    let change = if any_changed(attrs) {
        IndexedChange::Other
    } else if any_changed(summarized) {
        IndexedChange::Summarized
    } else {
        IndexedChange::None
    };
    pg_sys::bms_free(attrs);
    pg_sys::bms_free(summarized);
    (change, summarizing)
}

/// AFTER ROW UPDATE triggers (foreign keys included) and the transition
/// tables of UPDATE triggers (`REFERENCING OLD TABLE / NEW TABLE`, on the
/// table or on a partitioned table above it) fetch OLD and NEW by TID at
/// the end of the statement; they must differ, so such tables move every
/// updated row to a new rowid.
unsafe fn has_after_update_row_triggers(rel: pg_sys::Relation) -> bool {
    let t = (*rel).trigdesc;
    if !t.is_null() && ((*t).trig_update_after_row || (*t).trig_update_old_table || (*t).trig_update_new_table) {
        return true;
    }
    (*(*rel).rd_rel).relispartition && ancestor_has_transition_tables((*rel).rd_id)
}

thread_local! {
    /// Partitions known to have (or not) an ancestor with UPDATE transition
    /// tables; emptied by every relcache invalidation ([`forget_cached`]).
    static ANCESTOR_TRANSITIONS: std::cell::RefCell<std::collections::HashMap<pg_sys::Oid, bool>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

// catalog/partition.h; not in pgrx's PG16 bindings. Called through
// pg_guard_ffi_boundary.
extern "C-unwind" {
    fn get_partition_ancestors(relid: pg_sys::Oid) -> *mut pg_sys::List;
}

unsafe fn ancestor_has_transition_tables(relid: pg_sys::Oid) -> bool {
    if let Some(known) = ANCESTOR_TRANSITIONS.with(|m| m.borrow().get(&relid).copied()) {
        return known;
    }
    let ancestors = pg_sys::ffi::pg_guard_ffi_boundary(|| get_partition_ancestors(relid));
    let mut found = false;
    let n = if ancestors.is_null() { 0 } else { (*ancestors).length };
    for i in 0..n.max(0) as usize {
        let oid = (*(*ancestors).elements.add(i)).oid_value;
        let parent = pg_sys::RelationIdGetRelation(oid);
        if parent.is_null() {
            continue;
        }
        let t = (*parent).trigdesc;
        found |= !t.is_null() && ((*t).trig_update_old_table || (*t).trig_update_new_table);
        pg_sys::RelationClose(parent);
    }
    pg_sys::list_free(ancestors);
    ANCESTOR_TRANSITIONS.with(|m| m.borrow_mut().insert(relid, found));
    found
}

/// Forget what [`ancestor_has_transition_tables`] learnt (a relcache
/// invalidation: triggers or partitions may have changed).
pub(super) fn forget_cached() {
    ANCESTOR_TRANSITIONS.with(|m| m.borrow_mut().clear());
}

fn tombstone(cid: pg_sys::CommandId, full_xid: u64, moved_to: Option<u64>) -> [u8; HEADER_LEN] {
    let (flags, moved_to) = match moved_to {
        Some(r) => (FLAG_TOMBSTONE | FLAG_MOVED, r),
        None => (FLAG_TOMBSTONE, 0),
    };
    RowHeader { flags, cid, xid: full_xid, moved_to }.encode()
}

/// Mark a stored row value (`stored_value`'s) heap-only, with `link`
/// (`pasv_am::row::heap_only_link`).
fn mark_heap_only(value: &mut [u8], link: u64) {
    if let Ok((mut h, _)) = RowHeader::decode(value) {
        h.flags |= FLAG_HEAP_ONLY;
        h.moved_to = link;
        value[..HEADER_LEN].copy_from_slice(&h.encode());
    }
}

/// The root's side of a change of heap-only row `member` (HOT_PATH.md
/// §37), written in the same batch as the member's change, so every reader
/// sees both or neither: a redirect to `hot_to` when the row moved on
/// within the chain, else a tombstone that ends the chain (the row was
/// deleted, or moved to a row with index entries of its own): the root
/// and the root's version to write, None if `member` is not heap-only.
///
/// The version is the member's root version plus the member's own next
/// version (`at`): each attempt from a member writes a new version of the
/// member, so no two attempts (an aborted one and the next) share a root
/// version, and a member's successor starts above every attempt from it.
/// No read of the root: an UPDATE of a row already moved costs what the
/// first did. Without a root version (a link too small for it), the root's
/// chain is read and its dead versions pruned. Otherwise the root's
/// superseded redirects stay until VACUUM.
unsafe fn root_version_for(batch: &mut BatchBuilder, rel: pg_sys::Relation, cf: CfRef, member: &RowHeader, at: u32, doing: &str) -> Option<(u64, u32)> {
    let root = member.root()?;
    let version = match member.root_version().and_then(|k| k.checked_add(at)) {
        Some(v) if v < pasv_am::row::ROOT_VERSION_UNKNOWN => v,
        _ => {
            let chain = Chain::read(cf, root, doing);
            prune(batch, rel, root, &chain);
            chain.next_version()
        }
    };
    Some((root, version))
}

/// Write the root's side chosen by [`root_version_for`]: a redirect to
/// `hot_to`, or the end of the chain.
fn note_at_root(batch: &mut BatchBuilder, (root, version): (u64, u32), cid: pg_sys::CommandId, full_xid: u64, hot_to: Option<u64>) {
    let (flags, moved_to) = match hot_to {
        Some(n) => (REDIRECT_FLAGS, n),
        None => (FLAG_TOMBSTONE | FLAG_ROOT | FLAG_BOOKKEEPING, 0),
    };
    push(batch, &keys::row_key(root, version), &RowHeader { flags, cid, xid: full_xid, moved_to }.encode());
}

unsafe fn write(rel: pg_sys::Relation, cf: CfRef, batch: &BatchBuilder, doing: &str) {
    if let Err(e) = engine_client::put_batch_now(cf, super::logs_changes(rel), batch) {
        e.raise(&format!("{doing} {}", rel_name(rel)));
    }
    crate::xact::mark_written();
}

/// Write one row's change made under its exclusive row lock: buffered with
/// the backend's other row changes when the lock is in shared memory (sent
/// with them before this backend's next engine call, at the latest at
/// pre-commit), else sent now. Buffering is safe because nothing outside
/// this transaction may act on the change before it commits: MVCC readers
/// cannot see it, writers and lockers wait for the lock, and a unique
/// check, which must wait for a deleter or updater in progress, finds the
/// lock marked as written (`row_locks::note_write`, read by `tam/fetch.rs`).
/// `also`: the other rowids the batch writes (at most two: the new rowid
/// of a row that moves, which nothing but the old rowid's chain and a
/// chain's root lead to, and that root). A row that moves to a rowid with
/// index entries of its own is never buffered (call [`write`]): its new
/// rowid's index entries follow at once, and a unique check that finds
/// them must find the row. Nor is a
/// SERIALIZABLE transaction's change: a serializable reader of the row must
/// see the change in progress to record its rw-conflict (heap's conflict
/// out), or write skew goes undetected (`sql/serializable`).
unsafe fn write_row_change(rel: pg_sys::Relation, cf: CfRef, rowid: u64, also: &[u64], batch: &BatchBuilder, doing: &str) {
    let top = u32::from(super::top_xid());
    let serializable = pg_sys::XactIsoLevel == pg_sys::XACT_SERIALIZABLE as i32;
    if !serializable && crate::row_locks::note_write(cf, rowid, top) {
        let xid = super::current_full_xid() as u32;
        let mut rows = [rowid; 3];
        for (slot, r) in rows[1..].iter_mut().zip(also) {
            *slot = *r;
        }
        match engine_client::buffer_batch(cf, super::logs_changes(rel), xid, &rows, batch) {
            Ok(true) => {
                crate::xact::mark_written();
                return;
            }
            Ok(false) => {}
            Err(e) => e.raise(&format!("{doing} {}", rel_name(rel))),
        }
    }
    write(rel, cf, batch, doing);
}

/// Add the removal of `chain`'s dead versions to `batch` (an empty value
/// deletes a key).
unsafe fn prune(batch: &mut BatchBuilder, rel: pg_sys::Relation, rowid: u64, chain: &Chain) {
    for version in chain.dead_versions(rel) {
        push(batch, &keys::row_key(rowid, version), &[]);
    }
}

fn push(batch: &mut BatchBuilder, key: &[u8; ROW_KEY_LEN], value: &[u8]) {
    if let Err(e) = batch.push(key, value) {
        error::raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("pasv: encoding a row: {e}"), "This is a bug in pasv.");
    }
}

// ---------------------------------------------------------------------------
// Callbacks
// ---------------------------------------------------------------------------

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn tuple_delete(
    rel: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    cid: pg_sys::CommandId,
    snapshot: pg_sys::Snapshot,
    crosscheck: pg_sys::Snapshot,
    wait: bool,
    tmfd: *mut pg_sys::TM_FailureData,
    _changing_part: bool,
) -> pg_sys::TM_Result::Type {
    let cf = cf_of(rel);
    let Some(rowid) = rowid_from_tid(tid) else { return pg_sys::TM_Result::TM_Invisible };
    let on_conflict = if wait { OnConflict::Wait } else { OnConflict::Report };
    let (already, locked_chain) = match lock_for_write(rel, cf, rowid, on_conflict, pg_sys::XLTW_Oper::XLTW_Delete).0 {
        LockResult::Held { already, chain } => (already, chain),
        LockResult::Busy { holder } => {
            fill_tmfd(tmfd, rowid, u64::from(holder), INVALID_COMMAND_ID);
            return pg_sys::TM_Result::TM_BeingModified;
        }
    };
    let chain = read_locked_chain(rel, cf, rowid, "deleting from", locked_chain);
    let result = match check_modifiable(&chain, rowid, cid, snapshot, crosscheck, already, tmfd) {
        Check::Result(pg_sys::TM_Result::TM_Invisible) => invisible_row(rel, rowid, &chain, "delete"),
        Check::Result(r) => r,
        Check::Proceed(h) => {
            super::ssi::conflict_in(rel, Some(rowid));
            let mut old = chain.tuple(rel, rowid, h);
            let mut batch = notes::batch_for(rel);
            // Before its large values go: the old key is logged whole.
            notes::note_old_row(rel, &mut batch, rowid, &mut old, true);
            super::toast::delete_external(rel, &mut old);
            let full_xid = super::current_full_xid();
            push(&mut batch, &keys::row_key(rowid, chain.next_version()), &tombstone(cid, full_xid, None));
            prune(&mut batch, rel, rowid, &chain);
            let member = chain.versions[h].header;
            if let Some(at_root) = root_version_for(&mut batch, rel, cf, &member, chain.next_version(), "deleting from") {
                note_at_root(&mut batch, at_root, cid, full_xid, None);
            }
            write_row_change(rel, cf, rowid, &[member.root().unwrap_or(rowid)], &batch, "deleting from");
            pg_sys::pgstat_count_heap_delete(rel);
            let xid = u32::from(pg_sys::GetTopTransactionIdIfAny());
            DELETED_ROW.with(|d| *d.borrow_mut() = Some(DeletedRow { cf, rowid, xid, cid, chain, head: h }));
            pg_sys::TM_Result::TM_Ok
        }
    };
    result
}

#[pgrx::pg_guard]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C-unwind" fn tuple_update(
    rel: pg_sys::Relation,
    otid: pg_sys::ItemPointer,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    snapshot: pg_sys::Snapshot,
    crosscheck: pg_sys::Snapshot,
    wait: bool,
    tmfd: *mut pg_sys::TM_FailureData,
    lockmode: *mut pg_sys::LockTupleMode::Type,
    update_indexes: *mut pg_sys::TU_UpdateIndexes::Type,
) -> pg_sys::TM_Result::Type {
    *lockmode = pg_sys::LockTupleMode::LockTupleExclusive;
    *update_indexes = pg_sys::TU_UpdateIndexes::TU_None;
    let cf = cf_of(rel);
    let Some(rowid) = rowid_from_tid(otid) else { return pg_sys::TM_Result::TM_Invisible };
    let on_conflict = if wait { OnConflict::Wait } else { OnConflict::Report };
    // `relocked`: locked by tuple_lock just before (ON CONFLICT DO UPDATE,
    // EvalPlanQual): the new version shows the lock in xmax, as heap's does.
    let (locked, relocked) = lock_for_write(rel, cf, rowid, on_conflict, pg_sys::XLTW_Oper::XLTW_Update);
    let (already, locked_chain) = match locked {
        LockResult::Held { already, chain } => (already, chain),
        LockResult::Busy { holder } => {
            fill_tmfd(tmfd, rowid, u64::from(holder), INVALID_COMMAND_ID);
            return pg_sys::TM_Result::TM_BeingModified;
        }
    };
    let chain = read_locked_chain(rel, cf, rowid, "updating", locked_chain);
    let h = match check_modifiable(&chain, rowid, cid, snapshot, crosscheck, already, tmfd) {
        Check::Result(pg_sys::TM_Result::TM_Invisible) => invisible_row(rel, rowid, &chain, "update"),
        Check::Result(r) => {
            return r;
        }
        Check::Proceed(h) => h,
    };
    super::ssi::conflict_in(rel, Some(rowid));

    let mut should_free = false;
    let slot_tuple = pg_sys::ExecFetchSlotHeapTuple(slot, true, &mut should_free);
    (*slot).tts_tableOid = (*rel).rd_id;
    (*slot_tuple).t_tableOid = (*rel).rd_id;
    let mut old = chain.tuple(rel, rowid, h);
    let (change, summarizing) = indexed_columns_change(rel, &mut old, slot);
    // With `pasv.move_unindexed_updates` (on by default), a table without
    // indexes moves every updated row to a new rowid, as heap puts the new
    // version after the others: scans meet updated rows last (20 of the
    // core suite's tests print such tables unordered). Nothing points at
    // the old rowid but the version chain, so the move costs no index
    // work; the old rowid's two keys (the old version and the tombstone)
    // are removed by the next sequential scan that finds them dead to all
    // (`scan_prune`), and the memtable holding their delete markers is
    // flushed and compacted once scans step over many of them
    // (`pasv_am::engine::delete_markers`). 10 rows updated by one client,
    // autocommit: 1 804 TPS moving, 1 738 in place, heap 3 077 (20 s each,
    // one server); before the scans removed them, moving fell from 861 to
    // 231 TPS within 20 s.
    let indexed = (*(*rel).rd_rel).relhasindex;
    let unindexed = !indexed && crate::guc::MOVE_UNINDEXED_UPDATES.get();
    // A table with indexes: an UPDATE that changes no indexed column moves
    // the row within its chain, as heap's HOT update (HOT_PATH.md §37): the
    // new version is heap-only, reached from the index entries of the
    // chain's root, which gets a redirect to it; no index gets an entry.
    // Not in a table with summarizing (BRIN) indexes: heap's HOT version
    // stays on its page, so in its block range (brin_summarize_new_values
    // finds nothing new after updates), where pasv's would go to another;
    // such rows keep their rowid.
    let hot = indexed && change == IndexedChange::None && !summarizing && crate::guc::HOT_UPDATES.get();
    let moves = has_after_update_row_triggers(rel) || change == IndexedChange::Other || unindexed || hot;
    // The row's head version: a heap-only member's knows its chain's root.
    let member = chain.versions[h].header;
    let member_of = member.root();
    let mut batch = notes::batch_for(rel);
    // A moved row's subscribers find it by its old key; an updated one by
    // its new key, unless the identity is the whole row. A HOT move keeps
    // every indexed column, the identity's too: as heap's, its message
    // carries the new row only.
    notes::note_old_row(rel, &mut batch, rowid, &mut old, moves && !hot);
    // Large values go to TOAST; unchanged ones are shared with the old version.
    let tuple = super::toast::prepare(rel, slot_tuple, &mut old);
    let full_xid = super::current_full_xid();
    check_row_size(rel, (*tuple).t_len as usize);

    // A member that moves on: the root's version to write (HOT_PATH §37).
    let at_root = if moves { root_version_for(&mut batch, rel, cf, &member, chain.next_version(), "updating") } else { None };
    let mut value = Vec::with_capacity(HEADER_LEN + (*tuple).t_len as usize);
    let new_rowid = if moves {
        // The row moves: index entries for the old key values keep
        // pointing at the old rowid's tombstone (or, HOT, at the root).
        let new_rowid = match engine_client::next_rowid(cf, super::modify::row_space(rel, tuple)) {
            Ok(r) => r,
            Err(e) => e.raise(&format!("updating {}", rel_name(rel))),
        };
        super::forklen::cover_inserted(rel, new_rowid);
        stored_value(tuple, new_rowid, full_xid, cid, &mut value);
        let mut gone = RowHeader { flags: FLAG_TOMBSTONE | FLAG_MOVED, cid, xid: full_xid, moved_to: new_rowid };
        if let Some(at_root) = at_root {
            // The root's side: a redirect to the new version, or the end.
            note_at_root(&mut batch, at_root, cid, full_xid, hot.then_some(new_rowid));
        }
        if hot {
            let link = match at_root {
                Some((root, version)) => heap_only_link(root, Some(version)),
                // The row's first move within its chain: it becomes the
                // root, its tombstone the redirect.
                None => heap_only_link(rowid, Some(chain.next_version())),
            };
            mark_heap_only(&mut value, link);
            gone.flags |= FLAG_HOT;
            if member_of.is_none() {
                gone.flags |= FLAG_ROOT;
            }
            *update_indexes = pg_sys::TU_UpdateIndexes::TU_None;
        } else {
            *update_indexes = pg_sys::TU_UpdateIndexes::TU_All;
        }
        push(&mut batch, &keys::row_key(new_rowid, 0), &value);
        push(&mut batch, &keys::row_key(rowid, chain.next_version()), &gone.encode());
        new_rowid
    } else {
        stored_value(tuple, rowid, full_xid, cid, &mut value);
        if member.is_heap_only() {
            mark_heap_only(&mut value, member.moved_to);
        }
        push(&mut batch, &keys::row_key(rowid, chain.next_version()), &value);
        if change == IndexedChange::Summarized {
            *update_indexes = pg_sys::TU_UpdateIndexes::TU_Summarizing;
        }
        rowid
    };
    prune(&mut batch, rel, rowid, &chain);
    if !moves {
        write_row_change(rel, cf, rowid, &[], &batch, "updating");
    } else if unindexed || hot {
        write_row_change(rel, cf, rowid, &[new_rowid, member_of.unwrap_or(new_rowid)], &batch, "updating");
    } else {
        write(rel, cf, &batch, "updating");
    }
    tid_from_rowid(new_rowid, &mut (*slot).tts_tid);
    (*slot_tuple).t_self = (*slot).tts_tid;
    if relocked && !should_free {
        // The slot's own tuple (its stored copy was encoded above).
        super::set_xmax(slot_tuple, super::Xmax::Locked(pg_sys::LockTupleMode::LockTupleExclusive));
    }
    // Heap's HOT rule: no column of a non-summarizing index changed.
    pg_sys::pgstat_count_heap_update(rel, change != IndexedChange::Other, false);
    if tuple != slot_tuple {
        pg_sys::heap_freetuple(tuple);
    }
    if should_free {
        pg_sys::heap_freetuple(slot_tuple);
    }
    pg_sys::TM_Result::TM_Ok
}

#[pgrx::pg_guard]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C-unwind" fn tuple_lock(
    rel: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    mode: pg_sys::LockTupleMode::Type,
    wait_policy: pg_sys::LockWaitPolicy::Type,
    flags: u8,
    tmfd: *mut pg_sys::TM_FailureData,
) -> pg_sys::TM_Result::Type {
    use pg_sys::TM_Result::*;
    let cf = cf_of(rel);
    let find_last = u32::from(flags) & pg_sys::TUPLE_LOCK_FLAG_FIND_LAST_VERSION != 0;
    let lock_mode = match mode {
        pg_sys::LockTupleMode::LockTupleKeyShare | pg_sys::LockTupleMode::LockTupleShare => LockMode::Shared,
        _ => LockMode::Exclusive,
    };
    let on_conflict = match wait_policy {
        pg_sys::LockWaitPolicy::LockWaitSkip => OnConflict::Skip,
        pg_sys::LockWaitPolicy::LockWaitError => OnConflict::Error,
        _ => OnConflict::Wait,
    };
    (*tmfd).traversed = false;
    forget_locked_chain();
    forget_deleted_row();
    // Each turn follows one "moved" link; a chain of moves is finite.
    loop {
        let Some(rowid) = rowid_from_tid(tid) else { return TM_Invisible };
        let (already, locked_chain) = match lock_row(rel, cf, rowid, lock_mode, on_conflict, pg_sys::XLTW_Oper::XLTW_Lock, true) {
            LockResult::Held { already, chain } => (already, chain),
            LockResult::Busy { .. } => return TM_WouldBlock,
        };
        let chain = read_locked_chain(rel, cf, rowid, "locking a row of", locked_chain);
        let Some(h) = chain.head() else {
            return TM_Invisible;
        };
        let head = &chain.versions[h];
        if head.creator == Creator::Current && head.header.cid >= cid {
            fill_tmfd(tmfd, rowid, head.header.xid, head.header.cid);
            // Deleted, or updated after a row-locking scan saw an older
            // version (a FOR UPDATE cursor over a row this transaction then
            // updated): heap locks the version the scan returned, finds its
            // xmax to be a later command of its own and skips the row.
            // ON CONFLICT locks the newest version its dirty index lookup
            // found (no LOCK_UPDATE_IN_PROGRESS flag), which this command
            // created: heap's TM_Invisible, below.
            let scan_saw_older = u32::from(flags) & pg_sys::TUPLE_LOCK_FLAG_LOCK_UPDATE_IN_PROGRESS != 0
                && chain.visible(Reader::Snapshot(snapshot)).is_some_and(|v| v != h);
            if head.header.is_tombstone() || scan_saw_older {
                return TM_SelfModified;
            }
            // Inserted by this very command (e.g. the same key twice in one
            // INSERT ... ON CONFLICT DO UPDATE): the executor reads its xmin
            // from the slot to report it, as with heap.
            store_copy(&chain, rel, rowid, h, slot);
            return TM_Invisible;
        }
        let seen = chain.visible(Reader::Snapshot(snapshot)) == Some(h);
        // READ COMMITTED callers lock the row's latest version, as heap does
        // for a TID found through a dirty snapshot (INSERT ... ON CONFLICT);
        // REPEATABLE READ and SERIALIZABLE get TM_Updated and fail.
        let read_committed = pg_sys::XactIsoLevel < pg_sys::XACT_REPEATABLE_READ as i32;
        let usable = seen || already || head.creator == Creator::Current || find_last || read_committed;
        if head.header.is_moved() && (find_last || !usable) {
            fill_tmfd(tmfd, head.header.moved_to, head.header.xid, INVALID_COMMAND_ID);
            if !find_last {
                return TM_Updated;
            }
            tid_from_rowid(head.header.moved_to, &mut *tid);
            (*tmfd).traversed = true;
            continue;
        }
        if head.header.is_tombstone() {
            fill_tmfd(tmfd, rowid, head.header.xid, INVALID_COMMAND_ID);
            return TM_Deleted;
        }
        if !usable {
            fill_tmfd(tmfd, rowid, head.header.xid, INVALID_COMMAND_ID);
            return TM_Updated;
        }
        if !seen && !already && head.creator != Creator::Current && find_last {
            // FIND_LAST_VERSION: a later version than the snapshot's is locked.
            (*tmfd).traversed = true;
        }
        store_copy_marked(&chain, rel, rowid, h, slot, super::Xmax::Locked(mode));
        if lock_mode == LockMode::Exclusive {
            let xid = u32::from(super::top_xid());
            LOCKED_CHAIN.with(|l| *l.borrow_mut() = Some(LockedChain { cf, rowid, xid, chain }));
        }
        return TM_Ok;
    }
}

/// Store a copy of version `i` in `slot` (the slot owns it).
unsafe fn store_copy(chain: &Chain, rel: pg_sys::Relation, rowid: u64, i: usize, slot: *mut pg_sys::TupleTableSlot) {
    let mut t = chain.tuple(rel, rowid, i);
    super::store_copy_in_slot(&mut t, slot);
}

/// As [`store_copy`], the copy's `xmax` saying what this transaction did
/// to the version (see [`super::set_xmax`]).
unsafe fn store_copy_marked(
    chain: &Chain,
    rel: pg_sys::Relation,
    rowid: u64,
    i: usize,
    slot: *mut pg_sys::TupleTableSlot,
    what: super::Xmax,
) {
    let mut t = chain.tuple(rel, rowid, i);
    let copy = pg_sys::heap_copytuple(&mut t);
    super::set_xmax(copy, what);
    super::store_owned_in_slot(copy, slot);
}

/// Follow "moved" links from `tid` to the row's current rowid.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn tuple_get_latest_tid(scan: pg_sys::TableScanDesc, tid: pg_sys::ItemPointer) {
    let rel = (*scan).rs_rd;
    let cf = cf_of(rel);
    let doing = format!("following updates in {}", rel_name(rel));
    while let Some(rowid) = rowid_from_tid(tid) {
        let chain = Chain::read(cf, rowid, &doing);
        let next = chain.head().map(|h| &chain.versions[h]).and_then(|v| {
            (v.header.is_moved() && matches!(v.creator, Creator::Committed | Creator::Current)).then_some(v.header.moved_to)
        });
        match next {
            Some(r) => tid_from_rowid(r, &mut *tid),
            None => break,
        }
    }
}
