//! `Scan`: the read request, and the writer that builds its answer in place.
//!
//! Owns the request's body (the two bounds and the per-row limit) and
//! [`ScanWriter`], which the engine fills entry by entry straight in the
//! response slot. Calls the framing and the entry codec.
//!
//! Body: start_len u16 ‖ end_len u16 ‖ per_row u32 ‖ start ‖ end.
//!
//! Invariant: an answer holds whole entries only; a writer that cannot take
//! the next one leaves the buffer as it was, so the answer is always a valid
//! `Entries` response once finished.

use super::entries::{check_entry_lens, entry_encoded_len, write_entry};
use super::{
    need, read_u16, read_u32, write_entries_header, CfRef, ProtocolError, Request, ALIGN,
    REQUEST_HEADER_LEN, RESPONSE_HEADER_LEN,
};

/// Scan request: start_len u16 ‖ end_len u16 ‖ 4 zero bytes.
const SCAN_BOUNDS_LEN: usize = 8;

const _: () = assert!(SCAN_BOUNDS_LEN.is_multiple_of(ALIGN));

/// Length of the `Scan` request for `[start, end)`; a bound longer than
/// 65535 bytes cannot be encoded.
pub(super) fn request_len(start: &[u8], end: &[u8]) -> Result<usize, ProtocolError> {
    for bound in [start, end] {
        if bound.len() > u16::MAX as usize {
            return Err(ProtocolError::KeyTooLong(bound.len()));
        }
    }
    Ok(REQUEST_HEADER_LEN + SCAN_BOUNDS_LEN + start.len() + end.len())
}

/// Writes a `Scan` body into `body`, which is exactly its length.
pub(super) fn write_body(body: &mut [u8], start: &[u8], end: &[u8], per_row: u32) {
    body[..SCAN_BOUNDS_LEN].fill(0);
    body[4..8].copy_from_slice(&per_row.to_le_bytes());
    body[0..2].copy_from_slice(&(start.len() as u16).to_le_bytes());
    body[2..4].copy_from_slice(&(end.len() as u16).to_le_bytes());
    let (s, e) = body[SCAN_BOUNDS_LEN..].split_at_mut(start.len());
    s.copy_from_slice(start);
    e.copy_from_slice(end);
}

/// Decodes the body of a `Scan` of `cf` (`buf` is the whole message).
pub(super) fn decode<'a>(
    buf: &'a [u8],
    body: &'a [u8],
    cf: CfRef,
    max_entries: u32,
) -> Result<Request<'a>, ProtocolError> {
    let base = REQUEST_HEADER_LEN;
    let start_len = read_u16(body, 0, base)? as usize;
    let end_len = read_u16(body, 2, base)? as usize;
    let per_row = read_u32(body, 4, base)?;
    need(buf, base + SCAN_BOUNDS_LEN + start_len + end_len)?;
    let bounds = &body[SCAN_BOUNDS_LEN..];
    let (start, rest) = bounds.split_at(start_len);
    Ok(Request::Scan {
        cf,
        start,
        end: &rest[..end_len],
        max_entries,
        per_row,
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

#[cfg(test)]
mod tests {
    use super::super::decode_response;
    use super::super::test_support::assert_values_aligned;
    use super::super::Response;
    use super::*;
    use crate::keys::row_key;

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
}
