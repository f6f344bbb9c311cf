//! `PutBatch`: the one write request, and the builder backends fill it from.
//!
//! Owns the request's body (its LSN, then the entries), [`BatchBuilder`] and
//! [`encode_put_batch`]. Calls the framing and the entry codec.
//!
//! Body: lsn u64 ‖ `count` entries (`count` is the header's arg).
//!
//! Invariant: a batch is logged to PostgreSQL's WAL exactly as encoded, with
//! lsn 0, before it is sent; the sender then writes the record's real end
//! at [`PUT_BATCH_LSN_AT`]. A replayed message is therefore a valid request
//! as it stands.

use super::entries::{check_entry_lens, entry_encoded_len, write_entry};
use super::logical_notes::{LogicalNotes, Note};
use super::{encode_request, read_u64, CfRef, EntryBatch, ProtocolError, Request, LSN_LEN, REQUEST_HEADER_LEN};

/// Byte offset of a `PutBatch`'s LSN in its encoding.
pub const PUT_BATCH_LSN_AT: usize = REQUEST_HEADER_LEN;

/// Accumulates entries for a `PutBatch` (the backend's multi_insert / COPY buffer).
#[derive(Clone, Debug, Default)]
pub struct BatchBuilder {
    buf: Vec<u8>,
    count: u32,
    /// Logged after the request, never sent (see `logical_notes`).
    notes: LogicalNotes,
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

    /// Empties the batch and its notes, keeping the allocations.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.count = 0;
        self.notes.clear();
    }

    /// Appends `other`'s entries and notes (one row's change joining the
    /// batch a backend buffers). Fails as [`BatchBuilder::push`] on count.
    pub fn append(&mut self, other: &BatchBuilder) -> Result<(), ProtocolError> {
        if self.count.checked_add(other.count).is_none_or(|n| n == u32::MAX) {
            return Err(ProtocolError::TooManyEntries);
        }
        self.buf.extend_from_slice(&other.buf);
        self.count += other.count;
        self.notes.append(&other.notes);
        Ok(())
    }

    /// Adds a logical note (logged with the batch, for logical decoding).
    pub fn note(&mut self, note: Note<'_>) -> Result<(), ProtocolError> {
        self.notes.push(note)
    }

    /// The batch's logical notes, encoded (empty if none).
    pub fn notes(&self) -> &[u8] {
        self.notes.bytes()
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

/// Length of the `PutBatch` request that carries `batch`.
pub(super) fn request_len(batch: EntryBatch<'_>) -> usize {
    REQUEST_HEADER_LEN + LSN_LEN + batch.encoded_len()
}

/// Length of the `PutBatch` request that carries `batch` (a logged message
/// is that request, then its logical notes).
pub fn put_batch_len(batch: EntryBatch<'_>) -> usize {
    request_len(batch)
}

/// Writes a `PutBatch` body into `body`, which is exactly its length.
pub(super) fn write_body(body: &mut [u8], lsn: u64, batch: EntryBatch<'_>) {
    body[..LSN_LEN].copy_from_slice(&lsn.to_le_bytes());
    body[LSN_LEN..].copy_from_slice(batch.bytes);
}

/// Decodes the body of a `PutBatch` of `count` entries for `cf`.
pub(super) fn decode(cf: CfRef, count: u32, body: &[u8]) -> Result<Request<'_>, ProtocolError> {
    Ok(Request::PutBatch {
        cf,
        lsn: read_u64(body, 0, REQUEST_HEADER_LEN)?,
        batch: EntryBatch::parse(count, &body[LSN_LEN..], REQUEST_HEADER_LEN + LSN_LEN)?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{assert_values_aligned, cf, sample_batch};
    use super::super::{decode_request, entry_encoded_len};
    use super::*;
    use crate::keys::row_key;

    #[test]
    fn appended_batches_equal_one_built_whole() {
        use super::super::logical_notes::parse_notes;
        let mut whole = BatchBuilder::new();
        let mut first = BatchBuilder::new();
        let mut second = BatchBuilder::new();
        let rows: [(&[u8], &[u8]); 3] = [(b"k1", b"a value"), (b"key-two", b""), (b"k3", &[7; 19])];
        for (i, (key, value)) in rows.iter().enumerate() {
            whole.push(key, value).unwrap();
            let part = if i == 0 { &mut first } else { &mut second };
            part.push(key, value).unwrap();
        }
        let tuple = [1u8, 2, 3];
        for (i, note) in [Note::Tablespace(1663), Note::OldRow { rowid: 9, tuple: &tuple }, Note::SpecAborted(4)].into_iter().enumerate() {
            whole.note(note).unwrap();
            let part = if i == 0 { &mut first } else { &mut second };
            part.note(note).unwrap();
        }
        let mut joined = BatchBuilder::new();
        joined.append(&BatchBuilder::new()).unwrap();
        joined.append(&first).unwrap();
        joined.append(&second).unwrap();
        assert_eq!(joined.len(), 3);
        assert_eq!(joined.as_batch().bytes, whole.as_batch().bytes);
        assert_eq!(joined.notes(), whole.notes());
        assert_eq!(parse_notes(joined.notes()).unwrap().len(), 3);
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
}
