//! The form a change batch takes in PostgreSQL's WAL: a compact encoding of
//! a `PutBatch` request, expanded back to the very same request bytes by
//! whoever reads the WAL (recovery's replay, logical decoding).
//!
//! Owns [`compact`] and [`expand`]. Calls the request codec and
//! [`BatchBuilder`]; knows the row key and row header layouts.
//!
//! Why: a `PutBatch` is laid out for the channel (8-byte alignment so that
//! tuples are read in place, fixed-width keys and headers), which costs 24
//! bytes a message and about 50 an entry beyond the tuple. Logged as is, a
//! TPC-B transaction wrote 838 bytes of WAL (heap: about 550 without its
//! full-page images) and a bulk insert 120 bytes a row (heap: 104); in
//! this form, 511 and 58 (`src/ipc/HOT_PATH.md` §33).
//!
//! Compact form: tag [`COMPACT_TAG`] ‖ varint db ‖ varint rel ‖ varint
//! count ‖ entries. An entry is varint zigzag(rowid − previous rowid) ‖
//! varint version ‖ kind ‖ body; kinds: [`DELETE`] (empty value, no body),
//! [`ROW`] (a well-formed row header: flags u8 ‖ varint cid ‖ varint
//! zigzag(xid − previous xid) ‖ varint moved_to when MOVED, or when
//! HEAP_ONLY varint zigzag(root − rowid) ‖ varint root version (the
//! link's two parts: `row::heap_only_link`), or when HOT (a move within a
//! chain) varint zigzag(moved_to − rowid) ‖ varint tuple length ‖ tuple),
//! [`ROW_DERIVED`] (as [`ROW`], but the tuple's first [`DERIVED_LEN`]
//! bytes are left out: its heap header's xmin, xmax, cid
//! and ctid, which the backend sets from the row header and the key:
//! `tam/modify.rs::stored_value`), [`RAW`] (varint value length ‖ value).
//! A heap-only row's kind may carry bits for the entries a HOT move writes
//! around it, which follow from the row (its link, creator and command):
//! [`REDIRECT_BEFORE`] (the root's redirect to it precedes it),
//! [`TOMBSTONE_AT_ROOT`] (the root's tombstone that moved it follows) or
//! [`TOMBSTONE_ON_MEMBER`] (a member's tombstone that moved it follows;
//! varint zigzag(member − rowid) ‖ varint version after the tuple). A HOT
//! move of a TPC-B row then logs its new row and a few bytes.
//! The logical notes follow the entries unchanged, as they follow the
//! request.
//!
//! Invariants:
//! * `expand(compact(r) ‖ notes) == r ‖ notes` byte for byte, for every
//!   request `compact` accepts; a request it cannot encode (a key that is
//!   not a row key) is logged as it stands.
//! * A message that does not start with [`COMPACT_TAG`] is a request as it
//!   stands (WAL written before this form existed); `expand` returns it
//!   unchanged. No request op is [`COMPACT_TAG`].

use std::borrow::Cow;

use super::{decode_request, encode_put_batch, put_batch_len, BatchBuilder, CfRef, ProtocolError, Request};
use crate::keys::{decode_row_key, row_key, rowid_to_tid, ROW_KEY_LEN};
use crate::row::{RowHeader, FLAG_HEAP_ONLY, FLAG_HOT, FLAG_MOVED, FLAG_ROOT, FLAG_TOMBSTONE, HEADER_LEN, REDIRECT_FLAGS, ROOT_BITS, ROOT_MASK};

/// First byte of a compact message (request ops are 1..=21).
pub const COMPACT_TAG: u8 = 0xC1;
/// Entry kind: the key is deleted (empty value).
const DELETE: u8 = 0;
/// Entry kind: a row header in its parts, then the tuple.
const ROW: u8 = 1;
/// Entry kind: any other value, as it stands.
const RAW: u8 = 2;
/// Entry kind: as [`ROW`], the tuple's first [`DERIVED_LEN`] bytes derived.
const ROW_DERIVED: u8 = 3;
/// Kind bit of a heap-only row: the entry before it, the redirect of its
/// root to it, is left out ([`hot_redirect`]).
const REDIRECT_BEFORE: u8 = 0x10;
/// Kind bit of a heap-only row: the entry after it, the tombstone that
/// moved its root to it, is left out ([`hot_tombstone`] at the link).
const TOMBSTONE_AT_ROOT: u8 = 0x20;
/// Kind bit of a heap-only row: the entry after it, the tombstone that
/// moved another member to it, is reduced to that member's key.
const TOMBSTONE_ON_MEMBER: u8 = 0x40;
/// The kind bits that stand for entries around a heap-only row.
const HOT_BITS: u8 = REDIRECT_BEFORE | TOMBSTONE_AT_ROOT | TOMBSTONE_ON_MEMBER;
/// The bytes of a stored tuple's heap header that repeat the row header
/// and the key: t_xmin, t_xmax, t_cid (t_field3) and t_ctid, in the
/// machine's byte order (htup_details.h).
const DERIVED_LEN: usize = 18;

/// The first [`DERIVED_LEN`] bytes of the tuple a backend stores as
/// version `h` of row `rowid`: xmin the creator's xid, xmax invalid, cid
/// the command's, ctid the row's own TID.
fn derived_prefix(rowid: u64, h: &RowHeader) -> [u8; DERIVED_LEN] {
    let (block, offset) = rowid_to_tid(rowid);
    let mut p = [0u8; DERIVED_LEN];
    p[0..4].copy_from_slice(&(h.xid as u32).to_ne_bytes());
    p[8..12].copy_from_slice(&h.cid.to_ne_bytes());
    p[12..14].copy_from_slice(&((block >> 16) as u16).to_ne_bytes());
    p[14..16].copy_from_slice(&(block as u16).to_ne_bytes());
    p[16..18].copy_from_slice(&offset.to_ne_bytes());
    p
}

/// The key of a heap-only row's root, and the root version its link names.
fn link_key(link: u64) -> [u8; ROW_KEY_LEN] {
    row_key(link & ROOT_MASK, (link >> ROOT_BITS) as u32)
}

/// The redirect a HOT move from a member writes on the chain's root, as
/// `rowops::note_at_root` writes it for heap-only row `rowid` (`h`): at
/// the root version of the row's link.
fn hot_redirect(rowid: u64, h: &RowHeader) -> ([u8; ROW_KEY_LEN], [u8; HEADER_LEN]) {
    (link_key(h.moved_to), RowHeader { flags: REDIRECT_FLAGS, cid: h.cid, xid: h.xid, moved_to: rowid }.encode())
}

/// The tombstone a HOT move to heap-only row `rowid` (`h`) leaves on the
/// version it moved from (`rowops::tuple_update`): on the root (then with
/// ROOT) or on another member.
fn hot_tombstone(rowid: u64, h: &RowHeader, on_root: bool) -> [u8; HEADER_LEN] {
    let flags = FLAG_TOMBSTONE | FLAG_MOVED | FLAG_HOT | if on_root { FLAG_ROOT } else { 0 };
    RowHeader { flags, cid: h.cid, xid: h.xid, moved_to: rowid }.encode()
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Writes the compact form of `request` (an encoded `PutBatch`, perhaps
/// followed by its notes) into `out` (emptied first). False, with `out` empty, when
/// the request is not a `PutBatch` of row keys: log it as it stands.
pub fn compact(request: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    let Ok(Request::PutBatch { cf, batch, .. }) = decode_request(request) else {
        return false;
    };
    out.push(COMPACT_TAG);
    put_varint(out, u64::from(cf.db));
    put_varint(out, u64::from(cf.rel));
    put_varint(out, batch.len() as u64);
    let entries: Vec<(&[u8], &[u8])> = batch.iter().collect();
    let (mut prev_rowid, mut prev_xid) = (0u64, 0u64);
    let mut i = 0;
    while i < entries.len() {
        // A root's redirect that the heap-only row after it implies is
        // written as a bit of that row's kind (only a redirect-shaped value
        // looks at the next entry: other rows' headers are decoded once).
        let mut hot_bits = 0;
        if is_redirect(entries[i].1) {
            if let Some(&(k, v)) = entries.get(i + 1) {
                if implied_redirect(k, v).is_some_and(|(rk, rv)| rk[..] == *entries[i].0 && rv[..] == *entries[i].1) {
                    hot_bits |= REDIRECT_BEFORE;
                    i += 1;
                }
            }
        }
        let (key, value) = entries[i];
        let Some((rowid, version)) = decode_row_key(key) else {
            out.clear();
            return false;
        };
        put_varint(out, zigzag(rowid.wrapping_sub(prev_rowid) as i64));
        put_varint(out, u64::from(version));
        prev_rowid = rowid;
        if value.is_empty() {
            out.push(DELETE);
            i += 1;
            continue;
        }
        // Only a header that decodes re-encodes to the same bytes.
        match RowHeader::decode(value) {
            Ok((h, tuple)) => {
                // The tombstone after a heap-only row that moved there.
                let mut member = None;
                if h.flags & FLAG_HEAP_ONLY != 0 {
                    if let Some(&(k, v)) = entries.get(i + 1) {
                        if k == link_key(h.moved_to) && v == hot_tombstone(rowid, &h, true) {
                            hot_bits |= TOMBSTONE_AT_ROOT;
                            i += 1;
                        } else if let Some(m) = decode_row_key(k).filter(|_| v == hot_tombstone(rowid, &h, false)) {
                            hot_bits |= TOMBSTONE_ON_MEMBER;
                            member = Some(m);
                            i += 1;
                        }
                    }
                }
                let derived = tuple.get(..DERIVED_LEN) == Some(&derived_prefix(rowid, &h)[..]);
                out.push(hot_bits | if derived { ROW_DERIVED } else { ROW });
                let tuple = if derived { &tuple[DERIVED_LEN..] } else { tuple };
                out.push(h.flags);
                put_varint(out, u64::from(h.cid));
                put_varint(out, zigzag(h.xid.wrapping_sub(prev_xid) as i64));
                prev_xid = h.xid;
                if h.flags & FLAG_HEAP_ONLY != 0 {
                    // The root, near the row, as a difference; its version
                    // (the link's high bits) apart: two short varints.
                    let root = h.moved_to & ROOT_MASK;
                    put_varint(out, zigzag(root.wrapping_sub(rowid) as i64));
                    put_varint(out, h.moved_to >> ROOT_BITS);
                } else if h.flags & FLAG_HOT != 0 {
                    // A move within a chain goes near: a difference.
                    put_varint(out, zigzag(h.moved_to.wrapping_sub(rowid) as i64));
                } else if h.flags & FLAG_MOVED != 0 {
                    put_varint(out, h.moved_to);
                }
                put_varint(out, tuple.len() as u64);
                out.extend_from_slice(tuple);
                if let Some((m, mv)) = member {
                    put_varint(out, zigzag(m.wrapping_sub(rowid) as i64));
                    put_varint(out, u64::from(mv));
                }
            }
            Err(_) => {
                out.push(RAW);
                put_varint(out, value.len() as u64);
                out.extend_from_slice(value);
            }
        }
        i += 1;
    }
    // Bytes past the request (notes logged with it, as owed messages keep
    // them) follow the entries as they follow the request.
    out.extend_from_slice(request.get(put_batch_len(batch)..).unwrap_or_default());
    true
}

/// Whether `value` is a root's redirect as [`hot_redirect`] writes it.
fn is_redirect(value: &[u8]) -> bool {
    value.len() == HEADER_LEN && RowHeader::decode(value).is_ok_and(|(h, _)| h.flags == REDIRECT_FLAGS)
}

/// The redirect entry a heap-only row's entry implies ([`hot_redirect`]);
/// None for any other entry.
fn implied_redirect(key: &[u8], value: &[u8]) -> Option<([u8; ROW_KEY_LEN], [u8; HEADER_LEN])> {
    let (rowid, _) = decode_row_key(key)?;
    let (h, _) = RowHeader::decode(value).ok()?;
    (h.flags & FLAG_HEAP_ONLY != 0).then(|| hot_redirect(rowid, &h))
}

/// Reads a compact message back.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn truncated(&self, needed: usize) -> ProtocolError {
        ProtocolError::Truncated { needed: self.at + needed, available: self.bytes.len() }
    }

    fn byte(&mut self) -> Result<u8, ProtocolError> {
        let b = *self.bytes.get(self.at).ok_or_else(|| self.truncated(1))?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, ProtocolError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtocolError::BadCompactMessage("varint longer than 64 bits"))
    }

    fn u32(&mut self) -> Result<u32, ProtocolError> {
        u32::try_from(self.varint()?).map_err(|_| ProtocolError::BadCompactMessage("field exceeds 32 bits"))
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], ProtocolError> {
        let n = usize::try_from(n).map_err(|_| self.truncated(usize::MAX))?;
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or_else(|| self.truncated(n))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
}

/// The request (‖ notes) `message` stands for: itself unless it is in the
/// compact form.
pub fn expand(message: &[u8]) -> Result<Cow<'_, [u8]>, ProtocolError> {
    if message.first() != Some(&COMPACT_TAG) {
        return Ok(Cow::Borrowed(message));
    }
    let mut r = Reader { bytes: message, at: 1 };
    let cf = CfRef { db: r.u32()?, rel: r.u32()? };
    let count = r.varint()?;
    let mut batch = BatchBuilder::new();
    let (mut rowid, mut xid) = (0u64, 0u64);
    let mut value = Vec::new();
    // Entries pushed: a heap-only row's kind bits stand for up to two more.
    let mut pushed = 0u64;
    while pushed < count {
        rowid = rowid.wrapping_add(unzigzag(r.varint()?) as u64);
        let version = r.u32()?;
        value.clear();
        let kind = r.byte()?;
        let hot_bits = kind & HOT_BITS;
        match kind & !HOT_BITS {
            DELETE if hot_bits == 0 => {}
            kind @ (ROW | ROW_DERIVED) => {
                let flags = r.byte()?;
                if hot_bits != 0 && (flags & FLAG_HEAP_ONLY == 0 || hot_bits & TOMBSTONE_AT_ROOT != 0 && hot_bits & TOMBSTONE_ON_MEMBER != 0) {
                    return Err(ProtocolError::BadCompactMessage("entries around a row that is not heap-only"));
                }
                let cid = r.u32()?;
                xid = xid.wrapping_add(unzigzag(r.varint()?) as u64);
                let moved_to = if flags & FLAG_HEAP_ONLY != 0 {
                    let root = rowid.wrapping_add(unzigzag(r.varint()?) as u64) & ROOT_MASK;
                    root | r.varint()? << ROOT_BITS
                } else if flags & FLAG_HOT != 0 {
                    rowid.wrapping_add(unzigzag(r.varint()?) as u64)
                } else if flags & FLAG_MOVED != 0 {
                    r.varint()?
                } else {
                    0
                };
                let tuple_len = r.varint()?;
                let header = RowHeader { flags, cid, xid, moved_to };
                value.extend_from_slice(&header.encode());
                if kind == ROW_DERIVED {
                    value.extend_from_slice(&derived_prefix(rowid, &header));
                }
                value.extend_from_slice(r.take(tuple_len)?);
                if hot_bits & REDIRECT_BEFORE != 0 {
                    let (k, v) = hot_redirect(rowid, &header);
                    batch.push(&k, &v)?;
                    pushed += 1;
                }
                batch.push(&row_key(rowid, version), &value)?;
                pushed += 1;
                if hot_bits & TOMBSTONE_AT_ROOT != 0 {
                    batch.push(&link_key(moved_to), &hot_tombstone(rowid, &header, true))?;
                    pushed += 1;
                } else if hot_bits & TOMBSTONE_ON_MEMBER != 0 {
                    let member = rowid.wrapping_add(unzigzag(r.varint()?) as u64);
                    batch.push(&row_key(member, r.u32()?), &hot_tombstone(rowid, &header, false))?;
                    pushed += 1;
                }
                continue;
            }
            RAW if hot_bits == 0 => {
                let len = r.varint()?;
                value.extend_from_slice(r.take(len)?);
                if value.is_empty() {
                    return Err(ProtocolError::BadCompactMessage("a raw value is empty"));
                }
            }
            _ => return Err(ProtocolError::BadCompactMessage("unknown entry kind")),
        }
        batch.push(&row_key(rowid, version), &value)?;
        pushed += 1;
    }
    if pushed != count {
        return Err(ProtocolError::BadCompactMessage("more entries than counted"));
    }
    let notes = &message[r.at..];
    let len = put_batch_len(batch.as_batch());
    let mut out = vec![0u8; len + notes.len()];
    let written = encode_put_batch(cf, &batch, &mut out[..len])?;
    debug_assert_eq!(written, len);
    out[len..].copy_from_slice(notes);
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_support::xorshift;
    use crate::row::{FLAG_FROZEN, FLAG_HEAP_ONLY, FLAG_TOMBSTONE};

    fn request(cf: CfRef, entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        let mut b = BatchBuilder::new();
        for (k, v) in entries {
            b.push(k, v).unwrap();
        }
        let mut out = vec![0u8; put_batch_len(b.as_batch())];
        encode_put_batch(cf, &b, &mut out).unwrap();
        out
    }

    fn value(h: RowHeader, tuple: &[u8]) -> Vec<u8> {
        let mut v = h.encode().to_vec();
        v.extend_from_slice(tuple);
        v
    }

    #[test]
    fn random_batches_expand_to_the_same_bytes_and_are_smaller() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let (mut logged, mut compacted) = (0usize, 0usize);
        for round in 0..500 {
            let n = next(40) as usize;
            let base = next(1 << 40);
            let xid = next(1 << 36);
            let mut entries = Vec::new();
            for i in 0..n {
                let rowid = match next(3) {
                    0 => base + i as u64,
                    1 => base.saturating_sub(i as u64 * 7),
                    _ => next(1 << 48),
                };
                let version = next(5) as u32 * if round % 7 == 0 { u32::MAX / 5 } else { 1 };
                let key = row_key(rowid, version).to_vec();
                let tuple: Vec<u8> = (0..next(200)).map(|_| next(256) as u8).collect();
                let v = match next(8) {
                    0 => Vec::new(),
                    7 => value(RowHeader { flags: FLAG_TOMBSTONE | FLAG_MOVED | FLAG_HOT | if next(2) == 0 { crate::row::FLAG_ROOT } else { 0 }, cid: 4, xid, moved_to: next(1 << 40) }, &[]),
                    6 => value(RowHeader { flags: FLAG_HEAP_ONLY, cid: 2, xid, moved_to: crate::row::heap_only_link(next(1 << 40), Some(next(1 << 23) as u32)) }, &tuple),
                    1 => value(RowHeader { flags: FLAG_TOMBSTONE | FLAG_MOVED, cid: 3, xid, moved_to: 1 + next(1 << 56) }, &[]),
                    2 => value(RowHeader { flags: FLAG_FROZEN, cid: u32::MAX, xid: xid + 1, moved_to: 0 }, &tuple),
                    // Not a row header: kept as it stands.
                    3 => tuple.iter().copied().chain([9u8]).collect(),
                    4 => value(RowHeader { flags: 0, cid: next(100) as u32, xid: xid.wrapping_sub(i as u64), moved_to: 0 }, &tuple),
                    // As a backend stores it: its heap header repeats the row's.
                    _ => {
                        let h = RowHeader { flags: 0, cid: next(100) as u32, xid: xid + i as u64, moved_to: 0 };
                        let mut t = derived_prefix(rowid, &h).to_vec();
                        t.extend_from_slice(&tuple);
                        value(h, &t)
                    }
                };
                entries.push((key, v));
            }
            let cf = CfRef { db: next(100_000) as u32, rel: next(1 << 32) as u32 };
            let req = request(cf, &entries);
            let mut out = Vec::new();
            assert!(compact(&req, &mut out), "round {round}");
            let notes: &[u8] = if round % 2 == 0 { b"" } else { b"\x01notes follow" };
            let mut message = out.clone();
            message.extend_from_slice(notes);
            let expanded = expand(&message).unwrap();
            let mut want = req.clone();
            want.extend_from_slice(notes);
            assert_eq!(&*expanded, &want[..], "round {round}");
            // A request kept with its notes (an owed log) compacts with them.
            let mut with_notes = Vec::new();
            assert!(compact(&want, &mut with_notes), "round {round}");
            assert_eq!(with_notes, message, "round {round}");
            logged += req.len();
            compacted += out.len();
        }
        assert!(compacted * 10 < logged * 9, "compact {compacted} bytes against {logged}");
    }

    #[test]
    fn an_update_of_a_tpcb_row_costs_little_beyond_its_tuple() {
        let h = RowHeader { flags: 0, cid: 1, xid: 1 << 32 | 123_456, moved_to: 0 };
        let mut tuple = derived_prefix(812_345, &h).to_vec();
        tuple.resize(120, 7);
        let req = request(
            CfRef { db: 16_384, rel: 16_400 },
            &[(row_key(812_345, 3).to_vec(), value(h, &tuple)), (row_key(812_345, 2).to_vec(), Vec::new())],
        );
        let mut out = Vec::new();
        assert!(compact(&req, &mut out));
        // The request: 24 bytes of header, 2 × 24 of keys and lengths, 24 of row header, tuple.
        assert_eq!(req.len(), 24 + 48 + 24 + 120);
        // The tuple less its 18 derived bytes, and under 30 bytes of the rest.
        assert!(out.len() < 120 - DERIVED_LEN + 30, "{} bytes", out.len());
    }

    /// The entries of a HOT move to new rowid `n` (as `rowops::tuple_update`
    /// writes them): from the root `r` itself, or from member `m` at
    /// version `mv` (the root's redirect first).
    fn hot_move(n: u64, r: u64, rv: u32, from: Option<(u64, u32)>, h: RowHeader, tuple_len: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let h = RowHeader { flags: FLAG_HEAP_ONLY, moved_to: crate::row::heap_only_link(r, Some(rv)), ..h };
        let mut tuple = derived_prefix(n, &h).to_vec();
        tuple.resize(tuple_len, 5);
        let row = (row_key(n, 0).to_vec(), value(h, &tuple));
        let gone = |flags| RowHeader { flags: FLAG_TOMBSTONE | FLAG_MOVED | FLAG_HOT | flags, moved_to: n, ..h };
        match from {
            None => vec![row, (row_key(r, rv).to_vec(), value(gone(crate::row::FLAG_ROOT), &[]))],
            Some((m, mv)) => vec![
                (row_key(r, rv).to_vec(), value(gone(crate::row::FLAG_ROOT | crate::row::FLAG_BOOKKEEPING), &[])),
                row,
                (row_key(m, mv).to_vec(), value(gone(0), &[])),
            ],
        }
    }

    fn compacted_len(cf: CfRef, entries: &[(Vec<u8>, Vec<u8>)]) -> usize {
        let req = request(cf, entries);
        let mut out = Vec::new();
        assert!(compact(&req, &mut out));
        assert_eq!(&*expand(&out).unwrap(), &req[..]);
        out.len()
    }

    #[test]
    fn a_hot_move_logs_its_new_row_and_at_most_a_member_key() {
        let cf = CfRef { db: 16_384, rel: 16_400 };
        let h = RowHeader { flags: 0, cid: 1, xid: 1 << 32 | 123_456, moved_to: 0 };
        let alone = |n| compacted_len(cf, &hot_move(n, 812_345, 3, None, h, 120)[..1]);
        // From the root: its tombstone follows from the row.
        assert_eq!(compacted_len(cf, &hot_move(1_000_077, 812_345, 3, None, h, 120)), alone(1_000_077));
        // From a member: the root's redirect follows from the row, the
        // member's tombstone costs its key (near the row: a few bytes).
        let from_member = compacted_len(cf, &hot_move(1_000_077, 812_345, 9, Some((1_000_011, 4)), h, 120));
        assert!(from_member <= compacted_len(cf, &hot_move(1_000_077, 812_345, 9, Some((1_000_011, 4)), h, 120)[1..2]) + 3, "{from_member}");
    }

    #[test]
    fn hot_moves_and_entries_that_only_look_like_them_expand_to_the_same_bytes() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        for round in 0..2000 {
            let cf = CfRef { db: 5, rel: next(1 << 20) as u32 };
            let mut entries = Vec::new();
            for _ in 0..1 + next(6) {
                let h = RowHeader { flags: 0, cid: next(4) as u32, xid: 1000 + next(3), moved_to: 0 };
                let (n, r) = (next(1 << 41), next(1 << 41));
                let rv = next(1 << 23) as u32;
                let from = (next(2) == 0).then(|| (next(1 << 45), next(1 << 32) as u32));
                let mut move_entries = hot_move(n, r, rv, from, h, next(60) as usize);
                // Now and then an entry that differs in one field, or one left out.
                match next(6) {
                    0 => {
                        let at = next(move_entries.len() as u64) as usize;
                        let byte = next(move_entries[at].1.len().min(HEADER_LEN) as u64) as usize;
                        move_entries[at].1[byte] ^= 1 << next(8);
                    }
                    1 => {
                        move_entries.remove(next(move_entries.len() as u64) as usize);
                    }
                    2 => {
                        let at = next(move_entries.len() as u64) as usize;
                        move_entries[at].0 = row_key(next(1 << 40), next(9) as u32).to_vec();
                    }
                    _ => {}
                }
                entries.extend(move_entries);
                if next(3) == 0 {
                    entries.push((row_key(next(1 << 40), next(3) as u32).to_vec(), Vec::new()));
                }
            }
            let req = request(cf, &entries);
            let mut out = Vec::new();
            assert!(compact(&req, &mut out), "round {round}");
            assert_eq!(&*expand(&out).unwrap(), &req[..], "round {round}");
            for cut in 1..out.len() {
                assert!(expand(&out[..cut]).is_err(), "round {round}: cut at {cut}");
            }
        }
    }

    #[test]
    fn a_request_as_it_stands_expands_to_itself() {
        let req = request(CfRef { db: 1, rel: 2 }, &[(row_key(5, 0).to_vec(), Vec::new())]);
        assert!(matches!(expand(&req).unwrap(), Cow::Borrowed(b) if b == &req[..]));
    }

    #[test]
    fn other_keys_or_requests_are_not_compacted() {
        let req = request(CfRef { db: 1, rel: 2 }, &[(b"meta".to_vec(), b"x".to_vec())]);
        let mut out = vec![1, 2, 3];
        assert!(!compact(&req, &mut out));
        assert!(out.is_empty());
        assert!(!compact(&[0u8; 16], &mut out));
    }

    #[test]
    fn damaged_compact_messages_are_errors() {
        let req = request(
            CfRef { db: 1, rel: 2 },
            &[(row_key(5, 0).to_vec(), value(RowHeader { flags: 0, cid: 0, xid: 9, moved_to: 0 }, b"abc"))],
        );
        let mut out = Vec::new();
        assert!(compact(&req, &mut out));
        for cut in 1..out.len() {
            assert!(expand(&out[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = out.clone();
        let kind_at = bad.len() - 1 - 3 - 1 - 1 - 1 - 1;
        assert_eq!(bad[kind_at], ROW);
        bad[kind_at] = 7;
        assert!(matches!(expand(&bad), Err(ProtocolError::BadCompactMessage(_))));
        assert!(matches!(expand(&[COMPACT_TAG, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]), Err(_)));
    }
}
