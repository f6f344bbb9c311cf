//! pasv's logical decoding output plugin (the extension library is also the
//! plugin: `pg_create_logical_replication_slot(name, 'pasv')`).
//!
//! Logical decoding hands transactional messages over at commit, in commit
//! order, with `txn->end_lsn` = the end of the commit record; messages of
//! aborted (sub)transactions never arrive. In a replay worker that has set a
//! [`ReplayRun`], each `pasv` message is applied to its CF only when the
//! transaction committed after the CF's cutoff (its local DPP, DESIGN §6);
//! elsewhere (someone peeking at the slot) the plugin describes the messages
//! as text, one line each.

use crate::engine_client;
use crate::error::CallError;
use pasv_am::protocol::{decode_request, expand, put_batch_len, ErrorCode, Request};
use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, CStr};
use std::time::{Duration, Instant};

/// What one replayed table saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct RelStats {
    pub replayed_ops: u64,
    pub skipped_ops: u64,
    pub replayed_messages: u64,
    pub skipped_messages: u64,
}

/// One recovery pass over a database's retained WAL.
pub struct ReplayRun {
    pub db: u32,
    /// Cutoff per table: transactions that committed at or before it are
    /// already persisted there. Tables not listed have no CF (dropped).
    pub cutoffs: HashMap<u32, u64>,
    /// Creation point per table (its CF incarnation's): a message logged
    /// before it belongs to an emptied or reused past (a TRUNCATE in the
    /// creating transaction, a reused relfilenumber), whenever it committed.
    pub created: HashMap<u32, u64>,
    pub stats: BTreeMap<u32, RelStats>,
    /// End of the last commit record decoded.
    pub last_commit: u64,
    pub messages: u64,
    /// Crash point for tests: abort the process after this many applied messages.
    pub crash_after: Option<u64>,
    pub applied: u64,
    started: Instant,
    last_log: Instant,
}

impl ReplayRun {
    pub fn new(db: u32, cutoffs: HashMap<u32, u64>, created: HashMap<u32, u64>, crash_after: Option<u64>) -> ReplayRun {
        ReplayRun {
            db,
            cutoffs,
            created,
            stats: BTreeMap::new(),
            last_commit: 0,
            messages: 0,
            crash_after,
            applied: 0,
            started: Instant::now(),
            last_log: Instant::now(),
        }
    }

    /// Apply one message (whose record ends at `message_lsn`: PostgreSQL's
    /// decoder hands out a message with its record's end) of a transaction
    /// whose commit record ends at `commit_lsn`, if its CF lost it.
    fn apply(&mut self, commit_lsn: u64, message_lsn: u64, message: &[u8]) -> Result<(), CallError> {
        self.messages += 1;
        self.last_commit = self.last_commit.max(commit_lsn);
        // Logged in the WAL's compact form (pasv_am::protocol::wal_form).
        let Ok(message) = expand(message) else {
            pgrx::warning!("pasv recovery: skipping a damaged compact change message ({} bytes)", message.len());
            return Ok(());
        };
        let message: &[u8] = &message;
        let Ok(Request::PutBatch { cf, batch, .. }) = decode_request(message) else {
            pgrx::warning!("pasv recovery: skipping a pasv message that is not a change batch ({} bytes)", message.len());
            return Ok(());
        };
        // The request alone: its logical notes are for logical decoding.
        let message = &message[..put_batch_len(batch).min(message.len())];
        if cf.db != self.db {
            return Ok(());
        }
        let stats = self.stats.entry(cf.rel).or_default();
        // A message logged before the creation point ends at or below it
        // (exactly at it when it was the last record inserted before the
        // point was taken); one logged after it ends above it.
        let behind = self.cutoffs.get(&cf.rel).is_some_and(|&cutoff| commit_lsn > cutoff)
            && self.created.get(&cf.rel).is_some_and(|&created| message_lsn > created);
        let applied = behind
            && match engine_client::put_logged_message(message) {
                Ok(()) => true,
                // Dropped while we replay: nothing to restore.
                Err(CallError::Engine { code: ErrorCode::NoSuchCf, .. }) => false,
                Err(e) => return Err(e),
            };
        if applied {
            stats.replayed_ops += batch.len() as u64;
            stats.replayed_messages += 1;
            self.applied += 1;
            if self.crash_after.is_some_and(|n| self.applied >= n) {
                pgrx::log!("pasv recovery: crash point reached after {} applied messages; aborting", self.applied);
                std::process::abort();
            }
        } else {
            stats.skipped_ops += batch.len() as u64;
            stats.skipped_messages += 1;
        }
        if self.last_log.elapsed() >= Duration::from_secs(5) {
            self.last_log = Instant::now();
            let (replayed, skipped) = self.totals();
            pgrx::log!(
                "pasv recovery of database {}: {:.0} s, decoded to {}, {} operations replayed, {} skipped",
                self.db,
                self.started.elapsed().as_secs_f64(),
                crate::fmt_lsn(commit_lsn),
                replayed,
                skipped
            );
        }
        Ok(())
    }

    pub fn totals(&self) -> (u64, u64) {
        self.stats.values().fold((0, 0), |(r, s), x| (r + x.replayed_ops, s + x.skipped_ops))
    }
}

thread_local! {
    static RUN: RefCell<Option<ReplayRun>> = const { RefCell::new(None) };
}

/// Decode with `run` in effect; returns it with its counts.
pub fn with_run<R>(run: ReplayRun, decode: impl FnOnce() -> R) -> (R, ReplayRun) {
    RUN.with(|r| *r.borrow_mut() = Some(run));
    let result = decode();
    let run = RUN.with(|r| r.borrow_mut().take()).expect("replay run still set");
    (result, run)
}

/// Entry point PostgreSQL looks up when a slot names the `pasv` plugin.
///
/// # Safety
/// Called by PostgreSQL with a valid callbacks struct.
#[unsafe(no_mangle)]
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn _PG_output_plugin_init(cb: *mut pg_sys::OutputPluginCallbacks) {
    (*cb).startup_cb = Some(startup);
    (*cb).begin_cb = Some(begin);
    (*cb).change_cb = Some(change);
    (*cb).commit_cb = Some(commit);
    (*cb).message_cb = Some(message);
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn startup(
    _ctx: *mut pg_sys::LogicalDecodingContext,
    options: *mut pg_sys::OutputPluginOptions,
    _is_init: bool,
) {
    (*options).output_type = pg_sys::OutputPluginOutputType::OUTPUT_PLUGIN_TEXTUAL_OUTPUT;
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn begin(_ctx: *mut pg_sys::LogicalDecodingContext, _txn: *mut pg_sys::ReorderBufferTXN) {}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn commit(
    _ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
    _commit_lsn: pg_sys::XLogRecPtr,
) {
}

/// Heap changes are not pasv's business.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn change(
    _ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
    _relation: pg_sys::Relation,
    _change: *mut pg_sys::ReorderBufferChange,
) {
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn message(
    ctx: *mut pg_sys::LogicalDecodingContext,
    txn: *mut pg_sys::ReorderBufferTXN,
    message_lsn: pg_sys::XLogRecPtr,
    transactional: bool,
    prefix: *const c_char,
    message_size: pg_sys::Size,
    message: *const c_char,
) {
    if !transactional || txn.is_null() || CStr::from_ptr(prefix) != crate::wal::PREFIX {
        return;
    }
    let bytes = std::slice::from_raw_parts(message as *const u8, message_size);
    let commit_lsn = (*txn).end_lsn;
    let outcome = RUN.with(|r| r.borrow_mut().as_mut().map(|run| run.apply(commit_lsn, message_lsn, bytes)));
    match outcome {
        Some(Ok(())) => {}
        Some(Err(e)) => e.raise("replaying a logged change"),
        None => describe(ctx, u32::from((*txn).xid), message_lsn, commit_lsn, bytes),
    }
}

/// One text line per message for whoever peeks at a pasv slot.
unsafe fn describe(ctx: *mut pg_sys::LogicalDecodingContext, xid: u32, lsn: u64, commit_lsn: u64, bytes: &[u8]) {
    let expanded = expand(bytes).ok();
    let line = match expanded.as_deref().map(decode_request) {
        Some(Ok(Request::PutBatch { cf, batch, .. })) => format!(
            "pasv xid {xid} message {} commit {}: table {cf}, {} entries",
            crate::fmt_lsn(lsn),
            crate::fmt_lsn(commit_lsn),
            batch.len()
        ),
        _ => format!("pasv xid {xid} message {}: {} bytes, not a change batch", crate::fmt_lsn(lsn), bytes.len()),
    };
    pg_sys::OutputPluginPrepareWrite(ctx, true);
    pg_sys::appendBinaryStringInfo((*ctx).out, line.as_ptr() as *const std::ffi::c_void, line.len() as i32);
    pg_sys::OutputPluginWrite(ctx, true);
}
