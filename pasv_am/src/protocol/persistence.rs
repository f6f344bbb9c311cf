//! Flush flags and persistence on the wire (DESIGN §5): the `Committed`
//! request that asks for flags, and the rows of a `Persistence` report.
//!
//! Owns [`RelList`], the `Committed` body, and [`PersistenceRow`] with its
//! fixed-size encoding as an `Entries` key and value. Calls the framing.
//!
//! `Committed` body: commit_lsn u64 ‖ first_lsn u64 ‖ last_lsn u64 ‖ xid u32
//! ‖ release_locks u8 ‖ 3 zero bytes ‖ rels (u32 each, their number is the
//! header's arg) ‖ zero pad to 8.
//!
//! Invariants: a report row's key sorts as `(db, rel)` does (big-endian),
//! so a report pages by key like a scan; its value is exactly
//! [`PERSISTENCE_LEN`] bytes, or it does not decode.

use super::{
    check_zero, encode_request, field, need, read_u32, read_u64, ProtocolError, Request, ALIGN,
    REQUEST_HEADER_LEN,
};

/// Committed request: three LSNs, xid u32, 4 zero bytes (then the rels).
const COMMITTED_FIXED_LEN: usize = 32;

/// Relfilenumbers, u32 little-endian each, as they sit in a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RelList<'a> {
    pub(super) bytes: &'a [u8],
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

/// What a [`Request::Committed`] says, with its tables as a slice (the
/// sender's form; the wire form is a [`RelList`]).
#[derive(Clone, Copy, Debug)]
pub struct CommitNotice<'a> {
    pub db: u32,
    /// Top-level transaction (0: none, e.g. a replay run).
    pub xid: u32,
    /// End of the commit record.
    pub commit_lsn: u64,
    /// Range of the transaction's pasv messages.
    pub first_lsn: u64,
    pub last_lsn: u64,
    /// Tables the transaction wrote: each gets a flush flag.
    pub rels: &'a [u32],
    /// Also release the row locks of `xid`.
    pub release_locks: bool,
}

/// Encodes `notice` as a [`Request::Committed`] into `out`; returns its length.
pub fn encode_committed(notice: &CommitNotice<'_>, out: &mut [u8]) -> Result<usize, ProtocolError> {
    let CommitNotice { db, xid, commit_lsn, first_lsn, last_lsn, rels, release_locks } = *notice;
    let bytes: Vec<u8> = rels.iter().flat_map(|r| r.to_le_bytes()).collect();
    encode_request(
        &Request::Committed { db, xid, commit_lsn, first_lsn, last_lsn, rels: RelList { bytes: &bytes }, release_locks },
        out,
    )
}

/// Length of the `Committed` request that names `rels`.
pub(super) fn committed_request_len(rels: RelList<'_>) -> usize {
    REQUEST_HEADER_LEN + COMMITTED_FIXED_LEN + (rels.len() * 4).next_multiple_of(ALIGN)
}

/// Writes a `Committed` body into `body`, which is exactly its length.
pub(super) fn write_committed_body(
    body: &mut [u8],
    xid: u32,
    commit_lsn: u64,
    first_lsn: u64,
    last_lsn: u64,
    rels: RelList<'_>,
    release_locks: bool,
) {
    body.fill(0);
    body[28] = release_locks as u8;
    body[0..8].copy_from_slice(&commit_lsn.to_le_bytes());
    body[8..16].copy_from_slice(&first_lsn.to_le_bytes());
    body[16..24].copy_from_slice(&last_lsn.to_le_bytes());
    body[24..28].copy_from_slice(&xid.to_le_bytes());
    body[COMMITTED_FIXED_LEN..COMMITTED_FIXED_LEN + rels.bytes.len()].copy_from_slice(rels.bytes);
}

/// Decodes the body of a `Committed` of database `db` naming `rel_count`
/// tables (`buf` is the whole message).
pub(super) fn decode_committed<'a>(
    buf: &'a [u8],
    body: &'a [u8],
    db: u32,
    rel_count: u32,
) -> Result<Request<'a>, ProtocolError> {
    let base = REQUEST_HEADER_LEN;
    let rels_len = rel_count as usize * 4;
    need(buf, base + COMMITTED_FIXED_LEN + rels_len.next_multiple_of(ALIGN))?;
    let release_locks = match field::<1>(body, 28, base)?[0] {
        0 => false,
        1 => true,
        _ => return Err(ProtocolError::NotZero { offset: base + 28 }),
    };
    check_zero(body, 29..32, base)?;
    check_zero(body, COMMITTED_FIXED_LEN + rels_len..COMMITTED_FIXED_LEN + rels_len.next_multiple_of(ALIGN), base)?;
    Ok(Request::Committed {
        db,
        commit_lsn: read_u64(body, 0, base)?,
        first_lsn: read_u64(body, 8, base)?,
        last_lsn: read_u64(body, 16, base)?,
        xid: read_u32(body, 24, base)?,
        rels: RelList { bytes: &body[COMMITTED_FIXED_LEN..COMMITTED_FIXED_LEN + rels_len] },
        release_locks,
    })
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
