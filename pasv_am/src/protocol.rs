//! The backend ⇄ engine wire format (DESIGN §1).
//!
//! Owns the byte layout of every request and response that crosses the
//! shared-memory channel. Both sides link this module; the extension never
//! sees RocksDB, and this module never sees shared memory (it works on plain
//! byte slices). Written by hand: the format is a fixed, zero-copy layout that
//! no serialization crate produces.
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
//! | 0 | op ([`Request`] variant, 1..=17 in declaration order) |
//! | 1..4 | zero |
//! | 4..8 | db (u32), zero unless the request names a CF or a database |
//! | 8..12 | rel (u32), zero unless the request names a CF |
//! | 12..16 | arg (u32): `count` of `AllocRowids` and `PutBatch`, `max_entries` of `Scan`, `xid` of `LockRow` and `ReleaseLocks` (never 0), the number of rels of `Committed`, else zero |
//!
//! then, for `CreateCf` and `TruncateCf`, created_lsn u64; for `PutBatch`,
//! lsn u64 ‖ `count` entries; for `Scan`, `start_len` u16 ‖ `end_len` u16 ‖
//! per_row u32 ‖ start ‖ end; for `LockRow`, rowid u64 ‖ evict u32 ‖ mode u8
//! ([`LockMode`]) ‖ read u8 ‖ 2 zero bytes; for `Committed`, commit_lsn u64 ‖
//! first_lsn u64 ‖ last_lsn u64 ‖ xid u32 ‖ release_locks u8 ‖ 3 zero bytes ‖ rels (u32 each)
//! ‖ zero pad to 8.
//!
//! A `PutBatch` is logged to the WAL exactly as encoded with lsn 0, before
//! it is sent; the sender then patches the real LSN in ([`PUT_BATCH_LSN_AT`]),
//! so a replayed message is a valid request as it stands.
//!
//! Response header, [`RESPONSE_HEADER_LEN`] = 8 bytes:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | tag ([`Response`] variant, 1..=6 in declaration order) |
//! | 1 | `more` (0/1) of `Entries`, the [`ErrorCode`] of `Error`, flags of `Lock` (bit 0 `granted`, bit 1 `already_held`, bit 2 `more`, others zero), else zero |
//! | 2..4 | zero |
//! | 4..8 | entry count of `Entries` and of a granted `Lock`, message length of `Error`, `holder` of a refused `Lock`, else zero |
//!
//! then `Rowids`: first (u64); `Entries` and a granted `Lock`: the entries; `CfInfo`: next_rowid,
//! approx_keys, approx_bytes (u64 each); `Error`: the UTF-8 message.
//!
//! Entry ([`entry_encoded_len`] bytes): key_len u16 ‖ 2 zero bytes ‖ val_len
//! u32 ‖ key ‖ zero pad to 8 ‖ value ‖ zero pad to 8.
//!
//! # Alignment invariant
//!
//! Both headers are multiples of 8 long and every entry is a multiple of 8
//! long, with its key padded to 8: **every value starts at an offset that is a
//! multiple of 8 from the start of the message**. The backend keeps messages
//! in 8-aligned buffers and reads tuples (after the 24-byte row header, also a
//! multiple of 8) in place, without copying.

use std::fmt;

use thiserror::Error;

/// Length of every request's fixed header.
pub const REQUEST_HEADER_LEN: usize = 16;
/// Length of every response's fixed header.
pub const RESPONSE_HEADER_LEN: usize = 8;
/// Length of an entry's (key_len, val_len) header.
pub const ENTRY_HEADER_LEN: usize = 8;
/// Alignment of headers, keys and values in a message.
pub const ALIGN: usize = 8;
/// Smallest response buffer the server can answer into (an `Ok` or an empty `Error`).
pub const MIN_RESPONSE_LEN: usize = RESPONSE_HEADER_LEN;

/// Scan request: start_len u16 ‖ end_len u16 ‖ 4 zero bytes.
const SCAN_BOUNDS_LEN: usize = 8;
/// LockRow request: rowid u64 ‖ evict u32 ‖ mode u8 ‖ read u8 ‖ 2 zero bytes.
const LOCK_ROW_BODY_LEN: usize = 16;
/// Committed request: three LSNs, xid u32, 4 zero bytes (then the rels).
const COMMITTED_FIXED_LEN: usize = 32;
/// Byte offset of a `PutBatch`'s LSN in its encoding.
pub const PUT_BATCH_LSN_AT: usize = REQUEST_HEADER_LEN;
/// Length of the LSN in front of `PutBatch` entries and `CreateCf`/`TruncateCf` bodies.
const LSN_LEN: usize = 8;
/// Length of the row keys [`max_entry_payload`] is computed for.
const PAYLOAD_KEY_LEN: usize = crate::keys::ROW_KEY_LEN;

const _: () = assert!(REQUEST_HEADER_LEN.is_multiple_of(ALIGN));
const _: () = assert!(RESPONSE_HEADER_LEN.is_multiple_of(ALIGN));
const _: () = assert!(ENTRY_HEADER_LEN.is_multiple_of(ALIGN));
const _: () = assert!(SCAN_BOUNDS_LEN.is_multiple_of(ALIGN));
const _: () = assert!(LOCK_ROW_BODY_LEN.is_multiple_of(ALIGN));

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
}

/// The op byte of a `PutBatch` request (the channel's test hook delays these).
pub const PUT_BATCH_OP: u8 = op::PUT_BATCH;

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
}

/// Flag bits of a `Lock` response's byte 1.
mod lock_flag {
    pub const GRANTED: u8 = 1;
    pub const ALREADY_HELD: u8 = 2;
    pub const MORE: u8 = 4;
    pub const ALL: u8 = GRANTED | ALREADY_HELD | MORE;
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

/// Strength of a row lock (DESIGN §3). A holder of a mode also holds every
/// weaker one, hence the order.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockMode {
    /// FOR SHARE / FOR KEY SHARE: compatible with other sharers.
    Shared = 1,
    /// UPDATE, DELETE, FOR UPDATE / FOR NO KEY UPDATE: compatible with nothing.
    Exclusive = 2,
}

impl LockMode {
    pub fn from_u8(byte: u8) -> Option<LockMode> {
        match byte {
            1 => Some(LockMode::Shared),
            2 => Some(LockMode::Exclusive),
            _ => None,
        }
    }
}

/// A request from a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    Ping,
    /// Create the table's CF with a new incarnation; an existing CF for
    /// (db, rel) is an orphan and is dropped first. `created_lsn`: a WAL
    /// position already durable; replay skips transactions committed before.
    CreateCf {
        cf: CfRef,
        created_lsn: u64,
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
}

/// Relfilenumbers, u32 little-endian each, as they sit in a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RelList<'a> {
    bytes: &'a [u8],
}

impl<'a> RelList<'a> {
    pub fn len(&self) -> usize {
        self.bytes.len() / 4
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + 'a {
        self.bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }
}

/// Encodes a [`Request::Committed`] for `rels` into `out`; returns its length.
#[allow(clippy::too_many_arguments)]
pub fn encode_committed(
    db: u32,
    xid: u32,
    commit_lsn: u64,
    first_lsn: u64,
    last_lsn: u64,
    rels: &[u32],
    release_locks: bool,
    out: &mut [u8],
) -> Result<usize, ProtocolError> {
    let bytes: Vec<u8> = rels.iter().flat_map(|r| r.to_le_bytes()).collect();
    encode_request(
        &Request::Committed { db, xid, commit_lsn, first_lsn, last_lsn, rels: RelList { bytes: &bytes }, release_locks },
        out,
    )
}

/// Value layout of one [`Request::Persistence`] answer entry: incarnation,
/// persisted commit LSN (0: no persisted flag), persisted flag's xid, newest
/// flag's commit LSN, dirty (0/1), memtable bytes, SST bytes, max LSN,
/// created LSN — u64 little-endian each.
pub const PERSISTENCE_LEN: usize = 72;

/// One CF's persistence state as it crosses the channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PersistenceRow {
    pub db: u32,
    pub rel: u32,
    pub incarnation: u64,
    /// Local DPP: commit LSN of the persisted flag (0: none persisted).
    pub persisted_lsn: u64,
    pub persisted_xid: u64,
    pub latest_flag_lsn: u64,
    pub dirty: bool,
    pub memtable_bytes: u64,
    pub sst_bytes: u64,
    pub max_lsn: u64,
    pub created_lsn: u64,
}

pub fn encode_persistence(row: &PersistenceRow) -> ([u8; 8], [u8; PERSISTENCE_LEN]) {
    let mut key = [0u8; 8];
    key[..4].copy_from_slice(&row.db.to_be_bytes());
    key[4..].copy_from_slice(&row.rel.to_be_bytes());
    let mut value = [0u8; PERSISTENCE_LEN];
    let fields = [
        row.incarnation,
        row.persisted_lsn,
        row.persisted_xid,
        row.latest_flag_lsn,
        row.dirty as u64,
        row.memtable_bytes,
        row.sst_bytes,
        row.max_lsn,
        row.created_lsn,
    ];
    for (i, f) in fields.iter().enumerate() {
        value[i * 8..i * 8 + 8].copy_from_slice(&f.to_le_bytes());
    }
    (key, value)
}

pub fn decode_persistence(key: &[u8], value: &[u8]) -> Option<PersistenceRow> {
    if key.len() != 8 || value.len() != PERSISTENCE_LEN {
        return None;
    }
    let f = |i: usize| u64::from_le_bytes(value[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    Some(PersistenceRow {
        db: u32::from_be_bytes(key[..4].try_into().ok()?),
        rel: u32::from_be_bytes(key[4..].try_into().ok()?),
        incarnation: f(0),
        persisted_lsn: f(1),
        persisted_xid: f(2),
        latest_flag_lsn: f(3),
        dirty: f(4) != 0,
        memtable_bytes: f(5),
        sst_bytes: f(6),
        max_lsn: f(7),
        created_lsn: f(8),
    })
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
}

/// Error classes the backend maps to SQLSTATEs.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    NoSuchCf = 1,
    DiskFull = 2,
    Io = 3,
    Corruption = 4,
    BadRequest = 5,
    TooLarge = 6,
    Busy = 7,
    Other = 8,
}

impl ErrorCode {
    pub fn from_u8(byte: u8) -> Option<ErrorCode> {
        Some(match byte {
            1 => ErrorCode::NoSuchCf,
            2 => ErrorCode::DiskFull,
            3 => ErrorCode::Io,
            4 => ErrorCode::Corruption,
            5 => ErrorCode::BadRequest,
            6 => ErrorCode::TooLarge,
            7 => ErrorCode::Busy,
            8 => ErrorCode::Other,
            _ => return None,
        })
    }
}

/// A message that cannot be encoded into the given buffer or decoded from it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtocolError {
    #[error("message needs {needed} bytes, buffer has {available}")]
    TooLarge { needed: usize, available: usize },
    #[error("message truncated: needs {needed} bytes, has {available}")]
    Truncated { needed: usize, available: usize },
    #[error("unknown request op {0}")]
    UnknownOp(u8),
    #[error("unknown response tag {0}")]
    UnknownTag(u8),
    #[error("unknown error code {0}")]
    UnknownErrorCode(u8),
    #[error("byte {offset} of the message must be zero")]
    NotZero { offset: usize },
    #[error("key of {0} bytes exceeds the 65535-byte limit")]
    KeyTooLong(usize),
    #[error("value of {0} bytes exceeds the u32 length limit")]
    ValueTooLong(usize),
    #[error("batch already holds the maximum number of entries")]
    TooManyEntries,
    #[error("error message is not UTF-8")]
    BadUtf8,
    #[error("unknown row lock mode {0}")]
    UnknownLockMode(u8),
    #[error("transaction id 0 (InvalidTransactionId) cannot hold row locks")]
    ZeroXid,
    #[error("a refused row lock carries no versions")]
    VersionsWithoutLock,
}

impl ProtocolError {
    /// The code the server answers with when a request fails this way.
    pub fn code(&self) -> ErrorCode {
        match self {
            ProtocolError::TooLarge { .. } => ErrorCode::TooLarge,
            _ => ErrorCode::BadRequest,
        }
    }
}

/// `n` rounded up to [`ALIGN`]. Callers only pass lengths bounded by u32, so no overflow.
const fn pad8(n: usize) -> usize {
    (n + (ALIGN - 1)) & !(ALIGN - 1)
}

/// Encoded size of one entry.
pub const fn entry_encoded_len(key_len: usize, value_len: usize) -> usize {
    ENTRY_HEADER_LEN + pad8(key_len) + pad8(value_len)
}

/// The largest value that fits with a 12-byte key as the only entry of both a
/// `PutBatch` request and a `Scan` response in a buffer of `buf_len` bytes.
/// The backend compares a tuple (plus row header) against it to raise a clear
/// "row too large" error before trying.
pub fn max_entry_payload(buf_len: usize) -> usize {
    let header = (REQUEST_HEADER_LEN + LSN_LEN).max(RESPONSE_HEADER_LEN);
    let room = buf_len.saturating_sub(header + ENTRY_HEADER_LEN + pad8(PAYLOAD_KEY_LEN));
    // Round down: the value's padding must fit too.
    (room & !(ALIGN - 1)).min(u32::MAX as usize)
}

// ---------------------------------------------------------------------------
// Entries
// ---------------------------------------------------------------------------

/// A validated, zero-copy view of `len()` encoded entries.
///
/// Only [`decode_request`], [`decode_response`] and [`BatchBuilder::as_batch`]
/// make one, each after checking every entry's bounds and padding, so
/// iterating never fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryBatch<'a> {
    count: u32,
    bytes: &'a [u8],
}

impl<'a> EntryBatch<'a> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes the entries occupy (without any message header).
    pub fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    /// `(key, value)` pairs in encoded order.
    pub fn iter(&self) -> EntryIter<'a> {
        EntryIter {
            rest: self.bytes,
            remaining: self.count,
        }
    }

    /// Validates `count` entries at the start of `buf` (which starts at an
    /// 8-aligned message offset) and returns the view over exactly them.
    fn parse(
        count: u32,
        buf: &'a [u8],
        base_offset: usize,
    ) -> Result<EntryBatch<'a>, ProtocolError> {
        let mut pos = 0usize;
        for _ in 0..count {
            let (key_len, val_len) = read_entry_header(buf, pos, base_offset)?;
            let len = entry_encoded_len(key_len, val_len);
            let end = pos.checked_add(len).filter(|&end| end <= buf.len()).ok_or(
                ProtocolError::Truncated {
                    needed: base_offset + pos + len,
                    available: base_offset + buf.len(),
                },
            )?;
            let key_end = pos + ENTRY_HEADER_LEN + key_len;
            let val_start = pos + ENTRY_HEADER_LEN + pad8(key_len);
            let val_end = val_start + val_len;
            check_zero(buf, key_end..val_start, base_offset)?;
            check_zero(buf, val_end..end, base_offset)?;
            pos = end;
        }
        Ok(EntryBatch {
            count,
            bytes: &buf[..pos],
        })
    }
}

impl<'a> IntoIterator for &EntryBatch<'a> {
    type Item = (&'a [u8], &'a [u8]);
    type IntoIter = EntryIter<'a>;

    fn into_iter(self) -> EntryIter<'a> {
        self.iter()
    }
}

/// Iterator over an [`EntryBatch`].
#[derive(Clone, Debug)]
pub struct EntryIter<'a> {
    rest: &'a [u8],
    remaining: u32,
}

impl<'a> Iterator for EntryIter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        // The batch was validated when it was made; `?` only guards the
        // impossible, without a panic path.
        let (key_len, val_len) = read_entry_header(self.rest, 0, 0).ok()?;
        let val_start = ENTRY_HEADER_LEN + pad8(key_len);
        let key = self
            .rest
            .get(ENTRY_HEADER_LEN..ENTRY_HEADER_LEN + key_len)?;
        let value = self.rest.get(val_start..val_start + val_len)?;
        self.rest = self.rest.get(entry_encoded_len(key_len, val_len)..)?;
        self.remaining -= 1;
        Some((key, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining as usize, Some(self.remaining as usize))
    }
}

impl ExactSizeIterator for EntryIter<'_> {}

/// Reads (key_len, val_len) of the entry at `pos` and checks its zero bytes.
fn read_entry_header(buf: &[u8], pos: usize, base: usize) -> Result<(usize, usize), ProtocolError> {
    let key_len = read_u16(buf, pos, base)? as usize;
    check_zero(buf, pos + 2..pos + 4, base)?;
    let val_len = read_u32(buf, pos + 4, base)? as usize;
    Ok((key_len, val_len))
}

/// Writes one entry at `out[pos..]`, which the caller has checked is large enough.
fn write_entry(out: &mut [u8], pos: usize, key: &[u8], value: &[u8]) -> usize {
    let len = entry_encoded_len(key.len(), value.len());
    let entry = &mut out[pos..pos + len];
    entry[..ENTRY_HEADER_LEN].fill(0);
    // The casts are checked by every caller (key ≤ u16::MAX, value ≤ u32::MAX).
    entry[0..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
    entry[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
    let val_start = ENTRY_HEADER_LEN + pad8(key.len());
    entry[ENTRY_HEADER_LEN..ENTRY_HEADER_LEN + key.len()].copy_from_slice(key);
    entry[ENTRY_HEADER_LEN + key.len()..val_start].fill(0);
    entry[val_start..val_start + value.len()].copy_from_slice(value);
    entry[val_start + value.len()..].fill(0);
    len
}

fn check_entry_lens(key: &[u8], value: &[u8]) -> Result<(), ProtocolError> {
    if key.len() > u16::MAX as usize {
        return Err(ProtocolError::KeyTooLong(key.len()));
    }
    if value.len() > u32::MAX as usize {
        return Err(ProtocolError::ValueTooLong(value.len()));
    }
    Ok(())
}

/// Accumulates entries for a `PutBatch` (the backend's multi_insert / COPY buffer).
#[derive(Clone, Debug, Default)]
pub struct BatchBuilder {
    buf: Vec<u8>,
    count: u32,
}

impl BatchBuilder {
    pub fn new() -> BatchBuilder {
        BatchBuilder::default()
    }

    /// Appends one entry. Fails only for a key over 65535 bytes, a value over
    /// `u32::MAX` bytes, or a batch of `u32::MAX` entries.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> Result<(), ProtocolError> {
        check_entry_lens(key, value)?;
        if self.count == u32::MAX {
            return Err(ProtocolError::TooManyEntries);
        }
        let pos = self.buf.len();
        self.buf
            .resize(pos + entry_encoded_len(key.len(), value.len()), 0);
        write_entry(&mut self.buf, pos, key, value);
        self.count += 1;
        Ok(())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Length of the whole `PutBatch` request this batch encodes to (header
    /// included): compare it with the channel's buffer size.
    pub fn encoded_len(&self) -> usize {
        REQUEST_HEADER_LEN + LSN_LEN + self.buf.len()
    }

    /// Empties the batch, keeping its allocation.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.count = 0;
    }

    /// The entries as a batch (what the engine receives).
    pub fn as_batch(&self) -> EntryBatch<'_> {
        EntryBatch {
            count: self.count,
            bytes: &self.buf,
        }
    }
}

/// Encodes `PutBatch { cf, batch }` into `out`; returns its length.
pub fn encode_put_batch(
    cf: CfRef,
    batch: &BatchBuilder,
    out: &mut [u8],
) -> Result<usize, ProtocolError> {
    encode_request(
        &Request::PutBatch {
            cf,
            lsn: 0,
            batch: batch.as_batch(),
        },
        out,
    )
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// Encodes a request into `out`; returns its length.
pub fn encode_request(request: &Request<'_>, out: &mut [u8]) -> Result<usize, ProtocolError> {
    let zero = CfRef { db: 0, rel: 0 };
    let (code, cf, arg) = match *request {
        Request::Ping => (op::PING, zero, 0),
        Request::CreateCf { cf, .. } => (op::CREATE_CF, cf, 0),
        Request::DropCf(cf) => (op::DROP_CF, cf, 0),
        Request::DropDatabase { db } => (op::DROP_DATABASE, CfRef { db, rel: 0 }, 0),
        Request::TruncateCf { cf, .. } => (op::TRUNCATE_CF, cf, 0),
        Request::AllocRowids { cf, count } => (op::ALLOC_ROWIDS, cf, count),
        Request::PutBatch { cf, batch, .. } => (op::PUT_BATCH, cf, batch.count),
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
    };
    if matches!(
        request,
        Request::LockRow { .. } | Request::ReleaseLocks { .. }
    ) && arg == 0
    {
        return Err(ProtocolError::ZeroXid);
    }
    let needed = match *request {
        Request::PutBatch { batch, .. } => REQUEST_HEADER_LEN + LSN_LEN + batch.encoded_len(),
        Request::CreateCf { .. } | Request::TruncateCf { .. } => REQUEST_HEADER_LEN + LSN_LEN,
        Request::Committed { rels, .. } => {
            REQUEST_HEADER_LEN + COMMITTED_FIXED_LEN + (rels.len() * 4).next_multiple_of(ALIGN)
        }
        Request::Scan { start, end, .. } => {
            for bound in [start, end] {
                if bound.len() > u16::MAX as usize {
                    return Err(ProtocolError::KeyTooLong(bound.len()));
                }
            }
            REQUEST_HEADER_LEN + SCAN_BOUNDS_LEN + start.len() + end.len()
        }
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
        Request::PutBatch { lsn, batch, .. } => {
            body[..LSN_LEN].copy_from_slice(&lsn.to_le_bytes());
            body[LSN_LEN..].copy_from_slice(batch.bytes);
        }
        Request::CreateCf { created_lsn, .. } | Request::TruncateCf { created_lsn, .. } => {
            body.copy_from_slice(&created_lsn.to_le_bytes());
        }
        Request::Committed { xid, commit_lsn, first_lsn, last_lsn, rels, release_locks, .. } => {
            body.fill(0);
            body[28] = release_locks as u8;
            body[0..8].copy_from_slice(&commit_lsn.to_le_bytes());
            body[8..16].copy_from_slice(&first_lsn.to_le_bytes());
            body[16..24].copy_from_slice(&last_lsn.to_le_bytes());
            body[24..28].copy_from_slice(&xid.to_le_bytes());
            body[COMMITTED_FIXED_LEN..COMMITTED_FIXED_LEN + rels.bytes.len()].copy_from_slice(rels.bytes);
        }
        Request::Scan { start, end, per_row, .. } => {
            body[..SCAN_BOUNDS_LEN].fill(0);
            body[4..8].copy_from_slice(&per_row.to_le_bytes());
            body[0..2].copy_from_slice(&(start.len() as u16).to_le_bytes());
            body[2..4].copy_from_slice(&(end.len() as u16).to_le_bytes());
            let (s, e) = body[SCAN_BOUNDS_LEN..].split_at_mut(start.len());
            s.copy_from_slice(start);
            e.copy_from_slice(end);
        }
        Request::LockRow {
            rowid, mode, evict, read, ..
        } => {
            body.fill(0);
            body[0..8].copy_from_slice(&rowid.to_le_bytes());
            body[8..12].copy_from_slice(&evict.to_le_bytes());
            body[12] = mode as u8;
            body[13] = read;
        }
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
        op::COMMITTED => (true, false, true),
        op::CREATE_CF | op::DROP_CF | op::TRUNCATE_CF | op::CF_INFO | op::FLUSH_CF => (true, true, false),
        op::ALLOC_ROWIDS | op::PUT_BATCH | op::SCAN | op::LOCK_ROW | op::PERSISTENCE => (true, true, true),
        op::RELEASE_LOCKS => (false, false, true),
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
        op::CREATE_CF => Request::CreateCf { cf, created_lsn: read_u64(body, 0, REQUEST_HEADER_LEN)? },
        op::DROP_CF => Request::DropCf(cf),
        op::DROP_DATABASE => Request::DropDatabase { db },
        op::TRUNCATE_CF => Request::TruncateCf { cf, created_lsn: read_u64(body, 0, REQUEST_HEADER_LEN)? },
        op::ALLOC_ROWIDS => Request::AllocRowids { cf, count: arg },
        op::PUT_BATCH => Request::PutBatch {
            cf,
            lsn: read_u64(body, 0, REQUEST_HEADER_LEN)?,
            batch: EntryBatch::parse(arg, &body[LSN_LEN..], REQUEST_HEADER_LEN + LSN_LEN)?,
        },
        op::COMMITTED => {
            let base = REQUEST_HEADER_LEN;
            let rels_len = arg as usize * 4;
            need(buf, base + COMMITTED_FIXED_LEN + rels_len.next_multiple_of(ALIGN))?;
            let release_locks = match field::<1>(body, 28, base)?[0] {
                0 => false,
                1 => true,
                _ => return Err(ProtocolError::NotZero { offset: base + 28 }),
            };
            check_zero(body, 29..32, base)?;
            check_zero(body, COMMITTED_FIXED_LEN + rels_len..COMMITTED_FIXED_LEN + rels_len.next_multiple_of(ALIGN), base)?;
            Request::Committed {
                db,
                commit_lsn: read_u64(body, 0, base)?,
                first_lsn: read_u64(body, 8, base)?,
                last_lsn: read_u64(body, 16, base)?,
                xid: read_u32(body, 24, base)?,
                rels: RelList { bytes: &body[COMMITTED_FIXED_LEN..COMMITTED_FIXED_LEN + rels_len] },
                release_locks,
            }
        }
        op::PERSISTENCE => Request::Persistence { db, after: CfRef { db: arg, rel } },
        op::FLUSH_CF => Request::FlushCf(cf),
        op::SYNC_WAL => Request::SyncWal,
        op::SCAN => {
            let base = REQUEST_HEADER_LEN;
            let start_len = read_u16(body, 0, base)? as usize;
            let end_len = read_u16(body, 2, base)? as usize;
            let per_row = read_u32(body, 4, base)?;
            need(buf, base + SCAN_BOUNDS_LEN + start_len + end_len)?;
            let bounds = &body[SCAN_BOUNDS_LEN..];
            let (start, rest) = bounds.split_at(start_len);
            Request::Scan {
                cf,
                start,
                end: &rest[..end_len],
                max_entries: arg,
                per_row,
            }
        }
        op::CF_INFO => Request::CfInfo(cf),
        op::LIST_CFS => Request::ListCfs,
        op::LOCK_ROW => {
            let base = REQUEST_HEADER_LEN;
            let rowid = read_u64(body, 0, base)?;
            let evict = read_u32(body, 8, base)?;
            let mode_byte = field::<1>(body, 12, base)?[0];
            let read = field::<1>(body, 13, base)?[0];
            check_zero(body, 14..LOCK_ROW_BODY_LEN, base)?;
            Request::LockRow {
                cf,
                rowid,
                xid: arg,
                mode: LockMode::from_u8(mode_byte)
                    .ok_or(ProtocolError::UnknownLockMode(mode_byte))?,
                evict,
                read,
            }
        }
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
            Response::CfInfo { .. } => 24,
            Response::Error { message, .. } => message.len(),
            Response::Lock { versions, .. } => versions.encoded_len(),
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
        } => {
            body[0..8].copy_from_slice(&next_rowid.to_le_bytes());
            body[8..16].copy_from_slice(&approx_keys.to_le_bytes());
            body[16..24].copy_from_slice(&approx_bytes.to_le_bytes());
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
        } => {
            if !granted && (more || !versions.is_empty()) {
                return Err(ProtocolError::VersionsWithoutLock);
            }
            body.copy_from_slice(versions.bytes);
            write_lock_header(out, granted, already_held, if granted { versions.count } else { holder }, more);
        }
    }
    Ok(needed)
}

fn write_lock_header(out: &mut [u8], granted: bool, already_held: bool, count_or_holder: u32, more: bool) {
    let mut flags = 0;
    if granted {
        flags |= lock_flag::GRANTED;
    }
    if already_held {
        flags |= lock_flag::ALREADY_HELD;
    }
    if more {
        flags |= lock_flag::MORE;
    }
    out[..RESPONSE_HEADER_LEN].fill(0);
    out[0] = tag::LOCK;
    out[1] = flags;
    out[4..8].copy_from_slice(&count_or_holder.to_le_bytes());
}

/// Turns a finished [`ScanWriter`] answer (an `Entries` response of length
/// `len` in `out`) into the answer to a granted `LockRow` that carries those
/// entries as the row's versions. Returns the length.
pub fn entries_into_granted_lock(out: &mut [u8], len: usize, already_held: bool) -> usize {
    let more = out[1] != 0;
    let count = u32::from_le_bytes([out[4], out[5], out[6], out[7]]);
    write_lock_header(out, true, already_held, count, more);
    len
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
        tag::OK | tag::ROWIDS | tag::CF_INFO => check_zero(buf, 1..8, 0)?,
        tag::ENTRIES | tag::ERROR => {}
        tag::LOCK => {
            if buf[1] & !lock_flag::ALL != 0 {
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
        tag::LOCK => {
            let granted = buf[1] & lock_flag::GRANTED != 0;
            let more = buf[1] & lock_flag::MORE != 0;
            let field = read_u32(buf, 4, 0)?;
            if !granted && more {
                return Err(ProtocolError::VersionsWithoutLock);
            }
            Response::Lock {
                granted,
                already_held: buf[1] & lock_flag::ALREADY_HELD != 0,
                holder: if granted { 0 } else { field },
                more,
                versions: if granted { EntryBatch::parse(field, body, base)? } else { EntryBatch::default() },
            }
        }
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

/// Builds a scan's `Entries` response directly in the response buffer.
///
/// Entries are appended until one does not fit or `max_entries` is reached
/// (0: no count limit); [`ScanWriter::finish`] then writes the header.
#[derive(Debug)]
pub struct ScanWriter<'a> {
    out: &'a mut [u8],
    pos: usize,
    count: u32,
    max_entries: u32,
}

impl<'a> ScanWriter<'a> {
    pub fn new(out: &'a mut [u8], max_entries: u32) -> ScanWriter<'a> {
        ScanWriter {
            out,
            pos: RESPONSE_HEADER_LEN,
            count: 0,
            max_entries,
        }
    }

    /// Appends an entry; `false` (nothing written) if it does not fit or the
    /// writer is full.
    pub fn try_push(&mut self, key: &[u8], value: &[u8]) -> bool {
        if self.is_full() || check_entry_lens(key, value).is_err() {
            return false;
        }
        let len = entry_encoded_len(key.len(), value.len());
        if self.pos.saturating_add(len) > self.out.len() {
            return false;
        }
        self.pos += write_entry(self.out, self.pos, key, value);
        self.count += 1;
        true
    }

    /// Entries written so far.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// `max_entries` reached (or the u32 count limit).
    pub fn is_full(&self) -> bool {
        self.count == u32::MAX || (self.max_entries != 0 && self.count >= self.max_entries)
    }

    /// Writes the header; returns the response length (0 if the buffer is
    /// shorter than [`MIN_RESPONSE_LEN`]).
    pub fn finish(self, more: bool) -> usize {
        if self.out.len() < RESPONSE_HEADER_LEN {
            return 0;
        }
        write_entries_header(self.out, more, self.count);
        self.pos
    }
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
    use super::*;
    use crate::keys::row_key;

    /// Every value's offset from the start of the message is a multiple of 8.
    fn assert_values_aligned(msg: &[u8], batch: &EntryBatch<'_>) {
        for (_, value) in batch.iter() {
            let offset = value.as_ptr() as usize - msg.as_ptr() as usize;
            assert!(offset < msg.len() || value.is_empty());
            assert_eq!(offset % 8, 0, "value at offset {offset}");
        }
    }

    fn sample_batch() -> BatchBuilder {
        let mut b = BatchBuilder::new();
        b.push(&row_key(1, 0), b"").unwrap();
        b.push(&row_key(2, 0), b"v").unwrap();
        b.push(b"odd-key", b"seven b").unwrap();
        b.push(b"", b"eight by").unwrap();
        b.push(&[0xAB; 17], &[0xCD; 33]).unwrap();
        b
    }

    fn cf() -> CfRef {
        CfRef { db: 5, rel: 16384 }
    }

    #[test]
    fn requests_round_trip() {
        let batch = sample_batch();
        let requests = [
            Request::Ping,
            Request::CreateCf { cf: cf(), created_lsn: 0x1_2345_6789 },
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
    fn put_batch_values_are_8_aligned_and_round_trip() {
        let batch = sample_batch();
        let mut buf = vec![0u8; 1024];
        let len = encode_put_batch(cf(), &batch, &mut buf).unwrap();
        assert_eq!(len, batch.encoded_len());
        let Request::PutBatch {
            cf: got_cf,
            batch: got,
            ..
        } = decode_request(&buf[..len]).unwrap()
        else {
            panic!("not a PutBatch");
        };
        assert_eq!(got_cf, cf());
        assert_eq!(got.len(), 5);
        assert_values_aligned(&buf[..len], &got);
        let entries: Vec<_> = got.iter().collect();
        assert_eq!(entries, batch.as_batch().iter().collect::<Vec<_>>());
        assert_eq!(entries[2], (&b"odd-key"[..], &b"seven b"[..]));
        assert_eq!(entries[4], (&[0xAB; 17][..], &[0xCD; 33][..]));
    }

    #[test]
    fn batch_builder_bookkeeping() {
        let mut b = BatchBuilder::new();
        assert!(b.is_empty());
        assert_eq!(b.encoded_len(), REQUEST_HEADER_LEN + LSN_LEN);
        b.push(&row_key(1, 0), &[1; 24]).unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!(
            b.encoded_len(),
            REQUEST_HEADER_LEN + LSN_LEN + entry_encoded_len(12, 24)
        );
        assert_eq!(entry_encoded_len(12, 24), 8 + 16 + 24);
        assert_eq!(
            b.push(&[0; 65536], b""),
            Err(ProtocolError::KeyTooLong(65536))
        );
        assert_eq!(b.len(), 1);
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.encoded_len(), REQUEST_HEADER_LEN + LSN_LEN);
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
    fn scan_writer_fills_until_full() {
        let mut buf = vec![0u8; 8 + 3 * 40];
        let mut w = ScanWriter::new(&mut buf, 0);
        // Three entries of 12-byte key + 16-byte value = 40 bytes each fit exactly.
        for rowid in 0..3 {
            assert!(w.try_push(&row_key(rowid, 0), &[rowid as u8; 16]));
        }
        assert!(!w.try_push(&row_key(3, 0), b""));
        assert_eq!(w.len(), 3);
        let len = w.finish(true);
        assert_eq!(len, 8 + 3 * 40);
        let Response::Entries { more: true, batch } = decode_response(&buf[..len]).unwrap() else {
            panic!("not Entries");
        };
        assert_values_aligned(&buf[..len], &batch);
        assert_eq!(
            batch.iter().nth(2),
            Some((&row_key(2, 0)[..], &[2u8; 16][..]))
        );

        let mut out = [0u8; 256];
        let mut w = ScanWriter::new(&mut out, 2);
        assert!(w.try_push(b"a", b"1") && w.try_push(b"b", b"2"));
        assert!(w.is_full());
        assert!(!w.try_push(b"c", b"3"));
        assert_eq!(w.finish(false), 8 + 2 * 24);

        assert_eq!(ScanWriter::new(&mut [0u8; 4], 0).finish(false), 0);
    }

    #[test]
    fn max_entry_payload_is_exact() {
        for buf_len in [0, 39, 40, 41, 48, 100, 4096, 65536 + 5] {
            let max = max_entry_payload(buf_len);
            let key = row_key(1, 0);
            let value = vec![7u8; max];
            let mut out = vec![0u8; buf_len];
            if buf_len < 40 {
                assert_eq!(max, 0);
            }
            let mut b = BatchBuilder::new();
            b.push(&key, &value).unwrap();
            let fits_put = encode_put_batch(cf(), &b, &mut out).is_ok();
            let mut w = ScanWriter::new(&mut out, 0);
            let fits_scan = w.try_push(&key, &value);
            assert_eq!(fits_put && fits_scan, buf_len >= 48, "buf_len {buf_len}");

            // One more byte (rounded to the next padded size) no longer fits a PutBatch.
            let mut b = BatchBuilder::new();
            b.push(&key, &vec![7u8; max + 1]).unwrap();
            assert!(encode_put_batch(cf(), &b, &mut out).is_err());
        }
        assert_eq!(max_entry_payload(4096), 4096 - 48);
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
    fn lock_answers_carry_versions_only_when_granted() {
        let batch = sample_batch();
        let mut buf = vec![0u8; 4096];
        let granted = Response::Lock { granted: true, already_held: true, holder: 0, more: true, versions: batch.as_batch() };
        let len = encode_response(&granted, &mut buf).unwrap();
        assert_eq!(decode_response(&buf[..len]).unwrap(), granted);
        let refused_with_versions =
            Response::Lock { granted: false, already_held: false, holder: 5, more: false, versions: batch.as_batch() };
        assert!(matches!(encode_response(&refused_with_versions, &mut buf), Err(ProtocolError::VersionsWithoutLock)));
        // A refused answer with the MORE bit set is malformed.
        let refused = Response::Lock { granted: false, already_held: false, holder: 5, more: false, versions: EntryBatch::default() };
        let len = encode_response(&refused, &mut buf).unwrap();
        assert_eq!(decode_response(&buf[..len]).unwrap(), refused);
        buf[1] |= lock_flag::MORE;
        assert!(decode_response(&buf[..len]).is_err());
    }

    #[test]
    fn lock_messages_are_strict() {
        let lock = Request::LockRow {
            cf: cf(),
            rowid: 7,
            xid: 10,
            mode: LockMode::Exclusive,
            evict: 9, read: 0,
        };
        let mut buf = [0u8; 64];
        let len = encode_request(&lock, &mut buf).unwrap();
        assert_eq!(len, REQUEST_HEADER_LEN + LOCK_ROW_BODY_LEN);
        assert_eq!(buf[REQUEST_HEADER_LEN + 12], 2, "mode byte");

        for bad_mode in [0u8, 3, 0xFF] {
            let mut m = buf;
            m[REQUEST_HEADER_LEN + 12] = bad_mode;
            assert_eq!(
                decode_request(&m[..len]),
                Err(ProtocolError::UnknownLockMode(bad_mode))
            );
        }
        for pad in 14..16 {
            let mut m = buf;
            m[REQUEST_HEADER_LEN + pad] = 1;
            assert_eq!(
                decode_request(&m[..len]),
                Err(ProtocolError::NotZero {
                    offset: REQUEST_HEADER_LEN + pad
                })
            );
        }
        // xid 0 is InvalidTransactionId: neither side accepts it.
        let mut m = buf;
        m[12..16].fill(0);
        assert_eq!(decode_request(&m[..len]), Err(ProtocolError::ZeroXid));
        assert_eq!(ProtocolError::ZeroXid.code(), ErrorCode::BadRequest);
        let zero = Request::LockRow {
            cf: cf(),
            rowid: 7,
            xid: 0,
            mode: LockMode::Shared,
            evict: 0, read: 0,
        };
        assert_eq!(encode_request(&zero, &mut buf), Err(ProtocolError::ZeroXid));
        assert_eq!(
            encode_request(&Request::ReleaseLocks { xid: 0 }, &mut buf),
            Err(ProtocolError::ZeroXid)
        );

        // ReleaseLocks names no CF.
        let len = encode_request(&Request::ReleaseLocks { xid: 5 }, &mut buf).unwrap();
        assert_eq!(len, REQUEST_HEADER_LEN);
        buf[4] = 1;
        assert_eq!(
            decode_request(&buf[..len]),
            Err(ProtocolError::NotZero { offset: 4 })
        );

        // Unknown flag bits of a Lock answer.
        let mut resp = [0u8; 8];
        let len = encode_response(
            &Response::Lock {
                granted: false,
                already_held: false,
                holder: 77, more: false, versions: Default::default(),
            },
            &mut resp,
        )
        .unwrap();
        assert_eq!(len, RESPONSE_HEADER_LEN);
        resp[1] = 8;
        assert_eq!(
            decode_response(&resp),
            Err(ProtocolError::NotZero { offset: 1 })
        );
        assert_eq!(LockMode::from_u8(1), Some(LockMode::Shared));
        assert!(LockMode::Shared < LockMode::Exclusive);
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
