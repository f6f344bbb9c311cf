//! pasv: a PostgreSQL 16 table access method whose rows live in RocksDB,
//! with PostgreSQL's WAL as the only log (see DESIGN.md).
//!
//! This file is the table of contents: `_PG_init` registers the settings,
//! the shared-memory channel, the engine worker, the transaction callbacks,
//! the DROP hook, the CREATE DATABASE hook and the logical decoding of pasv
//! messages. Where things live:
//! * `ipc/`            the shared-memory channel (the only raw shm pointers)
//! * `engine_worker`   the background worker that owns RocksDB
//! * `engine_client`   typed engine calls and the backend's write-behind buffer
//! * `tam/`            the table access method callbacks
//! * `logical/`        logical decoding sees pasv tables' changes as row changes (publications)
//! * `utility_hook`    CREATE DATABASE ... TEMPLATE copies pasv tables (`database_copy`)
//! * `xact`            pending drops, pre-commit flush, PREPARE hand-over
//! * `two_phase`       prepared transactions: durable writes, locks kept, state file
//! * `row_locks`       this backend's row locks (shared memory or the engine), released at the end
//! * `wal`             every change logged to PostgreSQL's WAL as a logical message
//! * `wal_flush`       WAL before data: the engine main thread's XLogFlush service
//! * `flushflag/`      flush flags at commit; pre-commit durability (calls `engine_client`)
//! * `written_tables`  which pasv tables this transaction wrote (filled by `engine_client`)
//! * `replay/`         output plugin + per-database replay worker (slot, recovery, DPP)
//! * `sql_api`         SQL-callable functions (`pasv.*`)
//! * `verify`          `pasv.verify(regclass)`: a table's consistency, as rows of problems
//! * `crash_point`     named crash points for crash tests (`pasv.crash_point`)
//! * `error`           pasv errors → SQLSTATE + HINT

use pgrx::pg_sys;
use pgrx::prelude::*;

mod channel_stats;
mod crash_point;
mod database_copy;
mod engine_client;
mod engine_worker;
mod error;
mod flushflag;
mod guc;
mod ipc;
mod logical;
mod replay;
mod row_locks;
mod shmem;
mod sql_api;
mod tam;
mod two_phase;
mod unguarded;
mod utility_hook;
mod verify;
mod wal;
mod wal_flush;
mod written_tables;
mod xact;

/// PostgreSQL's `%X/%X` spelling of an LSN.
pub fn fmt_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

pgrx::pg_module_magic!();

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // SAFETY: reading a postmaster-set flag.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        error::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "pasv must be loaded through shared_preload_libraries",
            "Add pasv to shared_preload_libraries in postgresql.conf (and set wal_level = logical), \
             restart the server, then run CREATE EXTENSION pasv.",
        );
    }
    guc::register();
    // SAFETY: _PG_init runs once per postmaster, during preload.
    unsafe {
        shmem::install_hooks();
        xact::register();
        tam::ddl::install_object_access_hook();
        tam::install_invalidation_callback();
        tam::parallel_plans::install();
        logical::decode::install();
        utility_hook::install();
    }
    engine_worker::register();
}

/// The table AM handler (`CREATE ACCESS METHOD pasv TYPE TABLE HANDLER ...`).
#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_pasv_tableam_handler() -> &'static pg_sys::Pg_finfo_record {
    static V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn pasv_tableam_handler(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    pg_sys::Datum::from(&raw const tam::ROUTINE as usize)
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION pasv_tableam_handler(internal) RETURNS table_am_handler
    LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'pasv_tableam_handler';
CREATE ACCESS METHOD pasv TYPE TABLE HANDLER pasv_tableam_handler;
COMMENT ON ACCESS METHOD pasv IS 'pasv: rows in RocksDB, PostgreSQL WAL as the only log';
"#,
    name = "pasv_access_method",
    bootstrap
);
