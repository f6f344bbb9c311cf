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

/// Every pasv column family: the database and relfilenumber it stores, its
/// RocksDB name (which carries the incarnation), the next rowid to hand out,
/// and RocksDB's estimates of its keys and bytes (memtables included).
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

/// Number of stored versions (live, dead and tombstones) of a pasv table:
/// what VACUUM and pruning reduce. Reads the whole column family.
#[pg_extern]
fn table_versions(rel: pg_sys::Oid) -> i64 {
    // SAFETY: the relation is opened and closed here with AccessShareLock.
    unsafe {
        let r = pg_sys::relation_open(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        if !crate::tam::is_pasv(r) {
            pg_sys::relation_close(r, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
                "pasv.table_versions() needs a pasv table",
                "Pass a table created USING pasv.",
            );
        }
        let cf = crate::tam::cf_of(r);
        pg_sys::relation_close(r, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let (start, end) = pasv_am::keys::row_range(0, pasv_am::keys::MAX_ROWID + 1);
        let mut count = 0i64;
        crate::tam::count_versions(cf, start, end, &mut count);
        count
    }
}
