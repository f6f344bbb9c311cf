//! Two-phase commit of transactions that wrote or locked rows of pasv
//! tables: `PREPARE TRANSACTION`, `COMMIT PREPARED`, `ROLLBACK PREPARED`.
//!
//! A prepared transaction outlives its session and a restart of the server,
//! clean or crash. What pasv keeps of it:
//! * **Its row changes** are applied in RocksDB before PREPARE returns and
//!   made durable then (`flushflag::before_prepare`): its change messages
//!   are decoded only once it commits, so replay could not bring back what
//!   a crash took from the memtables while it was prepared. Its commit
//!   writes no flush flags (its tables' persistence points only lag).
//! * **Its row locks** stay in the shared lock table under its xid; other
//!   transactions wait on that xid through PostgreSQL's lock manager, which
//!   keeps it for the prepared transaction. They are also written, with the
//!   column-family drops its commit or rollback must run, to a state file
//!   (`$PGDATA/pasv_prepared/XID`), synced before PostgreSQL writes the
//!   PREPARE record. When the engine starts it takes the locks of files
//!   whose transaction is still prepared again, and removes the others.
//! * **Its end** (`COMMIT` / `ROLLBACK PREPARED`, in any session of its
//!   database): after PostgreSQL finished it, the utility hook releases its
//!   locks, runs the drops due and removes the file.
//!
//! Calls: `row_locks` (the locks), `flushflag` and `engine_client` (drain,
//! durability), `xact` (the drops). Called by `xact` (the PREPARE events),
//! `utility_hook` (the statements) and the engine worker (restore).
//!
//! Invariant: a transaction with a state file either is prepared, or ended
//! (its file is removed at its end or at the next engine start); a prepared
//! transaction that locked rows has a state file.

use crate::error;
use crate::xact::{Action, When};
use pasv_am::protocol::{CfRef, LockMode};
use pgrx::{pg_sys, PgSqlErrorCode};
use std::cell::{Cell, RefCell};
use std::io::Write;
use std::path::PathBuf;

/// What a prepared transaction leaves for its end and for a restart.
#[derive(Debug, Default)]
struct PreparedState {
    xid: u32,
    db: u32,
    gid: String,
    locks: Vec<(CfRef, u64, LockMode)>,
    actions: Vec<(Action, When)>,
}

thread_local! {
    /// The GID of the PREPARE TRANSACTION this backend is running.
    static PREPARING_GID: RefCell<Option<String>> = const { RefCell::new(None) };
    /// The xid whose state file this backend wrote before the PREPARE
    /// record (0: none): removed if the PREPARE fails after all.
    static FILE_WRITTEN: Cell<u32> = const { Cell::new(0) };
    /// The prepared transaction a COMMIT / ROLLBACK PREPARED of this backend
    /// is finishing, read before PostgreSQL finishes it.
    static FINISHING: RefCell<Option<(PreparedState, bool)>> = const { RefCell::new(None) };
}

const HEADER: &str = "pasv prepared transaction 1";

fn dir() -> PathBuf {
    // SAFETY: DataDir is set in every backend and worker.
    let data = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) };
    PathBuf::from(data.to_string_lossy().into_owned()).join("pasv_prepared")
}

fn file_of(xid: u32) -> PathBuf {
    dir().join(xid.to_string())
}

// ---------------------------------------------------------------------------
// The state file: one line per fact, text so that it can be read by eye.
// ---------------------------------------------------------------------------

fn encode(state: &PreparedState) -> String {
    let mut out = format!("{HEADER}\nxid {}\ndb {}\ngid {}\n", state.xid, state.db, hex(state.gid.as_bytes()));
    for (cf, rowid, mode) in &state.locks {
        let mode = if *mode == LockMode::Exclusive { 'X' } else { 'S' };
        out += &format!("lock {} {} {rowid} {mode}\n", cf.db, cf.rel);
    }
    for (action, when) in &state.actions {
        let when = if *when == When::Commit { "commit" } else { "abort" };
        out += &match action {
            Action::DropCf(cf) => format!("{when} drop-cf {} {}\n", cf.db, cf.rel),
            Action::DropDatabase(db) => format!("{when} drop-database {db}\n"),
            Action::ResumeDatabase(db) => format!("{when} resume-database {db}\n"),
        };
    }
    out
}

fn decode(text: &str) -> Option<PreparedState> {
    let mut lines = text.lines();
    if lines.next()? != HEADER {
        return None;
    }
    let mut state = PreparedState::default();
    for line in lines {
        let words: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| words.get(i)?.parse::<u64>().ok();
        let num32 = |i: usize| num(i).and_then(|n| u32::try_from(n).ok());
        match words.as_slice() {
            ["xid", _] => state.xid = num32(1)?,
            ["db", _] => state.db = num32(1)?,
            ["gid", g] => state.gid = String::from_utf8(unhex(g)?).ok()?,
            ["lock", _, _, _, mode] => {
                let mode = match *mode {
                    "X" => LockMode::Exclusive,
                    "S" => LockMode::Shared,
                    _ => return None,
                };
                state.locks.push((CfRef { db: num32(1)?, rel: num32(2)? }, num(3)?, mode));
            }
            [when @ ("commit" | "abort"), what, ..] => {
                let when = if *when == "commit" { When::Commit } else { When::Abort };
                let action = match *what {
                    "drop-cf" => Action::DropCf(CfRef { db: num32(2)?, rel: num32(3)? }),
                    "drop-database" => Action::DropDatabase(num32(2)?),
                    "resume-database" => Action::ResumeDatabase(num32(2)?),
                    _ => return None,
                };
                state.actions.push((action, when));
            }
            _ => return None,
        }
    }
    (state.xid != 0).then_some(state)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// Write `state`'s file durably: a temporary file synced, renamed, and the
/// directory synced.
fn write_file(state: &PreparedState) -> std::io::Result<()> {
    let dir = dir();
    std::fs::create_dir_all(&dir)?;
    let path = file_of(state.xid);
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(encode(state).as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(&dir)?.sync_all()
}

/// Every file in the state directory, with its state: `None` for a
/// temporary file (a PREPARE cut off before its rename, hence before its
/// record) or one that does not decode.
fn state_files() -> Vec<(PathBuf, Option<PreparedState>)> {
    let Ok(entries) = std::fs::read_dir(dir()) else { return Vec::new() };
    entries
        .flatten()
        .map(|e| {
            let path = e.path();
            let state = path.extension().is_none().then(|| std::fs::read_to_string(&path).ok()).flatten();
            (path, state.as_deref().and_then(decode))
        })
        .collect()
}

fn remove_file(xid: u32) {
    if let Err(e) = std::fs::remove_file(file_of(xid)) {
        if e.kind() != std::io::ErrorKind::NotFound {
            pgrx::log!("pasv: removing the state file of prepared transaction {xid}: {e}");
        }
    }
}

// ---------------------------------------------------------------------------
// PREPARE TRANSACTION
// ---------------------------------------------------------------------------

/// The utility hook saw `PREPARE TRANSACTION gid`.
pub fn note_prepare_statement(gid: &str) {
    PREPARING_GID.with(|g| *g.borrow_mut() = Some(gid.to_owned()));
}

/// Pre-prepare (still inside the transaction: an ERROR aborts it): send and
/// apply the buffered rows, make the transaction's writes durable, and
/// write its state file when it holds locks or has drops to run at its end.
/// `actions` are the drops scheduled by its DDL.
pub fn before_prepare(actions: Vec<(Action, When)>) {
    let Some(locks) = crate::row_locks::held_for_prepare() else {
        error::not_supported(
            "PREPARE TRANSACTION after locking more rows than the shared row-lock table holds",
            "Lock fewer rows in the transaction, or commit it directly instead of preparing it.",
        );
    };
    if let Err(e) = crate::engine_client::drain() {
        e.raise("writing buffered rows at PREPARE TRANSACTION");
    }
    if let Err(e) = crate::flushflag::before_prepare() {
        e.raise("making pasv changes durable at PREPARE TRANSACTION");
    }
    if locks.is_empty() && actions.is_empty() {
        return;
    }
    // SAFETY: plain reads of the transaction state and a backend global.
    let (xid, db) = unsafe { (u32::from(pg_sys::GetTopTransactionId()), u32::from(pg_sys::MyDatabaseId)) };
    let gid = PREPARING_GID.with(|g| g.borrow().clone()).unwrap_or_default();
    let state = PreparedState { xid, db, gid, locks, actions };
    if let Err(e) = write_file(&state) {
        error::raise(
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!("pasv could not write the state of prepared transaction {xid} to {}: {e}", file_of(xid).display()),
            "Check the data directory's free space and permissions; the transaction was not prepared.",
        );
    }
    FILE_WRITTEN.with(|f| f.set(xid));
}

/// After the PREPARE record (never ERRORs): the prepared transaction owns
/// the locks and the file now; this backend forgets its transaction's state.
pub fn after_prepare() {
    crate::row_locks::hand_over_to_prepared();
    crate::written_tables::forget();
    FILE_WRITTEN.with(|f| f.set(0));
    PREPARING_GID.with(|g| g.borrow_mut().take());
}

/// The transaction aborted (never ERRORs): a state file written for a
/// PREPARE that failed after it goes.
pub fn after_abort() {
    PREPARING_GID.with(|g| g.borrow_mut().take());
    FINISHING.with(|f| f.borrow_mut().take());
    let xid = FILE_WRITTEN.with(|f| f.replace(0));
    if xid != 0 {
        remove_file(xid);
    }
}

// ---------------------------------------------------------------------------
// COMMIT PREPARED / ROLLBACK PREPARED
// ---------------------------------------------------------------------------

/// Before PostgreSQL runs `COMMIT PREPARED gid` (`commit`) or `ROLLBACK
/// PREPARED gid`: find the transaction's state file, if it has one in this
/// database.
pub fn before_finish(gid: &str, commit: bool) {
    FINISHING.with(|f| f.borrow_mut().take());
    // SAFETY: plain read of a backend global.
    let db = unsafe { u32::from(pg_sys::MyDatabaseId) };
    let found = state_files().into_iter().filter_map(|(_, s)| s).find(|s| s.gid == gid && s.db == db);
    if let Some(state) = found {
        FINISHING.with(|f| *f.borrow_mut() = Some((state, commit)));
    }
}

/// After PostgreSQL finished the prepared transaction (never ERRORs: the
/// transaction has ended): release its locks, run its drops, remove its file.
pub fn after_finish() {
    let Some((state, commit)) = FINISHING.with(|f| f.borrow_mut().take()) else { return };
    crate::row_locks::release_prepared(state.xid, &state.locks);
    let when = if commit { When::Commit } else { When::Abort };
    for &(action, due) in &state.actions {
        if due == when {
            crate::xact::run(action, when);
        }
    }
    remove_file(state.xid);
}

// ---------------------------------------------------------------------------
// Engine start
// ---------------------------------------------------------------------------

/// Engine start, before backends may lock rows: take the locks of every
/// transaction that is still prepared again (`in_engine` takes one in the
/// engine's table), and remove the files of transactions that ended. A drop
/// an ended transaction left undone is the orphan sweep's (DESIGN §6).
/// Returns how many prepared transactions' locks were restored.
pub fn restore(mut in_engine: impl FnMut(u32, CfRef, u64, LockMode)) -> usize {
    let mut restored = 0;
    for (path, state) in state_files() {
        // SAFETY: reads PostgreSQL's process array; any process attached to
        // shared memory may ask.
        let prepared = state.as_ref().is_some_and(|s| unsafe { pg_sys::TransactionIdIsInProgress(s.xid.into()) });
        match state {
            Some(s) if prepared => {
                crate::row_locks::restore_prepared(s.xid, &s.locks, |cf, rowid, mode| in_engine(s.xid, cf, rowid, mode));
                pgrx::log!("pasv: prepared transaction {} ('{}') holds {} row locks again", s.xid, s.gid, s.locks.len());
                restored += 1;
            }
            _ => {
                if let Err(e) = std::fs::remove_file(&path) {
                    pgrx::log!("pasv: removing {}: {e}", path.display());
                }
            }
        }
    }
    restored
}
