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
pub(super) fn write_entry(out: &mut [u8], pos: usize, key: &[u8], value: &[u8]) -> usize {
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
}
