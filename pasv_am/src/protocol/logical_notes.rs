//! Logical notes: what a change message carries after its `PutBatch` so that
//! logical decoding can turn the batch into row changes (INSERT, UPDATE,
//! DELETE) for output plugins such as `pgoutput`.
//!
//! The rows themselves say most of it: a version 0 is an insert, a newer
//! version an update, a delete marker a delete, a "moved" marker plus a new
//! row an update that moved. What the engine does not store is written here:
//! the old row's replica identity (key columns, or the whole row for
//! `REPLICA IDENTITY FULL`) of deletes and updates, which subscribers use to
//! find the row; which inserts are speculative (INSERT ... ON CONFLICT) and
//! how each ended; and the table's tablespace when it is not the database's
//! default (decoding finds the table by tablespace and relfilenumber).
//!
//! Never sent to the engine and ignored by recovery: the notes follow the
//! request in the WAL message, and a request decoder reads only what the
//! header describes. A batch without notes logs none (no bytes at all).
//!
//! Layout: [`NOTES_MAGIC`] then records, each a kind byte and its fields
//! (integers little-endian, unaligned):
//! * `TABLESPACE` u32;
//! * `OLD_ROW` rowid u64, length u32, that many bytes of a heap tuple
//!   (header included);
//! * `SPECULATIVE`, `SPEC_CONFIRMED`, `SPEC_ABORTED` rowid u64;
//! * `MAINTENANCE` (no fields): VACUUM's or CLUSTER's batch, no row changes.

use super::ProtocolError;

/// First bytes of a message's notes.
pub const NOTES_MAGIC: [u8; 4] = *b"PLN1";

mod kind {
    pub const TABLESPACE: u8 = 1;
    pub const OLD_ROW: u8 = 2;
    pub const SPECULATIVE: u8 = 3;
    pub const SPEC_CONFIRMED: u8 = 4;
    pub const SPEC_ABORTED: u8 = 5;
    pub const MAINTENANCE: u8 = 6;
}

/// One note.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Note<'a> {
    /// The table lives in this tablespace (not the database's default).
    Tablespace(u32),
    /// The replica identity of the row at `rowid` before this batch
    /// deleted, moved or updated it: a heap tuple.
    OldRow { rowid: u64, tuple: &'a [u8] },
    /// The row inserted at `rowid` is speculative (INSERT ... ON CONFLICT).
    Speculative(u64),
    /// The speculative row at `rowid` stays (its index insertions succeeded).
    SpecConfirmed(u64),
    /// The speculative row at `rowid` was withdrawn (a conflict).
    SpecAborted(u64),
    /// The batch is VACUUM's or CLUSTER's, not row changes.
    Maintenance,
}

/// The notes of one batch, as they are built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogicalNotes {
    bytes: Vec<u8>,
}

impl LogicalNotes {
    /// Appends `note`.
    pub fn push(&mut self, note: Note<'_>) -> Result<(), ProtocolError> {
        // One allocation for the note (a DELETE's old-row note, built a row
        // at a time, grew the vector four times: 4 % of its backend time).
        let body = match note {
            Note::Maintenance => 0,
            Note::Tablespace(_) => 4,
            Note::OldRow { tuple, .. } => 12 + tuple.len(),
            Note::Speculative(_) | Note::SpecConfirmed(_) | Note::SpecAborted(_) => 8,
        };
        let magic = if self.bytes.is_empty() { NOTES_MAGIC.len() } else { 0 };
        self.bytes.reserve(magic + 1 + body);
        if self.bytes.is_empty() {
            self.bytes.extend_from_slice(&NOTES_MAGIC);
        }
        match note {
            Note::Maintenance => self.bytes.push(kind::MAINTENANCE),
            Note::Tablespace(oid) => {
                self.bytes.push(kind::TABLESPACE);
                self.bytes.extend_from_slice(&oid.to_le_bytes());
            }
            Note::OldRow { rowid, tuple } => {
                let len = u32::try_from(tuple.len()).map_err(|_| ProtocolError::ValueTooLong(tuple.len()))?;
                self.bytes.push(kind::OLD_ROW);
                self.bytes.extend_from_slice(&rowid.to_le_bytes());
                self.bytes.extend_from_slice(&len.to_le_bytes());
                self.bytes.extend_from_slice(tuple);
            }
            Note::Speculative(rowid) | Note::SpecConfirmed(rowid) | Note::SpecAborted(rowid) => {
                self.bytes.push(match note {
                    Note::Speculative(_) => kind::SPECULATIVE,
                    Note::SpecConfirmed(_) => kind::SPEC_CONFIRMED,
                    _ => kind::SPEC_ABORTED,
                });
                self.bytes.extend_from_slice(&rowid.to_le_bytes());
            }
        }
        Ok(())
    }

    /// Appends every note of `other` (a batch's notes joining a larger
    /// batch's).
    pub fn append(&mut self, other: &LogicalNotes) {
        if other.bytes.is_empty() {
            return;
        }
        if self.bytes.is_empty() {
            self.bytes.extend_from_slice(&other.bytes);
        } else {
            self.bytes.extend_from_slice(&other.bytes[NOTES_MAGIC.len()..]);
        }
    }

    /// The encoded notes (empty if there are none).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
    }
}

/// Decodes the notes that follow a request in a message (`bytes` empty: no
/// notes). Never panics; malformed notes are an error.
pub fn parse_notes(bytes: &[u8]) -> Result<Vec<Note<'_>>, ProtocolError> {
    let mut notes = Vec::new();
    if bytes.is_empty() {
        return Ok(notes);
    }
    if bytes.len() < NOTES_MAGIC.len() || bytes[..NOTES_MAGIC.len()] != NOTES_MAGIC {
        return Err(ProtocolError::Truncated { needed: NOTES_MAGIC.len(), available: bytes.len() });
    }
    let mut at = NOTES_MAGIC.len();
    let take = |at: &mut usize, n: usize| -> Result<&[u8], ProtocolError> {
        let end = at.checked_add(n).filter(|&e| e <= bytes.len()).ok_or(ProtocolError::Truncated {
            needed: at.saturating_add(n),
            available: bytes.len(),
        })?;
        let slice = &bytes[*at..end];
        *at = end;
        Ok(slice)
    };
    let u64_at = |s: &[u8]| u64::from_le_bytes(s.try_into().unwrap_or([0; 8]));
    let u32_at = |s: &[u8]| u32::from_le_bytes(s.try_into().unwrap_or([0; 4]));
    while at < bytes.len() {
        let k = take(&mut at, 1)?[0];
        let note = match k {
            kind::TABLESPACE => Note::Tablespace(u32_at(take(&mut at, 4)?)),
            kind::OLD_ROW => {
                let rowid = u64_at(take(&mut at, 8)?);
                let len = u32_at(take(&mut at, 4)?) as usize;
                Note::OldRow { rowid, tuple: take(&mut at, len)? }
            }
            kind::SPECULATIVE => Note::Speculative(u64_at(take(&mut at, 8)?)),
            kind::SPEC_CONFIRMED => Note::SpecConfirmed(u64_at(take(&mut at, 8)?)),
            kind::SPEC_ABORTED => Note::SpecAborted(u64_at(take(&mut at, 8)?)),
            kind::MAINTENANCE => Note::Maintenance,
            other => return Err(ProtocolError::UnknownTag(other)),
        };
        notes.push(note);
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_round_trip_and_reject_garbage() {
        let mut notes = LogicalNotes::default();
        assert!(notes.is_empty());
        assert_eq!(parse_notes(notes.bytes()).unwrap(), vec![]);
        let all = [
            Note::Tablespace(1663),
            Note::OldRow { rowid: 7, tuple: b"old tuple bytes" },
            Note::OldRow { rowid: u64::MAX, tuple: b"" },
            Note::Speculative(3),
            Note::SpecConfirmed(3),
            Note::SpecAborted(4),
            Note::Maintenance,
        ];
        for note in all {
            notes.push(note).unwrap();
        }
        assert_eq!(parse_notes(notes.bytes()).unwrap(), all.to_vec());
        // A truncation is an error, or (cut between records) fewer notes.
        for cut in 1..notes.bytes().len() {
            if let Ok(fewer) = parse_notes(&notes.bytes()[..cut]) {
                assert!(fewer.len() < all.len() && fewer[..] == all[..fewer.len()], "cut at {cut}");
            }
        }
        assert!(parse_notes(b"XXXX").is_err());
        assert!(parse_notes(&[b'P', b'L', b'N', b'1', 99]).is_err());
        notes.clear();
        assert!(notes.bytes().is_empty());
    }
}
