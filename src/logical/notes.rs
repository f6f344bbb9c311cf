//! The write side of logical decoding: the notes a DML batch of a pasv
//! table logs for [`super::decode`] (`pasv_am::protocol::logical_notes`
//! describes them). Heap logs the same facts in its own records: the old
//! row's replica identity in deletes and updates, speculative insertions
//! and how they ended.
//!
//! Only batches that are logged get notes (not those of unlogged or
//! temporary tables); VACUUM's and CLUSTER's batches are marked as
//! maintenance, which decoding skips (heap's rewrites are not decoded
//! either).

use pasv_am::protocol::{BatchBuilder, Note};
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

// Called through pg_guard_ffi_boundary.
extern "C-unwind" {
    // access/heaptoast.h; not in pgrx's PG16 bindings.
    fn toast_flatten_tuple(tup: pg_sys::HeapTuple, desc: pg_sys::TupleDesc) -> pg_sys::HeapTuple;
}

/// Whether `set` (not null) holds `member` (>= 0): `bms_is_member`, read in
/// place.
///
/// # Safety
/// `set` is a valid `Bitmapset`.
unsafe fn bitmap_has(set: *const pg_sys::Bitmapset, member: i32) -> bool {
    let Ok(member) = usize::try_from(member) else { return false };
    let bits = pg_sys::bitmapword::BITS as usize;
    let word = member / bits;
    let nwords = usize::try_from((*set).nwords).unwrap_or(0);
    word < nwords && (*(*set).words.as_ptr().add(word)) >> (member % bits) & 1 != 0
}

/// One value a column, on the stack for tables of up to 64 columns.
enum ColumnBuffer<T: Copy> {
    Inline([T; 64], usize),
    Heap(Vec<T>),
}

impl<T: Copy> ColumnBuffer<T> {
    fn new(len: usize, fill: T) -> ColumnBuffer<T> {
        if len <= 64 {
            ColumnBuffer::Inline([fill; 64], len)
        } else {
            ColumnBuffer::Heap(vec![fill; len])
        }
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            ColumnBuffer::Inline(values, len) => &mut values[..*len],
            ColumnBuffer::Heap(values) => values,
        }
    }

    fn as_mut_ptr(&mut self) -> *mut T {
        match self {
            ColumnBuffer::Inline(values, _) => values.as_mut_ptr(),
            ColumnBuffer::Heap(values) => values.as_mut_ptr(),
        }
    }
}

fn add(batch: &mut BatchBuilder, note: Note<'_>) {
    if let Err(e) = batch.note(note) {
        crate::error::raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("pasv: noting a change: {e}"), "This is a bug in pasv.");
    }
}

/// A new batch of row changes for `rel`, noting its tablespace when that is
/// not the database's default (decoding finds the table by both).
///
/// # Safety
/// `rel` is an open pasv relation.
pub unsafe fn batch_for(rel: pg_sys::Relation) -> BatchBuilder {
    let mut batch = BatchBuilder::new();
    note_tablespace(rel, &mut batch);
    batch
}

/// Note `rel`'s tablespace in `batch` if it is not the database's default.
///
/// # Safety
/// `rel` is an open pasv relation.
pub unsafe fn note_tablespace(rel: pg_sys::Relation, batch: &mut BatchBuilder) {
    let tablespace = tablespace_of(rel);
    if tablespace != 0 {
        add(batch, Note::Tablespace(tablespace));
    }
}

/// `rel`'s tablespace as `pg_class` has it (0: the database's default).
///
/// # Safety
/// `rel` is an open relation.
pub unsafe fn tablespace_of(rel: pg_sys::Relation) -> u32 {
    u32::from((*(*rel).rd_rel).reltablespace)
}

/// Mark `batch` as maintenance (VACUUM, CLUSTER): not row changes.
pub fn note_maintenance(batch: &mut BatchBuilder) {
    add(batch, Note::Maintenance);
}

/// Note a speculative insertion's row, or how it ended.
pub fn note_speculative(batch: &mut BatchBuilder, note: Note<'static>) {
    add(batch, note);
}

/// Note the replica identity of `old`, the row at `rowid` a delete, a move
/// or (with `REPLICA IDENTITY FULL` only, unless `always`) an in-place
/// update replaces, as heap's `ExtractReplicaIdentity` forms it: the key
/// columns of the identity index (others NULL) or the whole row, with
/// out-of-line values fetched (the old ones may be gone by the time a
/// subscriber needs them). Nothing for `REPLICA IDENTITY NOTHING`, a table
/// without an identity index, or a batch that is not logged.
///
/// # Safety
/// `rel` is an open pasv relation; `old` a valid tuple of it.
pub unsafe fn note_old_row(rel: pg_sys::Relation, batch: &mut BatchBuilder, rowid: u64, old: &mut pg_sys::HeapTupleData, always: bool) {
    if !crate::tam::logs_changes(rel) {
        return;
    }
    let desc = (*rel).rd_att;
    let identity = (*(*rel).rd_rel).relreplident as u8;
    let formed: pg_sys::HeapTuple = if identity == pg_sys::REPLICA_IDENTITY_FULL as u8 {
        old
    } else if identity == pg_sys::REPLICA_IDENTITY_NOTHING as u8 || !always {
        return;
    } else {
        let key = pg_sys::RelationGetIndexAttrBitmap(rel, pg_sys::IndexAttrBitmapKind::INDEX_ATTR_BITMAP_IDENTITY_KEY);
        if key.is_null() {
            return;
        }
        // A delete notes its row's key once a row: no allocation and no
        // guarded call per column (they were about half of this function,
        // which was a tenth of a bulk DELETE's backend: HOT_PATH §54).
        let natts = (*desc).natts as usize;
        let mut values = ColumnBuffer::<pg_sys::Datum>::new(natts, pg_sys::Datum::from(0usize));
        let mut nulls = ColumnBuffer::<bool>::new(natts, false);
        // SAFETY: `old` is a tuple of `desc`; the arrays hold `natts` each.
        // PG16's heap_deform_tuple reads the tuple and writes the arrays,
        // and raises nothing.
        crate::unguarded::heap_deform_tuple(old, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
        for (i, null) in nulls.as_mut_slice().iter_mut().enumerate() {
            let attnum = i as i32 + 1 - pg_sys::FirstLowInvalidHeapAttributeNumber;
            if !bitmap_has(key, attnum) {
                *null = true;
            }
        }
        // SAFETY: `key` is the palloc'd copy RelationGetIndexAttrBitmap
        // returned; pfree raises nothing for a valid chunk.
        crate::unguarded::pfree(key.cast());
        pg_sys::heap_form_tuple(desc, values.as_mut_ptr(), nulls.as_mut_ptr())
    };
    let has_external = (*(*formed).t_data).t_infomask & pg_sys::HEAP_HASEXTERNAL as u16 != 0;
    let tuple = if has_external { pg_sys::ffi::pg_guard_ffi_boundary(|| toast_flatten_tuple(formed, desc)) } else { formed };
    add(
        batch,
        Note::OldRow { rowid, tuple: std::slice::from_raw_parts((*tuple).t_data as *const u8, (*tuple).t_len as usize) },
    );
    if tuple != formed {
        pg_sys::heap_freetuple(tuple);
    }
    if formed != old as *mut pg_sys::HeapTupleData {
        pg_sys::heap_freetuple(formed);
    }
}
