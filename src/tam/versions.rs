//! Walking the stored versions of a table's column family page by page,
//! every version with its header: what UPDATE's chain reads, VACUUM,
//! CLUSTER and `pasv.table_versions()` share. (Scans that resolve visibility
//! use `stream` instead, which reads only what decides each row.)

use crate::engine_client;
use crate::error::{self, CallError};
use pasv_am::keys::{self, ROW_KEY_LEN};
use pasv_am::protocol::{self, CfRef, Response};
use pasv_am::row::RowHeader;
use pgrx::pg_sys;

/// One stored version, borrowed from the current page.
pub struct RawVersion<'a> {
    pub rowid: u64,
    pub version: u32,
    pub header: RowHeader,
    /// The whole stored value: header, then the tuple (empty for tombstones).
    pub value: &'a [u8],
}

/// The key after `(rowid, version)` in key order (versions are stored newest
/// first), or None past the last rowid.
pub fn key_after(rowid: u64, version: u32) -> Option<[u8; ROW_KEY_LEN]> {
    if version > 0 {
        Some(keys::row_key(rowid, version - 1))
    } else if rowid < keys::MAX_ROWID {
        Some(keys::row_key(rowid + 1, u32::MAX))
    } else {
        None
    }
}

/// Call `visit` for every version with a key in `[start, end)`, in key
/// order, fetching `page` entries a round trip (0: as many as fit).
/// `visit` returns false to stop early. A version whose header does not
/// decode is an ERROR (DATA_CORRUPTED).
///
/// # Safety
/// Backend inside a transaction.
pub unsafe fn walk(
    cf: CfRef,
    start: [u8; ROW_KEY_LEN],
    end: [u8; ROW_KEY_LEN],
    page: u32,
    doing: &str,
    mut visit: impl FnMut(RawVersion<'_>) -> bool,
) {
    walk_pages(cf, start, end, page, false, doing, |rowid, version, value| visit(decode(rowid, version, value, doing)));
}

/// As [`walk`] with pages as large as fit, for a pass over a table (VACUUM,
/// CLUSTER's copy, counting versions): from the second page on, the engine
/// reads the next page into this backend's read-ahead slot while this one
/// is visited. The first page is read synchronously, after every write this
/// backend posted before; what a pass writes meanwhile are rows it has
/// visited (VACUUM's prunes and freezes) or another table (CLUSTER's copy),
/// never a key of the page read ahead. A concurrent writer's change races
/// with the pass as it does with a page read synchronously, a moment later.
///
/// # Safety
/// Backend inside a transaction.
pub unsafe fn walk_ahead(
    cf: CfRef,
    start: [u8; ROW_KEY_LEN],
    end: [u8; ROW_KEY_LEN],
    doing: &str,
    mut visit: impl FnMut(RawVersion<'_>) -> bool,
) {
    walk_pages(cf, start, end, 0, true, doing, |rowid, version, value| visit(decode(rowid, version, value, doing)));
}

fn decode<'a>(rowid: u64, version: u32, value: &'a [u8], doing: &str) -> RawVersion<'a> {
    let header = match RowHeader::decode(value) {
        Ok((h, _)) => h,
        Err(e) => error::raise(
            pgrx::PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("pasv: {doing}: bad row header at rowid {rowid}: {e}"),
            "The table's RocksDB data is damaged; restore from a backup.",
        ),
    };
    RawVersion { rowid, version, header, value }
}

/// As [`walk`], with each version's stored value undecoded (`pasv.verify`
/// reports a bad header rather than failing on it).
///
/// # Safety
/// Backend inside a transaction.
pub unsafe fn walk_raw(
    cf: CfRef,
    start: [u8; ROW_KEY_LEN],
    end: [u8; ROW_KEY_LEN],
    page: u32,
    doing: &str,
    visit: impl FnMut(u64, u32, &[u8]) -> bool,
) {
    walk_pages(cf, start, end, page, false, doing, visit);
}

/// The walk of `[start, end)`, `page` entries a page (0: as many as fit),
/// each page read ahead while the one before is visited when `ahead`
/// ([`walk_ahead`]'s rule), else each read when the one before is done.
unsafe fn walk_pages(
    cf: CfRef,
    start: [u8; ROW_KEY_LEN],
    end: [u8; ROW_KEY_LEN],
    page: u32,
    ahead: bool,
    doing: &str,
    mut visit: impl FnMut(u64, u32, &[u8]) -> bool,
) {
    let cap = crate::ipc::client::buffer_bytes().unwrap_or(64 * 1024);
    // A read-ahead's answer fills up to the read-ahead slot's size; that
    // buffer is the pass's own (the backend's page is one call's size).
    let buf_cap = if ahead { crate::ipc::client::ahead_bytes().unwrap_or(cap).max(cap) } else { cap };
    let buf = if ahead { pg_sys::palloc(buf_cap) as *mut u8 } else { take_page(cap) };
    let mut start = start;
    let mut ticket = 0u64;
    // Bounded by the range: each turn starts past the previous page's last key.
    'pages: loop {
        let dest = std::slice::from_raw_parts_mut(buf, buf_cap);
        let taken = match std::mem::take(&mut ticket) {
            0 => None,
            t => match engine_client::take_scan_ahead(t, dest) {
                Ok(taken) => taken,
                Err(e) => e.raise(doing),
            },
        };
        // Not read ahead (the first page, or another read-ahead of this
        // backend displaced it): read now.
        let copied = match taken {
            Some(c) => c,
            None => match engine_client::scan_into(cf, &start, &end, page, 0, &mut dest[..cap]) {
                Ok(c) => c,
                Err(e) => e.raise(doing),
            },
        };
        let bytes = std::slice::from_raw_parts(buf as *const u8, copied.len);
        let (more, batch) = match protocol::decode_response(bytes) {
            Ok(Response::Entries { more, batch }) => (more, batch),
            _ => CallError::Unexpected("Scan").raise(doing),
        };
        let last = batch.iter().filter_map(|(key, _)| keys::decode_row_key(key)).last();
        let next = last.and_then(|(r, v)| key_after(r, v)).filter(|_| more);
        if let Some(next) = next.filter(|_| ahead) {
            ticket = match engine_client::scan_ahead(cf, &next, &end, 0, page) {
                Ok(t) => t,
                Err(e) => e.raise(doing),
            };
        }
        for (key, value) in batch.iter() {
            let Some((rowid, version)) = keys::decode_row_key(key) else { continue };
            if !visit(rowid, version, value) {
                break 'pages;
            }
        }
        match next {
            Some(next) => start = next,
            None => break,
        }
    }
    if ahead {
        pg_sys::pfree(buf as *mut _);
    } else {
        give_back_page(buf);
    }
}

thread_local! {
    /// The page buffer of [`walk_raw`], allocated once per backend in
    /// `TopMemoryContext`, and whether a walk is using it. A 64 kB palloc
    /// per walk (every UPDATE's chain read that the row cache cannot
    /// answer) is a `malloc` of its own that grows and trims the heap
    /// (the scans' buffers did the same: HOT_PATH.md §28).
    static PAGE: std::cell::Cell<(*mut u8, bool)> = const { std::cell::Cell::new((std::ptr::null_mut(), false)) };
}

/// A page buffer of `cap` bytes: the backend's own when free, else (a walk
/// within a walk, or one an ERROR ended in this transaction) a palloc'd one
/// that the memory context frees if an ERROR skips [`give_back_page`].
unsafe fn take_page(cap: usize) -> *mut u8 {
    let (page, in_use) = PAGE.with(|p| p.get());
    if in_use {
        return pg_sys::palloc(cap) as *mut u8;
    }
    let page = if page.is_null() { pg_sys::MemoryContextAlloc(pg_sys::TopMemoryContext, cap) as *mut u8 } else { page };
    PAGE.with(|p| p.set((page, true)));
    page
}

unsafe fn give_back_page(buf: *mut u8) {
    let (page, _) = PAGE.with(|p| p.get());
    if buf == page {
        PAGE.with(|p| p.set((page, false)));
    } else {
        pg_sys::pfree(buf as *mut _);
    }
}

/// At the end of the top-level transaction no walk is running (a walk is
/// one synchronous call): the page is free again even if an ERROR left it
/// marked in use.
pub fn page_free_at_transaction_end() {
    PAGE.with(|p| {
        let (page, _) = p.get();
        p.set((page, false));
    });
}
