//! What can go wrong on the wire: the error classes an engine answer carries,
//! and the ways a message can fail to encode or decode.
//!
//! Owns [`ErrorCode`] (its byte values are part of the format: never
//! renumber one) and [`ProtocolError`]. Calls nothing. Every protocol error
//! maps to the class the server answers with: a buffer too small is
//! `TooLarge`, anything else a `BadRequest`.

use thiserror::Error;

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
    #[error("unknown table kind {0} (0: logged, 1: unlogged)")]
    UnknownTableKind(u32),
    #[error("part {0} of a PutBatches request is not a PutBatch")]
    NotPutBatch(usize),
    #[error("damaged compact change message: {0}")]
    BadCompactMessage(&'static str),
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
