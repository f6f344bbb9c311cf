//! The replay worker of one database (DESIGN §5-6): a background worker
//! connected to the database, started and restarted by the engine.
//!
//! 1. After a crash (the engine marked the database RECOVERING), it decodes
//!    the slot's retained WAL with pasv's plugin, which applies each change
//!    only to CFs whose cutoff is behind the transaction's commit
//!    ([`super::plugin`]); then writes flags, flushes the database's CFs,
//!    leaves a report and lets backends in.
//! 2. It keeps the slot `pasv_<dboid>`: creates it (from here, not from the
//!    backend whose transaction made the first table: slot creation waits
//!    for running transactions, that one included), and recreates it if
//!    someone dropped it (after flushing, so nothing relied on the lost WAL).
//! 3. Once a second it advances the slot to the global DPP (fast-forward
//!    decoding moves `restart_lsn`, so PostgreSQL keeps only the WAL recovery
//!    may need), and flushes the most lagging CFs when the distance passes
//!    `pasv.max_recovery_lag` (bounded recovery).
//!
//! Steps 2 and 3 hold no snapshot: the slot's position is read from shared
//! memory and its functions are called without a query (`call`). A
//! snapshot's xmin, held through a decoding of seconds, kept every backend
//! of the database from pruning (pasv's and heap's) meanwhile. Recovery
//! (step 1) queries with snapshots: no backend runs before it ends.
//!
//! In `naive` mode flags are ignored: the slot moves only past full flushes,
//! and recovery replays everything retained. In `engine_wal` and `unlogged`
//! modes there is nothing to replay: the worker drops a leftover slot and ends.

use super::plugin::{self, ReplayRun};
use crate::guc::{self, DurabilityMode};
use crate::ipc::{
    client, DbSlot, DB_READY, DB_RECOVERING, DB_RECOVERY_FAILED, MAX_RECOVERY_ATTEMPTS, SLOT_FAILED, SLOT_NONE,
    SLOT_NOT_NEEDED, SLOT_READY,
};
use crate::{engine_client, fmt_lsn};
use pasv_am::protocol::{CfRef, CommitNotice, PersistenceRow};
use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Index of ReplicationSlotControlLock in MainLWLockArray (lwlocknames.txt,
/// PG16); a macro in C.
const REPLICATION_SLOT_CONTROL_LOCK: usize = 37;

/// How often the slot is advanced while nothing presses (see `maintain`).
const ADVANCE_INTERVAL: Duration = Duration::from_secs(10);

pub fn slot_name(db: u32) -> String {
    format!("pasv_{db}")
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pasv_replay_main(arg: pg_sys::Datum) {
    let db = arg.value() as u32;
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(db)), None);
    super::mark_recovered();
    let Some(chan) = client::channel() else { return };
    let Some(slot) = chan.header().db_slot(db) else { return };
    // SAFETY: reading our pid.
    slot.worker_pid.store(unsafe { pg_sys::MyProcPid }, Ordering::Release);
    let worker = Worker { db, slot, name: slot_name(db), last_advance: std::cell::Cell::new(Instant::now()),
        last_snapshot_log: std::cell::Cell::new(Instant::now()),
        last_snapshot_lsn: std::cell::Cell::new(0),
        last_catch_up: std::cell::Cell::new(Instant::now()),
    };
    worker.run();
    slot.worker_pid.store(0, Ordering::Release);
}

struct Worker<'a> {
    db: u32,
    slot: &'a DbSlot,
    name: String,
    last_advance: std::cell::Cell<Instant>,
    last_snapshot_log: std::cell::Cell<Instant>,
    last_snapshot_lsn: std::cell::Cell<u64>,
    last_catch_up: std::cell::Cell<Instant>,
}

/// A failed step of the worker: logged, then retried on a later tick.
type Step<T> = Result<T, String>;

impl Worker<'_> {
    fn run(&self) {
        let mode = guc::durability();
        if !mode.replays() {
            if self.slot_position().ok().flatten().is_some() {
                match self.spi_run(&format!("SELECT pg_drop_replication_slot('{}')", self.name)) {
                    Ok(()) => pgrx::log!("pasv: durability is {mode:?}: dropped the slot {} (nothing to replay)", self.name),
                    Err(e) => pgrx::warning!("pasv: dropping the unneeded slot {}: {e}", self.name),
                }
            }
            self.slot.slot.store(SLOT_NOT_NEEDED, Ordering::Release);
            self.slot.recovery.store(DB_READY, Ordering::Release);
            return;
        }

        if !self.wait_while_recovery_failed() {
            return;
        }
        if self.slot.recovery.load(Ordering::Acquire) == DB_RECOVERING {
            match self.slot_position() {
                Ok(Some(_)) => {
                    if let Err(e) = self.recover(mode) {
                        self.recovery_failed(&e);
                    }
                    self.slot.recovery_failures.store(0, Ordering::Release);
                    self.slot.slot.store(SLOT_READY, Ordering::Release);
                }
                Ok(None) => {
                    crate::error::warn(
                        PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                        format!(
                            "pasv: database {} has no replication slot {}: changes that were not flushed before the crash cannot be replayed",
                            self.db, self.name
                        ),
                        "Check pasv tables for missing rows; the slot was dropped or never created (see earlier WARNINGs). pasv creates a new one now.",
                    );
                }
                Err(e) => self.recovery_failed(&format!("reading the slot: {e}")),
            }
            self.slot.recovery.store(DB_READY, Ordering::Release);
        }

        let mut next_slot_attempt = Instant::now();
        let mut last_maintenance = Instant::now() - Duration::from_secs(10);
        while crate::ipc::client::worker_wait_latch(Duration::from_millis(200)) {
            if self.slot.dropping.load(Ordering::Acquire) != 0 {
                break;
            }
            if BackgroundWorker::sighup_received() {
                // SAFETY: main thread of this worker, outside any transaction.
                unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
            }
            if last_maintenance.elapsed() < Duration::from_secs(1) {
                continue;
            }
            last_maintenance = Instant::now();
            match self.slot_position() {
                Ok(Some((confirmed, restart))) => {
                    self.slot.slot.store(SLOT_READY, Ordering::Release);
                    if let Err(e) = self.maintain(mode, confirmed, restart) {
                        pgrx::log!("pasv: maintaining the slot of database {}: {e}", self.db);
                    }
                }
                Ok(None) if Instant::now() >= next_slot_attempt => {
                    if let Err(e) = self.create_slot() {
                        self.slot.slot.store(SLOT_FAILED, Ordering::Release);
                        crate::error::warn(
                            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                            format!("pasv: cannot create the replication slot {} for database {}: {e}", self.name, self.db),
                            "pasv needs wal_level = logical and a free replication slot (max_replication_slots). \
                             Until then every commit flushes the pasv tables it wrote (safe, slow); pasv retries every 10 s.",
                        );
                        next_slot_attempt = Instant::now() + Duration::from_secs(10);
                    }
                }
                Ok(None) => {}
                Err(e) => pgrx::log!("pasv: reading the slot of database {}: {e}", self.db),
            }
        }
    }

    /// The slot's (confirmed_flush, restart_lsn), or `None` if it does not
    /// exist. Read from shared memory as `pg_get_replication_slots` does,
    /// outside any transaction: a query would take a snapshot once a second,
    /// and while this worker holds one, no backend of the database may prune
    /// a version its xmin still covers (heap's HOT pruning neither).
    fn slot_position(&self) -> Step<Option<(u64, u64)>> {
        let name = std::ffi::CString::new(self.name.as_str()).map_err(|e| e.to_string())?;
        // SAFETY: the slot array is read under ReplicationSlotControlLock
        // (shared), which keeps every slot's `in_use` and name fixed, and a
        // slot's positions under its spinlock, as slot.c's readers do.
        unsafe {
            let lock = &raw mut (*pg_sys::MainLWLockArray.add(REPLICATION_SLOT_CONTROL_LOCK)).lock;
            pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_SHARED);
            let slot = pg_sys::SearchNamedReplicationSlot(name.as_ptr(), false);
            let position = (!slot.is_null()).then(|| {
                pg_sys::SpinLockAcquire(&raw mut (*slot).mutex);
                let position = ((*slot).data.confirmed_flush, (*slot).data.restart_lsn);
                pg_sys::SpinLockRelease(&raw mut (*slot).mutex);
                position
            });
            pg_sys::LWLockRelease(lock);
            // A slot still being created has no confirmed position yet.
            Ok(position.filter(|&(confirmed, _)| confirmed != 0))
        }
    }

    /// No slot: from now on commits flush what they wrote; create the slot
    /// (waits for running transactions); then flush every CF, so whatever
    /// committed without the slot's protection is on disk.
    fn create_slot(&self) -> Step<()> {
        let was = self.slot.slot.swap(SLOT_NONE, Ordering::AcqRel);
        if was == SLOT_READY {
            crate::error::warn(
                PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                format!("pasv: the replication slot {} of database {} was dropped", self.name, self.db),
                "pasv flushes the database's pasv tables and creates the slot again; do not drop pasv_* slots.",
            );
        }
        // SAFETY: reading a server setting.
        if unsafe { pg_sys::wal_level } < pg_sys::WalLevel::WAL_LEVEL_LOGICAL as i32 {
            return Err("wal_level is below logical".into());
        }
        // Creation waits for the transactions running now to end: no
        // snapshot of this worker may pin pruning meanwhile.
        let (mut name, mut plugin) = (name_data(&self.name)?, name_data(super::PLUGIN_NAME)?);
        self.call_slot_function(pg_sys::F_PG_CREATE_LOGICAL_REPLICATION_SLOT, |function| {
            // SAFETY: in a transaction of this worker; the names outlive the
            // call; (temporary, two_phase) = (false, false), its defaults.
            unsafe {
                pg_sys::OidFunctionCall4Coll(
                    function,
                    pg_sys::InvalidOid,
                    pg_sys::Datum::from(&raw mut name),
                    pg_sys::Datum::from(&raw mut plugin),
                    pg_sys::Datum::from(false),
                    pg_sys::Datum::from(false),
                )
            };
        })?;
        // Flush before READY (what committed so far is on disk when the state
        // says protected) and after (a commit that still saw NONE's
        // predecessor READY may have slipped in between).
        self.flush_all_cfs()?;
        self.slot.slot.store(SLOT_READY, Ordering::Release);
        self.flush_all_cfs()?;
        pgrx::log!("pasv: created the replication slot {} for database {}", self.name, self.db);
        Ok(())
    }

    fn flush_all_cfs(&self) -> Step<()> {
        for row in engine_client::persistence(self.db).map_err(|e| e.to_string())? {
            engine_client::flush_cf(CfRef { db: row.db, rel: row.rel }).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Advance the slot to the global DPP; flush laggards past the bound.
    fn maintain(&self, mode: DurabilityMode, confirmed: u64, restart: u64) -> Step<()> {
        // The slot's restart_lsn moves only to restart points that decoding
        // finds at running-transactions records between restart_lsn and the
        // target, and decoding that starts amid running transactions needs a
        // few such records to become consistent. PostgreSQL logs one every
        // 15 s at most; pasv logs one every 2 s while WAL flows, so
        // restart_lsn follows the target closely.
        // SAFETY: plain WAL position read.
        let before = unsafe { pg_sys::GetXLogInsertRecPtr() };
        if before >= self.last_snapshot_lsn.get().saturating_add(1 << 20)
            && self.last_snapshot_log.get().elapsed() >= Duration::from_secs(2)
        {
            self.last_snapshot_log.set(Instant::now());
            self.last_snapshot_lsn.set(before);
            // Called, not queried: see `call`.
            // SAFETY: in a transaction of this worker, on a primary (the
            // worker runs only there), with wal_level logical.
            self.call(|| {
                unsafe { pg_sys::LogStandbySnapshot() };
                Ok(())
            })?;
        }
        // Read the position first: a CF clean in the report below was clean
        // when every transaction that committed before `now` had written it.
        // SAFETY: plain WAL position read.
        let now = unsafe { pg_sys::GetXLogInsertRecPtr() };
        let rows = engine_client::persistence(self.db).map_err(|e| e.to_string())?;
        let max_lag = guc::MAX_RECOVERY_LAG_MB.get().max(1) as u64 * 1024 * 1024;
        let target = match mode {
            DurabilityMode::Naive if rows.iter().any(|r| r.dirty) => {
                if now.saturating_sub(confirmed) > max_lag {
                    // Naive: only a full flush moves the slot.
                    self.flush_all_cfs()?;
                    now
                } else {
                    confirmed
                }
            }
            DurabilityMode::Naive => now,
            _ => {
                let target = pasv_am::flush_flag::global_dpp(&rows, now);
                if now.saturating_sub(target) > max_lag {
                    self.flush_laggards(&rows, now, max_lag)?;
                }
                target
            }
        };
        self.slot.global_dpp.store(target, Ordering::Release);
        // Each advance decodes from restart_lsn, which trails the target by
        // up to the recovery lag (hundreds of MB under load): advancing
        // every second decoded 17 GB in a 9-minute benchmark run and took a
        // core from the workload (session 4). So advance every 10 s, or at
        // once when the WAL retained passes twice the lag bound.
        let retained = now.saturating_sub(restart);
        let due = target > confirmed
            && (self.last_advance.get().elapsed() >= ADVANCE_INTERVAL || retained > 2 * max_lag);
        if due {
            self.last_advance.set(Instant::now());
            self.advance_slot(target)?;
        }
        // An advance moves restart_lsn to at most the first restart point
        // past the old confirmed position; advancing again to where the slot
        // already is accepts the newest restart point before it. Decodes from
        // restart_lsn, so only when it trails by more than a megabyte, and at
        // most every other advance interval.
        let confirmed_now = if due { target } else { confirmed };
        if confirmed_now.saturating_sub(restart) > 1 << 20 && self.last_catch_up.get().elapsed() >= 2 * ADVANCE_INTERVAL {
            self.last_catch_up.set(Instant::now());
            self.advance_slot(confirmed_now)?;
        }
        Ok(())
    }

    /// Fast-forward the slot to `lsn` (PostgreSQL decodes from its restart_lsn).
    fn advance_slot(&self, lsn: u64) -> Step<()> {
        crate::crash_point::reach(crate::crash_point::Point::SlotAdvance);
        // The decoding can run for seconds under load: no snapshot may pin
        // pruning meanwhile (`call_slot_function`). The decoding resets the
        // caches, and with them the catalog snapshot, before it reads WAL.
        let mut name = name_data(&self.name)?;
        self.call_slot_function(pg_sys::F_PG_REPLICATION_SLOT_ADVANCE, |function| {
            // SAFETY: in a transaction of this worker; `name` outlives the
            // call; a pg_lsn is passed by value.
            unsafe {
                pg_sys::OidFunctionCall2Coll(
                    function,
                    pg_sys::InvalidOid,
                    pg_sys::Datum::from(&raw mut name),
                    pg_sys::Datum::from(lsn),
                )
            };
        })
    }

    /// Calls `function`, one of PostgreSQL's slot functions (they return a
    /// record), through `invoke`, in a transaction without a snapshot (see
    /// `call`). What the function looks up before it gets to work (the
    /// role, its result type) is looked up here first and the catalog
    /// snapshot that took is dropped: the function finds it all cached and
    /// takes none.
    fn call_slot_function(&self, function: u32, invoke: impl FnOnce(pg_sys::Oid)) -> Step<()> {
        let function = pg_sys::Oid::from(function);
        self.call(|| {
            // SAFETY: in a transaction of this worker; catalog lookups.
            unsafe {
                pg_sys::has_rolreplication(pg_sys::GetUserId());
                let mut result_type = pg_sys::InvalidOid;
                let mut tupdesc: pg_sys::TupleDesc = std::ptr::null_mut();
                pg_sys::get_func_result_type(function, &raw mut result_type, &raw mut tupdesc);
                pg_sys::InvalidateCatalogSnapshot();
            }
            invoke(function);
            Ok(())
        })
    }

    /// Flush the dirty CFs whose DPP is more than half the bound behind.
    fn flush_laggards(&self, rows: &[PersistenceRow], now: u64, max_lag: u64) -> Step<()> {
        for row in rows.iter().filter(|r| r.dirty && now.saturating_sub(pasv_am::flush_flag::local_dpp(r)) > max_lag / 2) {
            pgrx::log!(
                "pasv: flushing table {}/{}: its data persistence point {} is {} MB behind (pasv.max_recovery_lag)",
                row.db,
                row.rel,
                fmt_lsn(pasv_am::flush_flag::local_dpp(row)),
                now.saturating_sub(pasv_am::flush_flag::local_dpp(row)) >> 20
            );
            engine_client::flush_cf(CfRef { db: row.db, rel: row.rel }).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// A recovery attempt failed: the worker exits with an ERROR and the
    /// engine starts it again (replay is idempotent). After
    /// [`MAX_RECOVERY_ATTEMPTS`] failures in a row the database is marked
    /// failed: backends get an ERROR rather than wait forever.
    fn recovery_failed(&self, e: &str) -> ! {
        let failures = self.slot.recovery_failures.fetch_add(1, Ordering::AcqRel) + 1;
        if failures >= MAX_RECOVERY_ATTEMPTS {
            self.slot.recovery.store(DB_RECOVERY_FAILED, Ordering::Release);
            crate::error::log(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("pasv recovery of database {} failed {failures} times; its pasv tables are unavailable: {e}", self.db),
                "Fix the cause, then run SELECT pasv.retry_recovery() in that database; or run SELECT pasv.abandon_recovery() there to use the tables without the changes that were not replayed.",
            );
        }
        pgrx::error!("pasv recovery of database {} failed (attempt {failures}): {e}", self.db);
    }

    /// While the database's recovery is marked failed, wait for a superuser's
    /// retry or abandon. Returns false if the worker should stop.
    fn wait_while_recovery_failed(&self) -> bool {
        while self.slot.recovery.load(Ordering::Acquire) == DB_RECOVERY_FAILED {
            if !crate::ipc::client::worker_wait_latch(Duration::from_millis(200)) || self.slot.dropping.load(Ordering::Acquire) != 0 {
                return false;
            }
        }
        true
    }

    /// Recovery (DESIGN §6.3): decode everything the slot retains and apply
    /// what each CF lost.
    fn recover(&self, mode: DurabilityMode) -> Step<()> {
        let started = Instant::now();
        let rows = engine_client::persistence(self.db).map_err(|e| e.to_string())?;
        let cutoffs: HashMap<u32, u64> = rows
            .iter()
            .map(|r| {
                let cutoff = if mode == DurabilityMode::Pasv { pasv_am::flush_flag::local_dpp(r) } else { r.created_lsn };
                (r.rel, cutoff)
            })
            .collect();
        let (_, restart) = self.slot_position()?.ok_or("the slot vanished")?;
        // SAFETY: in a transaction of this worker.
        self.spi(|| {
            unsafe { crate::wal::pad_past_current_page() };
            Ok(())
        })?;
        // SAFETY: plain WAL position read.
        let end = unsafe { pg_sys::GetFlushRecPtr(std::ptr::null_mut()) };
        pgrx::log!(
            "pasv recovery of database {} ({} mode): decoding WAL {}..{} ({} MB) for {} tables",
            self.db,
            guc::durability_name(mode),
            fmt_lsn(restart),
            fmt_lsn(end),
            end.saturating_sub(restart) >> 20,
            rows.len()
        );
        let created = rows.iter().map(|r| (r.rel, r.created_lsn)).collect();
        let crash_after = match take_crash_point() {
            Some(CrashPoint::AbortAfter(n)) => Some(n),
            Some(CrashPoint::Stall) => {
                stall_until_stopped();
                return Err("stopped while recovery was stalled (test hook replay_stall)".into());
            }
            Some(CrashPoint::Fail) => return Err("failed on purpose (test hook replay_fail)".into()),
            None => None,
        };
        let run = ReplayRun::new(self.db, cutoffs.clone(), created, crash_after);
        let query = format!("SELECT count(*) FROM pg_logical_slot_peek_changes('{}', NULL, NULL)", self.name);
        let (decoded, run) = plugin::with_run(run, || self.spi(|| select_one(&query).map(|_| ())));
        decoded?;
        // Every CF now holds every transaction decoded: say so with a flag,
        // and make it durable, so the next recovery starts from here.
        let rels: Vec<u32> = rows.iter().map(|r| r.rel).collect();
        if run.last_commit != 0 && mode == DurabilityMode::Pasv {
            let notice = CommitNotice {
                db: self.db,
                xid: 0,
                commit_lsn: run.last_commit,
                first_lsn: 0,
                last_lsn: 0,
                rels: &rels,
                release_locks: false,
            };
            engine_client::committed(&notice).map_err(|e| e.to_string())?;
        }
        self.sweep_orphans(&rows)?;
        self.flush_all_cfs()?;
        let seconds = started.elapsed().as_secs_f64();
        let (replayed, skipped) = run.totals();
        pgrx::log!(
            "pasv recovery of database {} done in {:.3} s: {} messages decoded, {} operations replayed, {} skipped, {} MB of WAL",
            self.db,
            seconds,
            run.messages,
            replayed,
            skipped,
            end.saturating_sub(restart) >> 20
        );
        write_report(self.db, mode, &rows, &cutoffs, &run, end.saturating_sub(restart), seconds)
    }

    /// Drop the CFs no table of this database owns any more (DESIGN §6):
    /// tables whose CREATE was cut off by the crash, or whose DROP committed
    /// but did not reach the engine. Safe only here, before the database is
    /// READY: no backend can have created a CF since the crash.
    fn sweep_orphans(&self, rows: &[PersistenceRow]) -> Step<()> {
        // A prepared transaction's tables are invisible in pg_class until it
        // commits: sweep another time (the next recovery without any).
        let prepared = "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()";
        if let Some(n @ 1..) = self.spi(|| select_one(prepared))? {
            pgrx::log!("pasv recovery of database {}: {n} prepared transactions: column families without a table are kept", self.db);
            return Ok(());
        }
        for row in rows {
            let query = format!("SELECT count(*) FROM pg_class WHERE relfilenode = {}", row.rel);
            if self.spi(|| select_one(&query))? == Some(0) {
                pgrx::log!(
                    "pasv recovery of database {}: dropping the column family of relfilenumber {}: no table owns it",
                    self.db,
                    row.rel
                );
                engine_client::drop_cf(CfRef { db: row.db, rel: row.rel }).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// `f` in a transaction of its own, with a snapshot: for queries.
    fn spi<T>(&self, f: impl FnOnce() -> Result<T, pgrx::spi::Error>) -> Step<T> {
        self.in_transaction(true, f)
    }

    /// `f` in a transaction of its own without a snapshot, for calls that
    /// read no table: while this worker holds a snapshot, its xmin holds
    /// back every prune in the database (heap's HOT pruning too).
    fn call<T>(&self, f: impl FnOnce() -> Result<T, pgrx::spi::Error>) -> Step<T> {
        self.in_transaction(false, f)
    }

    fn in_transaction<T>(&self, snapshot: bool, f: impl FnOnce() -> Result<T, pgrx::spi::Error>) -> Step<T> {
        let f = std::panic::AssertUnwindSafe(f);
        let outcome = PgTryBuilder::new(|| {
            let f = f;
            if snapshot {
                return BackgroundWorker::transaction(std::panic::AssertUnwindSafe(move || (f.0)().map_err(|e| e.to_string())));
            }
            // SAFETY: this worker's main thread, between transactions; an
            // ERROR is caught below and aborts the transaction.
            unsafe {
                pg_sys::SetCurrentStatementStartTimestamp();
                pg_sys::StartTransactionCommand();
            }
            let result = (f.0)().map_err(|e| e.to_string());
            // SAFETY: as above.
            unsafe { pg_sys::CommitTransactionCommand() };
            result
        })
        .catch_others(|cause| {
            // SAFETY: an ERROR escaped mid-transaction: clean up as
            // PostgreSQL's error recovery would (a slot being created or
            // decoded is still acquired), then roll back.
            unsafe {
                if !pg_sys::MyReplicationSlot.is_null() {
                    pg_sys::ReplicationSlotRelease();
                }
                pg_sys::ReplicationSlotCleanup();
                pg_sys::AbortCurrentTransaction();
            }
            Err(match cause {
                pg_sys::panic::CaughtError::PostgresError(report)
                | pg_sys::panic::CaughtError::ErrorReport(report) => report.message().to_string(),
                pg_sys::panic::CaughtError::RustPanic { ereport, .. } => ereport.message().to_string(),
            })
        })
        .execute();
        outcome
    }

    /// Run a query in its own transaction. Read-only SPI on purpose: pgrx's
    /// read-write path assigns a transaction id, and a logical slot cannot be
    /// created by a transaction that has one.
    fn spi_run(&self, query: &str) -> Step<()> {
        let counted = format!("SELECT count(*) FROM ({query}) AS q");
        self.spi(|| select_one(&counted).map(|_| ()))
    }
}

/// Where recovery reports live: `$PGDATA/pasv_recovery/<db>.tsv`.
pub fn report_path(db: u32) -> PathBuf {
    // SAFETY: DataDir is set in every backend and worker.
    let dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) };
    PathBuf::from(dir.to_string_lossy().into_owned()).join("pasv_recovery").join(format!("{db}.tsv"))
}

/// Report columns: rel, cutoff, replayed ops, skipped ops, replayed
/// messages, skipped messages, WAL bytes decoded, seconds, mode.
fn write_report(
    db: u32,
    mode: DurabilityMode,
    rows: &[PersistenceRow],
    cutoffs: &HashMap<u32, u64>,
    run: &ReplayRun,
    wal_bytes: u64,
    seconds: f64,
) -> Step<()> {
    let mut text = String::new();
    let mut rels: Vec<u32> = rows.iter().map(|r| r.rel).chain(run.stats.keys().copied()).collect();
    rels.sort_unstable();
    rels.dedup();
    for rel in rels {
        let s = run.stats.get(&rel).copied().unwrap_or_default();
        let _ = writeln!(
            text,
            "{rel}\t{}\t{}\t{}\t{}\t{}\t{wal_bytes}\t{seconds:.6}\t{}",
            cutoffs.get(&rel).copied().unwrap_or(0),
            s.replayed_ops,
            s.skipped_ops,
            s.replayed_messages,
            s.skipped_messages,
            guc::durability_name(mode)
        );
    }
    let path = report_path(db);
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(path.parent().expect("has a parent"))?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text.as_bytes())?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| format!("writing {}: {e}", path.display()))
}

/// The test crash point: `$PGDATA/pasv_crash_point` holding
/// `replay_after_messages=N` makes the next recovery abort the process after
/// N applied messages. Read once and removed (one shot).
/// What `$PGDATA/pasv_crash_point` asks of the next recovery (one-shot; see
/// `crate::crash_point`).
enum CrashPoint {
    /// `replay_after_messages=N`: abort after N applied messages.
    AbortAfter(u64),
    /// `replay_stall`: wait, recovering, until the server stops (tests of a
    /// clean stop during recovery).
    Stall,
    /// `replay_fail`: every recovery fails until the file is removed (tests
    /// of a recovery that cannot succeed).
    Fail,
}

fn take_crash_point() -> Option<CrashPoint> {
    // SAFETY: DataDir is set.
    let dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) };
    let path = PathBuf::from(dir.to_string_lossy().into_owned()).join("pasv_crash_point");
    let text = std::fs::read_to_string(&path).ok()?;
    if text.trim() == "replay_fail" {
        return Some(CrashPoint::Fail);
    }
    let _ = std::fs::remove_file(&path);
    if text.trim() == "replay_stall" {
        pgrx::log!("pasv recovery: test hook armed: recovery stalls until the server stops");
        return Some(CrashPoint::Stall);
    }
    let n = text.trim().strip_prefix("replay_after_messages=")?.parse().ok()?;
    pgrx::log!("pasv recovery: crash point armed: abort after {n} applied messages");
    Some(CrashPoint::AbortAfter(n))
}

/// Wait (at most 10 minutes) until this worker is asked to stop.
fn stall_until_stopped() {
    let until = Instant::now() + Duration::from_secs(600);
    while Instant::now() < until && crate::ipc::client::worker_wait_latch(Duration::from_millis(100)) {}
}

/// Make the database's worker leave (it holds a connection to it, which
/// DROP DATABASE and CREATE DATABASE ... TEMPLATE refuse) and wait up to
/// 10 s for it. The engine starts none again until [`resume_worker`].
pub fn stop_worker(db: u32) {
    let Some(chan) = client::channel() else { return };
    let Some(slot) = chan.header().db_slot(db) else { return };
    slot.dropping.store(1, Ordering::Release);
    let pid = slot.worker_pid.load(Ordering::Acquire);
    if pid == 0 {
        return;
    }
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: signals the worker process (SIGTERM = 15).
    unsafe { kill(pid, 15) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while slot.worker_pid.load(Ordering::Acquire) == pid
        && crate::ipc::futex::process_alive(pid)
        && Instant::now() < deadline
    {
        client::nap(10);
    }
}

/// The statement that needed the worker away is over (a failed DROP
/// DATABASE, a database copied): let the engine start it again.
pub fn resume_worker(db: u32) {
    let Some(chan) = client::channel() else { return };
    if let Some(slot) = chan.header().db_slot(db) {
        slot.dropping.store(0, Ordering::Release);
    }
}

/// `s` as a `name` datum's storage (NUL-padded), or why it cannot be one.
fn name_data(s: &str) -> Step<pg_sys::NameData> {
    let mut name = pg_sys::NameData::default();
    if s.len() >= name.data.len() || s.contains('\0') {
        return Err(format!("{s:?} is not a valid name"));
    }
    for (d, &b) in name.data.iter_mut().zip(s.as_bytes()) {
        *d = b as std::ffi::c_char;
    }
    Ok(name)
}

fn select_one(query: &str) -> Result<Option<i64>, pgrx::spi::Error> {
    Spi::connect(|c| c.select(query, Some(1), &[])?.first().get_one::<i64>())
}
