//! Named crash points (OrioleDB's stop events, TiKV's `fail_point!`): crash
//! tests stop the system at a chosen step, deterministically, instead of
//! sleeping and hoping.
//!
//! `pasv.crash_point(name, skip)` (superuser) arms a point in shared memory;
//! the `skip + 1`-th process to reach it aborts, and the postmaster restarts
//! the cluster as after any crash. `pasv.clear_crash_points()` disarms all.
//! Reaching a disarmed point costs one atomic load. `replay_midway` is
//! different: shared memory does not survive the crash that recovery follows,
//! so it is written to `$PGDATA/pasv_crash_point`, which the next recovery
//! reads (and removes): it aborts after `skip + 1` applied messages.
//!
//! Points may be reached in any pasv process and thread (an engine flush
//! thread included): they touch only shared atomics, never PostgreSQL.

use crate::ipc::client;
use std::sync::atomic::Ordering;

/// Every crash point, in the order of a change's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// A backend logged a change and has not sent it to the engine.
    AfterLogBeforeWrite,
    /// A backend's writes are in the engine; its commit record is not written.
    AfterWriteBeforeCommit,
    /// The commit record is written; the flush flags are not sent.
    AfterCommitBeforeFlag,
    /// A RocksDB memtable flush began (its flags are about to reach disk).
    FlagFlush,
    /// The engine's main thread is about to make the WAL durable for a flush.
    FlushBeginWal,
    /// Midway through replay (armed through a file; see the module doc).
    ReplayMidway,
    /// CREATE TABLE: the column family exists, the transaction is open.
    CreateTable,
    /// TRUNCATE: the new incarnation exists, the transaction is open.
    Truncate,
    /// DROP TABLE: committed, the column family not dropped yet.
    DropTable,
    /// VACUUM: a batch of its row pass written and on disk (the point flushes
    /// the table's CF first when armed), the rest of the pass not written.
    VacuumBatchWritten,
    /// VACUUM: rows removed, index entries not yet.
    VacuumBetweenPasses,
    /// VACUUM: its re-packs written and flushed, VACUUM not committed.
    VacuumRepacked,
    /// VACUUM: relfrozenxid moved (in place, durable), VACUUM not committed.
    VacuumAfterRelfrozenxid,
    /// The replay worker is about to advance its slot.
    SlotAdvance,
}

pub const COUNT: usize = 14;

const ALL: [Point; COUNT] = [
    Point::AfterLogBeforeWrite,
    Point::AfterWriteBeforeCommit,
    Point::AfterCommitBeforeFlag,
    Point::FlagFlush,
    Point::FlushBeginWal,
    Point::ReplayMidway,
    Point::CreateTable,
    Point::Truncate,
    Point::DropTable,
    Point::VacuumBatchWritten,
    Point::VacuumBetweenPasses,
    Point::VacuumRepacked,
    Point::VacuumAfterRelfrozenxid,
    Point::SlotAdvance,
];

impl Point {
    pub fn name(self) -> &'static str {
        match self {
            Point::AfterLogBeforeWrite => "after_log_before_write",
            Point::AfterWriteBeforeCommit => "after_write_before_commit",
            Point::AfterCommitBeforeFlag => "after_commit_before_flag",
            Point::FlagFlush => "flag_flush",
            Point::FlushBeginWal => "flush_begin_wal",
            Point::ReplayMidway => "replay_midway",
            Point::CreateTable => "create_table",
            Point::Truncate => "truncate",
            Point::DropTable => "drop_table",
            Point::VacuumBatchWritten => "vacuum_batch_written",
            Point::VacuumBetweenPasses => "vacuum_between_passes",
            Point::VacuumRepacked => "vacuum_repacked",
            Point::VacuumAfterRelfrozenxid => "vacuum_after_relfrozenxid",
            Point::SlotAdvance => "slot_advance",
        }
    }

    pub fn from_name(name: &str) -> Option<Point> {
        ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Names of every point, for the error HINT and `pasv.crash_points()`.
pub fn names() -> impl Iterator<Item = &'static str> {
    ALL.into_iter().map(Point::name)
}

/// Whether `point` is armed (a caller that must set the scene first, such
/// as flushing what the crash should find on disk, asks before [`reach`]).
pub fn armed(point: Point) -> bool {
    client::channel().is_some_and(|chan| chan.header().crash_points[point as usize].load(Ordering::Relaxed) > 0)
}

/// Abort this process if `point` is armed and this is its chosen hit.
pub fn reach(point: Point) {
    let Some(chan) = client::channel() else { return };
    let counter = &chan.header().crash_points[point as usize];
    if counter.load(Ordering::Relaxed) == 0 {
        return;
    }
    // Armed with skip + 1: the hit that takes it from 1 to 0 fires.
    let fired = counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok_and(|before| before == 1);
    if fired {
        // eprintln, not ereport: this may be an engine thread.
        eprintln!("pasv: crash point {} reached: aborting (pid {})", point.name(), std::process::id());
        std::process::abort();
    }
}

/// Arm `point` (from SQL). `replay_midway` goes to `file` instead.
pub fn arm(point: Point, skip: u32, file: &std::path::Path) -> std::io::Result<()> {
    if point == Point::ReplayMidway {
        return std::fs::write(file, format!("replay_after_messages={}\n", u64::from(skip) + 1));
    }
    if let Some(chan) = client::channel() {
        chan.header().crash_points[point as usize].store(skip.saturating_add(1), Ordering::Release);
    }
    Ok(())
}

/// Disarm every point (and the recovery file).
pub fn clear(file: &std::path::Path) {
    if let Some(chan) = client::channel() {
        for counter in &chan.header().crash_points {
            counter.store(0, Ordering::Release);
        }
    }
    let _ = std::fs::remove_file(file);
}
