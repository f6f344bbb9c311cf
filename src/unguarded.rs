//! PostgreSQL functions pasv calls without pgrx's guard (a `sigsetjmp` and
//! a thread check for each call, which would catch an ERROR raised inside
//! and turn it into a Rust panic). Only functions that cannot raise where
//! they are called belong here, and each call says why (`// SAFETY:`): a
//! sequential scan stores a row in its slot once a row, and row writes
//! read the transaction's xids several times a row, where the guard was a
//! few per cent of the backend's time (HOT_PATH §46, §53, §54).

use pgrx::pg_sys;

extern "C" {
    pub fn ExecStoreHeapTuple(
        tuple: pg_sys::HeapTuple,
        slot: *mut pg_sys::TupleTableSlot,
        should_free: bool,
    ) -> *mut pg_sys::TupleTableSlot;
    pub fn GetTopTransactionIdIfAny() -> pg_sys::TransactionId;
    pub fn GetCurrentFullTransactionIdIfAny() -> pg_sys::FullTransactionId;
    pub fn heap_deform_tuple(tuple: pg_sys::HeapTuple, desc: pg_sys::TupleDesc, values: *mut pg_sys::Datum, isnull: *mut bool);
    pub fn pfree(pointer: *mut std::ffi::c_void);
}
