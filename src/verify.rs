//! `pasv.verify(regclass)` (over `pasv.verify_raw(oid)`): checks one pasv table and reports each problem
//! as a row `(rowid, version, problem)`; a healthy table gives no rows. Never
//! fails on bad data: a version that does not decode is a problem row.
//!
//! What it checks (DESIGN §3, §5, §9):
//! * every stored version decodes;
//! * no unfrozen version's creator lies in the future (at or past the next
//!   transaction id) or before `relfrozenxid` (its CLOG may be gone);
//! * chains are well-formed: no committed version above a committed,
//!   non-moved deletion of the same row;
//! * a committed "moved" tombstone that a snapshot may still follow points
//!   at a rowid that has versions (once the move, or a newer version of its
//!   row, committed before every snapshot that may still run, sequential
//!   scans may have removed the heap-only member it names);
//! * no row, and no entry of the table's btree indexes, names a rowid at or
//!   above the next rowid the engine hands out (the durable floor): such a
//!   rowid would be handed out again and mean another row;
//! * the table's flush flags are not ahead of the WAL.

use crate::engine_client;
use crate::tam::versions;
use pasv_am::keys::{self, MAX_ROWID};
use pasv_am::protocol::CfRef;
use pasv_am::row::RowHeader;
use pgrx::prelude::*;
use std::collections::{BTreeSet, HashSet};

type Problem = (Option<i64>, Option<i32>, String);

#[pg_extern]
fn verify_raw(
    rel: pg_sys::Oid,
) -> TableIterator<'static, (name!(rowid, Option<i64>), name!(version, Option<i32>), name!(problem, String))> {
    // SAFETY: the relation is opened and closed here with AccessShareLock.
    let problems = unsafe {
        let r = crate::sql_api::open_pasv_table(rel, "pasv.verify()");
        let problems = check(r);
        pg_sys::relation_close(r, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        problems
    };
    TableIterator::new(problems)
}

/// # Safety
/// `rel` is an open pasv relation.
unsafe fn check(rel: pg_sys::Relation) -> Vec<Problem> {
    let cf = crate::tam::cf_of(rel);
    let doing = format!("verifying {}", crate::tam::rel_name(rel));
    let mut problems: Vec<Problem> = Vec::new();
    let next_rowid = match engine_client::cf_info(cf) {
        Ok(info) => info.next_rowid,
        Err(e) => e.raise(&doing),
    };
    let next_xid = pg_sys::ReadNextFullTransactionId().value;
    let frozen_xid = (*(*rel).rd_rel).relfrozenxid;
    let horizon = pg_sys::GlobalVisTestFor(rel);

    let mut rowids: HashSet<u64> = HashSet::new();
    let mut moved: Vec<(u64, u32, u64)> = Vec::new();
    // Per row, newest first: whether a committed version was seen above.
    let mut current: Option<u64> = None;
    let mut committed_above = false;
    // Per row, newest first: whether a version seen above committed before
    // every snapshot that may still run.
    let mut settled_above = false;
    let (start, end) = keys::row_range(0, MAX_ROWID + 1);
    versions::walk_raw(cf, start, end, 0, &doing, |rowid, version, value| {
        let at = (Some(rowid as i64), Some(version as i32));
        if current != Some(rowid) {
            current = Some(rowid);
            committed_above = false;
            settled_above = false;
            rowids.insert(rowid);
            if rowid >= next_rowid {
                problems.push((at.0, None, format!("rowid at or above the next rowid to hand out ({next_rowid})")));
            }
        }
        let header = match RowHeader::decode(value) {
            Ok((h, _)) => h,
            Err(e) => {
                problems.push((at.0, at.1, format!("bad row header: {e}")));
                return true;
            }
        };
        if !header.is_frozen() {
            let xid = pg_sys::TransactionId::from(header.xid as u32);
            if header.xid >= next_xid {
                problems.push((at.0, at.1, format!("creator {} is at or past the next transaction id {next_xid}", header.xid)));
                return true;
            }
            if pg_sys::TransactionIdIsNormal(xid) && pg_sys::TransactionIdPrecedes(xid, frozen_xid) {
                problems.push((at.0, at.1, format!("unfrozen version of transaction {} older than relfrozenxid {}", header.xid, frozen_xid.into_inner())));
                return true;
            }
        }
        let committed = crate::tam::creator_committed(&header);
        if committed && header.is_tombstone() && !header.is_moved() && committed_above {
            problems.push((at.0, at.1, "a committed version above this committed deletion".into()));
        }
        // Sequential scans remove heap-only members dead to every snapshot
        // (`tam::scan_prune`). A move must lead somewhere while some
        // snapshot may still follow it: unless the move itself (a member's
        // tombstone) or a newer one of its row (a root's later redirect)
        // committed before every snapshot that may still run.
        let settled = committed && crate::tam::older_than_all_snapshots(&header, horizon);
        if committed && header.is_moved() && !settled && !settled_above {
            moved.push((rowid, version, header.moved_to));
        }
        committed_above |= committed;
        settled_above |= settled;
        true
    });
    for (rowid, version, target) in moved {
        if !rowids.contains(&target) {
            problems.push((Some(rowid as i64), Some(version as i32), format!("moved to rowid {target}, which has no versions")));
        }
    }
    problems.extend(index_entries_past(rel, next_rowid));
    problems.extend(flags_ahead_of_wal(cf, &doing));
    problems
}

/// Entries of `rel`'s indexes (those that return TIDs one by one) naming a
/// rowid at or above `next_rowid`.
///
/// # Safety
/// `rel` is an open pasv relation.
unsafe fn index_entries_past(rel: pg_sys::Relation, next_rowid: u64) -> Vec<Problem> {
    let mut problems = Vec::new();
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    let mut nindexes = 0;
    let mut indexes: *mut pg_sys::Relation = std::ptr::null_mut();
    pg_sys::vac_open_indexes(rel, lock, &mut nindexes, &mut indexes);
    for i in 0..nindexes.max(0) as usize {
        let index = *indexes.add(i);
        if (*(*index).rd_indam).amgettuple.is_none() {
            continue;
        }
        let name = crate::tam::rel_name(index);
        let scan = pg_sys::index_beginscan(rel, index, &raw mut pg_sys::SnapshotAnyData, 0, 0);
        pg_sys::index_rescan(scan, std::ptr::null_mut(), 0, std::ptr::null_mut(), 0);
        let mut past: BTreeSet<u64> = BTreeSet::new();
        loop {
            let tid = pg_sys::index_getnext_tid(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tid.is_null() {
                break;
            }
            match crate::tam::rowid_from_tid(tid) {
                Some(rowid) if rowid < next_rowid => {}
                Some(rowid) => {
                    past.insert(rowid);
                }
                None => problems.push((None, None, format!("index {name} has an entry whose TID names no rowid"))),
            }
        }
        pg_sys::index_endscan(scan);
        for rowid in past {
            problems.push((Some(rowid as i64), None, format!("index {name} points at a rowid at or above the next rowid to hand out ({next_rowid})")));
        }
    }
    pg_sys::vac_close_indexes(nindexes, indexes, lock);
    problems
}

/// The table's flags must not claim commits the WAL does not have.
fn flags_ahead_of_wal(cf: CfRef, doing: &str) -> Vec<Problem> {
    let rows = match engine_client::persistence(cf.db) {
        Ok(rows) => rows,
        Err(e) => e.raise(doing),
    };
    let wal_end = crate::wal::inserted_end();
    rows.iter()
        .filter(|r| r.rel == cf.rel)
        .flat_map(|r| [("persisted", r.persisted_lsn), ("newest", r.latest_flag_lsn)])
        .filter(|&(_, lsn)| lsn > wal_end)
        .map(|(which, lsn)| {
            (None, None, format!("{which} flush flag at {} is ahead of the WAL end {}", crate::fmt_lsn(lsn), crate::fmt_lsn(wal_end)))
        })
        .collect()
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION pasv.verify(rel regclass)
  RETURNS TABLE (rowid bigint, version integer, problem text)
  LANGUAGE sql STRICT AS 'SELECT * FROM pasv.verify_raw($1::oid)';
COMMENT ON FUNCTION pasv.verify(regclass) IS 'Problems found in a pasv table (no rows: none)';
"#,
    name = "verify_function",
    requires = [verify_raw]
);
