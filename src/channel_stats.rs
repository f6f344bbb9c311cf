//! Counters of the backend ⇄ engine channel, read from SQL: how many round
//! trips each kind of request costs, how many of them slept, and what the
//! engine's service threads did. The counters live in the channel's shared
//! memory ([`crate::ipc::SlotStats`], [`crate::ipc::EngineStat`]); this
//! module only reads them.

use crate::ipc::{client, EngineStat, KindStats, REQUEST_KINDS};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;
use std::sync::atomic::Ordering;

/// Round trips over the channel by request kind: `scope => 'all'` (every
/// backend since the server started) or `'backend'` (this session).
#[pg_extern]
fn channel_stats(
    scope: default!(&str, "'all'"),
) -> TableIterator<
    'static,
    (
        name!(request, String),
        name!(calls, i64),
        name!(posted, i64),
        name!(slept, i64),
        name!(bytes_sent, i64),
        name!(bytes_received, i64),
    ),
> {
    let Some(chan) = client::channel() else {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "pasv is not loaded through shared_preload_libraries",
            "Add pasv to shared_preload_libraries and restart the server.",
        );
    };
    let totals: Vec<KindStats> = match scope {
        "all" => (0..chan.nslots()).map(|i| chan.slot(i).stats.snapshot()).fold(
            vec![[0; 5]; REQUEST_KINDS],
            |mut acc, slot| {
                for (a, r) in acc.iter_mut().zip(slot) {
                    a.iter_mut().zip(r).for_each(|(a, x)| *a += x);
                }
                acc
            },
        ),
        "backend" => client::my_stats().unwrap_or_default(),
        other => crate::error::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("unknown scope \"{other}\" for pasv.channel_stats"),
            "Use 'all' (every backend since the server started) or 'backend' (this session).",
        ),
    };
    let rows: Vec<_> = totals
        .into_iter()
        .enumerate()
        .filter(|(_, r)| r[0] + r[1] > 0)
        .filter_map(|(k, r)| {
            let name = pasv_am::protocol::op_name(k as u8)?;
            Some((name.to_string(), r[0] as i64, r[1] as i64, r[2] as i64, r[3] as i64, r[4] as i64))
        })
        .collect();
    TableIterator::new(rows)
}

/// What the engine's service threads did since the server started.
#[pg_extern]
fn engine_stats() -> TableIterator<'static, (name!(counter, String), name!(value, i64))> {
    let Some(chan) = client::channel() else {
        return TableIterator::new(Vec::new());
    };
    let h = chan.header();
    let rows = [
        ("served", EngineStat::Served),
        ("service_thread_sleeps", EngineStat::Sleeps),
        ("service_thread_wakes", EngineStat::DoorbellWakes),
        ("backend_wakes", EngineStat::BackendWakes),
        ("service_thread_yields", EngineStat::PollYields),
        ("service_thread_yields_busy", EngineStat::BusyYields),
    ]
    .map(|(n, stat)| (n.to_string(), h.engine_stat(stat) as i64));
    let sum = |counter: fn(&crate::ipc::SlotStats) -> &std::sync::atomic::AtomicU64| -> i64 {
        (0..chan.nslots()).map(|i| counter(&chan.slot(i).stats).load(Ordering::Relaxed) as i64).sum()
    };
    let locks = crate::shmem::row_locks().map(|l| l.stats()).unwrap_or_default();
    let slots = [
        ("submits_behind_a_posted_request", sum(|s| &s.waited_for_previous)),
        ("read_aheads_discarded", sum(|s| &s.ahead_discarded)),
        // Row locks granted in shared memory, and lock requests sent on to
        // the engine's table because their bucket was full or spilled.
        ("row_locks_shared", locks.granted as i64),
        ("row_locks_spilled", locks.spilled as i64),
    ]
    .map(|(n, v)| (n.to_string(), v));
    TableIterator::new(rows.into_iter().chain(slots))
}

/// The row cache's counters since the server started (every backend):
/// lookups answered from it, lookups that went on to the engine, answers
/// the engine installed after such a miss, and its size in sets (64 ways
/// of 128 bytes each). All zero when `pasv.row_cache_size` is 0.
#[pg_extern]
fn row_cache_stats() -> TableIterator<'static, (name!(hits, i64), name!(misses, i64), name!(fills, i64), name!(sets, i64))> {
    let s = crate::shmem::row_cache().map(|c| c.stats()).unwrap_or_default();
    TableIterator::once((s.hits as i64, s.misses as i64, s.fills as i64, s.sets as i64))
}
