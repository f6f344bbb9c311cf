//! Typed calls from a backend to the engine, over this backend's channel
//! slot, plus the backend's write-behind buffer of new rows.
//!
//! Write-behind: new rows, and changes of rows under a row lock held in
//! shared memory, are collected here, for up to [`MAX_TABLES`] tables of
//! one transaction id, and sent in one request (a `PutBatch`, or a
//! `PutBatches` of a part per table) when the buffer fills, before any
//! request but a read, before a read of a buffered row (so every read this
//! backend makes sees its own writes), when the transaction id changes, at
//! pre-commit and at `finish_bulk_insert`.
//! New rows of tables with indexes too: another backend's
//! unique check may fetch a row by TID through its index entry at any
//! moment, so the buffer's new rows are published in shared memory
//! (`ipc::buffered_rows`) before their index entries exist, and the check
//! reports their creator as an inserter in progress, as heap's dirty
//! snapshot does (`tam/fetch.rs`). Rows the check must read (a table with
//! an exclusion constraint: a lossy index rechecks the row's values) are
//! written through at once (posted: see `put_batch_raw`; the checker's
//! fence, `ipc::client::fence_others`, waits for posted requests).
//!
//! Owed logs (DESIGN §4: a write is logged under the xid whose fate decides
//! it). Buffered rows of a (sub)transaction may be sent by the first engine
//! call inside a subtransaction it started (PostgreSQL offers no hook before a
//! subtransaction begins), so their message is logged under that deeper
//! subtransaction's xid, and logical decoding discards it if that one aborts,
//! while the rows, created by the owner, commit with the owner. Such a
//! message is kept as *owed* until the subtransaction it was logged under
//! commits up to the owner's level; if it aborts first, the message is logged
//! again before this backend's next engine call (so before anything else it
//! logs) or at pre-commit. Rows of an owner that aborts are dead: their debt
//! goes with them.
//!
//! Calls the channel (`crate::ipc::client`), the WAL (`crate::wal`: logging
//! a change, and the rules before an engine write) and records what the
//! transaction wrote in `crate::written_tables`. It never calls
//! `crate::flushflag`: that module calls this one, and only that way round.

use crate::error::CallError;
use crate::ipc::buffered_rows;
use crate::ipc::client::{self, ChannelError};
use pasv_am::protocol::{self, BatchBuilder, CfRef, LockMode, Note, PersistenceRow, Request, Response};
use std::cell::RefCell;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::HashMap;

/// Tables whose rows the buffer holds at once. A transaction that writes
/// several tables row by row (TPC-C-like: an order's lines and the stock
/// rows they update) sent the buffer at every switch of table, a post per
/// row, each waiting for the one before.
const MAX_TABLES: usize = 8;

/// Rows of one table in the buffer.
struct TableRows {
    cf: CfRef,
    /// The table's changes are logged (not unlogged or temporary).
    logged: bool,
    batch: BatchBuilder,
    /// The rowids the buffered rows change: a read of another row from the
    /// row cache need not send them first.
    rows: RowSet,
}

/// A set of rowids, kept as a sorted run while they come in ascending
/// order (new rows do: a hash insert a row was 2 % of an `INSERT …
/// SELECT`'s backend time), the others in a hash set.
#[derive(Default)]
struct RowSet {
    ascending: Vec<u64>,
    other: FxHashSet<u64>,
}

impl RowSet {
    fn insert(&mut self, rowid: u64) {
        match self.ascending.last() {
            Some(&last) if rowid <= last => {
                if rowid != last {
                    self.other.insert(rowid);
                }
            }
            _ => self.ascending.push(rowid),
        }
    }

    fn clear(&mut self) {
        self.ascending.clear();
        self.other.clear();
    }

    /// Whether a rowid of `rows` is in the set.
    fn any_in(&self, rows: std::ops::RangeInclusive<u64>) -> bool {
        let (lo, hi) = (*rows.start(), *rows.end());
        let first = self.ascending.partition_point(|&r| r < lo);
        if self.ascending.get(first).is_some_and(|&r| r <= hi) {
            return true;
        }
        if self.other.is_empty() {
            false
        } else if hi.saturating_sub(lo) < 64 {
            rows.into_iter().any(|r| self.other.contains(&r))
        } else {
            self.other.iter().any(|r| rows.contains(r))
        }
    }
}

/// Rows of one transaction id, of up to [`MAX_TABLES`] tables, not yet
/// sent. Sent together: one `PutBatch`, or one `PutBatches` of a part per
/// table.
struct Pending {
    /// The (sub)transaction id that made the rows (`None`: empty).
    xid: Option<u32>,
    /// Transaction nest level of the rows' creator (see "Owed logs").
    level: i32,
    tables: Vec<TableRows>,
    /// The table the last row joined (a note goes with its rows).
    current: usize,
    /// Emptied tables' allocations, for reuse.
    spare: Vec<TableRows>,
}

impl Pending {
    /// Forget the buffered rows (sent, or dead with their transaction).
    fn clear(&mut self) {
        self.xid = None;
        while let Some(t) = self.tables.pop() {
            self.recycle(t);
        }
        buffered_rows::withdraw();
    }

    fn recycle(&mut self, mut t: TableRows) {
        t.batch.clear();
        t.rows.clear();
        self.spare.push(t);
    }

    /// Bytes of the request that would carry the buffer (0: empty).
    fn request_len(&self) -> usize {
        match self.tables.as_slice() {
            [] => 0,
            [one] => one.batch.encoded_len(),
            many => {
                protocol::REQUEST_HEADER_LEN
                    + many.iter().map(|t| protocol::PART_PREFIX_LEN + t.batch.encoded_len()).sum::<usize>()
            }
        }
    }

    /// Whether buffered rows of `cf` change one of `rows` (`None`: any).
    fn touches(&self, cf: CfRef, rows: Option<std::ops::RangeInclusive<u64>>) -> bool {
        self.tables
            .iter()
            .any(|t| t.cf == cf && rows.clone().is_none_or(|rows| t.rows.any_in(rows)))
    }
}

/// A sent change whose message is not (yet) logged under a transaction that
/// shares its rows' fate (see "Owed logs").
struct Owed {
    /// The encoded `PutBatch`, with LSN 0, as it is logged.
    message: Vec<u8>,
    cf: CfRef,
    /// Nest level of the (sub)transaction that created the rows.
    owner: i32,
    /// Nest level of the subtransaction whose xid the message was logged
    /// under (always deeper than `owner`), 0 once that one aborted.
    logged_at: i32,
}

/// Per-CF cache of rowids this backend has reserved from the engine.
struct RowidRange {
    next: u64,
    end: u64,
    chunk: u32,
    /// Bytes a heap page would have in use for the rows this backend put
    /// in `next`'s rowid block so far (see [`RowSpace`]).
    fill: u32,
    /// Every rowid from here to `end` was reserved by this backend (its
    /// chunks followed each other): rowids it skipped there to start a
    /// new block are nobody's.
    own_from: u64,
}

thread_local! {
    // A posted write failed: this transaction must not commit (the write
    // may have belonged to a (sub)transaction other than the one that
    // found out). Cleared at top-level abort.
    static POISON: RefCell<Option<(protocol::ErrorCode, String)>> = const { RefCell::new(None) };
    // Backends are single-threaded: thread-local is process-local here.
    static PENDING: RefCell<Pending> = const { RefCell::new(Pending { xid: None, level: 0, tables: Vec::new(), current: 0, spare: Vec::new() }) };
    static OWED: RefCell<Vec<Owed>> = const { RefCell::new(Vec::new()) };
    static ROWIDS: RefCell<FxHashMap<(u32, u32), RowidRange>> = RefCell::new(FxHashMap::default());
    // The rows the checked posts (`PutBatch`, `PutBatches`) whose answers
    // are not taken change, with the posts' tickets: see
    // `check_posted_for_row`.
    static IN_FLIGHT: RefCell<Vec<(u64, PostedRows)>> = const { RefCell::new(Vec::new()) };
}

/// The rows a posted `PutBatch` changes: rowids `lo..=hi` of `cf` (all of
/// its rows when a key is not a row key).
#[derive(Clone, Copy)]
struct PostedRows {
    cf: CfRef,
    lo: u64,
    hi: u64,
}

impl PostedRows {
    fn of(cf: CfRef, batch: &BatchBuilder) -> PostedRows {
        let mut rows = PostedRows { cf, lo: u64::MAX, hi: 0 };
        for (key, _) in &batch.as_batch() {
            let (lo, hi) = match pasv_am::keys::decode_row_key(key) {
                Some((rowid, _)) => (rowid, rowid),
                None => (0, u64::MAX),
            };
            rows.lo = rows.lo.min(lo);
            rows.hi = rows.hi.max(hi);
        }
        rows
    }

    fn touch(&self, cf: CfRef, rowid: u64) -> bool {
        self.cf == cf && (self.lo..=self.hi).contains(&rowid)
    }
}

fn key(cf: CfRef) -> (u32, u32) {
    (cf.db, cf.rel)
}

/// Read the answers of this backend's posted writes (waiting for those
/// still in flight) and fail if one of them, or any earlier one of this
/// transaction, failed.
fn check_posted() -> Result<(), CallError> {
    take_posted(true)
}

/// Read the answers of this backend's posted writes that are applied, and
/// fail if one of them, or any earlier one of this transaction, failed;
/// with `wait`, wait for the rest first. A write still in flight is
/// checked by a later call (at the latest [`drain`], before the commit).
fn take_posted(wait: bool) -> Result<(), CallError> {
    let mut bad = None;
    let oldest = client::take_posted_answers(wait, |answer| match protocol::decode_response(answer) {
        Ok(Response::Ok) => {}
        Ok(Response::Error { code, message }) => POISON.with(|p| {
            p.borrow_mut().get_or_insert_with(|| (code, message.to_string()));
        }),
        Ok(_) => bad = Some(CallError::Unexpected("PutBatch")),
        Err(e) => bad = Some(CallError::Protocol(e.to_string())),
    })?;
    IN_FLIGHT.with(|f| f.borrow_mut().retain(|&(ticket, _)| oldest.is_some_and(|o| ticket >= o)));
    match bad {
        Some(e) => Err(e),
        None => poisoned(),
    }
}

/// Fail if a posted write of this transaction is known to have failed.
fn poisoned() -> Result<(), CallError> {
    POISON.with(|p| match &*p.borrow() {
        Some((code, message)) => Err(CallError::Engine { code: *code, message: message.clone() }),
        None => Ok(()),
    })
}

/// Before a read of row `rowid` of `cf` from the row cache, which the
/// engine writes through as it applies each write: wait for this backend's
/// posted write only if it changes that row (the answer must hold this
/// backend's own writes). A read of another row goes on while the engine
/// applies the write (TPC-C-like, perf: the wait was 6 % of all CPU, most
/// of it reads of other rows); the answer is taken by the next request.
/// A failure already known still fails the read, as `check_posted` does.
fn check_posted_for_row(cf: CfRef, rowid: u64) -> Result<(), CallError> {
    let elsewhere = IN_FLIGHT.with(|f| {
        let posted = f.borrow();
        !posted.is_empty() && !posted.iter().any(|(_, rows)| rows.touch(cf, rowid))
    });
    if elsewhere {
        return poisoned();
    }
    check_posted()
}

/// Everything this backend sent has been applied (or the transaction fails
/// here): buffered rows are sent and every posted write's answer read. Run
/// at pre-commit, before the commit record.
pub fn drain() -> Result<(), CallError> {
    flush_pending()?;
    check_posted()
}

/// Send `req`; `read` turns the decoded answer into the caller's value
/// (inside the slot, before any other call can reuse the buffer).
fn raw_call<R>(
    req: &Request<'_>,
    read: impl FnOnce(Response<'_>) -> Result<R, CallError>,
) -> Result<R, CallError> {
    crate::replay::wait_for_recovery();
    check_posted()?;
    send(req, read)
}

/// As [`raw_call`], for a request that may run behind this backend's posted
/// writes still in flight (a row lock, a read of rows, a reservation of
/// rowids): the engine applies them first (`client::call`), and the
/// backend waits once for both. A posted write that failed fails the call
/// once its answer is known, after the request ran; what the request did
/// is then undone with the transaction, as for any failed statement.
fn queued_call<R>(
    req: &Request<'_>,
    read: impl FnOnce(Response<'_>) -> Result<R, CallError>,
) -> Result<R, CallError> {
    crate::replay::wait_for_recovery();
    take_posted(false)?;
    let result = send(req, read);
    // Every write posted before the request is applied now.
    take_posted(false)?;
    result
}

/// Send `req` and decode its answer.
fn send<R>(req: &Request<'_>, read: impl FnOnce(Response<'_>) -> Result<R, CallError>) -> Result<R, CallError> {
    let available = client::buffer_bytes().ok_or(ChannelError::NotPreloaded)?;
    client::call(
        |out| {
            protocol::encode_request(req, out).map_err(|_| ChannelError::RequestTooLarge {
                needed: available + 1,
                available,
            })
        },
        |bytes| match protocol::decode_response(bytes) {
            Ok(Response::Error { code, message }) => Err(CallError::Engine { code, message: message.to_string() }),
            Ok(resp) => read(resp),
            Err(e) => Err(CallError::Protocol(e.to_string())),
        },
    )?
}

/// Send `req` after flushing this backend's buffered rows.
fn call<R>(req: &Request<'_>, read: impl FnOnce(Response<'_>) -> Result<R, CallError>) -> Result<R, CallError> {
    flush_pending()?;
    raw_call(req, read)
}

fn expect_ok(what: &'static str) -> impl FnOnce(Response<'_>) -> Result<(), CallError> {
    move |r| match r {
        Response::Ok => Ok(()),
        _ => Err(CallError::Unexpected(what)),
    }
}

pub fn ping() -> Result<(), CallError> {
    raw_call(&Request::Ping, expect_ok("Ping"))
}

/// Create the CF of a new table (or of a rewrite's new relfilenumber);
/// `logged` is false for an unlogged or temporary table, whose changes are
/// never logged and which needs no creation point.
pub fn create_cf(cf: CfRef, logged: bool) -> Result<(), CallError> {
    forget_rowids(cf);
    let created_lsn = if logged { crate::wal::creation_point() } else { 0 };
    call(&Request::CreateCf { cf, created_lsn, logged }, expect_ok("CreateCf"))?;
    crate::crash_point::reach(crate::crash_point::Point::CreateTable);
    crate::replay::database_uses_pasv(cf.db);
    Ok(())
}

pub fn drop_cf(cf: CfRef) -> Result<(), CallError> {
    forget_rowids(cf);
    discard_pending_for(cf);
    call(&Request::DropCf(cf), expect_ok("DropCf"))
}

pub fn drop_database(db: u32) -> Result<(), CallError> {
    ROWIDS.with(|r| r.borrow_mut().retain(|k, _| k.0 != db));
    call(&Request::DropDatabase { db }, expect_ok("DropDatabase"))
}

/// Copy every row version of `from` into the new, empty table `to_rel` of
/// the same database (same rowids), durably (`ALTER TABLE ... SET
/// TABLESPACE`). This backend's buffered and posted writes go first.
pub fn copy_cf(from: CfRef, to_rel: u32) -> Result<(), CallError> {
    call(&Request::CopyCf { from, to_rel }, expect_ok("CopyCf"))
}

/// Copy every table of database `from` into the new database `to` (same
/// relfilenumbers and rowids), durably: `CREATE DATABASE ... TEMPLATE`.
pub fn copy_database(from: u32, to: u32) -> Result<(), CallError> {
    let created_lsn = crate::wal::creation_point();
    call(&Request::CopyDatabase { from, to, created_lsn }, expect_ok("CopyDatabase"))
}

/// Empty a table in place (its new incarnation keeps the kind); `logged`
/// as for [`create_cf`].
pub fn truncate_cf(cf: CfRef, logged: bool) -> Result<(), CallError> {
    discard_pending_for(cf);
    forget_rowids(cf);
    let created_lsn = if logged { crate::wal::creation_point() } else { 0 };
    call(&Request::TruncateCf { cf, created_lsn }, expect_ok("TruncateCf"))?;
    crate::crash_point::reach(crate::crash_point::Point::Truncate);
    Ok(())
}

pub struct CfInfo {
    pub next_rowid: u64,
    pub approx_keys: u64,
    pub approx_bytes: u64,
    /// Entries a full scan steps over (versions and delete markers).
    pub entries: u64,
    /// One past the highest rowid that may hold a row: the table's size.
    pub size_end: u64,
}

/// A table's size as the planner sees it.
#[derive(Clone, Copy)]
pub struct SizeEstimate {
    /// One past the highest rowid that may hold a row: an upper bound of
    /// the rows (gaps of rowids reserved and not used, or of rows removed,
    /// count).
    pub rows: u64,
    /// The engine's size end alone ([`CfInfo::size_end`]), without this
    /// backend's own rowids that `rows` adds.
    pub size_end: u64,
    /// Entries a full scan steps over (RocksDB's estimate): every version
    /// and delete marker, so far more than the rows for a table whose hot
    /// rows piled them up.
    pub entries: u64,
}

thread_local! {
    /// The planner's table sizes, with when they were read, per table.
    static ESTIMATES: RefCell<HashMap<(u32, u32), (std::time::Instant, SizeEstimate)>> = RefCell::new(HashMap::new());
}

/// How long a backend plans with a table size it read from the engine: the
/// planner asks for every table of every statement it plans, and a round
/// trip per table per statement was a third of pgbench TPC-B's round trips
/// (profiled, session 4). The planner needs the magnitude, not the exact
/// count; this backend's own inserts invalidate it at once.
const ESTIMATE_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// The table's size as the planner sees it: from the engine, reused for
/// [`ESTIMATE_TTL`] unless this backend reserved rowids meanwhile, and never
/// below the rowids this backend has used. The engine's figures are read
/// behind this backend's posted writes and without sending its buffered
/// rows: the rowids those use count through `own_end`, and an estimate
/// needs nothing else of them. (As a strict call it waited for every post
/// first: 38 of the TPC-C-like mix's 761 backend waits, HOT_PATH §65.)
pub fn estimated_size(cf: CfRef) -> Result<SizeEstimate, CallError> {
    let now = std::time::Instant::now();
    let cached = ESTIMATES.with(|e| {
        e.borrow().get(&key(cf)).filter(|(at, _)| now.duration_since(*at) < ESTIMATE_TTL).map(|&(_, n)| n)
    });
    // This backend's own inserts count at once, cached figures or not.
    let own_end = ROWIDS.with(|r| r.borrow().get(&key(cf)).map_or(0, |range| range.next));
    if let Some(n) = cached {
        return Ok(SizeEstimate { rows: n.rows.max(own_end), ..n });
    }
    settle_owed();
    let info = info_behind_posts(&Request::CfInfo(cf))?;
    let n = SizeEstimate { rows: info.size_end.max(own_end), size_end: info.size_end, entries: info.entries };
    ESTIMATES.with(|e| {
        let mut e = e.borrow_mut();
        if e.len() > 10_000 {
            e.clear();
        }
        e.insert(key(cf), (now, n));
    });
    Ok(n)
}

fn forget_estimate(cf: CfRef) {
    ESTIMATES.with(|e| e.borrow_mut().remove(&key(cf)));
}

pub fn cf_info(cf: CfRef) -> Result<CfInfo, CallError> {
    info_call(&Request::CfInfo(cf))
}

/// VACUUM's truncation: the engine sets the table's size end to one past
/// its highest row present; returns the table's figures after it.
pub fn trim_size(cf: CfRef) -> Result<CfInfo, CallError> {
    forget_estimate(cf);
    info_call(&Request::TrimSize(cf))
}

fn info_call(request: &Request<'_>) -> Result<CfInfo, CallError> {
    call(request, read_cf_info)
}

/// As [`info_call`], sent behind this backend's posted writes
/// ([`queued_call`]) and leaving its buffered rows where they are.
fn info_behind_posts(request: &Request<'_>) -> Result<CfInfo, CallError> {
    queued_call(request, read_cf_info)
}

fn read_cf_info(r: Response<'_>) -> Result<CfInfo, CallError> {
    match r {
        Response::CfInfo { next_rowid, approx_keys, approx_bytes, entries, size_end } => {
            Ok(CfInfo { next_rowid, approx_keys, approx_bytes, entries, size_end })
        }
        _ => Err(CallError::Unexpected("CfInfo")),
    }
}

/// Every table CF the engine has: (db, rel, CF name), and whether the list
/// was cut short by the channel buffer.
pub fn list_cfs() -> Result<(Vec<(u32, u32, String)>, bool), CallError> {
    call(&Request::ListCfs, |r| match r {
        Response::Entries { more, batch } => Ok((
            batch
                .iter()
                .filter(|(k, _)| k.len() == 8)
                .map(|(k, v)| {
                    let db = u32::from_be_bytes([k[0], k[1], k[2], k[3]]);
                    let rel = u32::from_be_bytes([k[4], k[5], k[6], k[7]]);
                    (db, rel, String::from_utf8_lossy(v).into_owned())
                })
                .collect(),
            more,
        )),
        _ => Err(CallError::Unexpected("ListCfs")),
    })
}

pub fn flush_all() -> Result<(), CallError> {
    call(&Request::FlushAll, expect_ok("FlushAll"))
}

pub fn flush_cf(cf: CfRef) -> Result<(), CallError> {
    call(&Request::FlushCf(cf), expect_ok("FlushCf"))
}

/// Fold the row keys of version 0 beside the table's packs back into them
/// (`pasv_am::engine::repacking`): VACUUM's frozen copies and the markers
/// of its removals. Returns the groups re-packed and the keys folded.
pub fn repack_cf(cf: CfRef) -> Result<(u64, u64), CallError> {
    call(&Request::RepackCf(cf), |r| match r {
        Response::Repacked { groups, keys } => Ok((groups, keys)),
        _ => Err(CallError::Unexpected("RepackCf")),
    })
}

pub fn sync_wal() -> Result<(), CallError> {
    call(&Request::SyncWal, expect_ok("SyncWal"))
}

/// Tell the engine that a transaction committed after writing the tables
/// of `notice`: it writes their flags (and releases the transaction's row
/// locks if asked). Not waited for: a late flag only makes a persistence
/// point lag.
pub fn committed(notice: &protocol::CommitNotice<'_>) -> Result<(), CallError> {
    Ok(client::post(|out| {
        let available = out.len();
        protocol::encode_committed(notice, out)
            .map_err(|_| ChannelError::RequestTooLarge { needed: 64 + notice.rels.len() * 4, available })
    })?)
}

/// Where every CF of database `db` (0: all) stands on persistence: every
/// one of them, over as many answers as it takes (a table missing here would
/// let the slot pass its unflushed commits).
pub fn persistence(db: u32) -> Result<Vec<PersistenceRow>, CallError> {
    let mut rows: Vec<PersistenceRow> = Vec::new();
    loop {
        let after = rows.last().map_or(CfRef { db: 0, rel: 0 }, |r| CfRef { db: r.db, rel: r.rel });
        let (page, more) = call(&Request::Persistence { db, after }, |r| match r {
            Response::Entries { batch, more } => Ok((
                batch
                    .iter()
                    .map(|(k, v)| protocol::decode_persistence(k, v).ok_or(CallError::Unexpected("Persistence row")))
                    .collect::<Result<Vec<_>, _>>()?,
                more,
            )),
            _ => Err(CallError::Unexpected("Persistence")),
        })?;
        if more && page.is_empty() {
            return Err(CallError::Unexpected("Persistence: an empty page with more to come"));
        }
        rows.extend(page);
        if !more {
            return Ok(rows);
        }
    }
}

/// Replay: send a logged `PutBatch` message as it stands (its LSN is 0:
/// the WAL it came from is durable).
pub fn put_logged_message(message: &[u8]) -> Result<(), CallError> {
    check_posted()?;
    client::call(
        |out| {
            let available = out.len();
            if message.len() > available {
                return Err(ChannelError::RequestTooLarge { needed: message.len(), available });
            }
            out[..message.len()].copy_from_slice(message);
            Ok(message.len())
        },
        decode_ok("PutBatch"),
    )?
}

fn decode_ok(what: &'static str) -> impl FnOnce(&[u8]) -> Result<(), CallError> {
    move |bytes| match protocol::decode_response(bytes) {
        Ok(Response::Ok) => Ok(()),
        Ok(Response::Error { code, message }) => Err(CallError::Engine { code, message: message.to_string() }),
        Ok(_) => Err(CallError::Unexpected(what)),
        Err(e) => Err(CallError::Protocol(e.to_string())),
    }
}

/// Result of a scan call whose raw answer was copied into the caller's buffer.
pub struct ScanCopied {
    pub len: usize,
}

/// Scan `[start, end)` and copy the raw answer (a `Response::Entries`) into
/// `dest`, which must be at least the channel buffer size. The caller decodes
/// it with `protocol::decode_response` from its own memory.
pub fn scan_into(
    cf: CfRef,
    start: &[u8],
    end: &[u8],
    max_entries: u32,
    per_row: u32,
    dest: &mut [u8],
) -> Result<ScanCopied, CallError> {
    send_pending_for_range(cf, start, end)?;
    crate::replay::wait_for_recovery();
    take_posted(false)?;
    let req = Request::Scan { cf, start, end, max_entries, per_row };
    // Behind this backend's posted writes (`queued_call`).
    let copied = client::call(encode_scan(&req), |bytes| copy_entries(bytes, dest))?;
    take_posted(false)?;
    copied
}

fn encode_scan<'a>(req: &'a Request<'a>) -> impl FnOnce(&mut [u8]) -> Result<usize, ChannelError> + 'a {
    move |out| {
        let available = out.len();
        protocol::encode_request(req, out).map_err(|_| ChannelError::RequestTooLarge { needed: available + 1, available })
    }
}

/// Copy a scan's answer (an `Entries` response) into `dest`. Its entries
/// are checked where the caller reads them, from its own copy (a scan's
/// stream, once each: `protocol::entries_cursor`).
fn copy_entries(bytes: &[u8], dest: &mut [u8]) -> Result<ScanCopied, CallError> {
    if let Ok(Some(_)) = protocol::entries_cursor(bytes) {
        dest[..bytes.len()].copy_from_slice(bytes);
        return Ok(ScanCopied { len: bytes.len() });
    }
    match protocol::decode_response(bytes) {
        Ok(Response::Error { code, message }) => Err(CallError::Engine { code, message: message.to_string() }),
        Ok(Response::Entries { .. }) => {
            dest[..bytes.len()].copy_from_slice(bytes);
            Ok(ScanCopied { len: bytes.len() })
        }
        Ok(_) => Err(CallError::Unexpected("Scan")),
        Err(e) => Err(CallError::Protocol(e.to_string())),
    }
}

/// Ask for the scan `scan_into(cf, start, end, max_entries, per_row, _)`
/// would make, without waiting for it: the engine reads while the backend
/// works through the batch it has (double buffering). Returns the ticket
/// for [`take_scan_ahead`]. The answer fills up to the read-ahead buffer
/// (`client::ahead_bytes`), larger than a call's.
///
/// The read-ahead runs in the backend's read-ahead slot, beside (and in no
/// set order with) the requests of its main slot, so it may miss writes
/// this backend sends after it, or sends before it but are still in
/// flight. A stream may read ahead only when such writes cannot change
/// what it returns: an MVCC reader whose first batch was read synchronously
/// (which sent and applied every earlier write of this backend). Every
/// later write of this backend belongs to the reader's own command or a
/// later one, and every write of another backend that is not applied yet
/// commits after the reader's snapshot: the snapshot sees neither. ANALYZE's
/// and index builds' readers are not snapshots but read ahead too: their
/// command writes nothing to the table they read, and another backend's
/// write races with them whether the batch is read now or a moment later.
pub fn scan_ahead(cf: CfRef, start: &[u8], end: &[u8], per_row: u32, max_entries: u32) -> Result<u64, CallError> {
    crate::replay::wait_for_recovery();
    let req = Request::Scan { cf, start, end, max_entries, per_row };
    Ok(client::post_ahead(encode_scan(&req))?)
}

/// The answer to read-ahead `ticket` copied into `dest`, or `None` when
/// another read-ahead of this backend displaced it (ask with `scan_into`);
/// `dest` holds `client::ahead_bytes`.
pub fn take_scan_ahead(ticket: u64, dest: &mut [u8]) -> Result<Option<ScanCopied>, CallError> {
    client::take_ahead(ticket, |bytes| copy_entries(bytes, dest))?.transpose()
}

/// The row cache's answer to the one-row read `scan_into(cf, row_range(rowid,
/// rowid + 1), 0, row_cache::PER_ROW, dest)` would make, copied into
/// `dest`, or `None` (not cached: ask the engine). MVCC readers only: this
/// backend's own writes are applied first (sent and their answers read),
/// and other backends' writes that an MVCC snapshot could see were
/// acknowledged, hence cached or dropped, before their commit.
pub fn cached_row(cf: CfRef, rowid: u64, dest: &mut [u8]) -> Result<Option<ScanCopied>, CallError> {
    let Some(cache) = crate::shmem::row_cache() else { return Ok(None) };
    send_pending_row(cf, rowid)?;
    crate::replay::wait_for_recovery();
    check_posted_for_row(cf, rowid)?;
    let found = cache.lookup(cf, rowid, dest);
    cache.note(found.is_some());
    Ok(found.map(|len| ScanCopied { len }))
}

/// Warm the CPU caches for [`cached_row`] of the rows after `rowid` of
/// `cf` (an index fetch window walks ascending rowids).
pub fn prefetch_cached_after(cf: CfRef, rowid: u64) {
    if let Some(cache) = crate::shmem::row_cache() {
        cache.prefetch_after(cf, rowid);
    }
}

/// The newest `max` versions of row `rowid` of `cf` from the row cache, as
/// a granted engine lock would bring them (`(key, value)` newest first, and
/// whether older ones may exist), or `None` when the cache cannot tell. For
/// a row this backend just locked: its own writes are applied first, and
/// every earlier holder's were before it released the lock
/// (`crate::row_locks`).
pub fn cached_versions(cf: CfRef, rowid: u64, max: u8) -> Result<Option<(Vec<(Vec<u8>, Vec<u8>)>, bool)>, CallError> {
    let Some(cache) = crate::shmem::row_cache() else { return Ok(None) };
    send_pending_row(cf, rowid)?;
    crate::replay::wait_for_recovery();
    check_posted_for_row(cf, rowid)?;
    let mut versions = Vec::with_capacity(usize::from(max));
    let more = cache.versions(cf, rowid, usize::from(max), |key, value| {
        versions.push((key.to_vec(), value.to_vec()));
        true
    });
    cache.note(more.is_some());
    Ok(more.map(|more| (versions, more)))
}

/// Before reading row `rowid` of `cf` from the row cache: send the buffered
/// rows if they change it (the answer must hold this backend's own writes;
/// buffered changes of other rows may stay). Owed logs are settled as
/// before every engine call.
fn send_pending_row(cf: CfRef, rowid: u64) -> Result<(), CallError> {
    send_pending_if_touching(cf, Some(rowid..=rowid))
}

/// Before a read of `[start, end)` in `cf`: the same, for the rows of the
/// range (all of the CF's when the range is wide or not of rows). A DELETE
/// or UPDATE whose rows miss the row cache reads each row's chain here:
/// sending the buffer every time made one post per row (100 000 of 1 M rows
/// deleted: 89 867 posts).
fn send_pending_for_range(cf: CfRef, start: &[u8], end: &[u8]) -> Result<(), CallError> {
    /// Widest range whose rows are looked up one by one.
    const FEW_ROWS: u64 = 64;
    let rows = match (pasv_am::keys::decode_row_key(start), pasv_am::keys::decode_row_key(end)) {
        // Inclusive of `hi`: an end key may fall inside a row's versions.
        (Some((lo, _)), Some((hi, _))) if hi >= lo && hi - lo <= FEW_ROWS => Some(lo..=hi),
        _ => None,
    };
    send_pending_if_touching(cf, rows)
}

/// Send the buffered rows if they are `cf`'s and change one of `rows`
/// (`None`: any row of `cf`), else only settle owed logs.
fn send_pending_if_touching(cf: CfRef, rows: Option<std::ops::RangeInclusive<u64>>) -> Result<(), CallError> {
    let touching = PENDING.with(|p| p.borrow().touches(cf, rows));
    if touching {
        flush_pending()
    } else {
        settle_owed();
        Ok(())
    }
}

/// The current transaction nest level (1: top level).
fn nest_level() -> i32 {
    // SAFETY: plain read of the transaction state.
    unsafe { pgrx::pg_sys::GetCurrentTransactionNestLevel() }
}

/// Log one change message (a `PutBatch` request, then its logical notes)
/// under the current (sub)transaction.
fn log_message(cf: CfRef, request: &[u8], notes: &[u8]) -> u64 {
    // SAFETY: called in a backend inside the writing transaction.
    let lsn = unsafe { crate::wal::log_change(request, notes) };
    crate::written_tables::note_write(cf, lsn);
    lsn
}

/// Send rows created at nest level `owner` (the current one, or a
/// shallower one whose buffered rows are flushed late). The write is
/// posted, not waited for (its outcome is decided: the message is logged
/// and the rows are locked or new): the backend goes on while the engine
/// writes, and its next request, or [`drain`] at pre-commit, reads the
/// answer. Other backends that look for the rows through a non-MVCC
/// snapshot before the engine applied them fence first
/// ([`client::fence_others`]).
///
/// An unlogged or temporary table's batch (`logged` false) is neither
/// logged nor recorded for flush flags: nothing replays it.
fn put_batch_raw(cf: CfRef, logged: bool, batch: &BatchBuilder, owner: i32) -> Result<(), CallError> {
    post_put_batch(cf, batch, |request| log_before_write(cf, logged, request, batch.notes(), owner))
}

/// Remove rows `tam::scan_prune` found dead to every snapshot: a posted,
/// unlogged batch of deletes (nothing replays it), held from disk until
/// the WAL inserted so far is durable. The transactions whose commits made
/// the rows dead may have committed asynchronously (`synchronous_commit =
/// off`): a removal on disk before their commit records would outlive them
/// after a crash, and a row they moved or deleted would be gone with no
/// version left to see. Heap orders its pruning the same way: the prune
/// record follows the commit records in the WAL, and the page waits for it.
pub fn remove_dead_rows(cf: CfRef, batch: &BatchBuilder) -> Result<(), CallError> {
    flush_pending()?;
    let after = crate::wal::inserted_end();
    post_put_batch(cf, batch, |request| {
        request[protocol::PUT_BATCH_LSN_AT..protocol::PUT_BATCH_LSN_AT + 8].copy_from_slice(&after.to_le_bytes());
    })
}

/// Post `batch` as a `PutBatch` of `cf`, `stamp` writing its LSN field
/// into the encoded request (see [`put_batch_raw`]).
fn post_put_batch(cf: CfRef, batch: &BatchBuilder, stamp: impl FnOnce(&mut [u8])) -> Result<(), CallError> {
    crate::replay::wait_for_recovery();
    take_posted(false)?;
    let ticket = client::post_checked(|out| {
        let available = out.len();
        let len = protocol::encode_put_batch(cf, batch, out)
            .map_err(|_| ChannelError::RequestTooLarge { needed: batch.encoded_len(), available })?;
        stamp(&mut out[..len]);
        Ok(len)
    })?;
    IN_FLIGHT.with(|f| f.borrow_mut().push((ticket, PostedRows::of(cf, batch))));
    Ok(())
}

/// As [`put_batch_raw`], for several tables' rows in one request: each
/// table's `PutBatch` is logged and written as if sent alone, one post
/// carries them all (`pasv_am::protocol::BatchParts`).
fn put_batches_raw(tables: &[TableRows], owner: i32) -> Result<(), CallError> {
    crate::replay::wait_for_recovery();
    take_posted(false)?;
    let ticket = client::post_checked(|out| {
        let available = out.len();
        let too_large = |needed: usize| ChannelError::RequestTooLarge { needed, available };
        protocol::write_put_batches_header(out, tables.len() as u32).map_err(|_| too_large(available + 1))?;
        let mut at = protocol::REQUEST_HEADER_LEN;
        for t in tables {
            let part_at = at + protocol::PART_PREFIX_LEN;
            let part = out.get_mut(part_at..).ok_or(too_large(part_at))?;
            let len = protocol::encode_put_batch(t.cf, &t.batch, part).map_err(|_| too_large(part_at + t.batch.encoded_len()))?;
            log_before_write(t.cf, t.logged, &mut part[..len], t.batch.notes(), owner);
            protocol::write_part_prefix(&mut out[at..], len).map_err(|_| too_large(part_at + len))?;
            at = part_at + len;
        }
        Ok(at)
    })?;
    IN_FLIGHT.with(|f| f.borrow_mut().extend(tables.iter().map(|t| (ticket, PostedRows::of(t.cf, &t.batch)))));
    Ok(())
}

/// WAL first (DESIGN §4): `request`, a `PutBatch` of rows of `cf` created
/// at nest level `owner`, is logged exactly as encoded, with LSN 0, before
/// the engine sees it; then the record's end goes into its LSN field, so
/// the engine keeps the memtable from disk until that WAL is.
fn log_before_write(cf: CfRef, logged: bool, request: &mut [u8], notes: &[u8], owner: i32) {
    if !logged {
        // Not logged, not flagged: nothing to record.
    } else if crate::guc::durability().logs_messages() {
        let logged_at = nest_level();
        if owner < logged_at {
            let message = [&*request, notes].concat();
            OWED.with(|o| o.borrow_mut().push(Owed { message, cf, owner, logged_at }));
        }
        let lsn = log_message(cf, request, notes);
        crate::wal::xid_logged_before_engine_wal(lsn);
        crate::crash_point::reach(crate::crash_point::Point::AfterLogBeforeWrite);
        request[protocol::PUT_BATCH_LSN_AT..protocol::PUT_BATCH_LSN_AT + 8].copy_from_slice(&lsn.to_le_bytes());
    } else {
        crate::written_tables::note_write(cf, 0);
    }
}

/// Log again the owed messages whose log was discarded with an aborted
/// subtransaction, under the current one; forget those now logged under
/// their owner. Runs before every engine call of this backend.
fn settle_owed() {
    OWED.with(|o| {
        let mut owed = o.borrow_mut();
        if owed.iter().all(|x| x.logged_at != 0) {
            return;
        }
        let level = nest_level();
        for x in owed.iter_mut().filter(|x| x.logged_at == 0) {
            log_message(x.cf, &x.message, &[]);
            x.logged_at = level;
        }
        owed.retain(|x| x.logged_at != x.owner);
    });
}

/// Subtransaction at nest level `level` committed into its parent: its rows
/// (buffered or sent), and the messages logged under it, now share the
/// parent's fate.
pub fn subxact_committed(level: i32) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if p.level == level {
            p.level = level - 1;
        }
    });
    OWED.with(|o| {
        let mut owed = o.borrow_mut();
        for x in owed.iter_mut() {
            if x.owner == level {
                x.owner = level - 1;
            }
            if x.logged_at == level {
                x.logged_at = level - 1;
            }
        }
        owed.retain(|x| x.logged_at != x.owner);
    });
}

/// Subtransaction at nest level `level` aborted: its own rows (buffered or
/// sent) are dead, and what was logged under it for shallower owners is
/// owed again.
pub fn subxact_aborted(level: i32) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if p.xid.is_some() && p.level >= level {
            p.clear();
        }
    });
    OWED.with(|o| {
        let mut owed = o.borrow_mut();
        owed.retain(|x| x.owner < level);
        for x in owed.iter_mut().filter(|x| x.logged_at == level) {
            x.logged_at = 0;
        }
    });
}

/// The top-level transaction ended: nothing is owed any more.
pub fn owed_clear() {
    OWED.with(|o| o.borrow_mut().clear());
}

/// Drop every buffered row and forget posted writes' failures (top-level
/// abort: what they wrote is dead).
pub fn discard_pending() {
    client::forget_posted_answer();
    IN_FLIGHT.with(|f| f.borrow_mut().clear());
    POISON.with(|p| p.borrow_mut().take());
    PENDING.with(|p| p.borrow_mut().clear());
}

/// Write one batch of the current (sub)transaction now (flushing buffered
/// rows first), atomically.
pub fn put_batch_now(cf: CfRef, logged: bool, batch: &BatchBuilder) -> Result<(), CallError> {
    flush_pending()?;
    put_batch_raw(cf, logged, batch, nest_level())
}

/// Answer to a row-lock request.
pub struct LockOutcome {
    pub granted: bool,
    pub already_held: bool,
    pub holder: u32,
    /// Granted with `read` > 0: the row's newest versions as (key, value),
    /// newest first, and whether older ones exist.
    pub versions: Vec<(Vec<u8>, Vec<u8>)>,
    pub more: bool,
    /// A new grant asked with the write epoch of an earlier read of the row
    /// (`crate::row_locks::lock`): no other transaction can have written
    /// the row since that read. Always false from the engine's table.
    pub unchanged: bool,
}

/// Try to take a row lock for top-level transaction `xid`; `evict` names a
/// transaction known to have ended whose holdings on this row are stale.
/// `read` > 0 asks for the row's `read` newest versions with the lock.
pub fn lock_row(cf: CfRef, rowid: u64, xid: u32, mode: LockMode, evict: u32, read: u8) -> Result<LockOutcome, CallError> {
    send_pending_row(cf, rowid)?;
    queued_call(&Request::LockRow { cf, rowid, xid, mode, evict, read }, |r| match r {
        Response::Lock { granted, already_held, holder, more, versions } => Ok(LockOutcome {
            granted,
            already_held,
            holder,
            versions: versions.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect(),
            more,
            unchanged: false,
        }),
        _ => Err(CallError::Unexpected("LockRow")),
    })
}

/// Release every row lock of transaction `xid` (at its end). Not waited
/// for: a waiter that finds a lock of an ended transaction evicts it.
pub fn release_locks(xid: u32) -> Result<(), CallError> {
    Ok(client::post(|out| {
        protocol::encode_request(&Request::ReleaseLocks { xid }, out)
            .map_err(|_| ChannelError::RequestTooLarge { needed: 16, available: out.len() })
    })?)
}

/// Conservative encoded size of one entry (see `pasv_am::protocol`).
pub fn entry_cost(key: &[u8], value: &[u8]) -> usize {
    16 + key.len().next_multiple_of(8) + value.len().next_multiple_of(8) + 8
}

/// Largest batch payload that fits one request.
pub fn batch_capacity() -> usize {
    client::buffer_bytes().unwrap_or(0).saturating_sub(128)
}

/// Make the buffer take `bytes` more for transaction `xid` in `cf`: send
/// what it holds first if that is another (sub)transaction's, if it holds
/// [`MAX_TABLES`] other tables, or if it would overflow a request; then
/// `cf`'s rows are the current table's.
///
/// Also when rows of another table come and a post would not wait
/// (`client::post_is_free`: the write posted before is applied): the engine
/// applies them while the statement goes on, and the commit waits only
/// for what came after. Keeping everything for the commit made a single
/// client's TPC-B wait there for three tables' writes, on an engine
/// thread that had gone to sleep (1 170 → 600-690 TPS); sending at every
/// switch made a TPC-C-like order post a batch a row, each waiting for
/// the one before. Measurements: `src/ipc/HOT_PATH.md` §26.
fn make_room(cf: CfRef, logged: bool, xid: u32, bytes: usize) -> Result<(), CallError> {
    let must_send = PENDING.with(|p| {
        let p = p.borrow();
        let has_table = p.tables.iter().any(|t| t.cf == cf);
        if !has_table && !p.tables.is_empty() && p.xid == Some(xid) && client::post_is_free() {
            return true;
        }
        // A new table adds a part (and a second one turns the request into
        // `PutBatches`, with a header and a prefix for the first).
        let grows = if has_table {
            bytes
        } else {
            bytes + BatchBuilder::new().encoded_len() + protocol::REQUEST_HEADER_LEN + 2 * protocol::PART_PREFIX_LEN
        };
        p.xid.is_some_and(|x| x != xid)
            || (!has_table && p.tables.len() == MAX_TABLES)
            || p.request_len() + grows > batch_capacity()
    });
    if must_send {
        flush_pending()?;
    }
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        // Rows of one transaction id share a nest level (a committed
        // subtransaction's rows were moved up with `subxact_committed`).
        if p.xid != Some(xid) {
            p.xid = Some(xid);
            p.level = nest_level();
        }
        p.current = match p.tables.iter().position(|t| t.cf == cf) {
            Some(i) => i,
            None => {
                let mut t = p.spare.pop().unwrap_or_else(|| TableRows {
                    cf,
                    logged,
                    batch: BatchBuilder::new(),
                    rows: RowSet::default(),
                });
                t.cf = cf;
                t.logged = logged;
                p.tables.push(t);
                p.tables.len() - 1
            }
        };
    });
    Ok(())
}

/// The table rows join now (after [`make_room`]).
fn current_table(p: &mut Pending) -> Result<&mut TableRows, CallError> {
    let i = p.current;
    p.tables.get_mut(i).ok_or(CallError::Unexpected("write-behind buffer without a current table"))
}

/// Buffer one new row of transaction `xid` for `cf` (write-behind);
/// `logged` as for [`put_batch_now`]; `tablespace` the table's (0: the
/// database's default), noted for logical decoding. `indexed`: the table
/// has indexes, so another backend may reach the row through an entry
/// before it is sent, and it is published (`buffered_rows`); a table
/// without any cannot gain one while this transaction writes it (CREATE
/// INDEX waits for it, CONCURRENTLY too, before it builds).
pub fn buffer_put(cf: CfRef, logged: bool, tablespace: u32, xid: u32, indexed: bool, key: &[u8], value: &[u8]) -> Result<(), CallError> {
    let rowid = pasv_am::keys::decode_row_key(key).map(|(rowid, _)| rowid);
    make_room(cf, logged, xid, entry_cost(key, value))?;
    if let Some(rowid) = rowid.filter(|_| indexed) {
        // Published before the row's index entries exist (buffered_rows).
        // Rowids this backend skipped to start a new block may be covered
        // with the rows around them: nobody ever writes them.
        let own_from = ROWIDS.with(|r| r.borrow().get(&self::key(cf)).map_or(rowid, |x| x.own_from));
        if !buffered_rows::cover(cf, xid, rowid, own_from) {
            flush_pending()?;
            make_room(cf, logged, xid, entry_cost(key, value))?;
            let covered = buffered_rows::cover(cf, xid, rowid, own_from);
            debug_assert!(covered, "an empty buffer covers any row");
        }
    }
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        let t = current_table(&mut p)?;
        if t.batch.is_empty() && t.batch.notes().is_empty() && tablespace != 0 {
            t.batch.note(Note::Tablespace(tablespace)).map_err(|e| CallError::Protocol(e.to_string()))?;
        }
        if let Some(rowid) = rowid {
            t.rows.insert(rowid);
        }
        t.batch.push(key, value).map_err(|e| CallError::Protocol(e.to_string()))
    })
}

/// Buffer one row's change batch of transaction `xid` for `cf` (a delete or
/// an update under a row lock held in shared memory: see
/// `tam/rowops.rs::write_row_change`), joining the rows buffered before it.
/// `rows` are the rowids the batch writes: this backend's own reads of any
/// of them send the buffer first. False when the batch alone would not fit
/// a request (send it now).
pub fn buffer_batch(cf: CfRef, logged: bool, xid: u32, rows: &[u64], batch: &BatchBuilder) -> Result<bool, CallError> {
    if batch.encoded_len() > batch_capacity() {
        return Ok(false);
    }
    make_room(cf, logged, xid, batch.as_batch().encoded_len())?;
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        let t = current_table(&mut p)?;
        for &rowid in rows {
            t.rows.insert(rowid);
        }
        t.batch.append(batch).map_err(|e| CallError::Protocol(e.to_string()))
    })?;
    Ok(true)
}

/// Add a logical note to the rows last buffered (sent with them).
pub fn note_pending(note: Note<'_>) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if let Ok(t) = current_table(&mut p) {
            // Only a note longer than a channel buffer could fail; these are not.
            let _ = t.batch.note(note);
        }
    });
}

/// Send buffered rows, if any (after settling owed logs: before this
/// backend's every engine call).
pub fn flush_pending() -> Result<(), CallError> {
    settle_owed();
    // Take the rows out first: a failed send must not be retried with
    // stale rows at the next call (the statement fails and aborts).
    let Some((mut tables, owner)) = PENDING.with(|p| {
        let mut p = p.borrow_mut();
        p.xid.take()?;
        Some((std::mem::take(&mut p.tables), p.level))
    }) else {
        return Ok(());
    };
    tables.retain(|t| !t.batch.is_empty());
    let result = match tables.as_slice() {
        [] => Ok(()),
        [one] => put_batch_raw(one.cf, one.logged, &one.batch, owner),
        many => put_batches_raw(many, owner),
    };
    // After the post (or the failure that dooms the rows): see buffered_rows.
    buffered_rows::withdraw();
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        for t in tables {
            p.recycle(t);
        }
    });
    result
}

/// The CF is being emptied or dropped: its buffered rows and owed logs go
/// (a log owed to emptied rows, logged after the new incarnation's creation
/// point, would bring them back at replay).
fn discard_pending_for(cf: CfRef) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        // Only this table's rows leave. Its rows' publication, if it was
        // theirs, stays until the next send withdraws it (the caller's
        // request sends the rest): a reader meanwhile waits for this
        // transaction, as for any insert in progress.
        if let Some(i) = p.tables.iter().position(|t| t.cf == cf) {
            let gone = p.tables.remove(i);
            p.recycle(gone);
            if p.tables.is_empty() {
                p.clear();
            } else {
                p.current = 0;
            }
        }
    });
    OWED.with(|o| o.borrow_mut().retain(|x| x.cf != cf));
}

/// Rowids a reservation grows to. Each reservation is a round trip that
/// waits for the write posted before it, so a bulk insert with chunks of
/// 4 096 slept once per 8 batches (perf sched: 55 of the 93 sleeps of an
/// INSERT … SELECT of 500 000 rows); doubling from 64 keeps what a backend
/// leaves unused at most what it used. Rows fill blocks as heap's pages
/// ([`next_rowid`]), so a chunk holds fewer rows than rowids (226 narrow
/// rows a block of 291, 58 of about 130 bytes): the largest chunk is 4
/// times what it was when every rowid took a row.
const MAX_ROWID_CHUNK: u32 = 1 << 17;

/// The room a new row takes on a heap page, for [`next_rowid`]: its tuple
/// (MAXALIGN'd length) and the free space its table's fillfactor keeps.
#[derive(Clone, Copy)]
pub struct RowSpace {
    pub tuple: u32,
    pub keep_free: u32,
}

/// Heap's page: 8 kB, a 24-byte header, a 4-byte line pointer a row.
const PAGE_BYTES: u32 = 8192;
const PAGE_HEADER: u32 = 24;
const LINE_POINTER: u32 = 4;
/// Free space at which heap calls a page nearly empty (MaxHeapTupleSize
/// less 36 line pointers): a row whose fillfactor reserve asks for more
/// goes on a page that has this much (`RelationGetBufferForTuple`).
const NEARLY_EMPTY: u32 = PAGE_BYTES - 32 - (pasv_am::keys::ROWS_PER_BLOCK as u32 / 8) * LINE_POINTER;

/// Next rowid for a new row in `cf` taking `space` on a heap page.
///
/// Rows fill rowid blocks (TID pages) as heap's fill pages: a row goes
/// into the block of the previous one while a heap page would still take
/// it (heap's rule: the tuple plus the fillfactor's reserve within the
/// free space; an empty page takes any row), else it starts the next
/// block. So TIDs, page counts and block sampling follow the rows' widths
/// as heap's do (TABLESAMPLE, TID ranges, the planner's page figures),
/// instead of every block holding 291 rows. Only this backend's own rows
/// count towards a block's fill: blocks shared with another backend's
/// rows hold more than heap's page would.
///
/// Rowids are reserved from the engine in chunks that double while a
/// backend keeps inserting (64 up to [`MAX_ROWID_CHUNK`]); a backend that
/// exits leaves the rest of its chunk unused (gaps are harmless), as does
/// a row that starts a new block.
pub fn next_rowid(cf: CfRef, space: RowSpace) -> Result<u64, CallError> {
    // A new block beyond the reservation needs one more at most; a third
    // round would mean other backends took every rowid in between twice.
    for _ in 0..3 {
        let placed = ROWIDS.with(|r| r.borrow_mut().get_mut(&key(cf)).and_then(|range| place(range, space)));
        if let Some(id) = placed {
            return Ok(id);
        }
        reserve(cf)?;
    }
    reserve(cf)?;
    ROWIDS.with(|r| {
        let mut r = r.borrow_mut();
        let range = r.get_mut(&key(cf)).ok_or(CallError::Unexpected("AllocRowids"))?;
        let id = range.next;
        range.next += 1;
        range.fill = PAGE_HEADER + LINE_POINTER + space.tuple;
        Ok(id)
    })
}

/// The end of this backend's current rowid reservation of `cf`, and the
/// size of the chunk it came in (chunks grow while a backend keeps
/// inserting: a large one means a bulk insert).
pub fn rowid_reservation(cf: CfRef) -> Option<(u64, u32)> {
    ROWIDS.with(|r| r.borrow().get(&key(cf)).map(|range| (range.end, range.chunk)))
}

/// The rowid for a row taking `space` in `range`, if the range has it.
fn place(range: &mut RowidRange, space: RowSpace) -> Option<u64> {
    let rows_per_block = pasv_am::keys::ROWS_PER_BLOCK;
    loop {
        if range.next >= range.end {
            return None;
        }
        if range.next.is_multiple_of(rows_per_block) {
            range.fill = PAGE_HEADER;
        }
        let empty = range.fill <= PAGE_HEADER;
        let free = PAGE_BYTES.saturating_sub(range.fill + LINE_POINTER);
        let wanted = space.tuple.saturating_add(space.keep_free);
        let wanted = if wanted > NEARLY_EMPTY { space.tuple.max(NEARLY_EMPTY) } else { wanted };
        if empty || wanted <= free {
            let id = range.next;
            range.next += 1;
            range.fill += LINE_POINTER + space.tuple;
            return Some(id);
        }
        range.next = (range.next / rows_per_block + 1) * rows_per_block;
    }
}

/// Reserve the next chunk of rowids of `cf`. One that continues the last
/// one keeps its block's fill, and reaches a block start that the last
/// row asked for (one block more than the chunk); one that does not starts
/// as an empty page.
fn reserve(cf: CfRef) -> Result<(), CallError> {
    let rows_per_block = pasv_am::keys::ROWS_PER_BLOCK;
    let last = ROWIDS.with(|r| r.borrow().get(&key(cf)).map(|x| (x.chunk, x.next, x.end, x.fill, x.own_from)));
    let chunk = last.map_or(64, |(chunk, ..)| (chunk * 2).min(MAX_ROWID_CHUNK));
    // The last range ended wanting a block start past its end.
    let wanted = last.filter(|&(_, next, end, _, _)| next > end).map(|(_, next, ..)| next);
    let count = chunk + if wanted.is_some() { rows_per_block as u32 } else { 0 };
    flush_pending()?;
    let first = queued_call(&Request::AllocRowids { cf, count }, |r| match r {
        Response::Rowids { first } => Ok(first),
        _ => Err(CallError::Unexpected("AllocRowids")),
    })?;
    let end = first + u64::from(count);
    let continues = last.is_some_and(|(_, _, last_end, _, _)| last_end == first);
    let own_from = last.filter(|_| continues).map_or(first, |(.., own_from)| own_from);
    let (next, fill) = match (wanted, last) {
        (Some(block_start), _) if continues && block_start < end => (block_start, PAGE_HEADER),
        (Some(_), _) => (first.div_ceil(rows_per_block) * rows_per_block, PAGE_HEADER),
        (None, Some((_, _, _, fill, _))) if continues => (first, fill),
        _ => (first, PAGE_HEADER),
    };
    ROWIDS.with(|r| r.borrow_mut().insert(key(cf), RowidRange { next: next.min(end), end, chunk, fill, own_from }));
    forget_estimate(cf);
    Ok(())
}

pub fn forget_rowids(cf: CfRef) {
    forget_estimate(cf);
    ROWIDS.with(|r| r.borrow_mut().remove(&key(cf)));
}
