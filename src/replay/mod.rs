//! Recovery (DESIGN §6): pasv's logical decoding output plugin and one
//! replay worker per database that uses pasv.
//!
//! * [`plugin`] — the output plugin (`pasv` is also a plugin name): during
//!   recovery it applies each logged change to CFs whose local DPP is behind
//!   the transaction's commit LSN and counts the rest as skipped.
//! * [`worker`] — the per-database worker: creates and keeps the replication
//!   slot, recovers the database after a crash, advances the slot to the
//!   global DPP, and flushes lagging tables (bounded recovery).
//! * This file: what backends see (they wait until their database is
//!   recovered) and the engine's supervision of the workers.

pub mod plugin;
pub mod worker;

use crate::ipc::{self, client, DB_READY, SLOT_NOT_NEEDED};
use pgrx::bgworkers::{BackgroundWorkerBuilder, BackgroundWorkerStatus, BgWorkerStartTime, DynamicBackgroundWorker};
use pgrx::pg_sys;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The output plugin recovery decodes with: the extension library itself.
pub const PLUGIN_NAME: &str = "pasv";

thread_local! {
    /// This backend's database is known to be recovered (it never goes back).
    static RECOVERED: Cell<bool> = const { Cell::new(false) };
}

/// The replay worker itself must not wait for its own recovery.
pub(crate) fn mark_recovered() {
    RECOVERED.with(|r| r.set(true));
}

/// Before touching pasv data: wait (interruptibly, with a LOG line saying
/// why) until this backend's database is recovered.
pub fn wait_for_recovery() {
    if RECOVERED.with(|r| r.get()) {
        return;
    }
    let Some(chan) = client::channel() else {
        return; // not preloaded: the call reports it
    };
    // SAFETY: plain read of the recovery state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        // The engine starts only once recovery is over: on a standby (or
        // during archive recovery) pasv's messages are not applied, and its
        // RocksDB copy would be stale or torn.
        crate::error::raise(
            pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "pasv tables cannot be used on a standby server or during recovery",
            "Query pasv tables on the primary; pasv does not support physical replication or archive recovery yet.",
        );
    }
    // The engine marks databases for recovery before it says READY.
    if client::wait_engine_ready(&chan).is_err() {
        return; // the call reports it
    }
    // SAFETY: plain read of a backend global.
    let db = u32::from(unsafe { pg_sys::MyDatabaseId });
    let header = chan.header();
    let mut logged = false;
    loop {
        let state = header.db_slot(db).map_or(DB_READY, |s| s.recovery.load(Ordering::Acquire));
        if state == ipc::DB_RECOVERY_FAILED {
            crate::error::raise(
                pgrx::PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "pasv recovery of this database failed; its pasv tables are unavailable",
                "The server log says why. Fix the cause, then run SELECT pasv.retry_recovery() as a superuser; or run SELECT pasv.abandon_recovery() to use the tables without the changes that were not replayed.",
            );
        }
        let recovering = state != DB_READY;
        if !recovering {
            RECOVERED.with(|r| r.set(true));
            if logged {
                pgrx::log!("pasv: database {db} is recovered; continuing");
            }
            return;
        }
        if !logged {
            pgrx::log!("pasv: waiting for the pasv recovery of database {db} to finish before touching pasv tables");
            logged = true;
        }
        client::nap(20);
    }
}

/// The way out of a failed recovery of this backend's database: `abandon`
/// false starts recovery again, true gives it up (changes not replayed are
/// lost). Returns false if the database's recovery had not failed.
pub fn resolve_failed_recovery(abandon: bool) -> bool {
    let Some(chan) = client::channel() else { return false };
    // SAFETY: plain read of a backend global.
    let db = u32::from(unsafe { pg_sys::MyDatabaseId });
    let Some(slot) = chan.header().db_slot(db) else { return false };
    slot.recovery_failures.store(0, Ordering::Release);
    let to = if abandon { DB_READY } else { ipc::DB_RECOVERING };
    slot.recovery.compare_exchange(ipc::DB_RECOVERY_FAILED, to, Ordering::AcqRel, Ordering::Acquire).is_ok()
}

/// Database `db` has a pasv table: make sure it has a slot in shared memory
/// (the engine then starts its replay worker).
pub fn database_uses_pasv(db: u32) {
    let Some(chan) = client::channel() else { return };
    if chan.header().claim_db_slot(db, DB_READY).is_none() {
        crate::error::warn(
            pgrx::PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!("pasv: more than {} databases use pasv; database {db} gets no replay worker", ipc::MAX_DATABASES),
            "Its commits flush the tables they wrote (slow but safe). Use pasv in fewer databases.",
        );
    }
}

/// Whether database `db` has a replay worker slot (it used pasv since the
/// engine started, or has pasv tables).
pub fn has_worker_slot(db: u32) -> bool {
    client::channel().is_some_and(|chan| chan.header().db_slot(db).is_some())
}

/// Whether database `db` is being recovered (or its recovery failed): its
/// tables may still lack committed rows.
pub fn recovering(db: u32) -> bool {
    let Some(chan) = client::channel() else { return false };
    chan.header().db_slot(db).is_some_and(|slot| slot.recovery.load(Ordering::Acquire) != DB_READY)
}

/// The engine main thread's view of the replay workers.
#[derive(Default)]
pub struct Supervisor {
    workers: HashMap<u32, (DynamicBackgroundWorker, Instant)>,
    last_failure: HashMap<u32, Instant>,
}

/// How long to wait before starting a database's worker again.
const RESTART_DELAY: Duration = Duration::from_secs(5);

impl Supervisor {
    /// Start a worker for every database that needs one and has none.
    pub fn tick(&mut self, header: &ipc::ChannelHeader) {
        for slot in &header.dbs {
            let db = slot.db.load(Ordering::Acquire);
            if db == 0 || slot.dropping.load(Ordering::Acquire) != 0 {
                continue;
            }
            if let Some((worker, _)) = self.workers.get(&db) {
                if !matches!(worker.pid(), Err(BackgroundWorkerStatus::Stopped)) {
                    continue; // running or about to
                }
                self.workers.remove(&db);
                if slot.slot.load(Ordering::Acquire) == SLOT_NOT_NEEDED {
                    continue; // finished its one job
                }
                self.last_failure.insert(db, Instant::now());
            }
            if slot.slot.load(Ordering::Acquire) == SLOT_NOT_NEEDED && slot.recovery.load(Ordering::Acquire) == DB_READY {
                continue;
            }
            if self.last_failure.get(&db).is_some_and(|t| t.elapsed() < RESTART_DELAY) {
                continue;
            }
            let started = BackgroundWorkerBuilder::new(&format!("pasv replay worker for database {db}"))
                .set_type("pasv replay")
                .set_function("pasv_replay_main")
                .set_library("pasv")
                .set_argument(Some(pg_sys::Datum::from(db)))
                .enable_spi_access()
                .set_start_time(BgWorkerStartTime::RecoveryFinished)
                .set_restart_time(None)
                .load_dynamic();
            match started {
                Ok(worker) => {
                    self.workers.insert(db, (worker, Instant::now()));
                }
                Err(_) => {
                    self.last_failure.insert(db, Instant::now());
                    pgrx::warning!(
                        "pasv engine: could not start the replay worker of database {db}; its commits flush the tables they wrote until one runs (raise max_worker_processes)"
                    );
                }
            }
        }
    }
}
