//! pasv's `ProcessUtility` hook: the utility statements pasv must act on
//! beside PostgreSQL's own execution of them.
//!
//! * `CREATE DATABASE`: the template's pasv tables are copied into the new
//!   database (`database_copy.rs`).
//! * `PREPARE TRANSACTION`, `COMMIT PREPARED`, `ROLLBACK PREPARED`: the GID
//!   is noted, and a finished prepared transaction's locks and drops are
//!   settled after PostgreSQL finished it (`two_phase.rs`).
//! * Every statement but transaction control first sends (and so logs) the
//!   row changes this backend buffered: logical decoding reads a change with
//!   the catalog as of its log record, so a change logged after an `ALTER
//!   TABLE` of the same transaction (a replica identity, a new column) would
//!   be decoded with the altered table.
//!
//! Everything else passes through untouched.

use pgrx::pg_sys;

static mut PREV_PROCESS_UTILITY: pg_sys::ProcessUtility_hook_type = None;

/// # Safety
/// Called once from `_PG_init`.
pub unsafe fn install() {
    PREV_PROCESS_UTILITY = pg_sys::ProcessUtility_hook;
    pg_sys::ProcessUtility_hook = Some(process_utility);
}

// PostgreSQL's own statement runs through a raw call, not pgrx's guarded
// binding: the guard would turn any ERROR of the statement into a Rust panic
// and raise it again, without its CONTEXT and error position (the core
// suite's expected outputs showed the loss). Nothing with a destructor is
// alive in `process_utility` across the call, so PostgreSQL's longjmp may
// pass through it.
extern "C-unwind" {
    #[link_name = "standard_ProcessUtility"]
    fn standard_process_utility_raw(
        pstmt: *mut pg_sys::PlannedStmt,
        query_string: *const std::ffi::c_char,
        read_only_tree: bool,
        context: pg_sys::ProcessUtilityContext::Type,
        params: pg_sys::ParamListInfo,
        query_env: *mut pg_sys::QueryEnvironment,
        dest: *mut pg_sys::DestReceiver,
        qc: *mut pg_sys::QueryCompletion,
    );
}

/// Not `#[pg_guard]`: see above. Nothing here can panic; the work runs in
/// guarded functions of the modules it calls.
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // What the statement names is read before it runs (with read_only_tree
    // false it may scribble on its tree); names live in the statement's
    // memory, which outlasts this call.
    let stmt = (*pstmt).utilityStmt;
    let tag = if stmt.is_null() { pg_sys::NodeTag::T_Invalid } else { (*stmt).type_ };
    let mut finishing_prepared = false;
    if tag != pg_sys::NodeTag::T_TransactionStmt {
        send_buffered_rows();
    } else {
        finishing_prepared = transaction_statement(stmt as *const pg_sys::TransactionStmt);
    }
    let mut template = 0;
    let mut new_database: *const std::ffi::c_char = std::ptr::null();
    if tag == pg_sys::NodeTag::T_CreatedbStmt {
        let createdb = stmt as *mut pg_sys::CreatedbStmt;
        new_database = (*createdb).dbname;
        template = crate::database_copy::before_create(createdb);
    }
    match PREV_PROCESS_UTILITY {
        Some(prev) => prev(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc),
        None => standard_process_utility_raw(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc),
    }
    if template != 0 {
        crate::database_copy::after_create(template, new_database);
    }
    if finishing_prepared {
        finish_prepared();
    }
}

/// Note what a transaction statement means for prepared transactions;
/// whether it finishes one (its state is settled after PostgreSQL ran it).
#[pgrx::pg_guard]
extern "C-unwind" fn transaction_statement(stmt: *const pg_sys::TransactionStmt) -> bool {
    use pg_sys::TransactionStmtKind::*;
    // SAFETY: the hook's statement, a TransactionStmt by its tag.
    let (kind, gid) = unsafe {
        let gid = (*stmt).gid;
        ((*stmt).kind, (!gid.is_null()).then(|| std::ffi::CStr::from_ptr(gid).to_string_lossy().into_owned()))
    };
    match (kind, gid) {
        (TRANS_STMT_PREPARE, Some(gid)) => {
            crate::two_phase::note_prepare_statement(&gid);
            false
        }
        (TRANS_STMT_COMMIT_PREPARED | TRANS_STMT_ROLLBACK_PREPARED, Some(gid)) => {
            crate::two_phase::before_finish(&gid, kind == TRANS_STMT_COMMIT_PREPARED);
            true
        }
        _ => false,
    }
}

#[pgrx::pg_guard]
extern "C-unwind" fn finish_prepared() {
    crate::two_phase::after_finish();
}

/// Send the row changes this backend buffered, logging them now.
#[pgrx::pg_guard]
extern "C-unwind" fn send_buffered_rows() {
    if let Err(e) = crate::engine_client::flush_pending() {
        e.raise("sending buffered row changes before a utility statement");
    }
}
