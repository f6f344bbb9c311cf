//! Which version of a row a snapshot sees: PostgreSQL's rules (heapam_visibility.c)
//! applied to the creator recorded in pasv's row header, decided in the
//! backend with PostgreSQL's snapshots and CLOG — never RocksDB snapshots.
//!
//! The chain rule itself (newest version whose creator is visible decides)
//! lives in `pasv_am::row`; this module supplies the "is this creator
//! visible" predicate for each snapshot kind.

use pasv_am::row::RowHeader;
use pgrx::pg_sys;

/// How a reader decides visibility.
#[derive(Clone, Copy)]
pub enum Reader {
    /// A PostgreSQL snapshot of any kind.
    Snapshot(pg_sys::Snapshot),
    /// ANALYZE: every version whose creator did not abort.
    BuildLive,
    /// Index builds: as `BuildLive`, but a tombstone (delete or move) not yet
    /// gone for everyone — its creator does not precede this horizon, heap's
    /// OldestXmin — does not decide the row: older snapshots still see the
    /// version below it, which must stay reachable through the index.
    Build(pg_sys::TransactionId),
}

/// Whether `reader` is an MVCC snapshot (sees only committed or own versions).
///
/// # Safety
/// The snapshot pointer, if any, is valid.
pub unsafe fn is_mvcc(reader: Reader) -> bool {
    match reader {
        Reader::Snapshot(s) => {
            !s.is_null()
                && matches!(
                    (*s).snapshot_type,
                    pg_sys::SnapshotType::SNAPSHOT_MVCC | pg_sys::SnapshotType::SNAPSHOT_HISTORIC_MVCC
                )
        }
        _ => false,
    }
}

/// Whether `snapshot` is SnapshotAny.
///
/// # Safety
/// `snapshot` is null or valid.
pub unsafe fn is_any(snapshot: pg_sys::Snapshot) -> bool {
    !snapshot.is_null() && (*snapshot).snapshot_type == pg_sys::SnapshotType::SNAPSHOT_ANY
}

fn xid_of(h: &RowHeader) -> pg_sys::TransactionId {
    // The low 32 bits of a FullTransactionId are its TransactionId.
    pg_sys::TransactionId::from(h.xid as u32)
}

/// Reset what a dirty snapshot reports before resolving a new row.
///
/// # Safety
/// `reader`'s snapshot pointer, if any, must be valid.
pub unsafe fn begin_row(reader: Reader) {
    if let Reader::Snapshot(s) = reader {
        if (*s).snapshot_type == pg_sys::SnapshotType::SNAPSHOT_DIRTY {
            (*s).xmin = pg_sys::InvalidTransactionId;
            (*s).xmax = pg_sys::InvalidTransactionId;
            (*s).speculativeToken = 0;
        }
    }
}

/// The last answer of an MVCC snapshot about a creator that is not this
/// transaction: a bulk-loaded table's rows share one creator, and asking
/// PostgreSQL three times a row (each call behind pgrx's guard) was a third
/// of a sequential scan's backend time. The answer is a function of the
/// snapshot's contents and the xid alone: an xid the snapshot holds in
/// progress stays invisible to it, one it does not hold and below its xmax
/// has ended, and an xid that was not this transaction's never becomes so.
/// The key names the snapshot by address and by what changes with its
/// contents: the completion count (0 in a restored snapshot: a parallel
/// worker's), xmin, xmax and the sizes of its in-progress arrays (with the
/// same xmin and xmax, a later snapshot's in-progress xids are a subset of
/// an earlier one's, so equal sizes mean equal sets).
#[derive(Clone, Copy, PartialEq, Eq)]
struct MvccKey {
    // First: remembered answers differ in it most often, and the derived
    // comparison stops at the first field that differs.
    xid: u32,
    snapshot: usize,
    completions: u64,
    xmin: u32,
    xmax: u32,
    xcnt: u32,
    subxcnt: i32,
}

/// The last few remembered answers (see [`MvccKey`]), the most recently
/// used first; a scan keeps its own ([`creator_visible_memo`]), other
/// callers share one per backend. Several, not one: in a table after an
/// UPDATE and a DELETE, the rows of the load's creator alternate with the
/// updater's and the deleter's versions, and one remembered answer missed
/// about four rows in ten of such a scan (HOT_PATH.md §49).
#[derive(Clone, Copy)]
pub struct MvccMemo {
    answers: [(MvccKey, bool); MEMO_ANSWERS],
}

/// Answers an [`MvccMemo`] keeps.
const MEMO_ANSWERS: usize = 4;

impl MvccMemo {
    pub const EMPTY: MvccMemo = MvccMemo {
        answers: [(MvccKey { snapshot: 0, completions: 0, xmin: 0, xmax: 0, xcnt: 0, subxcnt: 0, xid: 0 }, false); MEMO_ANSWERS],
    };

    /// # Safety
    /// `snapshot` is a valid MVCC snapshot.
    unsafe fn key(snapshot: pg_sys::Snapshot, xid: pg_sys::TransactionId) -> MvccKey {
        MvccKey {
            snapshot: snapshot as usize,
            completions: (*snapshot).snapXactCompletionCount,
            xmin: u32::from((*snapshot).xmin),
            xmax: u32::from((*snapshot).xmax),
            xcnt: (*snapshot).xcnt,
            subxcnt: (*snapshot).subxcnt,
            xid: u32::from(xid),
        }
    }

    /// The most recent answer, if it is for `key`: a scan's usual case (a
    /// run of rows of one creator), answered without reordering.
    #[inline]
    fn latest(&self, key: &MvccKey) -> Option<bool> {
        let (k, visible) = &self.answers[0];
        (key.xid != 0 && k == key).then_some(*visible)
    }

    /// The remembered answer for `key`, which becomes the most recent.
    fn answer(&mut self, key: MvccKey) -> Option<bool> {
        if key.xid == 0 {
            return None;
        }
        // A run of rows of one creator asks about the most recent answer
        // again and again: nothing to reorder then.
        if let Some(visible) = self.latest(&key) {
            return Some(visible);
        }
        let i = self.answers.iter().position(|(k, _)| *k == key)?;
        let found = self.answers[i];
        self.answers.copy_within(0..i, 1);
        self.answers[0] = found;
        Some(found.1)
    }

    /// Remember `visible` for `key`, forgetting the least recent answer.
    fn remember(&mut self, key: MvccKey, visible: bool) {
        self.answers.copy_within(0..MEMO_ANSWERS - 1, 1);
        self.answers[0] = (key, visible);
    }
}

thread_local! {
    static MVCC_MEMO: std::cell::Cell<MvccMemo> = const { std::cell::Cell::new(MvccMemo::EMPTY) };
}

/// Forget the shared memo's answers (at the end of a transaction): an
/// ended transaction's outcome is remembered by its 32-bit xid alone
/// ([`creator_state`]), which names one transaction only while the xids
/// in use stay within PostgreSQL's wraparound bounds, as they do while one
/// transaction runs.
pub fn forget_answers() {
    MVCC_MEMO.with(|m| m.set(MvccMemo::EMPTY));
}

/// How the creator of a version stands now.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Creator {
    /// This transaction (or one of its subtransactions).
    Current,
    /// Another transaction still running.
    InProgress,
    Committed,
    /// Aborted, or gone in a crash.
    Aborted,
}

/// How the creator of version `h` stands now (frozen versions committed
/// long ago), with an ended creator remembered in the backend's memo
/// ([`creator_state`]): row locks, writes and VACUUM ask about every version
/// they meet.
///
/// # Safety
/// Backend inside a transaction.
pub(super) unsafe fn creator_of(h: &RowHeader) -> Creator {
    if h.is_frozen() {
        return Creator::Committed;
    }
    with_shared_memo(|memo| creator_state(xid_of(h), memo))
}

/// `f` with the backend's shared memo (callers outside a scan, which keeps
/// its own).
fn with_shared_memo<R>(f: impl FnOnce(&mut MvccMemo) -> R) -> R {
    MVCC_MEMO.with(|m| {
        let mut memo = m.get();
        let result = f(&mut memo);
        m.set(memo);
        result
    })
}

/// Where `xid` stands, by PostgreSQL's rule (this transaction, then the
/// running ones, then the commit log). A transaction that ended stays
/// committed or aborted for good, so its outcome goes into `memo` under a
/// key no snapshot has (`snapshot` 1): readers that are not MVCC snapshots
/// (ANALYZE, index builds, dirty and self snapshots) asked PostgreSQL up
/// to three times a row, each call behind pgrx's guard, and the running
/// transactions' check takes the ProcArray lock (ANALYZE of the
/// TPC-C-like order lines: 16 % of its backend time, HOT_PATH §63).
///
/// # Safety
/// Backend inside a transaction.
unsafe fn creator_state(xid: pg_sys::TransactionId, memo: &mut MvccMemo) -> Creator {
    let key = MvccKey { xid: u32::from(xid), snapshot: 1, completions: 0, xmin: 0, xmax: 0, xcnt: 0, subxcnt: 0 };
    if let Some(committed) = memo.answer(key) {
        return if committed { Creator::Committed } else { Creator::Aborted };
    }
    if pg_sys::TransactionIdIsCurrentTransactionId(xid) {
        return Creator::Current;
    }
    if pg_sys::TransactionIdIsInProgress(xid) {
        return Creator::InProgress;
    }
    let committed = pg_sys::TransactionIdDidCommit(xid);
    memo.remember(key, committed);
    if committed {
        Creator::Committed
    } else {
        Creator::Aborted
    }
}

/// Whether the creator of version `h` is visible to `reader`.
///
/// # Safety
/// Must run in a backend inside a transaction; the snapshot must be valid.
pub unsafe fn creator_visible(h: &RowHeader, reader: Reader) -> bool {
    with_shared_memo(|memo| creator_visible_memo(h, reader, memo))
}

/// As [`creator_visible`], with the caller's memo: a scan's, which asks
/// once a row (a thread-local's lookup, `__tls_get_addr` in a shared
/// library, was a few percent of a sequential scan's backend time).
///
/// The common case is inlined into the scan's per-row step: a frozen
/// version, or an MVCC snapshot asking again about the creator it asked
/// about last (a sequential scan's rows mostly share one). Out of line, the
/// call and the memo's reordering were about a tenth of a `count(*)`'s
/// backend time (perf, session 36).
///
/// # Safety
/// As [`creator_visible`].
#[inline]
pub unsafe fn creator_visible_memo(h: &RowHeader, reader: Reader, memo: &mut MvccMemo) -> bool {
    if h.is_frozen() {
        return true;
    }
    if let Reader::Snapshot(snapshot) = reader {
        if (*snapshot).snapshot_type == pg_sys::SnapshotType::SNAPSHOT_MVCC {
            if let Some(visible) = memo.latest(&MvccMemo::key(snapshot, xid_of(h))) {
                return visible;
            }
        }
    }
    creator_visible_slow(h, reader, memo)
}

/// [`creator_visible_memo`] past its inlined common case.
///
/// # Safety
/// As [`creator_visible`].
#[inline(never)]
unsafe fn creator_visible_slow(h: &RowHeader, reader: Reader, memo: &mut MvccMemo) -> bool {
    let xid = xid_of(h);
    let snapshot = match reader {
        Reader::BuildLive | Reader::Build(_) => return creator_state(xid, memo) != Creator::Aborted,
        Reader::Snapshot(s) => s,
    };
    use pg_sys::SnapshotType::*;
    match (*snapshot).snapshot_type {
        SNAPSHOT_MVCC => {
            let key = MvccMemo::key(snapshot, xid);
            if let Some(visible) = memo.answer(key) {
                return visible;
            }
            if pg_sys::TransactionIdIsCurrentTransactionId(xid) {
                // Rows inserted by this command or later are not seen by it.
                return h.cid < (*snapshot).curcid;
            }
            let visible = !pg_sys::XidInMVCCSnapshot(xid, snapshot) && pg_sys::TransactionIdDidCommit(xid);
            memo.remember(key, visible);
            visible
        }
        SNAPSHOT_SELF => matches!(creator_state(xid, memo), Creator::Current | Creator::Committed),
        // The version the executor may refer to by TID: the newest one this
        // transaction wrote or that committed (tombstones are skipped by the
        // caller). Never another transaction's uncommitted version: heap's
        // TID names the exact version the statement saw, and an UPDATE
        // fetches its old row this way (SnapshotAny) before it waits for the
        // row's lock; a version of a writer that then aborts must not become
        // the base of its new row.
        SNAPSHOT_ANY => matches!(creator_state(xid, memo), Creator::Current | Creator::Committed),
        SNAPSHOT_DIRTY => match creator_state(xid, memo) {
            Creator::InProgress => {
                // Tell the caller (e.g. a unique check) whom to wait for.
                (*snapshot).xmin = xid;
                true
            }
            state => state != Creator::Aborted,
        },
        // Visible unless its creator aborted.
        SNAPSHOT_TOAST | SNAPSHOT_NON_VACUUMABLE => creator_state(xid, memo) != Creator::Aborted,
        _ => crate::error::raise(
            pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "pasv tables cannot be read with a historic (logical decoding) snapshot",
            "pasv tables cannot be catalog tables or be read by logical decoding output plugins.",
        ),
    }
}

/// For a dirty snapshot: if `h` is a tombstone written by a transaction
/// still in progress (not this one), that transaction; the caller then keeps
/// looking for the previous version and reports the deleter in `xmax`.
///
/// # Safety
/// As [`creator_visible`].
pub unsafe fn dirty_pending_delete(h: &RowHeader, reader: Reader) -> Option<pg_sys::TransactionId> {
    let Reader::Snapshot(s) = reader else { return None };
    if (*s).snapshot_type != pg_sys::SnapshotType::SNAPSHOT_DIRTY || !h.is_tombstone() || h.is_frozen() {
        return None;
    }
    let xid = xid_of(h);
    if pg_sys::TransactionIdIsCurrentTransactionId(xid) || !pg_sys::TransactionIdIsInProgress(xid) {
        return None;
    }
    // creator_visible recorded the deleter as xmin; the older version decides xmin.
    (*s).xmin = pg_sys::InvalidTransactionId;
    Some(xid)
}

/// Index builds: whether tombstone `h` (whose creator did not abort) is gone
/// for every snapshot — frozen, or committed before `horizon` (heap's
/// HEAPTUPLE_DEAD, as opposed to RECENTLY_DEAD / DELETE_IN_PROGRESS).
///
/// # Safety
/// As [`creator_visible`].
pub unsafe fn dead_to_all(h: &RowHeader, horizon: pg_sys::TransactionId) -> bool {
    if h.is_frozen() {
        return true;
    }
    let xid = xid_of(h);
    !pg_sys::TransactionIdIsCurrentTransactionId(xid)
        && pg_sys::TransactionIdPrecedes(xid, horizon)
        && pg_sys::TransactionIdDidCommit(xid)
}

/// Whether a version's creator aborted or crashed: neither this
/// transaction, nor running, nor committed.
///
/// # Safety
/// Backend inside a transaction.
pub unsafe fn creator_aborted(h: &RowHeader) -> bool {
    if h.is_frozen() {
        return false;
    }
    let xid = xid_of(h);
    // Committed (the usual reason a version is invisible: it committed
    // after the snapshot) answers from CLOG without the ProcArray. Otherwise
    // "not running" must be established before "did not commit", or a
    // commit in between would pass for an abort (heapam_visibility.c).
    if pg_sys::TransactionIdIsCurrentTransactionId(xid) || pg_sys::TransactionIdDidCommit(xid) {
        return false;
    }
    !pg_sys::TransactionIdIsInProgress(xid) && !pg_sys::TransactionIdDidCommit(xid)
}

/// Whether a committed version (one a snapshot found visible) is older
/// than every snapshot that may still run: `test` is the relation's
/// horizon (`GlobalVisTestFor`).
///
/// # Safety
/// Backend inside a transaction; `test` from `GlobalVisTestFor`.
pub unsafe fn removable(h: &RowHeader, test: *mut pg_sys::GlobalVisState) -> bool {
    if h.is_frozen() {
        return true;
    }
    let xid = xid_of(h);
    !pg_sys::TransactionIdIsCurrentTransactionId(xid) && pg_sys::GlobalVisTestIsRemovableXid(test, xid)
}

/// Whether `reader` looks through tombstones to the newest tuple-bearing
/// version (SnapshotAny).
///
/// # Safety
/// `reader`'s snapshot pointer, if any, must be valid.
pub unsafe fn skips_tombstones(reader: Reader) -> bool {
    matches!(reader, Reader::Snapshot(s) if (*s).snapshot_type == pg_sys::SnapshotType::SNAPSHOT_ANY)
}
