//! The one place where pasv's errors become PostgreSQL errors: every
//! `ereport` carries a real SQLSTATE and a HINT.

use crate::ipc::client::ChannelError;
use pasv_am::protocol::ErrorCode;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// Raise an ERROR with a HINT. Does not return.
pub fn raise(code: PgSqlErrorCode, message: impl Into<String>, hint: impl Into<String>) -> ! {
    ErrorReport::new(code, message.into(), "pasv").set_hint(hint).report(PgLogLevel::ERROR);
    unreachable!("ERROR returned")
}

/// [`raise`] with a DETAIL.
pub fn raise_with_detail(code: PgSqlErrorCode, message: impl Into<String>, detail: impl Into<String>, hint: impl Into<String>) -> ! {
    ErrorReport::new(code, message.into(), "pasv").set_detail(detail).set_hint(hint).report(PgLogLevel::ERROR);
    unreachable!("ERROR returned")
}

/// Write a LOG line with a HINT to the server log (workers' conditions an
/// administrator must act on).
pub fn log(code: PgSqlErrorCode, message: impl Into<String>, hint: impl Into<String>) {
    ErrorReport::new(code, message.into(), "pasv").set_hint(hint).report(PgLogLevel::LOG);
}

/// Emit a WARNING with a HINT (for commit/abort paths, which must not ERROR).
pub fn warn(code: PgSqlErrorCode, message: impl Into<String>, hint: impl Into<String>) {
    ErrorReport::new(code, message.into(), "pasv").set_hint(hint).report(PgLogLevel::WARNING);
}

pub fn not_supported(what: &str, hint: &str) -> ! {
    raise(PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED, format!("pasv tables do not support {what} yet"), hint)
}

/// A failed engine call: the channel could not carry it, or the engine
/// answered with an error.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Channel(#[from] ChannelError),
    #[error("{message}")]
    Engine { code: ErrorCode, message: String },
    #[error("malformed answer from the pasv engine: {0}")]
    Protocol(String),
    #[error("unexpected answer from the pasv engine to {0}")]
    Unexpected(&'static str),
}

impl CallError {
    fn classify(&self) -> (PgSqlErrorCode, String) {
        use PgSqlErrorCode::*;
        match self {
            CallError::Channel(ChannelError::NotPreloaded) => (
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "Add pasv to shared_preload_libraries in postgresql.conf and restart the server.".into(),
            ),
            CallError::Channel(ChannelError::RequestTooLarge { .. }) => (
                ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                "Raise pasv.channel_buffer_size (needs a restart) or store smaller rows.".into(),
            ),
            CallError::Channel(ChannelError::EngineFailed) => (
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "The server log has the pasv engine's ERROR saying why it could not start; it retries every 5 seconds.".into(),
            ),
            CallError::Channel(_) => (
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "Check the server log for the pasv engine's messages; after a crash the postmaster restarts it.".into(),
            ),
            CallError::Engine { code, .. } => match code {
                ErrorCode::DiskFull => (
                    ERRCODE_DISK_FULL,
                    "Free disk space under $PGDATA/pasv and retry; the statement was not applied.".into(),
                ),
                ErrorCode::Io => (ERRCODE_IO_ERROR, "Check the server log and the storage under $PGDATA/pasv.".into()),
                ErrorCode::Corruption => (
                    ERRCODE_DATA_CORRUPTED,
                    "RocksDB reported corruption under $PGDATA/pasv; restore from a backup.".into(),
                ),
                ErrorCode::TooLarge => (
                    ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                    "Raise pasv.channel_buffer_size (needs a restart) or store smaller rows.".into(),
                ),
                ErrorCode::NoSuchCf => (
                    ERRCODE_UNDEFINED_OBJECT,
                    "The table's pasv storage is missing; it may have been dropped concurrently.".into(),
                ),
                _ => (ERRCODE_INTERNAL_ERROR, "This is a bug in pasv; please report it with the server log.".into()),
            },
            CallError::Protocol(_) | CallError::Unexpected(_) => {
                (ERRCODE_INTERNAL_ERROR, "This is a bug in pasv; please report it with the server log.".into())
            }
        }
    }

    /// Raise as an ERROR; `doing` says what pasv was doing ("inserting into \"t\"").
    pub fn raise(&self, doing: &str) -> ! {
        let (code, hint) = self.classify();
        raise(code, format!("pasv: {doing}: {self}"), hint)
    }

    /// Report as a WARNING (commit/abort paths).
    pub fn warn(&self, doing: &str) {
        let (code, hint) = self.classify();
        warn(code, format!("pasv: {doing}: {self}"), hint)
    }
}
