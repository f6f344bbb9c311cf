//! The backend ⇄ engine wire format (DESIGN §1): the bytes of every request
//! and response that crosses the shared-memory channel.
//!
//! Both sides link this module. It works on plain byte slices, never on
//! shared memory or RocksDB, and calls nothing outside this crate's key
//! definitions. The format is written by hand because it is a fixed,
//! zero-copy layout that no serialization crate produces.
//!
//! This file is the framing: the request and response headers, the tables
//! of ops and tags, [`Request`] and [`Response`], the encode and decode entry
//! points, and the bounds-checked primitives every decoder uses. What a
//! message carries after its header is laid out in the file of its family:
//!
//! * `entries` — a key/value entry and a batch of them, the unit that
//!   writes, scans, lists and lock answers all carry.
//! * `put_batch` — `PutBatch`, the write request, and its builder.
//! * `scan` — `Scan`, the read request, and the writer of its answer.
//! * `locks` — `LockRow`, `ReleaseLocks` and the `Lock` answer.
//! * `logical_notes` — what a logged `PutBatch` carries after the request
//!   for logical decoding (never sent to the engine).
//! * `persistence` — `Committed` (flush flags at commit) and the rows of a
//!   `Persistence` report.
//! * `error` — error classes, and the ways a message can be malformed.
//!
//! The table requests (`CreateCf`, `DropCf`, `DropDatabase`, `TruncateCf`,
//! `AllocRowids`, `CfInfo`, `TrimSize`, `RepackCf`, `ListCfs`, the flushes) need at most one u64
//! after the header and are encoded here.
//!
//! Invariants: a message decodes to exactly what was encoded, or to an
//! error, never to a panic; and every value in a message starts 8-aligned
//! (below).
//!
//! # Layout
//!
//! All integers are little-endian. Every "zero" byte must be zero: decoders
//! reject anything else, so a stale or torn slot is an error, not a request.
//! A decoder reads only what the header describes and ignores trailing bytes
//! (slots are fixed-size).
//!
//! Request header, [`REQUEST_HEADER_LEN`] = 16 bytes:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | op ([`Request`] variant, 1..=22 in declaration order) |
//! | 1..4 | zero |
//! | 4..8 | db (u32), zero unless the request names a CF or a database |
//! | 8..12 | rel (u32), zero unless the request names a CF |
//! | 12..16 | arg (u32): `count` of `AllocRowids`, `PutBatch` and `PutBatches`, `max_entries` of `Scan`, `xid` of `LockRow` and `ReleaseLocks` (never 0), the number of rels of `Committed`, the target rel of `CopyCf`, the target database of `CopyDatabase`, 1 for the `CreateCf` of an unlogged table (else 0), else zero |
//!
//! then, for `CreateCf`, `TruncateCf` and `CopyDatabase`, created_lsn u64; the bodies of
//! `PutBatch`, `PutBatches`, `Scan`, `LockRow` and `Committed` are described in their
//! families' files.
//!
//! Response header, [`RESPONSE_HEADER_LEN`] = 8 bytes:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | tag ([`Response`] variant, 1..=7 in declaration order) |
//! | 1 | `more` (0/1) of `Entries`, the [`ErrorCode`] of `Error`, flags of `Lock` (bit 0 `granted`, bit 1 `already_held`, bit 2 `more`, others zero), else zero |
//! | 2..4 | zero |
//! | 4..8 | entry count of `Entries` and of a granted `Lock`, message length of `Error`, `holder` of a refused `Lock`, else zero |
//!
//! then `Rowids`: first (u64); `Entries` and a granted `Lock`: the entries; `CfInfo`: next_rowid,
//! approx_keys, approx_bytes, entries, size_end (u64 each); `Repacked`: groups, keys (u64 each);
//! `Error`: the UTF-8 message.
//!
//! # Alignment invariant
//!
//! Both headers are multiples of 8 long and every entry is a multiple of 8
//! long, with its key padded to 8: **every value starts at an offset that is a
//! multiple of 8 from the start of the message**. The backend keeps messages
//! in 8-aligned buffers and reads tuples (after the 24-byte row header, also a
//! multiple of 8) in place, without copying.

mod entries;
mod error;
mod locks;
mod logical_notes;
mod persistence;
mod put_batch;
mod put_batches;
mod scan;
mod wal_form;
#[cfg(test)]
mod test_support;

use std::fmt;

pub use entries::{entry_encoded_len, max_entry_payload, EntryBatch, EntryCursor, EntryIter, ENTRY_HEADER_LEN};
pub use error::{ErrorCode, ProtocolError};
pub use locks::{entries_into_granted_lock, LockMode};
pub use logical_notes::{parse_notes, LogicalNotes, Note, NOTES_MAGIC};
pub use persistence::{
    decode_persistence, encode_committed, CommitNotice, encode_persistence, PersistenceRow, RelList, PERSISTENCE_LEN,
};
pub use put_batch::{encode_put_batch, put_batch_len, BatchBuilder, PUT_BATCH_LSN_AT};
pub use put_batches::{write_part_prefix, write_put_batches_header, BatchParts, PART_PREFIX_LEN};
pub use scan::ScanWriter;
pub use wal_form::{compact, expand, COMPACT_TAG};

use locks::LOCK_ROW_BODY_LEN;

/// Length of every request's fixed header.
pub const REQUEST_HEADER_LEN: usize = 16;
/// Length of every response's fixed header.
pub const RESPONSE_HEADER_LEN: usize = 8;
/// Alignment of headers, keys and values in a message.
pub const ALIGN: usize = 8;
/// Smallest response buffer the server can answer into (an `Ok` or an empty `Error`).
pub const MIN_RESPONSE_LEN: usize = RESPONSE_HEADER_LEN;
/// Length of the LSN in front of `PutBatch` entries and `CreateCf`/`TruncateCf` bodies.
const LSN_LEN: usize = 8;

const _: () = assert!(REQUEST_HEADER_LEN.is_multiple_of(ALIGN));
const _: () = assert!(RESPONSE_HEADER_LEN.is_multiple_of(ALIGN));

mod op {
    pub const PING: u8 = 1;
    pub const CREATE_CF: u8 = 2;
    pub const DROP_CF: u8 = 3;
    pub const DROP_DATABASE: u8 = 4;
    pub const TRUNCATE_CF: u8 = 5;
    pub const ALLOC_ROWIDS: u8 = 6;
    pub const PUT_BATCH: u8 = 7;
    pub const SCAN: u8 = 8;
    pub const CF_INFO: u8 = 9;
    pub const FLUSH_ALL: u8 = 10;
    pub const LIST_CFS: u8 = 11;
    pub const LOCK_ROW: u8 = 12;
    pub const RELEASE_LOCKS: u8 = 13;
    pub const COMMITTED: u8 = 14;
    pub const PERSISTENCE: u8 = 15;
    pub const FLUSH_CF: u8 = 16;
    pub const SYNC_WAL: u8 = 17;
    pub const COPY_CF: u8 = 18;
    pub const COPY_DATABASE: u8 = 19;
    pub const TRIM_SIZE: u8 = 20;
    pub const PUT_BATCHES: u8 = 21;
    pub const REPACK_CF: u8 = 22;
}

/// Whether a request with op byte `op` writes rows (`PutBatch` or
/// `PutBatches`: the channel's test hook delays these).
pub fn is_write_op(op: u8) -> bool {
    op == op::PUT_BATCH || op == op::PUT_BATCHES
}

/// The name of request op `op` (diagnostics: per-kind channel counters).
pub fn op_name(op: u8) -> Option<&'static str> {
    Some(match op {
        op::PING => "ping",
        op::CREATE_CF => "create_cf",
        op::DROP_CF => "drop_cf",
        op::DROP_DATABASE => "drop_database",
        op::TRUNCATE_CF => "truncate_cf",
        op::ALLOC_ROWIDS => "alloc_rowids",
        op::PUT_BATCH => "put_batch",
        op::SCAN => "scan",
        op::CF_INFO => "cf_info",
        op::FLUSH_ALL => "flush_all",
        op::LIST_CFS => "list_cfs",
        op::LOCK_ROW => "lock_row",
        op::RELEASE_LOCKS => "release_locks",
        op::COMMITTED => "committed",
        op::PERSISTENCE => "persistence",
        op::FLUSH_CF => "flush_cf",
        op::SYNC_WAL => "sync_wal",
        op::COPY_CF => "copy_cf",
        op::COPY_DATABASE => "copy_database",
        op::TRIM_SIZE => "trim_size",
        op::PUT_BATCHES => "put_batches",
        op::REPACK_CF => "repack_cf",
        _ => return None,
    })
}

mod tag {
    pub const OK: u8 = 1;
    pub const ROWIDS: u8 = 2;
    pub const ENTRIES: u8 = 3;
    pub const CF_INFO: u8 = 4;
    pub const ERROR: u8 = 5;
    pub const LOCK: u8 = 6;
    pub const REPACKED: u8 = 7;
}

/// A table as the backend names it. The engine maps it to the CF of the
/// table's current incarnation; the backend never knows incarnations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CfRef {
    /// Database OID.
    pub db: u32,
    /// Relfilenumber.
    pub rel: u32,
}

impl fmt::Display for CfRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.db, self.rel)
    }
}

/// A request from a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    Ping,
    /// Create the table's CF with a new incarnation; an existing CF for
    /// (db, rel) is an orphan and is dropped first. `created_lsn`: a WAL
    /// position already durable; replay skips transactions committed before.
    /// `logged`: false for an unlogged or temporary table, whose CF gets no
    /// flags and is emptied after a crash.
    CreateCf {
        cf: CfRef,
        created_lsn: u64,
        logged: bool,
    },
    /// Drop the table's CF; a missing CF is not an error.
    DropCf(CfRef),
    /// Drop every CF of the database.
    DropDatabase {
        db: u32,
    },
    /// Empty the CF (a new incarnation created at `created_lsn`); its rowids restart at 0.
    TruncateCf {
        cf: CfRef,
        created_lsn: u64,
    },
    /// Reserve `count` consecutive rowids; answered by [`Response::Rowids`].
    AllocRowids {
        cf: CfRef,
        count: u32,
    },
    /// Write the entries atomically (one WriteBatch, RocksDB WAL off). An
    /// entry with an empty value deletes its key (row values are never
    /// empty: the row header alone is 24 bytes), so a version chain's new
    /// head and the pruning of its dead versions are one atomic write.
    /// `lsn`: end of the WAL record that logged this batch (0: none, or
    /// already durable), so the memtable is not flushed before that WAL.
    PutBatch {
        cf: CfRef,
        lsn: u64,
        batch: EntryBatch<'a>,
    },
    /// Entries with keys in `[start, end)`, ascending; answered by
    /// [`Response::Entries`]. `max_entries` 0 means no count limit.
    /// `per_row` > 0 returns at most that many entries (the newest versions)
    /// of each rowid and then seeks to the next rowid, never stepping over a
    /// row's older versions or the delete markers pruning left behind them;
    /// 0 means every entry.
    Scan {
        cf: CfRef,
        start: &'a [u8],
        end: &'a [u8],
        max_entries: u32,
        per_row: u32,
    },
    /// Answered by [`Response::CfInfo`].
    CfInfo(CfRef),
    /// Flush every CF's memtable and wait.
    FlushAll,
    /// Every table CF; answered by [`Response::Entries`] whose keys are
    /// `db ‖ rel` (u32 big-endian each) and whose values are the CF names.
    /// `start`/`more` page through the list like a scan.
    ListCfs,
    /// Take a row lock for top-level transaction `xid`; answered by
    /// [`Response::Lock`]. `evict` (0: none) names a transaction known to
    /// have ended whose holdings on this row are removed first. The CF need
    /// not exist when `read` is 0: locks are about rowids. `read` > 0: once
    /// granted, the answer also carries the row's `read` newest versions
    /// (what a writer reads next: lock and read in one round trip).
    LockRow {
        cf: CfRef,
        rowid: u64,
        xid: u32,
        mode: LockMode,
        evict: u32,
        read: u8,
    },
    /// Drop every row lock `xid` holds (its transaction ended); answered by
    /// [`Response::Ok`].
    ReleaseLocks {
        xid: u32,
    },
    /// Transaction `xid` of database `db` committed, its commit record ending
    /// at `commit_lsn`, after writing the tables `rels`: write their flush
    /// flags. Answered by [`Response::Ok`].
    /// `release_locks`: also drop every row lock `xid` holds (saves a
    /// second request at commit).
    Committed {
        db: u32,
        xid: u32,
        commit_lsn: u64,
        first_lsn: u64,
        last_lsn: u64,
        rels: RelList<'a>,
        release_locks: bool,
    },
    /// Where every CF of `db` (0: of every database) after `after` (in
    /// `(db, rel)` order; `(0, 0)`: from the first) stands on persistence;
    /// answered by [`Response::Entries`] with keys `db ‖ rel` (u32 big-endian)
    /// and values [`encode_persistence`]. `more`: ask again from the last key.
    Persistence {
        db: u32,
        after: CfRef,
    },
    /// Flush the table's memtables and wait.
    FlushCf(CfRef),
    /// `engine_wal` mode: sync RocksDB's WAL (after PostgreSQL's).
    SyncWal,
    /// Copy every row version of table `from` into the (new, empty) table
    /// `to_rel` of the same database, with the same rowids, and make the
    /// copy durable (`ALTER TABLE ... SET TABLESPACE`).
    CopyCf {
        from: CfRef,
        to_rel: u32,
    },
    /// Copy every table of database `from` into database `to` (same
    /// relfilenumbers, kinds and rowids; `CREATE DATABASE ... TEMPLATE`),
    /// logged tables' copies created at `created_lsn` and made durable.
    CopyDatabase {
        from: u32,
        to: u32,
        created_lsn: u64,
    },
    /// VACUUM's truncation: the table's size end becomes one past its
    /// highest row present; answered by [`Response::CfInfo`] (after it).
    TrimSize(CfRef),
    /// Several tables' `PutBatch` requests in one, applied in order, each
    /// as a `PutBatch` of its own (`put_batches.rs`).
    PutBatches {
        parts: BatchParts<'a>,
    },
    /// Fold the row keys of version 0 beside the table's packs back into
    /// them (after VACUUM: its frozen copies, the markers of its removals);
    /// answered by [`Response::Repacked`].
    RepackCf(CfRef),
}

/// The engine's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Response<'a> {
    Ok,
    Rowids {
        first: u64,
    },
    /// A scan's batch. `more`: resume with `start` = the successor of the last
    /// key returned (that key ‖ `0x00`).
    Entries {
        more: bool,
        batch: EntryBatch<'a>,
    },
    CfInfo {
        next_rowid: u64,
        approx_keys: u64,
        approx_bytes: u64,
        entries: u64,
        size_end: u64,
    },
    Error {
        code: ErrorCode,
        message: &'a str,
    },
    /// Answer to `LockRow`. Not granted: `holder` is a transaction whose lock
    /// conflicts; wait for it to end, then ask again with `evict = holder`.
    /// Granted: `versions` holds the newest versions asked for (`read`),
    /// `more` whether the row has older ones.
    Lock {
        granted: bool,
        already_held: bool,
        holder: u32,
        more: bool,
        versions: EntryBatch<'a>,
    },
    /// Answer to `RepackCf`: the groups whose pack was written anew, and
    /// the row keys folded into them.
    Repacked {
        groups: u64,
        keys: u64,
    },
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// Encodes a request into `out`; returns its length.
pub fn encode_request(request: &Request<'_>, out: &mut [u8]) -> Result<usize, ProtocolError> {
    let zero = CfRef { db: 0, rel: 0 };
    let (code, cf, arg) = match *request {
        Request::Ping => (op::PING, zero, 0),
        Request::CreateCf { cf, logged, .. } => (op::CREATE_CF, cf, u32::from(!logged)),
        Request::DropCf(cf) => (op::DROP_CF, cf, 0),
        Request::DropDatabase { db } => (op::DROP_DATABASE, CfRef { db, rel: 0 }, 0),
        Request::TruncateCf { cf, .. } => (op::TRUNCATE_CF, cf, 0),
        Request::AllocRowids { cf, count } => (op::ALLOC_ROWIDS, cf, count),
        Request::PutBatch { cf, batch, .. } => (op::PUT_BATCH, cf, batch.count),
        Request::PutBatches { parts } => (op::PUT_BATCHES, zero, parts.count),
        Request::Scan {
            cf, max_entries, ..
        } => (op::SCAN, cf, max_entries),
        Request::CfInfo(cf) => (op::CF_INFO, cf, 0),
        Request::FlushAll => (op::FLUSH_ALL, zero, 0),
        Request::ListCfs => (op::LIST_CFS, zero, 0),
        Request::LockRow { cf, xid, .. } => (op::LOCK_ROW, cf, xid),
        Request::ReleaseLocks { xid } => (op::RELEASE_LOCKS, zero, xid),
        Request::Committed { db, rels, .. } => (op::COMMITTED, CfRef { db, rel: 0 }, rels.len() as u32),
        Request::Persistence { db, after } => (op::PERSISTENCE, CfRef { db, rel: after.rel }, after.db),
        Request::FlushCf(cf) => (op::FLUSH_CF, cf, 0),
        Request::SyncWal => (op::SYNC_WAL, zero, 0),
        Request::CopyCf { from, to_rel } => (op::COPY_CF, from, to_rel),
        Request::CopyDatabase { from, to, .. } => (op::COPY_DATABASE, CfRef { db: from, rel: 0 }, to),
        Request::TrimSize(cf) => (op::TRIM_SIZE, cf, 0),
        Request::RepackCf(cf) => (op::REPACK_CF, cf, 0),
    };
    if matches!(
        request,
        Request::LockRow { .. } | Request::ReleaseLocks { .. }
    ) && arg == 0
    {
        return Err(ProtocolError::ZeroXid);
    }
    let needed = match *request {
        Request::PutBatch { batch, .. } => put_batch::request_len(batch),
        Request::PutBatches { parts } => put_batches::request_len(parts),
        Request::CreateCf { .. } | Request::TruncateCf { .. } | Request::CopyDatabase { .. } => {
            REQUEST_HEADER_LEN + LSN_LEN
        }
        Request::Committed { rels, .. } => persistence::committed_request_len(rels),
        Request::Scan { start, end, .. } => scan::request_len(start, end)?,
        Request::LockRow { .. } => REQUEST_HEADER_LEN + LOCK_ROW_BODY_LEN,
        _ => REQUEST_HEADER_LEN,
    };
    let out = fit(out, needed)?;
    out[..REQUEST_HEADER_LEN].fill(0);
    out[0] = code;
    out[4..8].copy_from_slice(&cf.db.to_le_bytes());
    out[8..12].copy_from_slice(&cf.rel.to_le_bytes());
    out[12..16].copy_from_slice(&arg.to_le_bytes());
    let body = &mut out[REQUEST_HEADER_LEN..];
    match *request {
        Request::PutBatch { lsn, batch, .. } => put_batch::write_body(body, lsn, batch),
        Request::PutBatches { parts } => body.copy_from_slice(parts.bytes),
        Request::CreateCf { created_lsn, .. }
        | Request::TruncateCf { created_lsn, .. }
        | Request::CopyDatabase { created_lsn, .. } => {
            body.copy_from_slice(&created_lsn.to_le_bytes());
        }
        Request::Committed { xid, commit_lsn, first_lsn, last_lsn, rels, release_locks, .. } => {
            persistence::write_committed_body(body, xid, commit_lsn, first_lsn, last_lsn, rels, release_locks);
        }
        Request::Scan { start, end, per_row, .. } => scan::write_body(body, start, end, per_row),
        Request::LockRow {
            rowid, mode, evict, read, ..
        } => locks::write_body(body, rowid, mode, evict, read),
        _ => {}
    }
    Ok(needed)
}

/// Decodes a request. Never panics; any malformed input is an error.
pub fn decode_request(buf: &[u8]) -> Result<Request<'_>, ProtocolError> {
    need(buf, REQUEST_HEADER_LEN)?;
    check_zero(buf, 1..4, 0)?;
    let code = buf[0];
    let db = read_u32(buf, 4, 0)?;
    let rel = read_u32(buf, 8, 0)?;
    let arg = read_u32(buf, 12, 0)?;
    let cf = CfRef { db, rel };
    // Which header fields the op uses; the others must be zero.
    let (uses_db, uses_rel, uses_arg) = match code {
        op::PING | op::FLUSH_ALL | op::LIST_CFS | op::SYNC_WAL => (false, false, false),
        op::DROP_DATABASE => (true, false, false),
        op::COPY_DATABASE => (true, false, true),
        op::COMMITTED => (true, false, true),
        op::DROP_CF | op::TRUNCATE_CF | op::CF_INFO | op::FLUSH_CF | op::TRIM_SIZE | op::REPACK_CF => (true, true, false),
        op::CREATE_CF | op::ALLOC_ROWIDS | op::PUT_BATCH | op::SCAN | op::LOCK_ROW | op::PERSISTENCE | op::COPY_CF => (true, true, true),
        op::RELEASE_LOCKS | op::PUT_BATCHES => (false, false, true),
        other => return Err(ProtocolError::UnknownOp(other)),
    };
    for (used, range) in [(uses_db, 4..8), (uses_rel, 8..12), (uses_arg, 12..16)] {
        if !used {
            check_zero(buf, range, 0)?;
        }
    }
    if matches!(code, op::LOCK_ROW | op::RELEASE_LOCKS) && arg == 0 {
        return Err(ProtocolError::ZeroXid);
    }
    let body = &buf[REQUEST_HEADER_LEN..];
    Ok(match code {
        op::PING => Request::Ping,
        op::CREATE_CF => Request::CreateCf {
            cf,
            created_lsn: read_u64(body, 0, REQUEST_HEADER_LEN)?,
            logged: match arg {
                0 => true,
                1 => false,
                other => return Err(ProtocolError::UnknownTableKind(other)),
            },
        },
        op::DROP_CF => Request::DropCf(cf),
        op::DROP_DATABASE => Request::DropDatabase { db },
        op::TRUNCATE_CF => Request::TruncateCf { cf, created_lsn: read_u64(body, 0, REQUEST_HEADER_LEN)? },
        op::ALLOC_ROWIDS => Request::AllocRowids { cf, count: arg },
        op::PUT_BATCH => put_batch::decode(cf, arg, body)?,
        op::PUT_BATCHES => put_batches::decode(arg, body)?,
        op::COMMITTED => persistence::decode_committed(buf, body, db, arg)?,
        op::PERSISTENCE => Request::Persistence { db, after: CfRef { db: arg, rel } },
        op::FLUSH_CF => Request::FlushCf(cf),
        op::SYNC_WAL => Request::SyncWal,
        op::COPY_CF => Request::CopyCf { from: cf, to_rel: arg },
        op::COPY_DATABASE => Request::CopyDatabase {
            from: db,
            to: arg,
            created_lsn: read_u64(body, 0, REQUEST_HEADER_LEN)?,
        },
        op::SCAN => scan::decode(buf, body, cf, arg)?,
        op::CF_INFO => Request::CfInfo(cf),
        op::TRIM_SIZE => Request::TrimSize(cf),
        op::REPACK_CF => Request::RepackCf(cf),
        op::LIST_CFS => Request::ListCfs,
        op::LOCK_ROW => locks::decode(body, cf, arg)?,
        op::RELEASE_LOCKS => Request::ReleaseLocks { xid: arg },
        // Only FLUSH_ALL is left: every other code returned above.
        _ => Request::FlushAll,
    })
}

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

/// Encodes a response into `out`; returns its length. A message that does not
/// fit is an error (use [`encode_error`], which truncates, for errors).
pub fn encode_response(response: &Response<'_>, out: &mut [u8]) -> Result<usize, ProtocolError> {
    let needed = RESPONSE_HEADER_LEN
        + match *response {
            Response::Ok => 0,
            Response::Rowids { .. } => 8,
            Response::Entries { batch, .. } => batch.encoded_len(),
            Response::CfInfo { .. } => 40,
            Response::Error { message, .. } => message.len(),
            Response::Lock { versions, .. } => versions.encoded_len(),
            Response::Repacked { .. } => 16,
        };
    if let Response::Error { message, .. } = *response {
        if message.len() > u32::MAX as usize {
            return Err(ProtocolError::ValueTooLong(message.len()));
        }
    }
    let out = fit(out, needed)?;
    out[..RESPONSE_HEADER_LEN].fill(0);
    let body = &mut out[RESPONSE_HEADER_LEN..];
    match *response {
        Response::Ok => out[0] = tag::OK,
        Response::Rowids { first } => {
            body.copy_from_slice(&first.to_le_bytes());
            out[0] = tag::ROWIDS;
        }
        Response::Entries { more, batch } => {
            body.copy_from_slice(batch.bytes);
            write_entries_header(out, more, batch.count);
        }
        Response::CfInfo {
            next_rowid,
            approx_keys,
            approx_bytes,
            entries,
            size_end,
        } => {
            body[0..8].copy_from_slice(&next_rowid.to_le_bytes());
            body[8..16].copy_from_slice(&approx_keys.to_le_bytes());
            body[16..24].copy_from_slice(&approx_bytes.to_le_bytes());
            body[24..32].copy_from_slice(&entries.to_le_bytes());
            body[32..40].copy_from_slice(&size_end.to_le_bytes());
            out[0] = tag::CF_INFO;
        }
        Response::Error { code, message } => {
            body.copy_from_slice(message.as_bytes());
            write_error_header(out, code, message.len());
        }
        Response::Lock {
            granted,
            already_held,
            holder,
            more,
            versions,
        } => locks::encode_lock(out, granted, already_held, holder, more, versions)?,
        Response::Repacked { groups, keys } => {
            body[0..8].copy_from_slice(&groups.to_le_bytes());
            body[8..16].copy_from_slice(&keys.to_le_bytes());
            out[0] = tag::REPACKED;
        }
    }
    Ok(needed)
}

/// Encodes `Error { code, message }`, truncating the message (at a character
/// boundary) to fit. Returns the length, or 0 if `out` is shorter than
/// [`MIN_RESPONSE_LEN`] and nothing could be written.
pub fn encode_error(code: ErrorCode, message: &str, out: &mut [u8]) -> usize {
    let Some(room) = out.len().checked_sub(RESPONSE_HEADER_LEN) else {
        return 0;
    };
    let mut len = message.len().min(room).min(u32::MAX as usize);
    while !message.is_char_boundary(len) {
        len -= 1;
    }
    out[..RESPONSE_HEADER_LEN].fill(0);
    out[RESPONSE_HEADER_LEN..RESPONSE_HEADER_LEN + len].copy_from_slice(&message.as_bytes()[..len]);
    write_error_header(out, code, len);
    RESPONSE_HEADER_LEN + len
}

fn write_error_header(out: &mut [u8], code: ErrorCode, message_len: usize) {
    out[0] = tag::ERROR;
    out[1] = code as u8;
    out[4..8].copy_from_slice(&(message_len as u32).to_le_bytes());
}

fn write_entries_header(out: &mut [u8], more: bool, count: u32) {
    out[..RESPONSE_HEADER_LEN].fill(0);
    out[0] = tag::ENTRIES;
    out[1] = u8::from(more);
    out[4..8].copy_from_slice(&count.to_le_bytes());
}

/// Decodes a response. Never panics; any malformed input is an error.
pub fn decode_response(buf: &[u8]) -> Result<Response<'_>, ProtocolError> {
    need(buf, RESPONSE_HEADER_LEN)?;
    check_zero(buf, 2..4, 0)?;
    let code = buf[0];
    let body = &buf[RESPONSE_HEADER_LEN..];
    let base = RESPONSE_HEADER_LEN;
    match code {
        tag::OK | tag::ROWIDS | tag::CF_INFO | tag::REPACKED => check_zero(buf, 1..8, 0)?,
        tag::ENTRIES | tag::ERROR => {}
        tag::LOCK => {
            if buf[1] & !locks::lock_flag::ALL != 0 {
                return Err(ProtocolError::NotZero { offset: 1 });
            }
        }
        other => return Err(ProtocolError::UnknownTag(other)),
    }
    Ok(match code {
        tag::OK => Response::Ok,
        tag::ROWIDS => Response::Rowids {
            first: read_u64(body, 0, base)?,
        },
        tag::CF_INFO => Response::CfInfo {
            next_rowid: read_u64(body, 0, base)?,
            approx_keys: read_u64(body, 8, base)?,
            approx_bytes: read_u64(body, 16, base)?,
            entries: read_u64(body, 24, base)?,
            size_end: read_u64(body, 32, base)?,
        },
        tag::ENTRIES => {
            let more = match buf[1] {
                0 => false,
                1 => true,
                _ => return Err(ProtocolError::NotZero { offset: 1 }),
            };
            let count = read_u32(buf, 4, 0)?;
            Response::Entries {
                more,
                batch: EntryBatch::parse(count, body, base)?,
            }
        }
        tag::LOCK => locks::decode_lock(buf, body, base)?,
        tag::REPACKED => Response::Repacked {
            groups: read_u64(body, 0, base)?,
            keys: read_u64(body, 8, base)?,
        },
        // Only ERROR is left.
        _ => {
            let code = ErrorCode::from_u8(buf[1]).ok_or(ProtocolError::UnknownErrorCode(buf[1]))?;
            let len = read_u32(buf, 4, 0)? as usize;
            need(buf, base.saturating_add(len))?;
            let message = std::str::from_utf8(&body[..len]).map_err(|_| ProtocolError::BadUtf8)?;
            Response::Error { code, message }
        }
    })
}

/// An `Entries` answer as an [`EntryCursor`], its entries checked one by
/// one as the caller reads them; `None` if `buf` holds another answer
/// (decode it with [`decode_response`]).
pub fn entries_cursor(buf: &[u8]) -> Result<Option<EntryCursor<'_>>, ProtocolError> {
    need(buf, RESPONSE_HEADER_LEN)?;
    if buf[0] != tag::ENTRIES {
        return Ok(None);
    }
    check_zero(buf, 2..4, 0)?;
    let more = match buf[1] {
        0 => false,
        1 => true,
        _ => return Err(ProtocolError::NotZero { offset: 1 }),
    };
    let count = read_u32(buf, 4, 0)?;
    Ok(Some(EntryCursor::new(more, count, &buf[RESPONSE_HEADER_LEN..], RESPONSE_HEADER_LEN)))
}

// ---------------------------------------------------------------------------
// Bounds-checked primitives: decoding never indexes past a length check.
// `base` is the offset of `buf` within the message, for error messages.
// ---------------------------------------------------------------------------

fn need(buf: &[u8], needed: usize) -> Result<(), ProtocolError> {
    if buf.len() < needed {
        return Err(ProtocolError::Truncated {
            needed,
            available: buf.len(),
        });
    }
    Ok(())
}

fn fit(out: &mut [u8], needed: usize) -> Result<&mut [u8], ProtocolError> {
    let available = out.len();
    out.get_mut(..needed)
        .ok_or(ProtocolError::TooLarge { needed, available })
}

fn field<const N: usize>(buf: &[u8], pos: usize, base: usize) -> Result<[u8; N], ProtocolError> {
    pos.checked_add(N)
        .and_then(|end| buf.get(pos..end))
        .and_then(|b| b.try_into().ok())
        .ok_or(ProtocolError::Truncated {
            needed: base.saturating_add(pos).saturating_add(N),
            available: base + buf.len(),
        })
}

fn read_u16(buf: &[u8], pos: usize, base: usize) -> Result<u16, ProtocolError> {
    field(buf, pos, base).map(u16::from_le_bytes)
}

fn read_u32(buf: &[u8], pos: usize, base: usize) -> Result<u32, ProtocolError> {
    field(buf, pos, base).map(u32::from_le_bytes)
}

fn read_u64(buf: &[u8], pos: usize, base: usize) -> Result<u64, ProtocolError> {
    field(buf, pos, base).map(u64::from_le_bytes)
}

fn check_zero(buf: &[u8], range: std::ops::Range<usize>, base: usize) -> Result<(), ProtocolError> {
    let bytes = buf.get(range.clone()).ok_or(ProtocolError::Truncated {
        needed: base + range.end,
        available: base + buf.len(),
    })?;
    match bytes.iter().position(|&b| b != 0) {
        Some(i) => Err(ProtocolError::NotZero {
            offset: base + range.start + i,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{assert_values_aligned, cf, sample_batch};
    use super::*;

    #[test]
    fn requests_round_trip() {
        let batch = sample_batch();
        let requests = [
            Request::Ping,
            Request::CreateCf { cf: cf(), created_lsn: 0x1_2345_6789, logged: true },
            Request::CreateCf { cf: cf(), created_lsn: 0, logged: false },
            Request::DropCf(cf()),
            Request::DropDatabase { db: 7 },
            Request::TruncateCf { cf: cf(), created_lsn: 0 },
            Request::Persistence { db: 0, after: CfRef { db: 0, rel: 0 } },
            Request::Committed {
                db: 5,
                xid: 77,
                commit_lsn: 0x30,
                first_lsn: 0x10,
                last_lsn: 0x20,
                rels: RelList { bytes: &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0] },
                release_locks: true,
            },
            Request::Persistence { db: 5, after: CfRef { db: 5, rel: 16_384 } },
            Request::FlushCf(cf()),
            Request::SyncWal,
            Request::CopyCf { from: cf(), to_rel: 99 },
            Request::CopyDatabase { from: 5, to: 6, created_lsn: 0x1234 },
            Request::RepackCf(cf()),
            Request::AllocRowids {
                cf: cf(),
                count: 1000,
            },
            Request::PutBatch {
                cf: cf(),
                lsn: 0x10_0000_0040,
                batch: batch.as_batch(),
            },
            Request::PutBatch {
                cf: cf(),
                lsn: 0,
                batch: EntryBatch::default(),
            },
            Request::Scan {
                cf: cf(),
                start: b"abc",
                end: &[0xFF; 3],
                max_entries: 64,
                per_row: 0,
            },
            Request::Scan {
                cf: cf(),
                start: b"",
                end: b"",
                max_entries: 0,
                per_row: 0,
            },
            Request::CfInfo(cf()),
            Request::TrimSize(cf()),
            Request::FlushAll,
            Request::ListCfs,
            Request::LockRow {
                cf: cf(),
                rowid: 290,
                xid: 1234,
                mode: LockMode::Shared,
                evict: 0, read: 0,
            },
            Request::LockRow {
                cf: CfRef {
                    db: u32::MAX,
                    rel: u32::MAX,
                },
                rowid: u64::MAX,
                xid: u32::MAX,
                mode: LockMode::Exclusive,
                evict: u32::MAX - 1,
                read: 255,
            },
            Request::ReleaseLocks { xid: 3 },
        ];
        for request in requests {
            let mut buf = vec![0u8; 1024];
            buf.fill(0xEE); // garbage from a previous message must not leak into reserved bytes
            let len = encode_request(&request, &mut buf).unwrap();
            if !matches!(request, Request::Scan { .. }) {
                assert_eq!(len % 8, 0);
            }
            assert_eq!(decode_request(&buf[..len]).unwrap(), request);
            // Trailing bytes (the rest of a fixed-size slot) are ignored.
            assert_eq!(decode_request(&buf).unwrap(), request);
            // Every proper prefix is rejected as truncated.
            for cut in 0..len {
                assert!(
                    decode_request(&buf[..cut]).is_err(),
                    "{request:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn too_large_reports_sizes() {
        let batch = sample_batch();
        let needed = batch.encoded_len();
        let mut out = vec![0u8; needed - 1];
        assert_eq!(
            encode_put_batch(cf(), &batch, &mut out),
            Err(ProtocolError::TooLarge {
                needed,
                available: needed - 1
            })
        );
        assert_eq!(
            encode_request(&Request::Ping, &mut [0u8; 15]),
            Err(ProtocolError::TooLarge {
                needed: 16,
                available: 15
            })
        );
        assert_eq!(
            ProtocolError::TooLarge {
                needed: 1,
                available: 0
            }
            .code(),
            ErrorCode::TooLarge
        );
        assert_eq!(ProtocolError::UnknownOp(0).code(), ErrorCode::BadRequest);
    }

    #[test]
    fn responses_round_trip() {
        let batch = sample_batch();
        let responses = [
            Response::Ok,
            Response::Rowids {
                first: u64::MAX - 1,
            },
            Response::Repacked { groups: 3, keys: u64::MAX },
            Response::Entries {
                more: true,
                batch: batch.as_batch(),
            },
            Response::Entries {
                more: false,
                batch: EntryBatch::default(),
            },
            Response::CfInfo {
                next_rowid: 1,
                approx_keys: 2,
                approx_bytes: 3,
                entries: 4,
                size_end: 5,
            },
            Response::Error {
                code: ErrorCode::DiskFull,
                message: "No space left on device",
            },
            Response::Error {
                code: ErrorCode::Other,
                message: "",
            },
            Response::Lock {
                granted: true,
                already_held: false,
                holder: 0, more: false, versions: Default::default(),
            },
            Response::Lock {
                granted: true,
                already_held: true,
                holder: 0, more: false, versions: Default::default(),
            },
            Response::Lock {
                granted: false,
                already_held: false,
                holder: u32::MAX, more: false, versions: Default::default(),
            },
        ];
        for response in responses {
            let mut buf = vec![0u8; 1024];
            buf.fill(0xEE);
            let len = encode_response(&response, &mut buf).unwrap();
            let decoded = decode_response(&buf[..len]).unwrap();
            assert_eq!(decoded, response);
            if let Response::Entries { batch, .. } = decoded {
                assert_values_aligned(&buf[..len], &batch);
            }
            for cut in 0..len {
                assert!(
                    decode_response(&buf[..cut]).is_err(),
                    "{response:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn error_message_is_truncated_at_a_char_boundary() {
        let mut out = [0u8; RESPONSE_HEADER_LEN + 5];
        // "é" is two bytes: 5 bytes of room hold "ab" + "é" but not the next "é".
        let len = encode_error(ErrorCode::Io, "abéé", &mut out);
        assert_eq!(len, RESPONSE_HEADER_LEN + 4);
        assert_eq!(
            decode_response(&out[..len]).unwrap(),
            Response::Error {
                code: ErrorCode::Io,
                message: "abé"
            }
        );
        assert_eq!(encode_error(ErrorCode::Io, "x", &mut [0u8; 7]), 0);
        let mut out = [0u8; 8];
        assert_eq!(encode_error(ErrorCode::Busy, "dropped", &mut out), 8);
        assert_eq!(
            decode_response(&out).unwrap(),
            Response::Error {
                code: ErrorCode::Busy,
                message: ""
            }
        );
    }

    #[test]
    fn malformed_messages_are_rejected() {
        let mut buf = [0u8; 64];
        assert_eq!(decode_request(&buf), Err(ProtocolError::UnknownOp(0)));
        buf[0] = 99;
        assert_eq!(decode_request(&buf), Err(ProtocolError::UnknownOp(99)));
        buf[0] = op::PING;
        buf[2] = 1;
        assert_eq!(
            decode_request(&buf),
            Err(ProtocolError::NotZero { offset: 2 })
        );
        buf[2] = 0;
        buf[9] = 1; // rel on a Ping
        assert_eq!(
            decode_request(&buf),
            Err(ProtocolError::NotZero { offset: 9 })
        );

        // A CreateCf of a table kind that does not exist.
        let mut create = [0u8; 64];
        let len = encode_request(&Request::CreateCf { cf: cf(), created_lsn: 1, logged: false }, &mut create).unwrap();
        create[12] = 2;
        assert_eq!(decode_request(&create[..len]), Err(ProtocolError::UnknownTableKind(2)));

        // A PutBatch whose count promises more entries than the bytes hold.
        let mut b = BatchBuilder::new();
        b.push(b"k", b"v").unwrap();
        let mut out = [0u8; 64];
        let len = encode_put_batch(cf(), &b, &mut out).unwrap();
        out[12] = 2;
        assert!(matches!(
            decode_request(&out[..len]),
            Err(ProtocolError::Truncated { .. })
        ));
        out[12] = 1;
        out[REQUEST_HEADER_LEN + LSN_LEN + ENTRY_HEADER_LEN + 1] = 0xFF; // key padding
        assert!(matches!(
            decode_request(&out[..len]),
            Err(ProtocolError::NotZero { .. })
        ));

        let mut resp = [0u8; 16];
        resp[0] = tag::ERROR;
        resp[1] = 42;
        assert_eq!(
            decode_response(&resp),
            Err(ProtocolError::UnknownErrorCode(42))
        );
        resp[1] = ErrorCode::Io as u8;
        resp[4] = 2;
        resp[8] = 0xFF;
        resp[9] = 0xFE;
        assert_eq!(decode_response(&resp), Err(ProtocolError::BadUtf8));
        resp[0] = tag::ENTRIES;
        resp[1] = 2;
        assert_eq!(
            decode_response(&resp),
            Err(ProtocolError::NotZero { offset: 1 })
        );
        resp[0] = 0;
        assert_eq!(decode_response(&resp), Err(ProtocolError::UnknownTag(0)));
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            // xorshift64*: deterministic, no dependency.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut buf = [0u8; 96];
        for i in 0..200_000 {
            let len = (next() % 97) as usize;
            for b in &mut buf[..len] {
                *b = next() as u8;
            }
            // Bias towards valid headers so the decoders get past the first checks.
            if len > 0 {
                buf[0] = (next() % 15) as u8;
            }
            if i % 2 == 0 && len > 4 {
                buf[1..4].fill(0);
            }
            let _ = decode_request(&buf[..len]);
            if let Ok(Response::Entries { batch, .. }) = decode_response(&buf[..len]) {
                assert_eq!(batch.iter().count(), batch.len());
            }
        }
    }
}
