//! Table-CF row keys and the rowid ⇄ TID mapping (DESIGN §2).
//!
//! Owns the byte layout of a table CF key and the arithmetic that turns a
//! rowid into a PostgreSQL `ItemPointer` (block, offset) and back.
//!
//! Invariants:
//! * Key = rowid (u64 big-endian) ‖ `u32::MAX - version` (u32 big-endian), so
//!   RocksDB's byte order sorts rows by rowid and, within a row, versions
//!   newest first: a forward seek to a row lands on its head version.
//! * Every rowid is at most [`MAX_ROWID`], whose block is the last valid
//!   `BlockNumber` (`InvalidBlockNumber` = `0xFFFFFFFF` is never produced) and
//!   whose offset is at most [`ROWS_PER_BLOCK`] (≤ `MaxHeapTuplesPerPage`, so
//!   TID bitmaps work). Offsets are 1-based, as in PostgreSQL.
//! * Keys whose first byte is `0xFF` are reserved for per-CF metadata (flush
//!   flags). `MAX_ROWID < 2^56`, so no row key ever starts with `0xFF`.

/// Rows per pseudo block: `rowid % 291 + 1` stays within `MaxHeapTuplesPerPage` (291 for 8 kB pages).
pub const ROWS_PER_BLOCK: u64 = 291;

/// Length of a table CF row key.
pub const ROW_KEY_LEN: usize = 12;

/// Largest rowid: its block is `0xFFFFFFFE`, the last valid `BlockNumber`.
pub const MAX_ROWID: u64 = (u32::MAX as u64) * ROWS_PER_BLOCK - 1;

/// Length of the rowid that begins every row key: RocksDB's prefix for its
/// bloom filters (a key shorter than this, like a flush flag's, is outside
/// every prefix and never filtered).
pub const ROWID_PREFIX_LEN: usize = 8;

/// Whether every key in `[start, end)` of at least [`ROWID_PREFIX_LEN`]
/// bytes begins with `start`'s first [`ROWID_PREFIX_LEN`] bytes: `end` has
/// the same prefix, or is the smallest key of the next prefix (as
/// [`row_range`] of a single row gives). Such a range may be read in
/// RocksDB's prefix mode, which consults the bloom filters.
pub fn within_one_prefix(start: &[u8], end: &[u8]) -> bool {
    const N: usize = ROWID_PREFIX_LEN;
    if start.len() < N || end.len() < N || end <= start {
        return false;
    }
    if start[..N] == end[..N] {
        return true;
    }
    let prefix = u64::from_be_bytes(start[..N].try_into().unwrap_or_default());
    let next = prefix.checked_add(1).map(u64::to_be_bytes);
    next.is_some_and(|next| end[..N] == next) && end[N..].iter().all(|&b| b == 0)
}

/// First byte of keys reserved for metadata; row keys sort below it.
pub const RESERVED_KEY_PREFIX: u8 = 0xFF;

const _: () = assert!(MAX_ROWID >> 56 < RESERVED_KEY_PREFIX as u64);

/// Key of `version` of row `rowid`.
#[inline]
pub fn row_key(rowid: u64, version: u32) -> [u8; ROW_KEY_LEN] {
    let mut key = [0u8; ROW_KEY_LEN];
    key[..8].copy_from_slice(&rowid.to_be_bytes());
    key[8..].copy_from_slice(&(u32::MAX - version).to_be_bytes());
    key
}

/// Inverse of [`row_key`]; `None` unless `key` is exactly [`ROW_KEY_LEN`] bytes.
#[inline]
pub fn decode_row_key(key: &[u8]) -> Option<(u64, u32)> {
    let key: &[u8; ROW_KEY_LEN] = key.try_into().ok()?;
    let (rowid, inverted) = key.split_at(8);
    let rowid = u64::from_be_bytes(rowid.try_into().ok()?);
    let inverted = u32::from_be_bytes(inverted.try_into().ok()?);
    Some((rowid, u32::MAX - inverted))
}

/// `[start, end)` covering every version of every rowid in `[rowid_lo, rowid_hi_exclusive)`.
///
/// `row_key(r, u32::MAX)` is the smallest key of row `r` (its inverted version is 0).
pub fn row_range(rowid_lo: u64, rowid_hi_exclusive: u64) -> ([u8; ROW_KEY_LEN], [u8; ROW_KEY_LEN]) {
    (
        row_key(rowid_lo, u32::MAX),
        row_key(rowid_hi_exclusive, u32::MAX),
    )
}

/// The TID of a rowid: `(block, offset)` with a 1-based offset.
///
/// Meaningful for `rowid <= MAX_ROWID`; larger rowids are never allocated.
pub fn rowid_to_tid(rowid: u64) -> (u32, u16) {
    // Both casts are lossless for rowid <= MAX_ROWID: the block is < u32::MAX
    // and the offset ≤ 291.
    (
        (rowid / ROWS_PER_BLOCK) as u32,
        (rowid % ROWS_PER_BLOCK + 1) as u16,
    )
}

/// The rowid of a TID; `None` if the offset is 0 or above [`ROWS_PER_BLOCK`], or the
/// block is `InvalidBlockNumber` (`u32::MAX`): no rowid maps there.
pub fn tid_to_rowid(block: u32, offset: u16) -> Option<u64> {
    if offset == 0 || u64::from(offset) > ROWS_PER_BLOCK || block == u32::MAX {
        return None;
    }
    Some(u64::from(block) * ROWS_PER_BLOCK + u64::from(offset) - 1)
}


/// A well-mixed hash of row `rowid` of table `(db, rel)` (splitmix64 over
/// the row's identity: neighbouring rowids land far apart). Where a row goes
/// in the row cache and in the shared row-lock table.
pub fn row_hash(db: u32, rel: u32, rowid: u64) -> u64 {
    let mut x = rowid ^ (u64::from(rel) << 32 | u64::from(db)).rotate_left(17);
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn one_row_ranges_lie_within_one_prefix() {
        let (start, end) = row_range(41, 42);
        assert!(within_one_prefix(&start, &end));
        assert!(within_one_prefix(&row_key(41, 7), &row_key(41, 3)));
        assert!(within_one_prefix(&row_key(0xFF, u32::MAX), &row_range(0x100, 0x100).0));
        let (start, end) = row_range(41, 43);
        assert!(!within_one_prefix(&start, &end), "two rows");
        assert!(!within_one_prefix(&start, &row_key(42, 5)), "into the next row");
        assert!(!within_one_prefix(&start, &start), "empty");
        assert!(!within_one_prefix(&start, &[0xFF]), "end shorter than a prefix");
    }

    #[test]
    fn row_key_round_trips() {
        for (rowid, version) in [(0, 0), (1, 1), (MAX_ROWID, u32::MAX), (12345, 7)] {
            let key = row_key(rowid, version);
            assert_eq!(decode_row_key(&key), Some((rowid, version)));
        }
        assert_eq!(decode_row_key(&[0; 11]), None);
        assert_eq!(decode_row_key(&[0; 13]), None);
    }

    #[test]
    fn keys_sort_by_rowid_then_newest_version_first() {
        let mut keys = [
            row_key(2, 0),
            row_key(1, 0),
            row_key(1, 5),
            row_key(1, 1),
            row_key(0, u32::MAX),
            row_key(256, 0),
        ];
        keys.sort();
        let decoded: Vec<_> = keys.iter().map(|k| decode_row_key(k).unwrap()).collect();
        assert_eq!(
            decoded,
            [(0, u32::MAX), (1, 5), (1, 1), (1, 0), (2, 0), (256, 0)]
        );
    }

    #[test]
    fn row_range_covers_exactly_its_rowids() {
        let (start, end) = row_range(5, 7);
        let inside = [
            row_key(5, u32::MAX),
            row_key(5, 0),
            row_key(6, 3),
            row_key(6, 0),
        ];
        let outside = [row_key(4, 0), row_key(7, u32::MAX), row_key(7, 0)];
        for k in inside {
            assert!(start.as_slice() <= k.as_slice() && k.as_slice() < end.as_slice());
        }
        for k in outside {
            assert!(!(start.as_slice() <= k.as_slice() && k.as_slice() < end.as_slice()));
        }
    }

    #[test]
    fn tid_mapping_edges() {
        assert_eq!(rowid_to_tid(0), (0, 1));
        assert_eq!(rowid_to_tid(290), (0, 291));
        assert_eq!(rowid_to_tid(291), (1, 1));
        assert_eq!(rowid_to_tid(MAX_ROWID), (u32::MAX - 1, 291));
        for rowid in [0, 1, 289, 290, 291, 292, 581, 582, MAX_ROWID] {
            let (block, offset) = rowid_to_tid(rowid);
            assert_eq!(tid_to_rowid(block, offset), Some(rowid));
        }
        assert_eq!(tid_to_rowid(0, 0), None);
        assert_eq!(tid_to_rowid(0, 292), None);
        assert_eq!(tid_to_rowid(u32::MAX, 1), None);
        assert_eq!(tid_to_rowid(1, 1), Some(291));
    }

    #[test]
    fn row_keys_stay_below_the_reserved_prefix() {
        assert!(row_key(MAX_ROWID, 0)[0] < RESERVED_KEY_PREFIX);
    }
}
