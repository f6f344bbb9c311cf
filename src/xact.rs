//! Transaction-end work: sending buffered rows before commit, handing a
//! prepared transaction's state to `two_phase`, and the pending CF drops
//! scheduled by DDL, run at commit or abort of the (sub)transaction that
//! scheduled them (or at the end of the prepared transaction).
//!
//! Commit and abort callbacks must never ERROR (PostgreSQL would PANIC):
//! failures there are WARNINGs, and the orphaned CF is left for the sweep.

use crate::error::CallError;
use crate::engine_client;
use pasv_am::protocol::CfRef;
use pgrx::pg_sys;
use std::cell::{Cell, RefCell};

#[derive(Clone, Copy, Debug)]
pub enum Action {
    DropCf(CfRef),
    DropDatabase(u32),
    /// DROP DATABASE or CREATE DATABASE ... TEMPLATE failed: the
    /// database's replay worker may run again.
    ResumeDatabase(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    Commit,
    Abort,
}

struct Pending {
    action: Action,
    when: When,
    nest_level: i32,
}

thread_local! {
    static PENDING: RefCell<Vec<Pending>> = const { RefCell::new(Vec::new()) };
    static WROTE: Cell<bool> = const { Cell::new(false) };
}

pub fn schedule(action: Action, when: When) {
    // SAFETY: plain read of the transaction state.
    let nest_level = unsafe { pg_sys::GetCurrentTransactionNestLevel() };
    PENDING.with(|p| p.borrow_mut().push(Pending { action, when, nest_level }));
}

/// This transaction changed pasv data (PREPARE makes it durable then).
pub fn mark_written() {
    WROTE.with(|w| w.set(true));
}

/// # Safety
/// Called once from `_PG_init`.
pub unsafe fn register() {
    pg_sys::RegisterXactCallback(Some(xact_callback), std::ptr::null_mut());
    pg_sys::RegisterSubXactCallback(Some(subxact_callback), std::ptr::null_mut());
}

pub(crate) fn run(action: Action, when: When) {
    if !matches!(action, Action::ResumeDatabase(_)) && !crate::ipc::client::engine_up_now() {
        // Never wait here (see engine_up_now): the CF stays an orphan until
        // the sweep after the next recovery.
        pgrx::log!("pasv: {action:?} at {when:?} skipped: the pasv engine is not running");
        return;
    }
    if matches!(action, Action::DropCf(_)) && when == When::Commit {
        crate::crash_point::reach(crate::crash_point::Point::DropTable);
    }
    let (result, doing) = match action {
        Action::DropCf(cf) => (engine_client::drop_cf(cf), format!("dropping column family {cf}")),
        Action::DropDatabase(db) => {
            let result = engine_client::drop_database(db);
            if let Some(chan) = crate::ipc::client::channel() {
                chan.header().release_db_slot(db);
            }
            (result, format!("dropping the data of database {db}"))
        }
        Action::ResumeDatabase(db) => {
            crate::replay::worker::resume_worker(db);
            (Ok(()), String::new())
        }
    };
    match result {
        Ok(()) => {}
        // At abort an unreachable engine usually means the CF was never
        // created: the server log is enough. At commit the user dropped
        // something that now stays behind: tell them.
        Err(CallError::Channel(e)) if when == When::Abort => {
            pgrx::log!("pasv: {doing} at abort: {e}; it stays until removed")
        }
        Err(e) => e.warn(&doing),
    }
}

/// Run the actions due at `when` for levels ≥ `level`, and forget every
/// action of those levels.
fn finish_levels(level: i32, when: When) {
    let due: Vec<Action> = PENDING.with(|p| {
        let mut p = p.borrow_mut();
        let mut due = Vec::new();
        p.retain(|x| {
            if x.nest_level >= level {
                if x.when == when {
                    due.push(x.action);
                }
                false
            } else {
                true
            }
        });
        due
    });
    for action in due {
        run(action, when);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn xact_callback(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PARALLEL_PRE_COMMIT => {
            // Still inside the transaction: an ERROR here aborts it cleanly.
            if let Err(e) = engine_client::drain() {
                e.raise("writing buffered rows at commit");
            }
            if let Err(e) = crate::flushflag::before_commit() {
                e.raise("making pasv changes durable at commit");
            }
        }
        XACT_EVENT_PRE_PREPARE => {
            // A transaction that used temporary objects is refused by
            // PostgreSQL itself, right after this callback, with its own
            // message (as on heap): leave it that one.
            // SAFETY: a plain read of a backend global.
            let used_temp = unsafe { pg_sys::MyXactFlags as u32 & pg_sys::XACT_FLAGS_ACCESSEDTEMPNAMESPACE != 0 };
            let pending = PENDING.with(|p| p.borrow().iter().map(|x| (x.action, x.when)).collect::<Vec<_>>());
            if !used_temp && (WROTE.with(|w| w.get()) || crate::row_locks::any_held() || !pending.is_empty()) {
                crate::two_phase::before_prepare(pending);
            }
        }
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT => {
            crate::tam::forget_cached_rows();
            crate::tam::buffers_at_transaction_end(false);
            engine_client::owed_clear(); // settled at pre-commit
            crate::row_locks::release_at_commit(crate::flushflag::after_commit);
            finish_levels(0, When::Commit);
            WROTE.with(|w| w.set(false));
        }
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT => {
            crate::tam::forget_cached_rows();
            crate::tam::buffers_at_transaction_end(true);
            engine_client::discard_pending();
            engine_client::owed_clear();
            crate::flushflag::after_abort();
            crate::row_locks::release_at_abort();
            finish_levels(0, When::Abort);
            crate::two_phase::after_abort();
            WROTE.with(|w| w.set(false));
        }
        XACT_EVENT_PREPARE => {
            // The prepared transaction keeps its locks and drops (in its
            // state file): nothing is released or run here.
            crate::tam::forget_cached_rows();
            crate::tam::buffers_at_transaction_end(false);
            engine_client::owed_clear();
            crate::two_phase::after_prepare();
            PENDING.with(|p| p.borrow_mut().clear());
            WROTE.with(|w| w.set(false));
        }
        _ => {}
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn subxact_callback(
    event: pg_sys::SubXactEvent::Type,
    _my_subid: pg_sys::SubTransactionId,
    _parent_subid: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::SubXactEvent::*;
    let level = pg_sys::GetCurrentTransactionNestLevel();
    match event {
        SUBXACT_EVENT_ABORT_SUB => {
            crate::tam::forget_cached_rows();
            engine_client::subxact_aborted(level);
            finish_levels(level, When::Abort);
        }
        SUBXACT_EVENT_COMMIT_SUB => {
            engine_client::subxact_committed(level);
            PENDING.with(|p| {
                for x in p.borrow_mut().iter_mut().filter(|x| x.nest_level >= level) {
                    x.nest_level = level - 1;
                }
            });
        }
        _ => {}
    }
}
