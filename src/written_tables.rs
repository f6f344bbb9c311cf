//! Which pasv tables this backend's transaction wrote, and where in the WAL
//! its change messages lie.
//!
//! The engine client records each batch it sends ([`note_write`]); the
//! flush-flag code (`crate::flushflag`) reads the record before commit and
//! takes it at commit, to tell the engine which tables get a flush flag.
//! This module calls nothing in pasv: it sits below both, so that the engine
//! client need not know the flush-flag code that calls it.
//!
//! Invariant: one record per backend (thread-local), for the current
//! transaction only; it is emptied at that transaction's commit or abort.

use pasv_am::protocol::CfRef;
use std::cell::RefCell;

/// What this backend's transaction wrote to pasv tables.
#[derive(Default)]
pub struct Touched {
    pub db: u32,
    pub rels: Vec<u32>,
    pub first_lsn: u64,
    pub last_lsn: u64,
}

thread_local! {
    static TOUCHED: RefCell<Touched> = RefCell::new(Touched::default());
}

/// A batch for `cf`, logged at `lsn` (0: not logged), is being written.
pub fn note_write(cf: CfRef, lsn: u64) {
    TOUCHED.with(|t| {
        let mut t = t.borrow_mut();
        t.db = cf.db;
        if !t.rels.contains(&cf.rel) {
            t.rels.push(cf.rel);
        }
        if lsn != 0 {
            if t.first_lsn == 0 {
                t.first_lsn = lsn;
            }
            t.last_lsn = t.last_lsn.max(lsn);
        }
    });
}

/// The database and the tables written so far; the record stays as it is.
pub fn written_so_far() -> (u32, Vec<u32>) {
    TOUCHED.with(|t| {
        let t = t.borrow();
        (t.db, t.rels.clone())
    })
}

/// The whole record, leaving it empty (commit).
pub fn take() -> Touched {
    TOUCHED.with(|t| std::mem::take(&mut *t.borrow_mut()))
}

/// Empties the record (abort).
pub fn forget() {
    TOUCHED.with(|t| *t.borrow_mut() = Touched::default());
}
