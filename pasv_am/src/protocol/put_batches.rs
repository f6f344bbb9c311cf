//! `PutBatches`: the `PutBatch` requests of several tables sent as one
//! request (a backend's write-behind buffer holds rows of several tables:
//! a TPC-C-like order inserts into one table and updates another row by
//! row, and sending the buffer at every switch made a post per row).
//!
//! Owns the envelope's layout, [`write_put_batches_header`],
//! [`write_part_prefix`] and [`BatchParts`]. Calls the framing and the
//! `PutBatch` decoder.
//!
//! Body: `count` parts (the header's arg), each `len` u32 ‖ zero u32 ‖ a
//! whole `PutBatch` request of `len` bytes. A `PutBatch` is a multiple of
//! 8 long, so every value of every part stays 8-aligned from the start of
//! the message.
//!
//! Invariants:
//! * Each part is byte for byte the request logged for it, with its own
//!   LSN (`put_batch.rs`): logical decoding and replay never see the
//!   envelope.
//! * A request with a malformed part is refused whole, before any part is
//!   applied: decoding checks every part.

use super::{check_zero, fit, need, op, read_u32, CfRef, EntryBatch, ProtocolError, Request, REQUEST_HEADER_LEN};

/// Length of the prefix in front of each part.
pub const PART_PREFIX_LEN: usize = 8;

/// Writes the header of a `PutBatches` request of `count` parts into
/// `out[..REQUEST_HEADER_LEN]`.
pub fn write_put_batches_header(out: &mut [u8], count: u32) -> Result<(), ProtocolError> {
    let out = fit(out, REQUEST_HEADER_LEN)?;
    out.fill(0);
    out[0] = op::PUT_BATCHES;
    out[12..16].copy_from_slice(&count.to_le_bytes());
    Ok(())
}

/// Writes the prefix of a part of `len` bytes into `out[..PART_PREFIX_LEN]`.
pub fn write_part_prefix(out: &mut [u8], len: usize) -> Result<(), ProtocolError> {
    let len32 = u32::try_from(len).map_err(|_| ProtocolError::ValueTooLong(len))?;
    let out = fit(out, PART_PREFIX_LEN)?;
    out[..4].copy_from_slice(&len32.to_le_bytes());
    out[4..].fill(0);
    Ok(())
}

/// The parts of a decoded `PutBatches`, each checked at decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchParts<'a> {
    pub(super) count: u32,
    pub(super) bytes: &'a [u8],
}

impl<'a> BatchParts<'a> {
    /// Number of parts.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The encoded body (what follows the header).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Each part as `(cf, lsn, entries)`, in order.
    pub fn iter(&self) -> impl Iterator<Item = Result<(CfRef, u64, EntryBatch<'a>), ProtocolError>> + 'a {
        let mut rest = self.bytes;
        let mut base = REQUEST_HEADER_LEN;
        (0..self.count as usize).map(move |i| {
            let (part, next) = split_part(rest, base, i)?;
            base += PART_PREFIX_LEN + part.len();
            rest = next;
            match decode_part(part, i)? {
                Request::PutBatch { cf, lsn, batch } => Ok((cf, lsn, batch)),
                _ => Err(ProtocolError::NotPutBatch(i)),
            }
        })
    }
}

/// Part `i` at the front of `rest` (which starts `base` bytes into the
/// message), and what follows it.
fn split_part(rest: &[u8], base: usize, i: usize) -> Result<(&[u8], &[u8]), ProtocolError> {
    need(rest, PART_PREFIX_LEN).map_err(|e| shift(e, base))?;
    let len = read_u32(rest, 0, base)? as usize;
    check_zero(rest, 4..8, base)?;
    if !len.is_multiple_of(8) {
        return Err(ProtocolError::NotPutBatch(i));
    }
    let body = &rest[PART_PREFIX_LEN..];
    need(body, len).map_err(|e| shift(e, base + PART_PREFIX_LEN))?;
    Ok(body.split_at(len))
}

fn shift(e: ProtocolError, base: usize) -> ProtocolError {
    match e {
        ProtocolError::Truncated { needed, available } => ProtocolError::Truncated { needed: base + needed, available: base + available },
        other => other,
    }
}

/// A part decoded as a request of its own (its header first).
fn decode_part(part: &[u8], i: usize) -> Result<Request<'_>, ProtocolError> {
    need(part, REQUEST_HEADER_LEN)?;
    if part[0] != op::PUT_BATCH {
        return Err(ProtocolError::NotPutBatch(i));
    }
    // The part's own header is checked as any request's would be.
    super::decode_request(part)
}

/// Decodes the body of a `PutBatches` of `count` parts, checking each.
pub(super) fn decode(count: u32, body: &[u8]) -> Result<Request<'_>, ProtocolError> {
    let mut rest = body;
    let mut base = REQUEST_HEADER_LEN;
    for i in 0..count as usize {
        let (part, next) = split_part(rest, base, i)?;
        decode_part(part, i)?;
        base += PART_PREFIX_LEN + part.len();
        rest = next;
    }
    let used = body.len() - rest.len();
    Ok(Request::PutBatches { parts: BatchParts { count, bytes: &body[..used] } })
}

/// Length of the `PutBatches` request that carries `parts`.
pub(super) fn request_len(parts: BatchParts<'_>) -> usize {
    REQUEST_HEADER_LEN + parts.bytes.len()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{assert_values_aligned, cf, sample_batch};
    use super::super::{decode_request, encode_put_batch, encode_request, BatchBuilder};
    use super::*;
    use crate::keys::row_key;

    /// An envelope of `batches`, built as a backend builds it.
    fn envelope(batches: &[(CfRef, &BatchBuilder, u64)]) -> Vec<u8> {
        let mut out = vec![0u8; 4096];
        write_put_batches_header(&mut out, batches.len() as u32).unwrap();
        let mut at = REQUEST_HEADER_LEN;
        for (cf, batch, lsn) in batches {
            let len = encode_put_batch(*cf, batch, &mut out[at + PART_PREFIX_LEN..]).unwrap();
            let part = &mut out[at + PART_PREFIX_LEN..at + PART_PREFIX_LEN + len];
            part[super::super::PUT_BATCH_LSN_AT..super::super::PUT_BATCH_LSN_AT + 8].copy_from_slice(&lsn.to_le_bytes());
            write_part_prefix(&mut out[at..], len).unwrap();
            at += PART_PREFIX_LEN + len;
        }
        out.truncate(at);
        out
    }

    #[test]
    fn parts_round_trip_in_order_with_their_lsns_and_aligned_values() {
        let first = sample_batch();
        let mut second = BatchBuilder::new();
        second.push(&row_key(7, 0), &[9; 24]).unwrap();
        let other = CfRef { db: 5, rel: 99 };
        let msg = envelope(&[(cf(), &first, 11), (other, &second, 22)]);
        let Request::PutBatches { parts } = decode_request(&msg).unwrap() else { panic!("not PutBatches") };
        assert_eq!(parts.len(), 2);
        let got: Vec<_> = parts.iter().map(Result::unwrap).collect();
        assert_eq!((got[0].0, got[0].1), (cf(), 11));
        assert_eq!((got[1].0, got[1].1), (other, 22));
        assert_eq!(got[0].2.iter().collect::<Vec<_>>(), first.as_batch().iter().collect::<Vec<_>>());
        assert_eq!(got[1].2.iter().collect::<Vec<_>>(), second.as_batch().iter().collect::<Vec<_>>());
        for (_, _, batch) in &got {
            assert_values_aligned(&msg, batch);
        }
        // Re-encoding the decoded request gives the same bytes.
        let mut again = vec![0u8; msg.len()];
        assert_eq!(encode_request(&Request::PutBatches { parts }, &mut again).unwrap(), msg.len());
        assert_eq!(again, msg);
    }

    #[test]
    fn a_bad_part_refuses_the_whole_request() {
        let batch = sample_batch();
        let good = envelope(&[(cf(), &batch, 1), (cf(), &batch, 2)]);
        // The second part's op byte: not a PutBatch.
        let second_at = REQUEST_HEADER_LEN + PART_PREFIX_LEN + batch.encoded_len();
        let mut bad = good.clone();
        bad[second_at + PART_PREFIX_LEN] = op::SCAN;
        assert_eq!(decode_request(&bad), Err(ProtocolError::NotPutBatch(1)));
        // A length that runs past the message.
        let mut long = good.clone();
        long[second_at..second_at + 4].copy_from_slice(&(batch.encoded_len() as u32 + 8).to_le_bytes());
        assert!(matches!(decode_request(&long), Err(ProtocolError::Truncated { .. })));
        // A length that is not a multiple of 8.
        let mut odd = good.clone();
        odd[second_at..second_at + 4].copy_from_slice(&(batch.encoded_len() as u32 - 4).to_le_bytes());
        assert_eq!(decode_request(&odd), Err(ProtocolError::NotPutBatch(1)));
        // More parts announced than sent.
        let mut more = good;
        more[12..16].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(decode_request(&more), Err(ProtocolError::Truncated { .. })));
    }
}
