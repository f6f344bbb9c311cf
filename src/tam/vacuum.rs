//! The row pass of VACUUM: decides, row by row, which versions no snapshot
//! can see any more, which rows are gone for everyone, and which versions
//! to freeze, and writes those changes back in batches.

use super::visibility::{creator_of, Creator};
use super::cf_of;
use crate::{engine_client, error};
use pasv_am::keys;
use pasv_am::protocol::BatchBuilder;
use pasv_am::row::{RowHeader, FLAG_BOOKKEEPING, FLAG_FROZEN, FLAG_HEAP_ONLY, FLAG_HOT, FLAG_MOVED, FLAG_ROOT, HEADER_LEN};
use pgrx::pg_sys;
use std::collections::{HashMap, HashSet};

pub struct VacuumReport {
    pub live_rows: u64,
    pub removed_versions: u64,
    pub frozen_versions: u64,
    /// Rows removed entirely: their index entries must go too.
    pub dead_rowids: HashSet<u64>,
    pub new_relfrozenxid: pg_sys::TransactionId,
    /// Live rows left with a single version every snapshot sees (heap's
    /// all-visible tuples; the planner's `relallvisible` is scaled by them).
    pub all_visible_rows: u64,
    /// One past the highest rowid the pass left a version of (0: none).
    pub kept_end: u64,
}

struct Version {
    version: u32,
    header: RowHeader,
    creator: Creator,
    /// The stored value, kept only when the version may be frozen.
    value: Option<Vec<u8>>,
}

struct Pass {
    rel: pg_sys::Relation,
    /// Whether rows dead to everyone go entirely (their index entries go
    /// too), or keep their newest version for a later VACUUM.
    remove_rows: bool,
    oldest_xmin: pg_sys::TransactionId,
    freeze_limit: pg_sys::TransactionId,
    batch: BatchBuilder,
    report: VacuumReport,
}

unsafe fn precedes(xid: u64, limit: pg_sys::TransactionId) -> bool {
    pg_sys::TransactionIdPrecedes(pg_sys::TransactionId::from(xid as u32), limit)
}

impl Pass {
    /// A pass writing into `rel`'s CF with these horizons.
    fn new(rel: pg_sys::Relation, oldest_xmin: pg_sys::TransactionId, freeze_limit: pg_sys::TransactionId) -> Pass {
        Pass {
            rel,
            remove_rows: true,
            oldest_xmin,
            freeze_limit,
            batch: BatchBuilder::new(),
            report: VacuumReport {
                live_rows: 0,
                removed_versions: 0,
                frozen_versions: 0,
                dead_rowids: HashSet::new(),
                new_relfrozenxid: oldest_xmin,
                all_visible_rows: 0,
                kept_end: 0,
            },
        }
    }

    unsafe fn push(&mut self, key: &[u8], value: &[u8], doing: &str) {
        if self.batch.encoded_len() + engine_client::entry_cost(key, value) > engine_client::batch_capacity() {
            self.flush(doing);
        }
        if self.batch.is_empty() {
            // Logical decoding skips it: versions frozen, removed or copied.
            crate::logical::notes::note_maintenance(&mut self.batch);
        }
        if let Err(e) = self.batch.push(key, value) {
            error::raise(pgrx::PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("pasv: {doing}: {e}"), "This is a bug in pasv.");
        }
    }

    unsafe fn flush(&mut self, doing: &str) {
        if self.batch.is_empty() {
            return;
        }
        let cf = cf_of(self.rel);
        if let Err(e) = engine_client::put_batch_now(cf, super::logs_changes(self.rel), &self.batch) {
            e.raise(doing);
        }
        self.batch.clear();
        // A memtable flush may persist any prefix of the pass, and VACUUM's
        // own changes replay only if it commits: the crash test puts one
        // batch on disk and stops there.
        use crate::crash_point::{armed, reach, Point};
        if armed(Point::VacuumBatchWritten) {
            if let Err(e) = engine_client::flush_cf(cf) {
                e.raise(doing);
            }
            reach(Point::VacuumBatchWritten);
        }
    }

    /// Decide one row (all its versions, newest first). Its changes go out
    /// oldest version first: a row's removals may straddle two batches, and
    /// every prefix of them must leave the row as its readers saw it. Newest
    /// first, a dead row's tombstone went in one batch and its older
    /// versions in the next, so in between (to every reader, and for good
    /// if a memtable flush persisted that batch and VACUUM did not commit)
    /// the deleted row was back, its last committed version visible.
    unsafe fn row(&mut self, rowid: u64, versions: &[Version], doing: &str) {
        let all_visible = versions.iter().position(|v| {
            v.creator == Creator::Committed && (v.header.is_frozen() || precedes(v.header.xid, self.oldest_xmin))
        });
        let head = versions.iter().position(|v| v.creator != Creator::Aborted);
        // Gone for everyone: no live creator at all, or a visible-to-all tombstone on top.
        let row_dead = match (head, all_visible) {
            (None, _) => true,
            (Some(h), Some(k)) => h == k && versions[k].header.is_dead_end(),
            _ => false,
        };
        // A dead row that must stay keeps its newest version, alone.
        let keep_stub = row_dead && !self.remove_rows;
        let row_dead = row_dead && self.remove_rows;
        for (i, v) in versions.iter().enumerate().rev() {
            if keep_stub && i > 0 {
                self.push(&keys::row_key(rowid, v.version), &[], doing);
                self.report.removed_versions += 1;
                continue;
            }
            // The newest version of a live row stays even if its creator
            // aborted: its number must not be written again (DESIGN §3, keys
            // are never reused; replay would order our removal after the
            // later write). The next UPDATE or DELETE prunes it.
            let dead = row_dead || (v.creator == Creator::Aborted && i > 0) || all_visible.is_some_and(|k| i > k);
            let key = keys::row_key(rowid, v.version);
            if dead {
                self.push(&key, &[], doing);
                self.report.removed_versions += 1;
                continue;
            }
            let xid = v.header.xid;
            if v.creator == Creator::Committed && !v.header.is_frozen() && precedes(xid, self.freeze_limit) {
                if let Some(value) = &v.value {
                    let mut frozen = value.clone();
                    let mut header = v.header;
                    header.flags |= FLAG_FROZEN;
                    frozen[..HEADER_LEN].copy_from_slice(&header.encode());
                    self.push(&key, &frozen, doing);
                    self.report.frozen_versions += 1;
                    continue;
                }
            }
            if !v.header.is_frozen() && precedes(xid, self.report.new_relfrozenxid) {
                self.report.new_relfrozenxid = pg_sys::TransactionId::from(xid as u32);
            }
        }
        if row_dead {
            self.report.dead_rowids.insert(rowid);
            return;
        }
        self.report.kept_end = self.report.kept_end.max(rowid + 1);
        if head.is_some_and(|h| !versions[h].header.is_tombstone()) {
            self.report.live_rows += 1;
            if all_visible == Some(0) {
                self.report.all_visible_rows += 1;
            }
        }
    }
}

/// Walk every version of `rel`'s CF and apply VACUUM's decisions; rows dead
/// to everyone are removed only if `remove_rows` (else their newest version
/// stays, so their index entries stay valid).
///
/// # Safety
/// Backend inside VACUUM's transaction; `rel` open with VACUUM's lock.
pub unsafe fn vacuum_rows(
    rel: pg_sys::Relation,
    cutoffs: &pg_sys::VacuumCutoffs,
    remove_rows: bool,
    doing: &str,
) -> VacuumReport {
    let mut pass = Pass::new(rel, cutoffs.OldestXmin, cutoffs.FreezeLimit);
    pass.remove_rows = remove_rows;
    let (start, end) = keys::row_range(0, keys::MAX_ROWID + 1);
    let mut current: Option<u64> = None;
    let mut versions: Vec<Version> = Vec::new();
    let mut seen = 0u64;
    super::versions::walk_ahead(cf_of(rel), start, end, doing, |v| {
        seen += 1;
        if seen % 4096 == 0 {
            pg_sys::vacuum_delay_point();
        }
        if current != Some(v.rowid) {
            if let Some(r) = current {
                pass.row(r, &versions, doing);
            }
            versions.clear();
            current = Some(v.rowid);
        }
        let creator = creator_of(&v.header);
        let freezable = creator == Creator::Committed && !v.header.is_frozen() && precedes(v.header.xid, pass.freeze_limit);
        versions.push(Version {
            version: v.version,
            header: v.header,
            creator,
            value: freezable.then(|| v.value.to_vec()),
        });
        true
    });
    if let Some(r) = current {
        pass.row(r, &versions, doing);
    }
    pass.flush(doing);
    pass.report
}

/// What CLUSTER / VACUUM FULL report back.
pub struct CopyReport {
    pub live_rows: f64,
    pub removed_versions: f64,
    pub kept_dead_versions: f64,
}

/// CLUSTER / VACUUM FULL: copy every version some snapshot may still need
/// from `old` into `new`, freezing committed versions older than
/// `freeze_limit`. Rows keep their rowids (VACUUM FULL) or take the new ones
/// `renumber` gives them (CLUSTER: index order), "moved" links included. Large values are saved again through the toaster: the
/// TOAST tables are swapped by content afterwards, so the new one must hold
/// them (heap's rewrite does the same).
///
/// # Safety
/// Backend inside CLUSTER's transaction, both relations open and locked.
pub unsafe fn copy_rows(
    old: pg_sys::Relation,
    new: pg_sys::Relation,
    oldest_xmin: pg_sys::TransactionId,
    freeze_limit: pg_sys::TransactionId,
    renumber: Option<&HashMap<u64, u64>>,
    doing: &str,
) -> CopyReport {
    let cf_old = cf_of(old);
    let mut out = Pass::new(new, oldest_xmin, freeze_limit);
    let mut kept_dead = 0u64;
    let (start, end) = keys::row_range(0, keys::MAX_ROWID + 1);
    let mut rows: Vec<(u64, u32, RowHeader, Creator, Vec<u8>)> = Vec::new();
    let flush_row = |out: &mut Pass, rows: &mut Vec<(u64, u32, RowHeader, Creator, Vec<u8>)>, kept_dead: &mut u64| {
        let Some(&(rowid, ..)) = rows.first() else { return };
        let all_visible = rows.iter().position(|(_, _, h, c, _)| {
            *c == Creator::Committed && (h.is_frozen() || precedes(h.xid, oldest_xmin))
        });
        let head = rows.iter().position(|(_, _, _, c, _)| *c != Creator::Aborted);
        let row_dead = match (head, all_visible) {
            (None, _) => true,
            // The copy's rebuilt indexes hold every row under its own TID
            // (no chains: see below), so a root whose redirect every
            // snapshot sees is as gone as a moved row.
            (Some(h), Some(k)) => h == k && rows[k].2.is_tombstone(),
            _ => false,
        };
        // Oldest version first, as `Pass::row`: a row split over two
        // batches has its version 0 in the first, which the engine caches
        // as a new row, and its newer versions join that answer after.
        for (i, (_, version, header, creator, value)) in rows.iter().enumerate().rev() {
            if row_dead || *creator == Creator::Aborted || all_visible.is_some_and(|k| i > k) {
                out.report.removed_versions += 1;
                continue;
            }
            if head.is_some_and(|h| i > h) {
                *kept_dead += 1;
            }
            let mut header = *header;
            // Heap-only chains end with the copy: members become rows of
            // their own, which the rebuilt indexes hold under their own
            // TIDs, and roots' redirects plain moves.
            if header.is_heap_only() {
                header.moved_to = 0;
            }
            header.flags &= !(FLAG_HEAP_ONLY | FLAG_ROOT | FLAG_HOT | FLAG_BOOKKEEPING);
            if *creator == Creator::Committed && !header.is_frozen() && precedes(header.xid, freeze_limit) {
                header.flags |= FLAG_FROZEN;
            }
            let mut stored = header.encode().to_vec();
            if !header.is_tombstone() && value.len() > HEADER_LEN {
                let mut t: pg_sys::HeapTupleData = std::mem::zeroed();
                let mut tuple_bytes = value[HEADER_LEN..].to_vec();
                t.t_len = tuple_bytes.len() as u32;
                t.t_data = tuple_bytes.as_mut_ptr() as *mut pg_sys::HeapTupleHeaderData;
                t.t_tableOid = (*new).rd_id;
                super::tid_from_rowid(rowid, &mut t.t_self);
                let reformed = reform(old, new, &mut t);
                let saved = super::toast::resave(new, reformed);
                stored.extend_from_slice(std::slice::from_raw_parts((*saved).t_data as *const u8, (*saved).t_len as usize));
                if saved != reformed {
                    pg_sys::heap_freetuple(saved);
                }
                pg_sys::heap_freetuple(reformed);
            }
            if !header.is_frozen() && precedes(header.xid, out.report.new_relfrozenxid) {
                out.report.new_relfrozenxid = pg_sys::TransactionId::from(header.xid as u32);
            }
            let target = renumber.map_or(rowid, |m| m.get(&rowid).copied().unwrap_or(rowid));
            if header.is_moved() {
                if let Some(m) = renumber {
                    match m.get(&header.moved_to) {
                        Some(&to) => header.moved_to = to,
                        // The row it moved to is gone for everyone: a plain delete.
                        None => {
                            header.flags &= !FLAG_MOVED;
                            header.moved_to = 0;
                        }
                    }
                    stored[..HEADER_LEN].copy_from_slice(&header.encode());
                }
            }
            out.push(&keys::row_key(target, *version), &stored, doing);
        }
        if !row_dead && head.is_some_and(|h| !rows[h].2.is_tombstone()) {
            out.report.live_rows += 1;
        }
        rows.clear();
    };
    super::versions::walk_ahead(cf_old, start, end, doing, |v| {
        if rows.first().is_some_and(|r| r.0 != v.rowid) {
            pgrx::check_for_interrupts!();
            flush_row(&mut out, &mut rows, &mut kept_dead);
        }
        rows.push((v.rowid, v.version, v.header, creator_of(&v.header), v.value.to_vec()));
        true
    });
    flush_row(&mut out, &mut rows, &mut kept_dead);
    out.flush(doing);
    crate::xact::mark_written();
    CopyReport {
        live_rows: out.report.live_rows as f64,
        removed_versions: out.report.removed_versions as f64,
        kept_dead_versions: kept_dead as f64,
    }
}

/// `tuple` of `old` formed again for `new`'s descriptor, its header's
/// transaction fields kept (heap's reform_and_rewrite_tuple): attributes
/// added since it was stored take their missing values (the rewrite ends
/// with the catalog's missing values cleared, RelationClearMissing) and
/// dropped ones become NULL. Palloc'd; the caller frees it.
///
/// # Safety
/// Both relations open; `tuple` a valid heap tuple of `old`.
unsafe fn reform(old: pg_sys::Relation, new: pg_sys::Relation, tuple: &mut pg_sys::HeapTupleData) -> pg_sys::HeapTuple {
    let old_desc = (*old).rd_att;
    let new_desc = (*new).rd_att;
    let natts = (*old_desc).natts.max((*new_desc).natts).max(1) as usize;
    let values = pg_sys::palloc0(natts * std::mem::size_of::<pg_sys::Datum>()) as *mut pg_sys::Datum;
    let isnull = pg_sys::palloc0(natts * std::mem::size_of::<bool>()) as *mut bool;
    pg_sys::heap_deform_tuple(tuple, old_desc, values, isnull);
    for i in 0..(*new_desc).natts as usize {
        if (*(*new_desc).attrs.as_ptr().add(i)).attisdropped {
            *isnull.add(i) = true;
        }
    }
    let formed = pg_sys::heap_form_tuple(new_desc, values, isnull);
    let (from, to) = (tuple.t_data, (*formed).t_data);
    (*to).t_choice = (*from).t_choice;
    (*to).t_ctid = (*from).t_ctid;
    (*to).t_infomask = ((*to).t_infomask & !(pg_sys::HEAP_XACT_MASK as u16)) | ((*from).t_infomask & pg_sys::HEAP_XACT_MASK as u16);
    (*to).t_infomask2 = ((*to).t_infomask2 & !(pg_sys::HEAP2_XACT_MASK as u16)) | ((*from).t_infomask2 & pg_sys::HEAP2_XACT_MASK as u16);
    (*formed).t_self = tuple.t_self;
    (*formed).t_tableOid = tuple.t_tableOid;
    pg_sys::pfree(values as *mut _);
    pg_sys::pfree(isnull as *mut _);
    formed
}

/// CLUSTER's new rowids when PostgreSQL chose a sort over an index scan
/// (`use_sort`, as heap's copy for CLUSTER does): each row's newest
/// version not written by an aborted transaction, unless it is a
/// tombstone, goes through PostgreSQL's CLUSTER tuplesort in rowid order;
/// rows take their places in the sorted order (so rows with equal keys,
/// which the sort leaves in no defined order, come out as heap's do for
/// the same rows in the same physical order), then the rest in rowid
/// order (remembered from the same walk). Tuples are copied into aligned
/// memory before the sort reads them.
///
/// # Safety
/// Backend inside CLUSTER's transaction; both relations open and locked.
pub unsafe fn sort_order(rel: pg_sys::Relation, index: pg_sys::Relation, doing: &str) -> HashMap<u64, u64> {
    let sort = pg_sys::tuplesort_begin_cluster((*rel).rd_att, index, pg_sys::maintenance_work_mem, std::ptr::null_mut(), 0);
    let (start, end) = keys::row_range(0, keys::MAX_ROWID + 1);
    // Every rowid, ascending, for the rows the sort does not place.
    let mut rowids: Vec<u64> = Vec::new();
    let mut last_row = None;
    super::versions::walk_ahead(cf_of(rel), start, end, doing, |v| {
        if rowids.last() != Some(&v.rowid) {
            rowids.push(v.rowid);
        }
        // Versions come newest first: a row is decided by its first
        // version whose creator did not abort.
        if last_row == Some(v.rowid) || creator_of(&v.header) == Creator::Aborted {
            return true;
        }
        last_row = Some(v.rowid);
        if v.header.is_tombstone() || v.value.len() <= HEADER_LEN {
            return true;
        }
        let len = v.value.len() - HEADER_LEN;
        let data = pg_sys::palloc(len) as *mut u8;
        std::ptr::copy_nonoverlapping(v.value[HEADER_LEN..].as_ptr(), data, len);
        let mut tuple = pg_sys::HeapTupleData {
            t_len: len as u32,
            t_tableOid: (*rel).rd_id,
            t_data: data as pg_sys::HeapTupleHeader,
            ..Default::default()
        };
        super::tid_from_rowid(v.rowid, &mut tuple.t_self);
        pg_sys::tuplesort_putheaptuple(sort, &mut tuple);
        pg_sys::pfree(data as *mut _);
        true
    });
    pg_sys::tuplesort_performsort(sort);
    let mut order: HashMap<u64, u64> = HashMap::new();
    // Bounded by the rows put in: each call returns the next or null.
    loop {
        let tuple = pg_sys::tuplesort_getheaptuple(sort, true);
        if tuple.is_null() {
            break;
        }
        if let Some(rowid) = super::rowid_from_tid(&mut (*tuple).t_self) {
            let next = order.len() as u64;
            order.entry(rowid).or_insert(next);
        }
    }
    pg_sys::tuplesort_end(sort);
    for rowid in rowids {
        let next = order.len() as u64;
        order.entry(rowid).or_insert(next);
    }
    order
}

/// CLUSTER's new rowids: rows in the order of `index` (read with SnapshotAny,
/// first entry of a row wins), then rows no index entry names, in rowid order.
///
/// # Safety
/// Backend inside CLUSTER's transaction; both relations open and locked.
pub unsafe fn index_order(rel: pg_sys::Relation, index: pg_sys::Relation, doing: &str) -> HashMap<u64, u64> {
    let mut order: HashMap<u64, u64> = HashMap::new();
    let scan = pg_sys::index_beginscan(rel, index, &raw mut pg_sys::SnapshotAnyData, 0, 0);
    pg_sys::index_rescan(scan, std::ptr::null_mut(), 0, std::ptr::null_mut(), 0);
    // Bounded by the index: each call returns the next entry or null.
    loop {
        let tid = pg_sys::index_getnext_tid(scan, pg_sys::ScanDirection::ForwardScanDirection);
        if tid.is_null() {
            break;
        }
        if let Some(rowid) = super::rowid_from_tid(tid) {
            let next = order.len() as u64;
            order.entry(rowid).or_insert(next);
        }
    }
    pg_sys::index_endscan(scan);
    let (start, end) = keys::row_range(0, keys::MAX_ROWID + 1);
    super::versions::walk_ahead(cf_of(rel), start, end, doing, |v| {
        let next = order.len() as u64;
        order.entry(v.rowid).or_insert(next);
        true
    });
    order
}
