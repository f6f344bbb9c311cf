//! `CREATE DATABASE ... TEMPLATE db` when `db` has pasv tables (issue 10,
//! item 6): the new database gets their rows.
//!
//! PostgreSQL copies the template's catalogs, and with them every pasv
//! table's relfilenumber, and its relation files; a pasv table's rows live
//! in the engine, so pasv copies them too: every CF of the template into
//! the new database, with the same relfilenumbers, kinds and rowids, so the
//! copied indexes point at the right rows (`Engine::copy_database`). Logged
//! tables' copies are flushed before the statement goes on and are created
//! at the current WAL position, so no earlier message ever replays into
//! them.
//!
//! * The template's replay worker is connected to it, and PostgreSQL
//!   refuses to copy a database that others are connected to: the worker
//!   leaves before the statement runs and comes back after it (at abort,
//!   through `xact`), whatever the outcome.
//! * A template being recovered is refused: its CFs may still lack rows.
//! * An abort drops the copies; a crash before the commit leaves them as
//!   orphans of a database that does not exist, which nothing reads.
//!
//! Called by `utility_hook.rs`; reaches the engine through `engine_client`.

use crate::engine_client;
use crate::xact::{self, Action, When};
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

/// Before PostgreSQL runs `stmt`: the OID of its template if that has pasv
/// tables or a replay worker (which has been sent away), else 0.
///
/// # Safety
/// `stmt` is the statement's valid `CreatedbStmt`.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn before_create(stmt: *mut pg_sys::CreatedbStmt) -> u32 {
    let name = template_name(stmt);
    let template = pg_sys::get_database_oid(name.as_ptr(), true).to_u32();
    if template == 0 {
        return 0; // PostgreSQL reports it
    }
    // The engine gives every database with pasv tables a worker slot when it
    // starts, and a database that creates one gets a slot then; one whose
    // tables were all dropped keeps it (and its worker). Only with more
    // databases than slots can a template without one have tables: then
    // the engine is asked (it lists logged tables). With the engine down
    // (CREATE DATABASE must still work then, from templates pasv never
    // touched), a template without a slot has nothing to copy.
    if !crate::replay::has_worker_slot(template) {
        if !crate::ipc::client::engine_up_now() {
            return 0;
        }
        let doing = format!("copying the pasv tables of template database {}", name.to_string_lossy());
        match engine_client::persistence(template) {
            Ok(rows) if rows.is_empty() => return 0,
            Ok(_) => {}
            Err(e) => e.raise(&doing),
        }
    }
    if crate::replay::recovering(template) {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
            format!("template database \"{}\" is being recovered by pasv", name.to_string_lossy()),
            "Its pasv tables may still lack committed rows. Try again once its recovery has finished \
             (the view pasv.database_status).",
        );
    }
    crate::replay::worker::stop_worker(template);
    xact::schedule(Action::ResumeDatabase(template), When::Abort);
    template
}

/// After PostgreSQL created database `name` from `template` (which has pasv
/// tables): copy them, and let the template's worker come back.
///
/// # Safety
/// `name` is the statement's database name.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn after_create(template: u32, name: *const std::ffi::c_char) {
    let copy = pg_sys::get_database_oid(name, false).to_u32();
    xact::schedule(Action::DropDatabase(copy), When::Abort);
    let doing = format!(
        "copying the pasv tables of the template into database {}",
        std::ffi::CStr::from_ptr(name).to_string_lossy()
    );
    if let Err(e) = engine_client::copy_database(template, copy) {
        e.raise(&doing);
    }
    crate::replay::database_uses_pasv(copy);
    crate::replay::worker::resume_worker(template);
}

/// The template the statement names (`TEMPLATE = DEFAULT` and no TEMPLATE
/// mean `template1`, as for PostgreSQL).
unsafe fn template_name(stmt: *mut pg_sys::CreatedbStmt) -> std::ffi::CString {
    let options = pgrx::PgList::<pg_sys::DefElem>::from_pg((*stmt).options);
    for def in options.iter_ptr() {
        if std::ffi::CStr::from_ptr((*def).defname).to_bytes() == b"template" && !(*def).arg.is_null() {
            return std::ffi::CStr::from_ptr(pg_sys::defGetString(def)).to_owned();
        }
    }
    c"template1".to_owned()
}
