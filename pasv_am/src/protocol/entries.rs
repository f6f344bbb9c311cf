//! Entries: a key and a value as they sit in a message, and validated batches
//! of them.
//!
//! Owns the encoding of one entry, the zero-copy [`EntryBatch`] view over
//! several, and the size arithmetic built on it (an entry's length, the
//! largest value a buffer can carry). `PutBatch` requests and `Entries` and
//! `Lock` answers all carry entries this way. Calls the framing's bounds
//! checks only.
//!
//! One entry ([`entry_encoded_len`] bytes) is key_len u16 ‖ 2 zero bytes ‖
//! val_len u32 ‖ key ‖ zero pad to 8 ‖ value ‖ zero pad to 8.
//!
//! Invariants: an entry is a multiple of 8 long and its value begins 8 bytes
//! past a multiple of 8 from the entry's start, so values stay aligned
//! wherever a batch starts aligned. An [`EntryBatch`] exists only once every
//! entry in it has been checked, so iterating one cannot fail.

use super::{
    check_zero, read_u16, read_u32, ProtocolError, ALIGN, LSN_LEN, REQUEST_HEADER_LEN,
    RESPONSE_HEADER_LEN,
};

/// Length of an entry's (key_len, val_len) header.
pub const ENTRY_HEADER_LEN: usize = 8;
/// Length of the row keys [`max_entry_payload`] is computed for.
const PAYLOAD_KEY_LEN: usize = crate::keys::ROW_KEY_LEN;

const _: () = assert!(ENTRY_HEADER_LEN.is_multiple_of(ALIGN));

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

/// A validated, zero-copy view of `len()` encoded entries.
///
/// Only [`decode_request`], [`decode_response`] and [`BatchBuilder::as_batch`]
/// make one, each after checking every entry's bounds and padding, so
/// iterating never fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryBatch<'a> {
    pub(super) count: u32,
    pub(super) bytes: &'a [u8],
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
    pub(super) fn parse(
        count: u32,
        buf: &'a [u8],
        base_offset: usize,
    ) -> Result<EntryBatch<'a>, ProtocolError> {
        let mut pos = 0usize;
        for _ in 0..count {
            pos = check_entry(buf, pos, base_offset)?.end;
        }
        Ok(EntryBatch {
            count,
            bytes: &buf[..pos],
        })
    }
}

/// Where the parts of one checked entry lie, as offsets into its buffer.
struct EntrySpan {
    key: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
    /// Where the next entry starts.
    end: usize,
}

/// Checks the entry at `buf[pos..]`: its lengths within `buf`, its padding
/// zero.
#[inline]
fn check_entry(buf: &[u8], pos: usize, base: usize) -> Result<EntrySpan, ProtocolError> {
    match well_formed_entry(buf, pos) {
        Some(span) => Ok(span),
        None => explain_entry(buf, pos, base),
    }
}

/// The entry at `buf[pos..]` if it is well formed, with a few word-sized
/// loads and compares (a scan's answer holds thousands); `None` if
/// anything is off, which [`explain_entry`] then names.
#[inline]
fn well_formed_entry(buf: &[u8], pos: usize) -> Option<EntrySpan> {
    let header = word_at(buf, pos.checked_add(ENTRY_HEADER_LEN)?)?;
    // Bytes 2..4 of the header are zero.
    if header & 0xFFFF_0000 != 0 {
        return None;
    }
    let key_len = (header & 0xFFFF) as usize;
    let val_len = (header >> 32) as usize;
    let key_start = pos + ENTRY_HEADER_LEN;
    let val_start = key_start + pad8(key_len);
    let end = val_start.checked_add(pad8(val_len)).filter(|&end| end <= buf.len())?;
    let padding_zero = |area_end: usize, pad: usize| pad == 0 || word_at(buf, area_end).is_some_and(|w| w >> (8 * (ALIGN - pad)) == 0);
    if !padding_zero(val_start, pad8(key_len) - key_len) || !padding_zero(end, pad8(val_len) - val_len) {
        return None;
    }
    Some(EntrySpan { key: key_start..key_start + key_len, value: val_start..val_start + val_len, end })
}

/// The little-endian u64 that ends at `buf[end]`.
#[inline]
fn word_at(buf: &[u8], end: usize) -> Option<u64> {
    let bytes: [u8; 8] = buf.get(end.checked_sub(ALIGN)?..end)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// As [`check_entry`], byte by byte, naming what is wrong.
fn explain_entry(buf: &[u8], pos: usize, base: usize) -> Result<EntrySpan, ProtocolError> {
    let (key_len, val_len) = read_entry_header(buf, pos, base)?;
    let len = entry_encoded_len(key_len, val_len);
    let end = pos.checked_add(len).filter(|&end| end <= buf.len()).ok_or(ProtocolError::Truncated {
        needed: base + pos + len,
        available: base + buf.len(),
    })?;
    let key_end = pos + ENTRY_HEADER_LEN + key_len;
    let val_start = pos + ENTRY_HEADER_LEN + pad8(key_len);
    let val_end = val_start + val_len;
    check_zero(buf, key_end..val_start, base)?;
    check_zero(buf, val_end..end, base)?;
    Ok(EntrySpan { key: pos + ENTRY_HEADER_LEN..key_end, value: val_start..val_end, end })
}

/// An `Entries` answer read once, front to back, each entry checked when
/// it is reached: for a reader that indexes the entries itself (a scan's
/// batch of thousands), where [`EntryBatch`]'s check of every entry up
/// front followed by its iteration read each entry's header twice.
/// Made by [`super::entries_cursor`].
pub struct EntryCursor<'a> {
    more: bool,
    count: u32,
    body: &'a [u8],
    /// Offset of `body` within the message.
    base: usize,
    pos: usize,
    remaining: u32,
}

impl<'a> EntryCursor<'a> {
    pub(super) fn new(more: bool, count: u32, body: &'a [u8], base: usize) -> EntryCursor<'a> {
        EntryCursor { more, count, body, base, pos: 0, remaining: count }
    }

    /// The answer's `more` flag.
    pub fn more(&self) -> bool {
        self.more
    }

    /// Entries the answer says it holds (not yet checked).
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The next entry as (key, offset of the value within the message,
    /// value), or `None` after the last; an error if it is malformed.
    #[inline]
    pub fn next_entry(&mut self) -> Result<Option<(&'a [u8], usize, &'a [u8])>, ProtocolError> {
        if self.remaining == 0 {
            return Ok(None);
        }
        let span = check_entry(self.body, self.pos, self.base)?;
        self.pos = span.end;
        self.remaining -= 1;
        let value_offset = self.base + span.value.start;
        Ok(Some((&self.body[span.key], value_offset, &self.body[span.value])))
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
///
/// Each padded area gets its last 8 bytes zeroed before its bytes are
/// copied over them: a fixed-size store instead of a fill of 0 to 7 bytes
/// (a scan writes one entry a row).
pub(super) fn write_entry(out: &mut [u8], pos: usize, key: &[u8], value: &[u8]) -> usize {
    let len = entry_encoded_len(key.len(), value.len());
    let entry = &mut out[pos..pos + len];
    // The casts are checked by every caller (key ≤ u16::MAX, value ≤ u32::MAX).
    let header = key.len() as u64 | (value.len() as u64) << 32;
    entry[..ENTRY_HEADER_LEN].copy_from_slice(&header.to_le_bytes());
    let val_start = ENTRY_HEADER_LEN + pad8(key.len());
    if val_start > ENTRY_HEADER_LEN {
        entry[val_start - ALIGN..val_start].fill(0);
    }
    entry[ENTRY_HEADER_LEN..ENTRY_HEADER_LEN + key.len()].copy_from_slice(key);
    if len > val_start {
        entry[len - ALIGN..len].fill(0);
    }
    entry[val_start..val_start + value.len()].copy_from_slice(value);
    len
}

pub(super) fn check_entry_lens(key: &[u8], value: &[u8]) -> Result<(), ProtocolError> {
    if key.len() > u16::MAX as usize {
        return Err(ProtocolError::KeyTooLong(key.len()));
    }
    if value.len() > u32::MAX as usize {
        return Err(ProtocolError::ValueTooLong(value.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::cf;
    use super::super::{encode_put_batch, BatchBuilder, ScanWriter};
    use super::*;
    use crate::keys::row_key;

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

    /// A scan's answer of the sample entries, `more` set, `len` bytes long.
    fn sample_answer(out: &mut [u8]) -> usize {
        let mut w = ScanWriter::new(out, 0);
        let b = super::super::test_support::sample_batch();
        for (key, value) in b.as_batch().iter() {
            assert!(w.try_push(key, value));
        }
        w.finish(true)
    }

    #[test]
    fn a_cursor_reads_what_the_batch_holds() {
        let mut out = vec![0u8; 4096];
        let len = sample_answer(&mut out);
        let msg = &out[..len];
        let Ok(super::super::Response::Entries { more, batch }) = super::super::decode_response(msg) else { panic!() };
        let mut cursor = super::super::entries_cursor(msg).unwrap().unwrap();
        assert_eq!((cursor.more(), cursor.len()), (more, batch.len()));
        for (key, value) in batch.iter() {
            let (k, offset, v) = cursor.next_entry().unwrap().unwrap();
            assert_eq!((k, v), (key, value));
            assert_eq!(offset, value.as_ptr() as usize - msg.as_ptr() as usize);
        }
        assert_eq!(cursor.next_entry(), Ok(None));
    }

    #[test]
    fn the_quick_check_agrees_with_the_byte_by_byte_one() {
        let mut out = vec![0u8; 4096];
        let len = sample_answer(&mut out);
        let body = &out[RESPONSE_HEADER_LEN..len];
        // Each entry's start, from the byte-by-byte check.
        let mut starts = vec![0];
        while let Ok(span) = explain_entry(body, *starts.last().unwrap(), 0) {
            starts.push(span.end);
        }
        assert_eq!(starts.len(), 6, "five entries, then the end");
        let agree = |buf: &[u8], pos: usize, what: &str| {
            let quick = well_formed_entry(buf, pos).map(|s| (s.key, s.value, s.end));
            let slow = explain_entry(buf, pos, 0).ok().map(|s| (s.key, s.value, s.end));
            assert_eq!(quick, slow, "{what}");
        };
        for &pos in &starts {
            for cut in 0..=body.len() {
                agree(&body[..cut], pos, &format!("entry at {pos}, bytes cut at {cut}"));
            }
            for at in 0..body.len() {
                for flip in [0x01u8, 0x80, 0xFF] {
                    let mut bad = body.to_vec();
                    bad[at] ^= flip;
                    agree(&bad, pos, &format!("entry at {pos}, byte {at} ^ {flip:#x}"));
                }
            }
        }
    }

    #[test]
    fn a_cursor_refuses_what_the_batch_refuses() {
        let mut out = vec![0u8; 4096];
        let len = sample_answer(&mut out);
        // Every byte of the entries, made non-zero in turn: the whole-batch
        // decode and the cursor agree on whether the answer is malformed.
        for at in RESPONSE_HEADER_LEN..len {
            let mut msg = out[..len].to_vec();
            msg[at] ^= 0x5A;
            let whole = super::super::decode_response(&msg).is_ok();
            let mut cursor = super::super::entries_cursor(&msg).unwrap().unwrap();
            let mut read = Ok(());
            while let Some(step) = cursor.next_entry().transpose() {
                if let Err(e) = step {
                    read = Err(e);
                    break;
                }
            }
            assert_eq!(whole, read.is_ok(), "byte {at}");
        }
        // Another answer is not a cursor's.
        let mut msg = vec![0u8; 16];
        msg[0] = 1; // Ok
        assert!(super::super::entries_cursor(&msg).unwrap().is_none());
    }
}
