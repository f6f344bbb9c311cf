//! Large values: pasv tables keep rows inline up to `INLINE_LIMIT` bytes
//! (heap's threshold) and hand larger ones to PostgreSQL's toaster, which
//! compresses them in the row or moves them to the TOAST relation, an
//! ordinary heap table (so its chunks are WAL-logged and vacuumed as heap's).
//!
//! Why TOAST rather than chunking rows over the channel: values stay
//! compressible and individually fetchable (substring of a large text reads
//! only its chunks), unchanged large values are shared between versions on
//! UPDATE, and old versions' chunks are deleted transactionally, exactly as
//! for heap tables. The channel then only ever carries rows of a few kB.

use pgrx::pg_sys;

// Called only through pg_guard_ffi_boundary: an ERROR inside becomes a Rust
// panic that unwinds these frames, then an ERROR again at pasv's edge.
extern "C-unwind" {
    // access/heaptoast.h; not in pgrx's PG16 bindings.
    fn heap_toast_insert_or_update(
        rel: pg_sys::Relation,
        newtup: pg_sys::HeapTuple,
        oldtup: pg_sys::HeapTuple,
        options: i32,
    ) -> pg_sys::HeapTuple;
    fn heap_toast_delete(rel: pg_sys::Relation, oldtup: pg_sys::HeapTuple, is_speculative: bool);
}

/// Rows larger than this go through PostgreSQL's toaster, as heap's do
/// (`TOAST_TUPLE_THRESHOLD`: a quarter of a block, less its page and line
/// pointer overhead, 2 032 bytes for 8 kB blocks): large values are
/// compressed in the row first, then moved to the TOAST relation until the
/// row fits the TOAST target. So `pg_column_compression`, `ALTER TABLE ...
/// SET COMPRESSION` and the TOAST relation's size behave as on heap (the
/// core suite's `compression` and `strings` tests check them). Session 12:
/// before, rows up to 16 kB stayed inline and uncompressed.
pub const INLINE_LIMIT: usize = {
    let block = pg_sys::BLCKSZ as usize;
    // MAXALIGN(SizeOfPageHeaderData + 4 * sizeof(ItemIdData)) = 40.
    let usable = block - 40;
    (usable / 4) & !7
};

/// A table needs a TOAST relation when a column can hold a varlena that is
/// not stored PLAIN (heap's rule, without its width arithmetic).
///
/// # Safety
/// `rel` must be a valid, open relation.
pub unsafe fn needs_toast_table(rel: pg_sys::Relation) -> bool {
    let desc = (*rel).rd_att;
    (0..(*desc).natts as usize).any(|i| {
        let att = &*(*desc).attrs.as_ptr().add(i);
        !att.attisdropped && att.attlen < 0 && att.attstorage as u8 != pg_sys::TYPSTORAGE_PLAIN
    })
}

unsafe fn has_external(tuple: pg_sys::HeapTuple) -> bool {
    (*(*tuple).t_data).t_infomask & pg_sys::HEAP_HASEXTERNAL as u16 != 0
}

/// The tuple to store for `tuple` (a new version of `old`, if any): the
/// same pointer when no toasting is needed, else a new palloc'd tuple whose
/// large values live in the TOAST relation. Values pointing into another
/// table's TOAST relation are always copied into ours.
///
/// # Safety
/// `rel` open; `tuple` (and `old`, if not null) valid heap tuples of `rel`.
pub unsafe fn prepare(rel: pg_sys::Relation, tuple: pg_sys::HeapTuple, old: pg_sys::HeapTuple) -> pg_sys::HeapTuple {
    let old_external = !old.is_null() && has_external(old);
    if has_external(tuple) || old_external || (*tuple).t_len as usize > INLINE_LIMIT {
        // The toaster may WAL-log chunks for this row. Logical decoding
        // reassembles them for the next pasv change it decodes and forgets
        // them after it, so that change must be this row's: buffered rows
        // go first, in a message of their own.
        if let Err(e) = crate::engine_client::flush_pending() {
            e.raise(&format!("storing large values of {}", super::rel_name(rel)));
        }
        pg_sys::ffi::pg_guard_ffi_boundary(|| heap_toast_insert_or_update(rel, tuple, old, 0))
    } else {
        tuple
    }
}

/// Delete the TOAST chunks of a deleted row version (transactionally: older
/// snapshots still read them until the TOAST table is vacuumed).
///
/// # Safety
/// `rel` open; `old` a valid heap tuple of `rel`.
pub unsafe fn delete_external(rel: pg_sys::Relation, old: pg_sys::HeapTuple) {
    if has_external(old) {
        pg_sys::ffi::pg_guard_ffi_boundary(|| heap_toast_delete(rel, old, false));
    }
}

/// CLUSTER / VACUUM FULL: save `tuple`'s external values again into
/// `rel`'s TOAST relation (whose `rd_toastoid` makes them keep their value
/// OIDs and point at the TOAST table that will hold them after the swap).
/// Not logically logged, like heap's rewrite: logical decoding (pasv's
/// replay) cannot map the transient TOAST table's inserts to a relation and
/// fails on them.
///
/// # Safety
/// `rel` open; `tuple` a valid heap tuple of `rel`'s row type.
pub unsafe fn resave(rel: pg_sys::Relation, tuple: pg_sys::HeapTuple) -> pg_sys::HeapTuple {
    if has_external(tuple) {
        pg_sys::ffi::pg_guard_ffi_boundary(|| {
            heap_toast_insert_or_update(rel, tuple, std::ptr::null_mut(), pg_sys::HEAP_INSERT_NO_LOGICAL as i32)
        })
    } else {
        tuple
    }
}
