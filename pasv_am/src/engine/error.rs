//! What the engine can fail at, and the wire error class each failure is
//! reported as.
//!
//! Owns [`EngineError`] and the adapters that wrap a RocksDB error with what
//! the engine was doing at the time. Calls only the protocol's error types.
//! Every failure maps to exactly one [`ErrorCode`]; a full disk gets its own,
//! told apart from other I/O errors by RocksDB's message text (the only
//! place RocksDB says so).

use rocksdb::ErrorKind;
use thiserror::Error;

use crate::protocol::{CfRef, ErrorCode, ProtocolError};

/// What the engine failed to do, classified for the backend by [`EngineError::code`].
#[derive(Debug, Error)]
pub enum EngineError {
    #[error("no column family for table {0}")]
    NoSuchCf(CfRef),
    #[error("{context}: {source}")]
    RocksDb {
        context: String,
        #[source]
        source: rocksdb::Error,
    },
    #[error("{context}: RocksDB stopped writes after a background error: {reason}")]
    WritesStopped { context: String, reason: String },
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("entry with a {key_len}-byte key and a {value_len}-byte value does not fit in an empty response")]
    EntryTooLarge { key_len: usize, value_len: usize },
    #[error("rowids of table {0} are exhausted")]
    RowidsExhausted(CfRef),
    #[error("corruption: {0}")]
    Corruption(String),
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

impl EngineError {
    /// The wire error class.
    pub fn code(&self) -> ErrorCode {
        match self {
            EngineError::NoSuchCf(_) => ErrorCode::NoSuchCf,
            EngineError::RocksDb { source, .. } => classify(source.as_ref(), source.kind()),
            EngineError::WritesStopped { reason, .. } => classify(reason, ErrorKind::IOError),
            EngineError::BadRequest(_) => ErrorCode::BadRequest,
            EngineError::EntryTooLarge { .. } => ErrorCode::TooLarge,
            EngineError::RowidsExhausted(_) => ErrorCode::Other,
            EngineError::Corruption(_) => ErrorCode::Corruption,
            EngineError::Protocol(e) => e.code(),
        }
    }
}

/// RocksDB reports ENOSPC as an IO error whose text says so; it gets its own class.
fn classify(message: &str, kind: ErrorKind) -> ErrorCode {
    if message.contains("No space left") {
        return ErrorCode::DiskFull;
    }
    match kind {
        ErrorKind::Corruption => ErrorCode::Corruption,
        ErrorKind::IOError => ErrorCode::Io,
        ErrorKind::Busy | ErrorKind::TryAgain | ErrorKind::TimedOut => ErrorCode::Busy,
        _ => ErrorCode::Other,
    }
}

/// `map_err` adapter for a fixed context.
pub(super) fn rocks(context: &'static str) -> impl FnOnce(rocksdb::Error) -> EngineError {
    move |source| EngineError::RocksDb {
        context: context.to_owned(),
        source,
    }
}

/// `map_err` adapter whose context is only formatted on failure (hot paths).
pub(super) fn rocks_with(context: impl FnOnce() -> String) -> impl FnOnce(rocksdb::Error) -> EngineError {
    move |source| EngineError::RocksDb {
        context: context(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{open, TempDir, T};
    use super::*;
    use crate::protocol::EntryBatch;
    #[test]
    fn errors_map_to_codes() {
        let dir = TempDir::new();
        let engine = open(&dir);
        assert_eq!(
            engine
                .put_batch(T, EntryBatch::default())
                .unwrap_err()
                .code(),
            ErrorCode::NoSuchCf
        );
        assert_eq!(
            engine.alloc_rowids(T, 1).unwrap_err().code(),
            ErrorCode::NoSuchCf
        );
        assert_eq!(EngineError::RowidsExhausted(T).code(), ErrorCode::Other);
        assert_eq!(
            EngineError::Corruption("x".into()).code(),
            ErrorCode::Corruption
        );
        let stopped = |reason: &str| EngineError::WritesStopped { context: "write".into(), reason: reason.into() };
        assert_eq!(stopped("IO error: No space left on device: While appending").code(), ErrorCode::DiskFull);
        assert_eq!(stopped("IO error: Input/output error").code(), ErrorCode::Io);
    }
}
