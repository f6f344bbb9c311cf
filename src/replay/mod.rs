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
    // The engine marks databases for recovery before it says READY.
    if client::wait_engine_ready(&chan).is_err() {
        return; // the call reports it
    }
    // SAFETY: plain read of a backend global.
    let db = u32::from(unsafe { pg_sys::MyDatabaseId });
    let header = chan.header();
    let mut logged = false;
    loop {
        let recovering = header
            .db_slot(db)
            .is_some_and(|s| s.recovery.load(Ordering::Acquire) != DB_READY);
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
