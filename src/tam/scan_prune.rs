//! Pruning by sequential scans: the rows of a table without indexes that a
//! scan finds deleted (or moved away) for every snapshot are removed when
//! the scan reaches its end, as heap prunes the pages it reads. In a table
//! with indexes, only the members of heap-only chains that moved on within
//! their chain are (heap prunes its HOT chains' dead members the same way).
//!
//! Why only those: an index entry of a removed row would stay until a
//! VACUUM that no longer sees the row, so nothing would ever remove the
//! entry. Without indexes, nothing but a row's own version chain points at
//! its rowid. A chain's members have no index entries (they point at the
//! root, which is never removed here: its redirect is no tombstone of a
//! dead row), and a member dead to every snapshot is the target of no
//! redirect any snapshot follows: the move that left it wrote the root's
//! next redirect in the same batch, visible wherever the move is. Readers
//! without an MVCC snapshot that arrive at a member (a unique check's
//! dirty read of the root, then the member) hold a snapshot's xmin for
//! their statement, older than any move they have not seen, so the member
//! is not dead to all while they run.
//!
//! Why the removal is not logged (DESIGN §4 logs VACUUM's): it changes no
//! answer. A row pruned here is dead to every snapshot, nobody writes its
//! rowid again (keys are never reused), and if a crash loses the removal,
//! the row is back exactly as dead: replay re-applies only writes older
//! than the removal, tombstone included. The one thing such a row could
//! need after a crash is its deleter's CLOG entry, which VACUUM may let
//! PostgreSQL truncate once it advanced relfrozenxid without seeing the
//! row; so VACUUM of a table flushes its CF after its walk
//! (`maintenance::relation_vacuum`), persisting every removal made before
//! relfrozenxid moves. The other is the commit of the transaction that made
//! it dead, which may have been asynchronous and not yet on disk: the
//! removal waits in the memtable for the WAL inserted before it
//! (`engine_client::remove_dead_rows`).
//!
//! What the removal buys: every UPDATE of a table without indexes moves the
//! row to a new rowid (`rowops::tuple_update`, heap's row order), and every
//! UPDATE of a table with indexes that changes no indexed column moves it
//! to a new chain member; without the removal, a hot small table's scans
//! walked every version left behind until VACUUM. The members matter most
//! under prepared statements: a generic plan made while a hot table (TPC-C's
//! warehouse and district) had one page scans it sequentially for the whole
//! session, and the TPC-C-like mix right after its load fell from 480 to
//! 176 transactions a second within 30 s (session 25; HOT_PATH.md §41).
//! The removed keys are delete markers until a flush and a compaction drop
//! them (`pasv_am::engine::delete_markers`).
//!
//! Index fetches prune the roots of heap-only chains they read: a root
//! whose visible version is a redirect that every snapshot sees needs none
//! of its older versions (its original row, the redirects before), so the
//! keys of those the fetch read are removed when the fetch ends. Without
//! this a row updated N times kept N redirects and its first version until
//! VACUUM, and its cached answer (the newest versions, `pasv_am::row_cache`)
//! kept the original row beside the redirect: twice the row cache's room a
//! root (HOT_PATH.md §52). The same arguments hold: nothing reads a version
//! below one every snapshot sees (the row lock's chain prunes them the same
//! way, `rowops::Chain::dead_versions`), versions are never numbered again,
//! and a removal lost in a crash brings back versions exactly as dead.
//!
//! Calls `crate::engine_client` (posted, unlogged batches of deletes per
//! finished scan or fetch); called by `stream` (which finds the rows),
//! `scan` (which says which scans may prune) and `fetch` (whose end sends
//! the roots' versions).

use crate::engine_client;
use pasv_am::keys;
use pasv_am::protocol::{BatchBuilder, CfRef};
use pasv_am::row::RowHeader;
use pgrx::pg_sys;
use std::cell::RefCell;

/// Rows one backend remembers for removal at most (a few hundred kB): the
/// rest wait for a later scan or VACUUM.
const MAX_NOTED: usize = 16_384;

/// A row whose versions are all numbered at most this is removed key by
/// key; one with a longer history (it was updated in place before it
/// moved) is left to VACUUM, which reads every version it has.
const MAX_VERSION: u32 = 15;

thread_local! {
    /// Rows found dead to all, as (table, rowid, newest version), waiting
    /// for their scan to end.
    static NOTED: RefCell<Vec<(CfRef, u64, u32)>> = const { RefCell::new(Vec::new()) };
    /// Versions of chains' roots below a redirect every snapshot sees, as
    /// (table, rowid, version), waiting for their index fetch to end.
    static ROOT_VERSIONS: RefCell<Vec<(CfRef, u64, u32)>> = const { RefCell::new(Vec::new()) };
}

/// What a scan removes of the rows it finds dead to every snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prune {
    Nothing,
    /// Every such row (a table without indexes).
    DeadRows,
    /// Only members that moved on within their heap-only chain.
    MovedOnMembers,
}

/// What a scan of `rel` with `snapshot` (and scan `flags`) removes of the
/// dead rows it meets: a sequential scan with an MVCC snapshot, outside
/// recovery, removes dead rows of a table without indexes and moved-on
/// members of one with indexes.
///
/// # Safety
/// `rel` open; `snapshot` valid or null.
pub unsafe fn may_prune(rel: pg_sys::Relation, snapshot: pg_sys::Snapshot, flags: u32) -> Prune {
    let may = flags & pg_sys::ScanOptions::SO_TYPE_SEQSCAN != 0
        && !snapshot.is_null()
        && matches!((*snapshot).snapshot_type, pg_sys::SnapshotType::SNAPSHOT_MVCC)
        && !pg_sys::RecoveryInProgress();
    match (may, (*(*rel).rd_rel).relhasindex) {
        (false, _) => Prune::Nothing,
        (true, false) => Prune::DeadRows,
        (true, true) => Prune::MovedOnMembers,
    }
}

impl Prune {
    /// Whether a row dead to every snapshot, decided by `tombstone`, is
    /// removed: any such row, or only a chain's member that moved on within
    /// its chain (`RowHeader::is_moved_on_member`).
    pub fn removes(self, tombstone: &RowHeader) -> bool {
        match self {
            Prune::Nothing => false,
            Prune::DeadRows => true,
            Prune::MovedOnMembers => tombstone.is_moved_on_member(),
        }
    }
}

/// Remember `rowid` of `cf`, dead to every snapshot, whose newest version
/// is `newest`, for removal when its scan ends.
pub fn note(cf: CfRef, rowid: u64, newest: u32) {
    if newest > MAX_VERSION {
        return;
    }
    NOTED.with(|n| {
        let mut n = n.borrow_mut();
        if n.len() < MAX_NOTED {
            n.push((cf, rowid, newest));
        }
    });
}

/// The scan of `cf` ended: remove the rows it noted, every version key of
/// each (a delete of a key that was pruned before is harmless), in posted
/// batches that need no answer.
pub fn send(cf: CfRef, doing: &str) {
    let rows: Vec<(u64, u32)> = NOTED.with(|n| {
        let mut n = n.borrow_mut();
        let mine = n.iter().filter(|(c, _, _)| *c == cf).map(|&(_, r, v)| (r, v)).collect();
        n.retain(|(c, _, _)| *c != cf);
        mine
    });
    post_keys(cf, rows.into_iter().flat_map(|(rowid, newest)| (0..=newest).map(move |version| keys::row_key(rowid, version))), doing);
}

fn post(cf: CfRef, batch: &BatchBuilder, doing: &str) {
    if let Err(e) = engine_client::remove_dead_rows(cf, batch) {
        e.raise(doing);
    }
}

/// Remember version `version` of root `rowid` of `cf`, below a redirect
/// every snapshot sees, for removal when its index fetch ends.
pub fn note_root_version(cf: CfRef, rowid: u64, version: u32) {
    ROOT_VERSIONS.with(|n| {
        let mut n = n.borrow_mut();
        if n.len() < MAX_NOTED {
            n.push((cf, rowid, version));
        }
    });
}

/// Roots' versions a transaction must have noted before its index fetches
/// post their removal. A post wakes an engine thread: one for a point
/// select's root nearly doubled the CPU of a select-only transaction
/// (HOT_PATH.md §52), so a transaction that reads few roots (a point
/// select one, TPC-B's three at most nine) leaves them (its notes are
/// forgotten at its end), as heap prunes a page only when it is nearly
/// full; a 100-row range over a table a quarter of whose rows were updated
/// notes about 26.
const MIN_ROOT_REMOVALS: usize = 16;

/// An index fetch of `cf` ended: remove the roots' versions of `cf` noted
/// so far, in posted batches that need no answer, once there are enough of
/// them to be worth a post (fewer wait for the transaction's next fetch).
/// Only in a transaction in progress: an aborting one's notes go with it,
/// as its buffered rows do (PostgreSQL 16 does not end a cursor's executor
/// while its transaction aborts; this does not rely on it).
pub fn send_root_versions(cf: CfRef, doing: &str) {
    // SAFETY: reads the transaction state only.
    if !unsafe { pg_sys::IsTransactionState() } {
        return;
    }
    let removals: Vec<[u8; keys::ROW_KEY_LEN]> = ROOT_VERSIONS.with(|n| {
        let mut n = n.borrow_mut();
        if n.iter().filter(|(c, _, _)| *c == cf).count() < MIN_ROOT_REMOVALS {
            return Vec::new();
        }
        let mine = n.iter().filter(|(c, _, _)| *c == cf).map(|&(_, r, v)| keys::row_key(r, v)).collect();
        n.retain(|(c, _, _)| *c != cf);
        mine
    });
    post_keys(cf, removals, doing);
}

/// Post the removal of `removals`, keys of `cf`, in batches of the
/// channel's size.
fn post_keys(cf: CfRef, removals: impl IntoIterator<Item = [u8; keys::ROW_KEY_LEN]>, doing: &str) {
    let mut batch = BatchBuilder::new();
    for key in removals {
        if batch.encoded_len() + engine_client::entry_cost(&key, &[]) > engine_client::batch_capacity() {
            post(cf, &batch, doing);
            batch.clear();
        }
        if let Err(e) = batch.push(&key, &[]) {
            crate::error::raise(pgrx::PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("pasv: {doing}: {e}"), "This is a bug in pasv.");
        }
    }
    if !batch.is_empty() {
        post(cf, &batch, doing);
    }
}

/// At the end of a transaction: scans and fetches an ERROR cut short leave
/// their rows for later.
pub fn forget() {
    NOTED.with(|n| n.borrow_mut().clear());
    ROOT_VERSIONS.with(|n| n.borrow_mut().clear());
}
