//! SQL-callable functions in schema `pasv`.

use crate::engine_client;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;
use std::time::Instant;

/// Round trips over this backend's channel slot: `n` pings (after 1000
/// warm-up pings), with percentiles in microseconds. Used by
/// `bench/channel_roundtrip.sh`; not a test.
#[pg_extern]
fn channel_roundtrip(
    n: i32,
) -> TableIterator<
    'static,
    (
        name!(requests, i64),
        name!(p50_us, f64),
        name!(p90_us, f64),
        name!(p99_us, f64),
        name!(max_us, f64),
        name!(mean_us, f64),
    ),
> {
    let n = n.clamp(1, 10_000_000) as usize;
    for _ in 0..1000 {
        if let Err(e) = engine_client::ping() {
            e.raise("pinging the engine");
        }
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        if let Err(e) = engine_client::ping() {
            e.raise("pinging the engine");
        }
        samples.push(t.elapsed().as_nanos() as f64 / 1000.0);
    }
    let mean = samples.iter().sum::<f64>() / n as f64;
    samples.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| samples[((n as f64 * p) as usize).min(n - 1)];
    TableIterator::once((n as i64, pct(0.50), pct(0.90), pct(0.99), samples[n - 1], mean))
}

/// Flush every pasv memtable to SST files and wait (tests, operations).
#[pg_extern]
fn flush() {
    if let Err(e) = engine_client::flush_all() {
        e.raise("flushing memtables");
    }
}

/// Every pasv table's column family: the database and relfilenumber it
/// stores, its name by identity (`t.`/`u.` for a logged/unlogged table, then
/// database, relfilenumber and incarnation; the engine may hold it in a spare
/// CF bound to that identity), the next rowid to hand out, and the engine's
/// estimates of its keys and bytes (memtables included).
#[pg_extern]
fn column_families() -> TableIterator<
    'static,
    (
        name!(database_oid, pg_sys::Oid),
        name!(relfilenumber, pg_sys::Oid),
        name!(cf_name, String),
        name!(next_rowid, i64),
        name!(approx_keys, i64),
        name!(approx_bytes, i64),
    ),
> {
    let (cfs, truncated) = match engine_client::list_cfs() {
        Ok(x) => x,
        Err(e) => e.raise("listing column families"),
    };
    if truncated {
        pgrx::warning!("pasv.column_families(): list truncated to {} entries by the channel buffer", cfs.len());
    }
    let mut rows = Vec::with_capacity(cfs.len());
    for (db, rel, name) in cfs {
        // A CF dropped since the list was taken is simply left out.
        if let Ok(info) = engine_client::cf_info(pasv_am::protocol::CfRef { db, rel }) {
            rows.push((
                pg_sys::Oid::from(db),
                pg_sys::Oid::from(rel),
                name,
                info.next_rowid as i64,
                info.approx_keys as i64,
                info.approx_bytes as i64,
            ));
        }
    }
    TableIterator::new(rows)
}

/// Open `rel` with AccessShareLock for the SQL function `what`, which needs
/// a pasv table (an ERROR with a HINT otherwise). The caller closes it with
/// the same lock.
///
/// # Safety
/// A backend inside a transaction.
pub(crate) unsafe fn open_pasv_table(rel: pg_sys::Oid, what: &str) -> pg_sys::Relation {
    let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
    let r = pg_sys::relation_open(rel, lock);
    if !crate::tam::is_pasv(r) {
        pg_sys::relation_close(r, lock);
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            format!("{what} needs a pasv table"),
            "Pass a table created USING pasv.",
        );
    }
    r
}

/// The column family of pasv table `rel`, for the SQL function `what`.
fn pasv_cf(rel: pg_sys::Oid, what: &str) -> pasv_am::protocol::CfRef {
    // SAFETY: opened and closed here with AccessShareLock.
    unsafe {
        let r = open_pasv_table(rel, what);
        let cf = crate::tam::cf_of(r);
        pg_sys::relation_close(r, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        cf
    }
}

/// Number of stored versions (live, dead and tombstones) of a pasv table:
/// what VACUUM and pruning reduce. Reads the whole column family.
#[pg_extern]
fn table_versions(rel: pg_sys::Oid) -> i64 {
    let cf = pasv_cf(rel, "pasv.table_versions()");
    // SAFETY: a backend inside a transaction.
    unsafe {
        let (start, end) = pasv_am::keys::row_range(0, pasv_am::keys::MAX_ROWID + 1);
        let mut count = 0i64;
        crate::tam::count_versions(cf, start, end, &mut count);
        count
    }
}

/// Every stored version of a pasv table, newest first within a row:
/// diagnostics (what pruning and VACUUM leave, how chains look).
#[pg_extern]
fn versions(
    rel: pg_sys::Oid,
) -> TableIterator<
    'static,
    (
        name!(rowid, i64),
        name!(version, i64),
        name!(xid, i64),
        name!(tombstone, bool),
        name!(moved_to, Option<i64>),
        name!(frozen, bool),
    ),
> {
    let cf = pasv_cf(rel, "pasv.versions()");
    // SAFETY: a backend inside a transaction.
    let rows = unsafe {
        let (start, end) = pasv_am::keys::row_range(0, pasv_am::keys::MAX_ROWID + 1);
        let mut rows = Vec::new();
        crate::tam::versions::walk(cf, start, end, 0, "listing versions", |v| {
            let h = v.header;
            rows.push((v.rowid as i64, i64::from(v.version), h.xid as i64, h.is_tombstone(), h.is_moved().then_some(h.moved_to as i64), h.is_frozen()));
            true
        });
        rows
    };
    TableIterator::new(rows)
}

// ---------------------------------------------------------------------------
// Durability status (DESIGN §5-6): raw functions, and views over them that
// give relations, LSNs and slots their SQL types.
// ---------------------------------------------------------------------------

extern "C-unwind" {
    // utils/relfilenumbermap.h; not in pgrx's PG16 bindings.
    fn RelidByRelfilenumber(reltablespace: pg_sys::Oid, relfilenumber: pg_sys::Oid) -> pg_sys::Oid;
}

/// The table of relfilenumber `rel` if it is in this database (pasv tables
/// live in the default tablespace).
fn relid_of(db: u32, rel: u32) -> Option<pg_sys::Oid> {
    // SAFETY: plain read of a backend global, and a catalog lookup through
    // PostgreSQL's relfilenumber map inside a transaction.
    unsafe {
        if db != u32::from(pg_sys::MyDatabaseId) {
            return None;
        }
        let oid = pg_sys::ffi::pg_guard_ffi_boundary(|| RelidByRelfilenumber(pg_sys::Oid::INVALID, pg_sys::Oid::from(rel)));
        (oid != pg_sys::Oid::INVALID).then_some(oid)
    }
}

/// Every pasv CF and where it stands: its persisted flush flag (the local
/// DPP), the newest flag in its memtable, memtable and SST bytes, and how
/// far (WAL bytes) its DPP lags the current WAL position when it has
/// unflushed data.
#[pg_extern]
fn cf_status_raw() -> TableIterator<
    'static,
    (
        name!(database_oid, pg_sys::Oid),
        name!(relfilenumber, pg_sys::Oid),
        name!(relid, Option<pg_sys::Oid>),
        name!(incarnation, i64),
        name!(persisted_flag_lsn, String),
        name!(latest_flag_lsn, String),
        name!(local_dpp, String),
        name!(unflushed, bool),
        name!(memtable_bytes, i64),
        name!(sst_bytes, i64),
        name!(lag_bytes, i64),
    ),
> {
    let rows = match engine_client::persistence(0) {
        Ok(rows) => rows,
        Err(e) => e.raise("reading the persistence state"),
    };
    // SAFETY: plain WAL position read.
    let now = unsafe { pg_sys::GetXLogInsertRecPtr() };
    TableIterator::new(rows.into_iter().map(move |r| {
        let dpp = pasv_am::flush_flag::local_dpp(&r);
        (
            pg_sys::Oid::from(r.db),
            pg_sys::Oid::from(r.rel),
            relid_of(r.db, r.rel),
            r.incarnation as i64,
            crate::fmt_lsn(r.persisted_lsn),
            crate::fmt_lsn(r.latest_flag_lsn),
            crate::fmt_lsn(dpp),
            r.dirty,
            r.memtable_bytes as i64,
            r.sst_bytes as i64,
            if r.dirty { now.saturating_sub(dpp) as i64 } else { 0 },
        )
    }))
}

/// Every database using pasv: durability mode, recovery and slot state,
/// the global DPP its replay worker last computed, and the worker's pid.
#[pg_extern]
fn database_status_raw() -> TableIterator<
    'static,
    (
        name!(database_oid, pg_sys::Oid),
        name!(durability, String),
        name!(recovering, bool),
        name!(slot_state, String),
        name!(slot_name, String),
        name!(global_dpp, String),
        name!(worker_pid, i32),
    ),
> {
    use crate::ipc::{DB_READY, SLOT_FAILED, SLOT_NONE, SLOT_NOT_NEEDED, SLOT_READY};
    use std::sync::atomic::Ordering;
    let mode = crate::guc::durability_name(crate::guc::durability()).to_string();
    let mut rows = Vec::new();
    if let Some(chan) = crate::ipc::client::channel() {
        for s in &chan.header().dbs {
            let db = s.db.load(Ordering::Acquire);
            if db == 0 {
                continue;
            }
            let slot_state = match s.slot.load(Ordering::Acquire) {
                SLOT_NONE => "none (commits flush)",
                SLOT_READY => "ready",
                SLOT_FAILED => "failed (commits flush)",
                SLOT_NOT_NEEDED => "not needed",
                _ => "unknown",
            };
            rows.push((
                pg_sys::Oid::from(db),
                mode.clone(),
                s.recovery.load(Ordering::Acquire) != DB_READY, // recovering, or failed to
                slot_state.to_string(),
                crate::replay::worker::slot_name(db),
                crate::fmt_lsn(s.global_dpp.load(Ordering::Acquire)),
                s.worker_pid.load(Ordering::Acquire),
            ));
        }
    }
    TableIterator::new(rows)
}

/// The last recovery of this database, per table: its cutoff (the local
/// DPP it started from), operations and messages replayed and skipped, WAL
/// bytes decoded and seconds taken (the same for every row).
#[pg_extern]
fn recovery_report_raw() -> TableIterator<
    'static,
    (
        name!(relfilenumber, pg_sys::Oid),
        name!(relid, Option<pg_sys::Oid>),
        name!(cutoff_lsn, String),
        name!(replayed_ops, i64),
        name!(skipped_ops, i64),
        name!(replayed_messages, i64),
        name!(skipped_messages, i64),
        name!(wal_bytes, i64),
        name!(seconds, f64),
        name!(durability, String),
    ),
> {
    // SAFETY: plain read of a backend global.
    let db = u32::from(unsafe { pg_sys::MyDatabaseId });
    let text = std::fs::read_to_string(crate::replay::worker::report_path(db)).unwrap_or_default();
    let rows: Vec<_> = text
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() != 9 {
                return None;
            }
            let n = |i: usize| f[i].parse::<i64>().unwrap_or(0);
            let rel = f[0].parse::<u32>().ok()?;
            Some((
                pg_sys::Oid::from(rel),
                relid_of(db, rel),
                crate::fmt_lsn(n(1) as u64),
                n(2),
                n(3),
                n(4),
                n(5),
                n(6),
                f[7].parse::<f64>().unwrap_or(0.0),
                f[8].to_string(),
            ))
        })
        .collect();
    TableIterator::new(rows)
}

pgrx::extension_sql!(
    r#"
CREATE VIEW pasv.cf_status AS
  SELECT database_oid, relfilenumber, relid::regclass AS relation, incarnation,
         persisted_flag_lsn::pg_lsn, latest_flag_lsn::pg_lsn, local_dpp::pg_lsn,
         unflushed, memtable_bytes, sst_bytes, lag_bytes
    FROM pasv.cf_status_raw();
COMMENT ON VIEW pasv.cf_status IS 'Every pasv column family: flush flags, local data persistence point, memtable/SST bytes, lag';
CREATE VIEW pasv.database_status AS
  SELECT d.database_oid, db.datname, d.durability, d.recovering, d.slot_state, d.slot_name,
         d.global_dpp::pg_lsn, s.confirmed_flush_lsn AS slot_confirmed_lsn, s.restart_lsn AS slot_restart_lsn,
         pg_current_wal_lsn() - s.restart_lsn AS retained_wal_bytes, d.worker_pid
    FROM pasv.database_status_raw() d
    LEFT JOIN pg_database db ON db.oid = d.database_oid
    LEFT JOIN pg_replication_slots s ON s.slot_name = d.slot_name;
COMMENT ON VIEW pasv.database_status IS 'Every database using pasv: recovery and slot state, global data persistence point, WAL retained';
CREATE VIEW pasv.recovery_report AS
  SELECT relfilenumber, relid::regclass AS relation, cutoff_lsn::pg_lsn, replayed_ops, skipped_ops,
         replayed_messages, skipped_messages, wal_bytes, seconds, durability
    FROM pasv.recovery_report_raw();
COMMENT ON VIEW pasv.recovery_report IS 'The last pasv recovery of this database, per table';
"#,
    name = "durability_views",
    requires = [cf_status_raw, database_status_raw, recovery_report_raw]
);

/// Flush one pasv table's memtables to SST files and wait (tests,
/// operations): like a flush RocksDB starts by itself, it first makes the WAL
/// durable up to the table's newest logged change.
#[pg_extern]
fn flush_table(rel: pg_sys::Oid) {
    let cf = pasv_cf(rel, "pasv.flush_table()");
    if let Err(e) = engine_client::flush_cf(cf) {
        e.raise("flushing a table");
    }
}

// ---------------------------------------------------------------------------
// Crash points for crash tests (see crate::crash_point).
// ---------------------------------------------------------------------------

fn crash_point_file() -> std::path::PathBuf {
    // SAFETY: DataDir is set in every backend.
    let dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) };
    std::path::PathBuf::from(dir.to_string_lossy().into_owned()).join("pasv_crash_point")
}

fn require_superuser(what: &str) {
    // SAFETY: plain catalog check in a backend.
    if !unsafe { pg_sys::superuser() } {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("{what} is for superusers"),
            "Crash points abort the server on purpose; connect as a superuser.",
        );
    }
}

/// Arm the named crash point: the `skip + 1`-th process to reach it aborts
/// (and the server restarts as after any crash).
#[pg_extern]
fn crash_point(name: &str, skip: default!(i32, 0)) {
    require_superuser("pasv.crash_point()");
    let Some(point) = crate::crash_point::Point::from_name(name) else {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("unknown pasv crash point \"{name}\""),
            format!("Known crash points: {}.", crate::crash_point::names().collect::<Vec<_>>().join(", ")),
        );
    };
    if skip < 0 {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("skip must not be negative (got {skip})"),
            "Pass how many times the point is passed before it fires (0: the first time).",
        );
    }
    if let Err(e) = crate::crash_point::arm(point, skip as u32, &crash_point_file()) {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!("arming crash point {name}: {e}"),
            "Check that the data directory is writable.",
        );
    }
}

/// Test hook: the engine holds the next row write it receives (from any
/// backend) for `microseconds` before applying it, so tests can reach the
/// window in which a posted write is logged and not yet applied
/// (src/ipc/HOT_PATH.md). At most 10 s.
#[pg_extern]
fn test_delay_next_write(microseconds: i32) {
    require_superuser("pasv.test_delay_next_write()");
    if !(0..=10_000_000).contains(&microseconds) {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("delay must be between 0 and 10000000 microseconds (got {microseconds})"),
            "Pass a delay of at most 10 seconds.",
        );
    }
    if let Some(chan) = crate::ipc::client::channel() {
        chan.header().test_write_delay_us.store(microseconds as u32, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Disarm every crash point.
#[pg_extern]
fn clear_crash_points() {
    require_superuser("pasv.clear_crash_points()");
    crate::crash_point::clear(&crash_point_file());
}

/// The names of every crash point.
#[pg_extern]
fn crash_points() -> SetOfIterator<'static, String> {
    SetOfIterator::new(crate::crash_point::names().map(str::to_owned))
}

// ---------------------------------------------------------------------------
// The way out of a failed recovery (see crate::replay).
// ---------------------------------------------------------------------------

/// Start this database's failed pasv recovery again (after fixing its cause).
#[pg_extern]
fn retry_recovery() -> bool {
    require_superuser("pasv.retry_recovery()");
    crate::replay::resolve_failed_recovery(false)
}

/// Give up this database's failed pasv recovery: its tables become usable
/// as they are on disk; committed changes that were not replayed are lost.
#[pg_extern]
fn abandon_recovery() -> bool {
    require_superuser("pasv.abandon_recovery()");
    let abandoned = crate::replay::resolve_failed_recovery(true);
    if abandoned {
        crate::error::warn(
            PgSqlErrorCode::ERRCODE_WARNING,
            "pasv recovery abandoned: committed changes to this database's pasv tables that were not replayed are lost",
            "Check the tables (pasv.verify) and restore lost rows from a backup if needed.",
        );
    }
    abandoned
}
