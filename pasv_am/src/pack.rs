//! Packed row groups: many rows in one RocksDB entry (HOT_PATH §44).
//!
//! A scan pays RocksDB's per-entry step (about 180 ns on the project's
//! machine) for every row; a pack of [`PACK_ROWS`] rows pays it once. Owns
//! the pack key, the pack value's layout, the marker that hides one packed
//! entry, and the search of a pack by any key ([`KeyBound`]); calls nothing. The engine writes packs and merges them
//! with the row keys around them (`engine::row_view`); nothing outside the
//! engine ever sees one.
//!
//! Invariants:
//! * Groups split each rowid block (`keys::ROWS_PER_BLOCK`) into runs of
//!   [`PACK_ROWS`] rowids from its first (the last run shorter): a backend
//!   fills a block from its first rowid on, so a bulk load's rows of a
//!   block fill its groups from their starts.
//! * A pack key is the 8-byte rowid (big-endian) of its group's first
//!   rowid: it sorts before every row key of its group (a shorter key with
//!   the same prefix) and after every key of the group before, and it falls
//!   within RocksDB's rowid prefix. A group has at most one pack.
//! * A pack's entries are row keys of its group in key order (rowid
//!   ascending, versions newest first), each at most once; any of the
//!   group's rows may be missing.
//! * A pack holds first versions (version 0) only. It is written with its
//!   rows, and written anew only by a re-pack, which folds in the row keys
//!   of version 0 beside it without changing what the group reads as
//!   (`engine::repacking`). A row key written later shadows the packed
//!   entry with the same key (the row key is always the newer); a row key
//!   whose value is [`HIDDEN`] hides it and is not an entry itself.

use crate::keys::{row_key, ROWID_PREFIX_LEN, ROWS_PER_BLOCK, ROW_KEY_LEN};

/// Rowids a group covers: `[base, base + PACK_ROWS)`, cut short at the
/// end of its block. 64 rows of ~100 bytes keep a pack near RocksDB's 4 kB
/// blocks' scale while taking the per-entry cost down 64-fold.
pub const PACK_ROWS: u64 = 64;

/// Length of a pack key.
pub const PACK_KEY_LEN: usize = ROWID_PREFIX_LEN;

/// The value of a row key that hides the packed entry with that key: one
/// byte, shorter than any row's header, so never a row.
pub const HIDDEN: &[u8] = &[0];

const FORMAT_V1: u8 = 1;
/// Format byte, then the entry count (u16 LE).
const PREAMBLE_LEN: usize = 3;
/// Per entry: rowid offset in the group (u8), version (u32 LE), end of its
/// value in the value area (u32 LE).
const DIRECTORY_ENTRY_LEN: usize = 9;

const _: () = assert!(PACK_ROWS <= 256 && PACK_ROWS <= ROWS_PER_BLOCK);

/// First rowid of the group holding `rowid`.
pub fn group_base(rowid: u64) -> u64 {
    let in_block = rowid % ROWS_PER_BLOCK;
    rowid - in_block % PACK_ROWS
}

/// Rowids of the group whose first rowid is `base`: [`PACK_ROWS`], or
/// fewer where its block ends first.
pub fn group_rows(base: u64) -> u64 {
    PACK_ROWS.min(ROWS_PER_BLOCK - base % ROWS_PER_BLOCK)
}

/// Key of the pack of the group whose first rowid is `base`.
pub fn pack_key(base: u64) -> [u8; PACK_KEY_LEN] {
    base.to_be_bytes()
}

/// The group base of a pack key; `None` unless `key` is [`PACK_KEY_LEN`]
/// bytes naming a group's first rowid.
pub fn decode_pack_key(key: &[u8]) -> Option<u64> {
    let base = u64::from_be_bytes(key.try_into().ok()?);
    (group_base(base) == base).then_some(base)
}

/// Whether a row key's value is the marker that hides a packed entry.
pub fn is_hidden(value: &[u8]) -> bool {
    value == HIDDEN
}

/// Why bytes are not a pack.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("pack value of {len} bytes is malformed: {what}")]
pub struct PackError {
    pub len: usize,
    pub what: &'static str,
}

/// Builds a pack value from entries given in key order.
pub struct PackBuilder {
    base: u64,
    directory: Vec<u8>,
    values: Vec<u8>,
    count: u16,
    last: Option<(u64, u32)>,
}

impl PackBuilder {
    pub fn new(base: u64) -> PackBuilder {
        PackBuilder { base, directory: Vec::new(), values: Vec::new(), count: 0, last: None }
    }

    /// Appends version `version` of row `rowid` (in the group, after the
    /// entry pushed before it in key order). False, and nothing appended,
    /// if it is outside the group, out of order or the pack is full.
    pub fn push(&mut self, rowid: u64, version: u32, value: &[u8]) -> bool {
        let in_order = self.last.is_none_or(|(r, v)| rowid > r || (rowid == r && version < v));
        let Ok(end) = u32::try_from(self.values.len() + value.len()) else { return false };
        if group_base(rowid) != self.base || !in_order || self.count == u16::MAX {
            return false;
        }
        self.directory.push((rowid - self.base) as u8);
        self.directory.extend_from_slice(&version.to_le_bytes());
        self.directory.extend_from_slice(&end.to_le_bytes());
        self.values.extend_from_slice(value);
        self.count += 1;
        self.last = Some((rowid, version));
        true
    }

    pub fn base(&self) -> u64 {
        self.base
    }

    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn finish(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(PREAMBLE_LEN + self.directory.len() + self.values.len());
        out.push(FORMAT_V1);
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.directory);
        out.extend_from_slice(&self.values);
        out
    }
}

/// A pack value read in place: its entries by index, in key order.
#[derive(Clone, Copy)]
pub struct Pack<'a> {
    base: u64,
    directory: &'a [u8],
    values: &'a [u8],
}

impl<'a> Pack<'a> {
    /// Checks `bytes` whole (every value's bounds), so that reading an
    /// entry afterwards cannot fail.
    pub fn parse(base: u64, bytes: &'a [u8]) -> Result<Pack<'a>, PackError> {
        let bad = |what| PackError { len: bytes.len(), what };
        if bytes.len() < PREAMBLE_LEN || bytes[0] != FORMAT_V1 {
            return Err(bad("no version-1 preamble"));
        }
        let count = usize::from(u16::from_le_bytes([bytes[1], bytes[2]]));
        let directory_end = PREAMBLE_LEN + count * DIRECTORY_ENTRY_LEN;
        if bytes.len() < directory_end {
            return Err(bad("directory runs past the end"));
        }
        let pack = Pack { base, directory: &bytes[PREAMBLE_LEN..directory_end], values: &bytes[directory_end..] };
        let mut start = 0usize;
        let mut last: Option<(u64, u32)> = None;
        for i in 0..count {
            let (rowid, version, end) = pack.directory_entry(i);
            if end < start || end > pack.values.len() {
                return Err(bad("a value's bounds are out of place"));
            }
            if group_base(rowid) != base || last.is_some_and(|(r, v)| rowid < r || (rowid == r && version >= v)) {
                return Err(bad("entries out of key order or outside the group"));
            }
            start = end;
            last = Some((rowid, version));
        }
        Ok(pack)
    }

    /// The pack in `bytes`, which [`Pack::parse`] accepted before (a
    /// malformed one reads as empty).
    pub fn checked_before(base: u64, bytes: &'a [u8]) -> Pack<'a> {
        let count = bytes.get(1..PREAMBLE_LEN).map_or(0, |c| usize::from(u16::from_le_bytes([c[0], c[1]])));
        let directory_end = PREAMBLE_LEN + count * DIRECTORY_ENTRY_LEN;
        match (bytes.get(PREAMBLE_LEN..directory_end), bytes.get(directory_end..)) {
            (Some(directory), Some(values)) => Pack { base, directory, values },
            _ => Pack { base, directory: &[], values: &[] },
        }
    }

    pub fn len(&self) -> usize {
        self.directory.len() / DIRECTORY_ENTRY_LEN
    }

    pub fn is_empty(&self) -> bool {
        self.directory.is_empty()
    }

    fn directory_entry(&self, i: usize) -> (u64, u32, usize) {
        let d = &self.directory[i * DIRECTORY_ENTRY_LEN..(i + 1) * DIRECTORY_ENTRY_LEN];
        let version = u32::from_le_bytes([d[1], d[2], d[3], d[4]]);
        let end = u32::from_le_bytes([d[5], d[6], d[7], d[8]]) as usize;
        (self.base + u64::from(d[0]), version, end)
    }

    /// Entry `i` (< `len()`): its rowid, version and value.
    pub fn entry(&self, i: usize) -> (u64, u32, &'a [u8]) {
        let (rowid, version, end) = self.directory_entry(i);
        let start = if i == 0 { 0 } else { self.directory_entry(i - 1).2 };
        (rowid, version, &self.values[start..end])
    }

    /// Entries `range` as (rowid, version, value), in key order: as
    /// [`Pack::entry`] for each, reading each directory entry once.
    pub fn run(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = (u64, u32, &'a [u8])> + '_ {
        let mut start = if range.start == 0 { 0 } else { self.directory_entry(range.start - 1).2 };
        range.map(move |i| {
            let (rowid, version, end) = self.directory_entry(i);
            let value = &self.values[start..end];
            start = end;
            (rowid, version, value)
        })
    }

    /// Entry `i`'s row key.
    pub fn key(&self, i: usize) -> [u8; ROW_KEY_LEN] {
        let (rowid, version, _) = self.directory_entry(i);
        row_key(rowid, version)
    }

    /// Whether entry `i`'s row key is `key` (a row key's bound).
    pub fn key_is(&self, i: usize, key: &KeyBound) -> bool {
        let (rowid, version, _) = self.directory_entry(i);
        key.is_row(rowid, version)
    }

    /// Index of the first entry whose row key is `>= key` (`len()` if none).
    pub fn lower_bound(&self, key: &[u8]) -> usize {
        self.lower_bound_from(0, &KeyBound::of(key))
    }

    /// Index of the first entry from `start` whose row key is `>= key`
    /// (`len()` if none); `start` must be at or before it.
    pub fn lower_bound_from(&self, start: usize, key: &KeyBound) -> usize {
        let before = |i: usize| {
            let (rowid, version, _) = self.directory_entry(i);
            key.is_after_row(rowid, version)
        };
        // Mostly asked with a key at `start` (a row key of the entry's row)
        // or past every entry (the next group's key): one compare or two
        // instead of a search.
        let len = self.len();
        if start >= len || !before(start) {
            return start.min(len);
        }
        if before(len - 1) {
            return len;
        }
        let (mut lo, mut hi) = (start + 1, len - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if before(mid) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// Any key, made comparable with row keys as integers: a pack is searched
/// by the keys of RocksDB's entries and of a read's bounds, and comparing
/// its directory's (rowid, version) pairs as integers spares building a
/// 12-byte key and a `memcmp` per step (a scan of a table with updated
/// rows searched a pack at every row key between its entries: `memcmp`
/// was 6 % of the engine's samples).
///
/// A key `k` is kept as its first [`ROW_KEY_LEN`] bytes (zero-padded) read
/// as a big-endian integer, and its length. A row key `r` sorts
/// before `k` exactly when its integer is below `k`'s, or equal with `k`
/// longer (then `r` is a prefix of `k`); when equal with `k` no longer,
/// `k` is `r` or a prefix of it, so `r` is not before `k`.
#[derive(Clone, Copy, Debug)]
pub struct KeyBound {
    at: u128,
    len: usize,
}

impl KeyBound {
    pub fn of(key: &[u8]) -> KeyBound {
        let mut padded = [0u8; 16];
        let n = key.len().min(ROW_KEY_LEN);
        padded[16 - ROW_KEY_LEN..16 - ROW_KEY_LEN + n].copy_from_slice(&key[..n]);
        KeyBound { at: u128::from_be_bytes(padded), len: key.len() }
    }

    fn row(rowid: u64, version: u32) -> u128 {
        (u128::from(rowid) << 32) | u128::from(u32::MAX - version)
    }

    /// Whether row key `(rowid, version)` sorts before this key.
    #[inline]
    pub fn is_after_row(&self, rowid: u64, version: u32) -> bool {
        let row = KeyBound::row(rowid, version);
        row < self.at || (row == self.at && self.len > ROW_KEY_LEN)
    }

    /// Whether this key is row key `(rowid, version)` itself.
    #[inline]
    pub fn is_row(&self, rowid: u64, version: u32) -> bool {
        self.len == ROW_KEY_LEN && KeyBound::row(rowid, version) == self.at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_keys_sort_between_groups() {
        let base = 5 * ROWS_PER_BLOCK + PACK_ROWS;
        let key = pack_key(base);
        assert!(key.as_slice() > row_key(base - 1, 0).as_slice());
        assert!(key.as_slice() < row_key(base, u32::MAX).as_slice());
        assert!(row_key(base + PACK_ROWS - 1, 0).as_slice() < pack_key(base + PACK_ROWS).as_slice());
        assert_eq!(decode_pack_key(&key), Some(base));
        assert_eq!(decode_pack_key(&pack_key(base + 1)), None);
        assert_eq!(decode_pack_key(&row_key(base, 0)), None);
        assert_eq!(group_base(base + PACK_ROWS - 1), base);
    }

    #[test]
    fn groups_start_at_block_starts() {
        let block = 7 * ROWS_PER_BLOCK;
        let bases: Vec<u64> = (block..block + ROWS_PER_BLOCK).map(group_base).collect();
        let mut starts = bases.clone();
        starts.dedup();
        let expected: Vec<u64> = (0..ROWS_PER_BLOCK.div_ceil(PACK_ROWS)).map(|k| block + k * PACK_ROWS).collect();
        assert_eq!(starts, expected);
        assert_eq!(group_base(block + ROWS_PER_BLOCK), block + ROWS_PER_BLOCK, "the next block starts a group");
        assert_eq!(group_base(block - 1), block - ROWS_PER_BLOCK + 4 * PACK_ROWS, "the last group is short");
        assert!(bases.iter().all(|&b| decode_pack_key(&pack_key(b)) == Some(b)));
    }

    #[test]
    fn a_pack_round_trips_and_finds_keys() {
        let base = 3 * PACK_ROWS;
        let mut builder = PackBuilder::new(base);
        let rows: Vec<(u64, u32, Vec<u8>)> =
            vec![(base, 0, vec![1; 30]), (base + 2, 7, vec![]), (base + 2, 3, vec![2; 5]), (base + 63, 0, vec![3; 100])];
        for (rowid, version, value) in &rows {
            assert!(builder.push(*rowid, *version, value));
        }
        assert!(!builder.push(base + 63, 0, b"same key again"));
        assert!(!builder.push(base + 64, 0, b"next group"));
        let bytes = builder.finish();
        let pack = Pack::parse(base, &bytes).unwrap();
        assert_eq!(pack.len(), rows.len());
        for (i, (rowid, version, value)) in rows.iter().enumerate() {
            assert_eq!(pack.entry(i), (*rowid, *version, value.as_slice()));
            assert_eq!(pack.key(i), row_key(*rowid, *version));
            assert_eq!(pack.lower_bound(&row_key(*rowid, *version)), i);
        }
        assert_eq!(pack.lower_bound(&row_key(base + 1, 0)), 1);
        assert_eq!(pack.lower_bound(&row_key(base + 2, 5)), 2);
        assert_eq!(pack.lower_bound(&row_key(base + 2, 2)), 3);
        assert_eq!(pack.lower_bound(&pack_key(base)), 0);
        assert_eq!(pack.lower_bound(&pack_key(base + PACK_ROWS)), 4);
    }

    #[test]
    fn a_key_bound_orders_row_keys_as_their_bytes_do() {
        let mut next = crate::engine::test_support::xorshift(0x5eed_0b0d);
        // Keys near one row key, so that prefixes, equal keys and zero
        // padding meet: a row key, cut or extended, with a byte changed.
        let rowid = 0x0102_0304_0506_0700u64;
        for _ in 0..20_000 {
            let row = (rowid + next(3), next(4) as u32 * (u32::MAX / 3));
            let mut key = row_key(rowid + next(3), next(4) as u32 * (u32::MAX / 3)).to_vec();
            match next(4) {
                0 => key.truncate(next(13) as usize),
                1 => key.extend(std::iter::repeat_n(next(2) as u8, next(4) as usize + 1)),
                _ => {}
            }
            if !key.is_empty() && next(3) == 0 {
                let at = next(key.len() as u64) as usize;
                key[at] = next(3) as u8 * 0x7f;
            }
            let bytes = row_key(row.0, row.1);
            let bound = KeyBound::of(&key);
            assert_eq!(bound.is_after_row(row.0, row.1), bytes.as_slice() < key.as_slice(), "{row:?} against {key:?}");
            assert_eq!(bound.is_row(row.0, row.1), bytes.as_slice() == key.as_slice(), "{row:?} against {key:?}");
        }
    }

    #[test]
    fn a_search_from_an_entry_finds_what_a_linear_pass_does() {
        let base = 2 * ROWS_PER_BLOCK + PACK_ROWS;
        let mut builder = PackBuilder::new(base);
        let rows: Vec<(u64, u32)> = (0..PACK_ROWS).filter(|r| r % 3 != 1).flat_map(|r| [(base + r, 2), (base + r, 0)]).collect();
        for &(rowid, version) in &rows {
            assert!(builder.push(rowid, version, b"v"));
        }
        let bytes = builder.finish();
        let pack = Pack::parse(base, &bytes).unwrap();
        let mut keys: Vec<Vec<u8>> = vec![vec![], pack_key(base).to_vec(), pack_key(base + PACK_ROWS).to_vec()];
        for r in base..base + PACK_ROWS + 1 {
            for v in 0..4 {
                keys.push(row_key(r, v).to_vec());
                keys.push(row_key(r, v)[..10].to_vec());
                keys.push([&row_key(r, v)[..], &[0]].concat());
            }
        }
        for key in &keys {
            let linear = (0..pack.len()).find(|&i| pack.key(i).as_slice() >= key.as_slice()).unwrap_or(pack.len());
            assert_eq!(pack.lower_bound(key), linear, "{key:?}");
            for start in 0..=linear {
                assert_eq!(pack.lower_bound_from(start, &KeyBound::of(key)), linear, "{key:?} from {start}");
            }
        }
    }

    #[test]
    fn malformed_packs_are_refused() {
        let mut builder = PackBuilder::new(0);
        assert!(builder.push(1, 0, b"abc"));
        let good = builder.finish();
        assert!(Pack::parse(0, &good).is_ok());
        for cut in 0..good.len() {
            assert!(Pack::parse(0, &good[..cut]).is_err(), "cut at {cut}");
        }
        let mut wrong_group = good.clone();
        wrong_group[3] = 64;
        assert!(Pack::parse(0, &wrong_group).is_err());
        let mut wrong_format = good;
        wrong_format[0] = 9;
        assert!(Pack::parse(0, &wrong_format).is_err());
        assert!(!is_hidden(&[0; 24]) && is_hidden(HIDDEN));
    }
}
