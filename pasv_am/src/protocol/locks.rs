//! Row locks on the wire: `LockRow`, `ReleaseLocks` and the `Lock` answer.
//!
//! Owns [`LockMode`], the `LockRow` body, and the `Lock` answer's flags byte
//! and body (a granted lock may carry the row's newest versions, so a writer
//! locks and reads in one round trip). Calls the framing and the entry codec.
//!
//! `LockRow` body: rowid u64 ‖ evict u32 ‖ mode u8 ([`LockMode`]) ‖ read u8
//! ‖ 2 zero bytes. `ReleaseLocks` has no body. A `Lock` answer has the flags
//! in header byte 1, and the entry count (granted) or the holder (refused)
//! in bytes 4..8.
//!
//! Invariants: xid 0 (InvalidTransactionId) never takes or releases locks,
//! on either side; a refused lock carries no versions and no `more` flag.

use super::{
    check_zero, field, read_u32, read_u64, tag, CfRef, EntryBatch, ProtocolError, Request, Response,
    ALIGN, REQUEST_HEADER_LEN, RESPONSE_HEADER_LEN,
};

/// LockRow request: rowid u64 ‖ evict u32 ‖ mode u8 ‖ read u8 ‖ 2 zero bytes.
pub(super) const LOCK_ROW_BODY_LEN: usize = 16;

const _: () = assert!(LOCK_ROW_BODY_LEN.is_multiple_of(ALIGN));

/// Flag bits of a `Lock` response's byte 1.
pub(super) mod lock_flag {
    pub const GRANTED: u8 = 1;
    pub const ALREADY_HELD: u8 = 2;
    pub const MORE: u8 = 4;
    pub const ALL: u8 = GRANTED | ALREADY_HELD | MORE;
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

/// Writes a `LockRow` body into `body`, which is exactly its length.
pub(super) fn write_body(body: &mut [u8], rowid: u64, mode: LockMode, evict: u32, read: u8) {
    body.fill(0);
    body[0..8].copy_from_slice(&rowid.to_le_bytes());
    body[8..12].copy_from_slice(&evict.to_le_bytes());
    body[12] = mode as u8;
    body[13] = read;
}

/// Decodes the body of a `LockRow` of `cf` for transaction `xid`.
pub(super) fn decode(body: &[u8], cf: CfRef, xid: u32) -> Result<Request<'_>, ProtocolError> {
    let base = REQUEST_HEADER_LEN;
    let rowid = read_u64(body, 0, base)?;
    let evict = read_u32(body, 8, base)?;
    let mode_byte = field::<1>(body, 12, base)?[0];
    let read = field::<1>(body, 13, base)?[0];
    check_zero(body, 14..LOCK_ROW_BODY_LEN, base)?;
    Ok(Request::LockRow {
        cf,
        rowid,
        xid,
        mode: LockMode::from_u8(mode_byte)
            .ok_or(ProtocolError::UnknownLockMode(mode_byte))?,
        evict,
        read,
    })
}

/// Encodes a `Lock` answer into `out`, which is exactly its length.
pub(super) fn encode_lock(
    out: &mut [u8],
    granted: bool,
    already_held: bool,
    holder: u32,
    more: bool,
    versions: EntryBatch<'_>,
) -> Result<(), ProtocolError> {
    if !granted && (more || !versions.is_empty()) {
        return Err(ProtocolError::VersionsWithoutLock);
    }
    out[RESPONSE_HEADER_LEN..].copy_from_slice(versions.bytes);
    write_lock_header(out, granted, already_held, if granted { versions.count } else { holder }, more);
    Ok(())
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

/// Decodes a `Lock` answer whose flags byte was checked (`body` follows the
/// header, at `base`).
pub(super) fn decode_lock<'a>(buf: &'a [u8], body: &'a [u8], base: usize) -> Result<Response<'a>, ProtocolError> {
    let granted = buf[1] & lock_flag::GRANTED != 0;
    let more = buf[1] & lock_flag::MORE != 0;
    let field = read_u32(buf, 4, 0)?;
    if !granted && more {
        return Err(ProtocolError::VersionsWithoutLock);
    }
    Ok(Response::Lock {
        granted,
        already_held: buf[1] & lock_flag::ALREADY_HELD != 0,
        holder: if granted { 0 } else { field },
        more,
        versions: if granted { EntryBatch::parse(field, body, base)? } else { EntryBatch::default() },
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{cf, sample_batch};
    use super::super::{decode_request, decode_response, encode_request, encode_response, ErrorCode};
    use super::*;

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
}
