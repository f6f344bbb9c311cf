//! Fetching one row by TID: index scans (btree on a pasv table), TID scans,
//! triggers, and snapshot re-checks.

use super::stream::RowStream;
use super::visibility::Reader;
use super::{cf_of, describe_row, rowid_from_tid};
use pgrx::pg_sys;

#[repr(C)]
struct PasvIndexFetch {
    base: pg_sys::IndexFetchTableData,
    stream: RowStream,
    tuple: pg_sys::HeapTupleData,
    /// Read-ahead (MVCC snapshots only): an index scan that asks for rowids
    /// in ascending order (an index correlated with insertion order, e.g. a
    /// range over a serial key) gets a growing window of rows per round
    /// trip; `stream` holds the window `[ahead_lo, ahead_hi)` read for
    /// `ahead_snapshot`, resolved up to `ahead_next` (exclusive), with
    /// `peek` a resolved row not asked for yet.
    ahead_snapshot: pg_sys::Snapshot,
    ahead_lo: u64,
    ahead_hi: u64,
    ahead_next: u64,
    peek_valid: bool,
    peek_rowid: u64,
    peek_creator: u64,
    peek_tuple: *mut u8,
    peek_len: usize,
    peek_redirect: Option<u64>,
    /// Rows the next window reads (1 until the scan walks rowids in order,
    /// then doubling up to [`MAX_WINDOW`]), and the rowid asked for last.
    window: u64,
    last_asked: u64,
}

/// Largest read-ahead window of an index scan, in rows.
const MAX_WINDOW: u64 = pasv_am::row_cache::MAX_WINDOW_ROWS;

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn index_fetch_begin(rel: pg_sys::Relation) -> *mut pg_sys::IndexFetchTableData {
    let f = pg_sys::palloc0(std::mem::size_of::<PasvIndexFetch>()) as *mut PasvIndexFetch;
    (*f).base.rel = rel;
    std::ptr::write(&mut (*f).stream, RowStream::new(cf_of(rel)));
    (*f).stream.ssi_rel = rel;
    // Rows found dead to every snapshot are reported, so the index kills
    // its entries (heap's kill_prior_tuple): later scans skip them without
    // asking the engine.
    (*f).stream.dead_test = pg_sys::GlobalVisTestFor(rel);
    // Index entries point at chains' roots: a root that redirects leads
    // to the chain's newest member.
    (*f).stream.follow_redirects = true;
    // Roots' versions below a redirect every snapshot sees are removed
    // when the fetch ends (`scan_prune`): heap prunes a chain it reads.
    (*f).stream.prune_roots = !pg_sys::RecoveryInProgress();
    (*f).window = 1;
    f as *mut pg_sys::IndexFetchTableData
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn index_fetch_reset(data: *mut pg_sys::IndexFetchTableData) {
    let f = &mut *(data as *mut PasvIndexFetch);
    f.ahead_snapshot = std::ptr::null_mut();
    f.peek_valid = false;
    f.window = 1;
}

/// The row at `rowid` from the read-ahead window, if the window covers it:
/// `Some(Some(row))` visible, `Some(None)` not visible, `None` not covered.
unsafe fn from_window(f: &mut PasvIndexFetch, rowid: u64, snapshot: pg_sys::Snapshot) -> Option<Option<super::stream::Row>> {
    if f.ahead_snapshot != snapshot || rowid < f.ahead_lo || rowid >= f.ahead_hi || rowid < f.ahead_next && !(f.peek_valid && f.peek_rowid == rowid) {
        return None;
    }
    // Bounded by the window: every turn consumes a row of it.
    loop {
        if f.peek_valid {
            if f.peek_rowid == rowid {
                f.peek_valid = false;
                return Some(Some(super::stream::Row {
                    rowid,
                    creator: f.peek_creator,
                    tuple: f.peek_tuple,
                    tuple_len: f.peek_len,
                    root: rowid,
                    redirect: f.peek_redirect,
                }));
            }
            if f.peek_rowid > rowid {
                return Some(None);
            }
            f.peek_valid = false;
        }
        match f.stream.next_row(Reader::Snapshot(snapshot), "fetching a row by TID") {
            Some(row) => {
                f.ahead_next = row.rowid + 1;
                f.peek_valid = true;
                f.peek_rowid = row.rowid;
                f.peek_creator = row.creator;
                f.peek_tuple = row.tuple;
                f.peek_len = row.tuple_len;
                f.peek_redirect = row.redirect;
            }
            None => {
                // The window is exhausted: nothing more is visible in it.
                f.ahead_next = f.ahead_hi;
                return Some(None);
            }
        }
    }
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn index_fetch_end(data: *mut pg_sys::IndexFetchTableData) {
    let f = data as *mut PasvIndexFetch;
    super::scan_prune::send_root_versions((*f).stream.cf, "pruning chains an index scan read");
    (*f).stream.free();
    pg_sys::pfree(f as *mut _);
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn index_fetch_tuple(
    data: *mut pg_sys::IndexFetchTableData,
    tid: pg_sys::ItemPointer,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
    call_again: *mut bool,
    all_dead: *mut bool,
) -> bool {
    let f = &mut *(data as *mut PasvIndexFetch);
    // One rowid holds the whole version chain: nothing to call again for.
    *call_again = false;
    if !all_dead.is_null() {
        *all_dead = false;
    }
    let Some(rowid) = rowid_from_tid(tid) else { return false };
    let mvcc = super::visibility::is_mvcc(Reader::Snapshot(snapshot));
    if mvcc {
        // Data read ahead for this snapshot is as good as data read now: a
        // version written since belongs to a transaction the snapshot does
        // not see (commits drain their writes first) or to this command.
        let row = match from_window(f, rowid, snapshot) {
            Some(row) => row,
            None => {
                f.window = if f.ahead_snapshot == snapshot && rowid == f.last_asked.wrapping_add(1) {
                    (f.window * 2).min(MAX_WINDOW)
                } else {
                    1
                };
                f.ahead_snapshot = snapshot;
                f.ahead_lo = rowid;
                f.ahead_hi = rowid.saturating_add(f.window);
                f.ahead_next = rowid;
                f.peek_valid = false;
                f.stream.set_window(f.ahead_lo, f.ahead_hi);
                from_window(f, rowid, snapshot).flatten()
            }
        };
        f.last_asked = rowid;
        return match row {
            Some(super::stream::Row { redirect: Some(member), .. }) => fetch_member(f, tid, member, snapshot, slot),
            Some(row) => hand_out(f, &row, snapshot, slot),
            None => {
                report_dead(f, rowid, all_dead);
                false
            }
        };
    }
    f.ahead_snapshot = std::ptr::null_mut();
    f.stream.set_range(rowid, rowid + 1);
    // Before the fence: a row withdrawn from another backend's buffer after
    // this look was posted before it (`ipc::buffered_rows`).
    if let Some(inserter) = buffered_inserter(f.stream.cf, rowid, snapshot) {
        return hand_out_in_progress(f, rowid, inserter, snapshot, slot);
    }
    // A unique check (SnapshotDirty) must see what other writers posted
    // before the index entry that led here, or before they returned (a
    // tombstone under their row lock), even if the engine has not applied it
    // yet (src/ipc/HOT_PATH.md).
    if let Err(e) = crate::ipc::client::fence_others() {
        crate::error::CallError::from(e).raise("fetching a row by TID");
    }
    f.stream.cache_after_fence();
    match f.stream.next_row(Reader::Snapshot(snapshot), "fetching a row by TID") {
        Some(super::stream::Row { redirect: Some(member), .. }) => fetch_member(f, tid, member, snapshot, slot),
        Some(row) => {
            note_buffered_writer(f.stream.cf, rowid, snapshot);
            hand_out(f, &row, snapshot, slot)
        }
        None => {
            report_dead(f, rowid, all_dead);
            false
        }
    }
}

/// An index entry led to a root that redirects to `member`, the newest
/// member of its chain the snapshot sees: the row is that member's version
/// the snapshot sees, if any (a newer member's creator is the redirect's,
/// so a snapshot that sees a member's move sees the root's redirect to the
/// next member too, and one hop suffices). The slot and `tid` get the
/// member's TID, as heap's HOT search returns the chain member it found
/// (a deferred exclusion check passes it on to tell the row from others).
unsafe fn fetch_member(
    f: &mut PasvIndexFetch,
    tid: pg_sys::ItemPointer,
    member: u64,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    let Some(row) = member_row(f.base.rel, member, Reader::Snapshot(snapshot)) else { return false };
    super::tid_from_rowid(row.rowid, &mut *tid);
    note_buffered_writer(super::cf_of(f.base.rel), row.rowid, snapshot);
    hand_out(f, &row, snapshot, slot)
}

/// The version of heap-only row `member` of `rel` that `reader` sees, if
/// any, in the backend's single-row stream (valid until its next use).
/// The root and the member are two reads: a member that moved on in
/// between (a dirty snapshot sees it at once) is followed to the next, as
/// heap's HOT search walks the chain, else a unique check would miss the
/// row.
pub(super) unsafe fn member_row(rel: pg_sys::Relation, member: u64, reader: Reader) -> Option<super::stream::Row> {
    let stream = fetch_stream(rel);
    stream.follow_hot_moves = true;
    let mut at = member;
    // Each hop goes to a newer member; a chain is as long as its updates.
    for _ in 0..MAX_HOPS {
        stream.set_range(at, at + 1);
        match stream.next_row(reader, "following a chain of heap-only rows") {
            Some(super::stream::Row { redirect: Some(next), .. }) => at = next,
            found => {
                stream.follow_hot_moves = false;
                return found;
            }
        }
    }
    crate::error::raise(
        pgrx::PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        format!("pasv: a chain of heap-only rows of {} from rowid {member} is longer than {MAX_HOPS}", super::rel_name(rel)),
        "Run pasv.verify() on the table; VACUUM shortens chains.",
    )
}

/// Members [`member_row`] follows at most.
const MAX_HOPS: usize = 100_000;

/// A dirty snapshot (a unique check) found a row another transaction in
/// progress deleted or updated under its row lock with the write still in
/// that backend's buffer (`tam/rowops.rs::write_row_change`): report the
/// writer in `xmax`, as heap's dirty snapshot reports a deleter in progress,
/// so the check waits for it and looks again.
unsafe fn note_buffered_writer(cf: pasv_am::protocol::CfRef, rowid: u64, snapshot: pg_sys::Snapshot) {
    if snapshot.is_null()
        || (*snapshot).snapshot_type != pg_sys::SnapshotType::SNAPSHOT_DIRTY
        || (*snapshot).xmax != pg_sys::InvalidTransactionId
    {
        return;
    }
    let me = u32::from(pg_sys::GetTopTransactionIdIfAny());
    if let Some(writer) = crate::row_locks::writer(cf, rowid, me) {
        let writer = pg_sys::TransactionId::from(writer);
        if pg_sys::TransactionIdIsInProgress(writer) {
            (*snapshot).xmax = writer;
        }
    }
}

/// For a dirty snapshot (a unique check): the creator of row `rowid` if
/// another backend still holds the new row in its buffer and the creator is
/// in progress. Its index entry led here, so the row exists; heap's dirty
/// snapshot reports such an inserter in `xmin` whatever else it knows.
unsafe fn buffered_inserter(cf: pasv_am::protocol::CfRef, rowid: u64, snapshot: pg_sys::Snapshot) -> Option<pg_sys::TransactionId> {
    if snapshot.is_null() || (*snapshot).snapshot_type != pg_sys::SnapshotType::SNAPSHOT_DIRTY {
        return None;
    }
    let xid = pg_sys::TransactionId::from(crate::ipc::buffered_rows::buffered_creator(cf, rowid)?);
    // An aborted creator's rows are dead (its buffer went with it); a
    // committed one sent them before its commit: the engine answers.
    pg_sys::TransactionIdIsInProgress(xid).then_some(xid)
}

/// Answer a dirty fetch of a row buffered by `inserter`: found, with the
/// inserter in `xmin` for the caller to wait on. The slot holds the row's
/// TID and no values (none leave the other backend); callers that form
/// index values from it are kept away by `tam/modify.rs::writes_through`.
unsafe fn hand_out_in_progress(
    f: &PasvIndexFetch,
    rowid: u64,
    inserter: pg_sys::TransactionId,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    (*snapshot).xmin = inserter;
    (*snapshot).xmax = pg_sys::InvalidTransactionId;
    (*snapshot).speculativeToken = 0;
    pg_sys::ExecStoreAllNullTuple(slot);
    super::tid_from_rowid(rowid, &mut (*slot).tts_tid);
    (*slot).tts_tableOid = (*f.base.rel).rd_id;
    true
}

/// A fetch found no visible version: tell the index (`all_dead`) when the
/// row is dead to every snapshot, so it can mark the entry dead: the
/// stream saw it decided by such a delete, or every version's creator
/// aborted, or it has no version and never will.
unsafe fn report_dead(f: &PasvIndexFetch, rowid: u64, all_dead: *mut bool) {
    if !all_dead.is_null() {
        *all_dead = f.stream.known_dead(rowid)
            || f.stream.no_versions(rowid) && never_written_for_good(fetch_stream(f.base.rel), rowid);
    }
}

/// Whether row `rowid`, found with no version at all, will never have one:
/// no other backend holds it in its buffer, and after the fence (every
/// write posted before is applied) the engine still has none. Its index
/// entry exists, so the row was published before it and withdrawn only
/// once posted (`ipc::buffered_rows`): its creator discarded it, aborting
/// (or crashing) before sending it. Heap's entries of an aborted insert
/// are dead too. `stream` is a single-row stream of the row's table.
unsafe fn never_written_for_good(stream: &mut RowStream, rowid: u64) -> bool {
    if crate::ipc::buffered_rows::buffered_creator(stream.cf, rowid).is_some() {
        return false;
    }
    if crate::ipc::client::fence_others().is_err() {
        return false;
    }
    let ssi_rel = std::mem::replace(&mut stream.ssi_rel, std::ptr::null_mut());
    let mut dirty: pg_sys::SnapshotData = std::mem::zeroed();
    dirty.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_DIRTY;
    stream.set_range(rowid, rowid + 1);
    let none = stream.next_row(Reader::Snapshot(&mut dirty), "checking an index entry").is_none() && stream.no_versions(rowid);
    stream.ssi_rel = ssi_rel;
    none
}

/// Store a copy of `row` in `slot` (and take its SSI predicate lock).
unsafe fn hand_out(f: &mut PasvIndexFetch, row: &super::stream::Row, snapshot: pg_sys::Snapshot, slot: *mut pg_sys::TupleTableSlot) -> bool {
    describe_row(f.base.rel, row, &mut f.tuple);
    super::ssi::lock_row(f.base.rel, &mut f.tuple.t_self, snapshot, row.creator);
    // A copy the slot owns: callers may end the fetch before they read the
    // slot (unique_key_recheck does; heap's slot keeps a buffer pin), and
    // ending it frees the stream's memory.
    super::store_copy_in_slot(&mut f.tuple, slot);
    true
}

thread_local! {
    /// One stream for single-row fetches, allocated once per backend in
    /// TopMemoryContext: the executor fetches the old row of every UPDATE,
    /// and a fresh 100 kB of buffers each time was measurable. Safe to reuse:
    /// its users copy what they need out of it before returning.
    static FETCH_STREAM: std::cell::Cell<*mut RowStream> = const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// The backend's single-row fetch stream, set up for `rel`.
unsafe fn fetch_stream(rel: pg_sys::Relation) -> &'static mut RowStream {
    let mut stream = FETCH_STREAM.with(|s| s.get());
    if stream.is_null() {
        let old = pg_sys::MemoryContextSwitchTo(pg_sys::TopMemoryContext);
        stream = pg_sys::palloc(std::mem::size_of::<RowStream>()) as *mut RowStream;
        std::ptr::write(stream, RowStream::new_permanent(cf_of(rel)));
        pg_sys::MemoryContextSwitchTo(old);
        FETCH_STREAM.with(|s| s.set(stream));
    }
    let stream = &mut *stream;
    stream.cf = cf_of(rel);
    stream.ssi_rel = rel;
    // Set only by a user that an ERROR may have ended.
    stream.follow_hot_moves = false;
    stream
}

/// Resolve rowid `rowid` of `rel` for `reader` and store a copy of the
/// visible version in `slot` (the slot owns it). False if none is visible.
unsafe fn fetch_copy(rel: pg_sys::Relation, rowid: u64, reader: Reader, slot: *mut pg_sys::TupleTableSlot) -> bool {
    let stream = fetch_stream(rel);
    stream.set_range(rowid, rowid + 1);
    let found = match stream.next_row(reader, "fetching a row version") {
        Some(row) => {
            let mut t: pg_sys::HeapTupleData = std::mem::zeroed();
            describe_row(rel, &row, &mut t);
            if let Reader::Snapshot(snapshot) = reader {
                super::ssi::lock_row(rel, &mut t.t_self, snapshot, row.creator);
            }
            super::store_copy_in_slot(&mut t, slot);
            true
        }
        None => false,
    };
    found
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn tuple_fetch_row_version(
    rel: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    let Some(rowid) = rowid_from_tid(tid) else { return false };
    if super::visibility::is_any(snapshot) {
        // The re-fetch after EvalPlanQual locked the row's latest version.
        if super::rowops::locked_head_into_slot(rel, rowid, slot) {
            return true;
        }
        // DELETE's re-fetch of the row it deleted (RETURNING, triggers).
        if super::rowops::deleted_row_into_slot(rel, rowid, slot) {
            return true;
        }
        // UPDATE's re-fetch of the row its scan just returned.
        if let Some(row) = super::stream::last_row(cf_of(rel), rowid) {
            let mut t: pg_sys::HeapTupleData = std::mem::zeroed();
            describe_row(rel, &row, &mut t);
            super::store_copy_in_slot(&mut t, slot);
            return true;
        }
    }
    fetch_copy(rel, rowid, Reader::Snapshot(snapshot), slot)
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn tuple_tid_valid(scan: pg_sys::TableScanDesc, tid: pg_sys::ItemPointer) -> bool {
    rowid_from_tid(tid).is_some_and(|rowid| super::scan::tid_within_table(scan, rowid))
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn tuple_satisfies_snapshot(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    snapshot: pg_sys::Snapshot,
) -> bool {
    let Some(rowid) = rowid_from_tid(&(*slot).tts_tid) else { return false };
    let stream = fetch_stream(rel);
    stream.ssi_rel = std::ptr::null_mut();
    stream.set_range(rowid, rowid + 1);
    stream.next_row(Reader::Snapshot(snapshot), "checking a row against a snapshot").is_some()
}

/// Index entries an index asks to delete (the ones it marked dead after a
/// fetch reported `all_dead`, and for bottom-up deletion, candidates of
/// version churn): each row is read again, under a dirty snapshot, and its
/// entry is deletable if the row is dead to every snapshot. Bottom-up
/// passes check at most [`BOTTOM_UP_CHECKS`] entries (each is a round trip).
/// No horizon is returned: pasv tables are not read on standbys.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn index_delete_tuples(
    rel: pg_sys::Relation,
    delstate: *mut pg_sys::TM_IndexDeleteOp,
) -> pg_sys::TransactionId {
    let d = &mut *delstate;
    let limit = if d.bottomup { BOTTOM_UP_CHECKS.min(d.ndeltids as usize) } else { d.ndeltids.max(0) as usize };
    let stream = fetch_stream(rel);
    stream.ssi_rel = std::ptr::null_mut();
    stream.dead_test = pg_sys::GlobalVisTestFor(rel);
    let mut dirty: pg_sys::SnapshotData = std::mem::zeroed();
    dirty.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_DIRTY;
    // One fence for the whole check: each row is then read from the row
    // cache when it holds the row (the engine's bytes, as for a unique
    // check's fetch), not in a waited round trip each (TPC-C-like's
    // inserts into index pages full of dead entries: a quarter of
    // new_order's waited scans, HOT_PATH §48). Without the fence the rows
    // go to the engine, as before.
    let fenced = crate::ipc::client::fence_others().is_ok();
    for i in 0..d.ndeltids.max(0) as usize {
        let deltid = &*d.deltids.add(i);
        let status = &mut *d.status.add(deltid.id as usize);
        let Some(rowid) = rowid_from_tid(&deltid.tid) else {
            status.knowndeletable = false;
            continue;
        };
        if i >= limit {
            status.knowndeletable = false;
            continue;
        }
        stream.set_range(rowid, rowid + 1);
        if fenced {
            stream.cache_after_fence();
        }
        let visible = stream.next_row(Reader::Snapshot(&mut dirty), "checking index entries for deletion").is_some();
        status.knowndeletable =
            !visible && (stream.known_dead(rowid) || stream.no_versions(rowid) && never_written_for_good(stream, rowid));
    }
    stream.dead_test = std::ptr::null_mut();
    pg_sys::InvalidTransactionId
}

/// Entries a bottom-up deletion pass checks at most.
const BOTTOM_UP_CHECKS: usize = 32;
