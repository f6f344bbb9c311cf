//! The rows of a CF as the engine's readers see them: row keys, with every
//! pack (`crate::pack`) opened into the entries it holds.
//!
//! Owns `RowView`, a RocksDB iterator that merges each pack with the row
//! keys of its group. Used by every read of rows (`scan.rs`); calls RocksDB
//! iterators and `crate::pack`.
//!
//! Invariants:
//! * Entries come in key order, each key once, as if every packed entry
//!   were a row key of its own: a row key with the same key as a packed
//!   entry wins, and one whose value is `pack::HIDDEN` hides it and is
//!   itself skipped.
//! * A CF with no pack at or above a group (`pack_floor`) is read exactly
//!   as the iterator gives it: such a CF holds neither packs nor markers
//!   there, so the view adds no work per entry.
//! * When the iterator stops at a run of deleted keys (an Incomplete
//!   status), the view stops too, even with packed entries left: a row key
//!   past the run may shadow them. The caller seeks on.

use rocksdb::DBRawIteratorWithThreadMode;

use super::error::rocks_with;
use super::{Db, EngineError};
use crate::keys::{ROWID_PREFIX_LEN, ROW_KEY_LEN};
use crate::pack::{decode_pack_key, group_base, is_hidden, pack_key, KeyBound, Pack, PACK_KEY_LEN};

/// Where the view's current entry comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum At {
    /// The iterator's entry.
    Raw,
    /// Entry `pack_at` of the open pack.
    Packed,
    /// Nothing: the end, an Incomplete stop or an error.
    Nothing,
}

pub(super) struct RowView<'a> {
    raw: DBRawIteratorWithThreadMode<'a, Db>,
    /// Packed entries at or past this key are outside the read.
    end: KeyBound,
    /// Groups from this rowid's on may hold packs (`u64::MAX`: none do).
    pack_floor: u64,
    /// The open pack's bytes (a copy: the iterator moves on past its key
    /// while its entries are merged) and its group.
    pack: Vec<u8>,
    pack_base: u64,
    /// The open pack's entries before this one are before the end: those
    /// the view may give (0 when no pack is open).
    pack_end: usize,
    /// The open pack's next entry not yet passed.
    pack_at: usize,
    /// The open pack's entries before this one are known to come before
    /// the iterator's key and the end: they are given without comparing
    /// (the iterator only moves forward while a pack is open).
    pack_clear: usize,
    /// The rowid of the first entry the view can give after the clear
    /// run (`u64::MAX`: none within the read), or `None` when not known.
    after_clear: Option<u64>,
    at: At,
    /// The current packed entry's key.
    key: [u8; ROW_KEY_LEN],
    corrupt: Option<String>,
}

impl<'a> RowView<'a> {
    pub(super) fn new(raw: DBRawIteratorWithThreadMode<'a, Db>, end: &[u8], pack_floor: u64) -> RowView<'a> {
        RowView {
            raw,
            end: KeyBound::of(end),
            pack_floor,
            pack: Vec::new(),
            pack_base: 0,
            pack_end: 0,
            pack_at: 0,
            pack_clear: 0,
            after_clear: None,
            at: At::Nothing,
            key: [0; ROW_KEY_LEN],
            corrupt: None,
        }
    }

    fn open_pack(&self) -> Pack<'_> {
        // The bytes were checked whole when the pack was opened.
        Pack::checked_before(self.pack_base, &self.pack)
    }

    /// Positions the view at the first entry `>= target`.
    pub(super) fn seek(&mut self, target: &[u8]) {
        self.pack_end = 0;
        self.pack_at = 0;
        self.pack_clear = 0;
        if self.pack_floor != u64::MAX {
            let mut prefix = [0u8; ROWID_PREFIX_LEN];
            let head = target.len().min(ROWID_PREFIX_LEN);
            prefix[..head].copy_from_slice(&target[..head]);
            let base = group_base(u64::from_be_bytes(prefix));
            let key = pack_key(base);
            if base >= group_base(self.pack_floor) && key.as_slice() < target {
                // The group's pack lies before the target: open it, then
                // go where the target is.
                self.raw.seek(key);
                if self.raw.key() == Some(key.as_slice()) {
                    self.load_pack();
                    self.pack_at = self.open_pack().lower_bound(target).min(self.pack_end);
                }
            }
        }
        self.raw.seek(target);
        self.settle();
    }

    /// Moves to the next entry.
    pub(super) fn next(&mut self) {
        match self.at {
            At::Raw => self.raw.next(),
            At::Packed => self.pack_at += 1,
            At::Nothing => return,
        }
        self.settle();
    }

    /// The current entry.
    pub(super) fn item(&self) -> Option<(&[u8], &[u8])> {
        match self.at {
            At::Raw => self.raw.item(),
            At::Packed => Some((&self.key, self.open_pack().entry(self.pack_at).2)),
            At::Nothing => None,
        }
    }

    pub(super) fn key(&self) -> Option<&[u8]> {
        self.item().map(|(key, _)| key)
    }

    /// When the current entry is packed: the open pack and the run of its
    /// entries from the current one that the view gives next, in order,
    /// with nothing between them (each is before the iterator's key and
    /// the end), and the rowid of the entry after the run if known
    /// (`u64::MAX`: none within the read).
    pub(super) fn packed_run(&self) -> Option<(Pack<'_>, std::ops::Range<usize>, Option<u64>)> {
        (self.at == At::Packed).then(|| (self.open_pack(), self.pack_at..self.pack_clear, self.after_clear))
    }

    /// Moves past `n` entries of the current packed run (`packed_run`).
    pub(super) fn pass_packed(&mut self, n: usize) {
        debug_assert!(self.at == At::Packed && self.pack_at + n <= self.pack_clear);
        self.pack_at += n;
        self.settle();
    }

    /// Whether the iterator stopped at a run of deleted keys (it was given
    /// a limit of them to skip).
    pub(super) fn is_incomplete(&self) -> bool {
        self.at == At::Nothing
            && self.corrupt.is_none()
            && matches!(self.raw.status(), Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete)
    }

    /// The iterator's error, or the pack that could not be read.
    pub(super) fn status(&self, name: &str) -> Result<(), EngineError> {
        if let Some(what) = &self.corrupt {
            return Err(EngineError::Corruption(format!("{name}: {what}")));
        }
        self.raw.status().map_err(rocks_with(|| format!("scan {name}")))
    }

    /// Copies the pack at the iterator's position and steps past its key.
    fn load_pack(&mut self) {
        let Some((key, value)) = self.raw.item() else { return };
        let Some(base) = decode_pack_key(key) else {
            self.corrupt = Some(format!("a {}-byte key that is not a pack key", key.len()));
            return;
        };
        self.pack.clear();
        self.pack.extend_from_slice(value);
        match Pack::parse(base, &self.pack) {
            Ok(pack) => {
                self.pack_base = base;
                self.pack_end = pack.lower_bound_from(0, &self.end);
                self.pack_at = 0;
                self.pack_clear = 0;
            }
            Err(e) => {
                self.pack_end = 0;
                self.corrupt = Some(format!("pack of rows {base}..: {e}"));
            }
        }
    }

    /// Makes the current entry the smaller of the iterator's and the open
    /// pack's next, applying the shadowing rules.
    fn settle(&mut self) {
        if self.pack_floor == u64::MAX {
            self.at = if self.raw.valid() { At::Raw } else { At::Nothing };
            return;
        }
        if self.pack_at < self.pack_clear {
            self.key = self.open_pack().key(self.pack_at);
            self.at = At::Packed;
            return;
        }
        loop {
            if self.corrupt.is_some() {
                self.at = At::Nothing;
                return;
            }
            let packed = self.pack_at < self.pack_end;
            let Some((raw_key, raw_value)) = self.raw.item() else {
                // An Incomplete stop hides what follows: stop as well.
                let stopped = self.raw.status().is_err();
                self.at = if packed && !stopped { At::Packed } else { At::Nothing };
                if self.at == At::Packed {
                    self.pack_clear = self.pack_end;
                    // The iterator is done and the rest of the pack is at
                    // or past the end.
                    self.after_clear = Some(u64::MAX);
                    self.key = self.open_pack().key(self.pack_at);
                }
                return;
            };
            if packed {
                let raw = KeyBound::of(raw_key);
                let pack = self.open_pack();
                let before_raw = pack.lower_bound_from(self.pack_at, &raw);
                if before_raw > self.pack_at {
                    // The open pack's entries come first (the next group's
                    // pack key among what follows them), up to the
                    // iterator's key or the end.
                    self.key = pack.key(self.pack_at);
                    self.pack_clear = before_raw.min(self.pack_end);
                    // What follows is the iterator's entry (or, if it hides
                    // a packed entry, one after it: every later key's rowid
                    // is at least its own), or nothing: the pack's entries
                    // from `pack_end` on are at or past the end, and so is
                    // the iterator's key when it comes after them.
                    self.after_clear = if before_raw <= self.pack_end {
                        raw_key.get(..ROWID_PREFIX_LEN).and_then(|p| p.try_into().ok()).map(u64::from_be_bytes)
                    } else {
                        Some(u64::MAX)
                    };
                    self.at = At::Packed;
                    return;
                }
                if pack.key_is(self.pack_at, &raw) {
                    // The row key is the newer write of this entry.
                    self.pack_at += 1;
                }
                // The iterator's entry comes first.
            }
            if raw_key.len() == PACK_KEY_LEN {
                self.load_pack();
                self.raw.next();
                continue;
            }
            if is_hidden(raw_value) {
                self.raw.next();
                continue;
            }
            self.at = At::Raw;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{assert_same, config, value, xorshift, Rows, TempDir, T};
    use super::super::Engine;
    use crate::keys::{row_key, row_range, MAX_ROWID};
    use crate::protocol::{decode_response, BatchBuilder, Response, ScanWriter};

    fn open(dir: &TempDir, pack: bool) -> Engine {
        let mut cfg = config(dir);
        cfg.pack_new_rows = pack;
        Engine::open(cfg).expect("open engine")
    }

    /// Every entry of `[start, end)` as a backend reads it: answers of
    /// `buf_len` bytes, each resumed at the successor of the last key.
    fn read(engine: &Engine, start: &[u8], end: &[u8], per_row: u32, buf_len: usize) -> Rows {
        let mut out = vec![0u8; buf_len];
        let mut rows: Rows = Vec::new();
        let mut next_start = start.to_vec();
        for _ in 0..100_000 {
            let mut writer = ScanWriter::new(&mut out, 0);
            let more = engine.scan_rows(T, &next_start, end, per_row, &mut writer).unwrap();
            let len = writer.finish(more);
            let Response::Entries { batch, .. } = decode_response(&out[..len]).unwrap() else { panic!("not Entries") };
            rows.extend(batch.iter().map(|(k, v)| (k.to_vec(), v.to_vec())));
            if !more {
                return rows;
            }
            let Some((last, _)) = rows.last() else { return rows };
            next_start = [last.as_slice(), &[0]].concat();
        }
        panic!("a read did not end");
    }

    fn packs_in(engine: &Engine) -> usize {
        let handle = engine.db.cf_handle(&engine.table_entry_name(T)).unwrap();
        let mut iter = engine.db.raw_iterator_cf(&handle);
        iter.seek_to_first();
        let mut packs = 0;
        while let Some(key) = iter.key() {
            packs += usize::from(key.len() == crate::pack::PACK_KEY_LEN);
            iter.next();
        }
        packs
    }

    /// Random bulk inserts, updates, rewrites of version 0, deletes of any
    /// version (pruning's), flushes and reopenings, applied to an engine
    /// that packs new rows and to one that does not: every read of every
    /// shape (ranges, one row, a row's few newest versions, small answers)
    /// returns the same entries from both.
    #[test]
    fn packed_and_unpacked_tables_read_alike() {
        for seed in 1..=8u64 {
            let (dir_a, dir_b) = (TempDir::new(), TempDir::new());
            let mut engines = [open(&dir_a, true), open(&dir_b, false)];
            for e in &engines {
                e.create_cf(T).unwrap();
            }
            let mut next = xorshift(seed * 0x9E37_79B9);
            let mut end_rowid = 0u64;
            let mut reads = 0;
            for step in 0..300 {
                let mut batch = BatchBuilder::new();
                match next(12) {
                    0..=2 => {
                        end_rowid += next(3) * next(40);
                        let n = 1 + next(400);
                        for rowid in end_rowid..end_rowid + n {
                            batch.push(&row_key(rowid, 0), &value(rowid, 10 + (rowid % 90) as usize)).unwrap();
                        }
                        end_rowid += n;
                    }
                    3..=4 if end_rowid > 0 => {
                        for _ in 0..1 + next(5) {
                            let rowid = next(end_rowid);
                            let version = if next(3) == 0 { 0 } else { 1 + next(4) as u32 };
                            batch.push(&row_key(rowid, version), &value(rowid + u64::from(version) + step, 20)).unwrap();
                        }
                    }
                    5 if end_rowid > 70 => {
                        // VACUUM's freeze: version 0 of existing rows, in order.
                        let first = next(end_rowid - 70);
                        for rowid in first..first + 70 {
                            let header = crate::row::RowHeader { flags: crate::row::FLAG_FROZEN, cid: 0, xid: 2, moved_to: 0 };
                            let frozen = [header.encode().as_slice(), &[7; 12]].concat();
                            batch.push(&row_key(rowid, 0), &frozen).unwrap();
                        }
                    }
                    6..=7 if end_rowid > 0 => {
                        for _ in 0..1 + next(8) {
                            let rowid = next(end_rowid);
                            let version = if next(2) == 0 { 0 } else { 1 + next(4) as u32 };
                            batch.push(&row_key(rowid, version), &[]).unwrap();
                        }
                    }
                    8 => {
                        for e in &engines {
                            e.flush_cf(T).unwrap();
                        }
                    }
                    9 if next(4) == 0 => {
                        for e in &engines {
                            e.flush_cf(T).unwrap();
                        }
                        drop(engines);
                        engines = [open(&dir_a, true), open(&dir_b, false)];
                    }
                    _ => {
                        let lo = next(end_rowid + 2);
                        let hi = if next(3) == 0 { lo + 1 } else { lo + next(end_rowid + 2 - lo) + 1 };
                        let (start, end) = row_range(lo, hi.min(MAX_ROWID));
                        let per_row = next(4) as u32;
                        let buf_len = [300, 1000, 4096, 1 << 16][next(4) as usize];
                        let a = read(&engines[0], &start, &end, per_row, buf_len);
                        let b = read(&engines[1], &start, &end, per_row, buf_len);
                        assert_same(&a, &b, &format!("seed {seed} step {step}: rows {lo}..{hi}, per_row {per_row}, {buf_len}-byte answers"));
                        reads += 1;
                    }
                }
                if !batch.is_empty() {
                    for e in &engines {
                        e.put_batch(T, batch.as_batch()).unwrap();
                    }
                }
            }
            let (start, end) = row_range(0, MAX_ROWID);
            assert_same(&read(&engines[0], &start, &end, 0, 1 << 16), &read(&engines[1], &start, &end, 0, 1 << 16), &format!("seed {seed}"));
            assert!(reads > 20);
            assert!(packs_in(&engines[0]) > 0, "seed {seed}: no pack was written");
            assert_eq!(packs_in(&engines[1]), 0);
            assert_eq!(engines[0].cf_info(T).unwrap().next_rowid, engines[1].cf_info(T).unwrap().next_rowid);
        }
    }
}
