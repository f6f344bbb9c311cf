//! Re-packing: the later first versions of a packed group's rows folded
//! back into its pack.
//!
//! A pack is written once, by the batch that made its rows (`packing.rs`).
//! What changes a packed row's version 0 afterwards is a row key beside
//! the pack: VACUUM's frozen copy, or the marker (`pack::HIDDEN`) that a
//! removal of the version writes. Every scan pays RocksDB's step for each
//! such key, and markers are puts that compaction never drops: after a
//! VACUUM that removed a fifth of a packed table's rows, the engine's whole
//! scan of it took 33-39 ms without a re-pack and 19-21 ms with one
//! (src/ipc/HOT_PATH.md §59). Re-packing a group writes its pack anew with
//! those keys folded in (a frozen copy replaces its packed entry; a marker
//! goes, with the entry it hid) and deletes the keys, in one RocksDB write.
//!
//! Owns [`Engine::repack_cf`]; calls RocksDB (an iterator over the CF,
//! point reads of packs, writes) and `crate::pack`. VACUUM asks for it
//! after its pass (`src/tam/maintenance.rs`).
//!
//! Invariants:
//! * Re-packing changes how rows are stored, never what a read returns:
//!   the view (`row_view`) of a group is the same before and after.
//! * A pack still holds version 0 entries only (`packing.rs`: the delete
//!   of a version 0 reads the pack to know whether it must write a
//!   marker); row keys of later versions stay as they are.
//! * No write of the CF runs while a group is re-packed: `put_batch` holds
//!   the table's `packs_stay` lock shared from its read of packs to its
//!   write, re-packing holds it exclusively from its read of the group to
//!   its write. (A delete of a version 0 that read the pack before a
//!   re-pack folded the row in would write a RocksDB delete, which does
//!   not reach into the new pack, and the row would come back.)
//! * Not logged: the rows are the same, so a crash that loses the write
//!   loses nothing; the write is one batch into one memtable, which a
//!   flush persists whole or not at all. Replay after a crash writes row
//!   keys again on top, which shadow packed entries as always, and a
//!   replayed delete of a version 0 reads the pack it finds.

use std::sync::atomic::Ordering;
use std::sync::PoisonError;

use rocksdb::WriteBatch;

use super::cf_registry::TableEntry;
use super::error::rocks_with;
use super::scan::range_read_options;
use super::{Engine, EngineError};
use crate::keys::{decode_row_key, row_range, RESERVED_KEY_PREFIX, ROW_KEY_LEN};
use crate::pack::{decode_pack_key, group_base, group_rows, is_hidden, pack_key, Pack, PackBuilder, PACK_KEY_LEN};
use crate::protocol::CfRef;

use super::packing::FOLDED_ROWS_KEY;

/// What [`Engine::repack_cf`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Repacked {
    /// Groups whose pack was written anew (or deleted: every row gone).
    pub groups: u64,
    /// Row keys folded into packs and deleted (frozen copies and markers).
    pub keys: u64,
}

impl Engine {
    /// Re-packs every packed group of table `cf` beside whose pack a row
    /// key of a version 0 lies. The keys it deletes stay RocksDB delete
    /// markers until compaction; a flush writes them into an SST file that
    /// is mostly deletes, which RocksDB compacts (`delete_markers.rs`).
    pub fn repack_cf(&self, cf: CfRef) -> Result<Repacked, EngineError> {
        let entry = self.lookup(cf).ok_or(EngineError::NoSuchCf(cf))?;
        let mut done = Repacked::default();
        let floor = entry.pack_floor.load(Ordering::Acquire);
        if floor == u64::MAX {
            return Ok(done);
        }
        for base in self.groups_to_repack(cf, &entry, group_base(floor))? {
            match self.repack_group(cf, &entry, base) {
                Ok(keys) => {
                    done.groups += u64::from(keys > 0);
                    done.keys += keys;
                }
                // Dropped meanwhile: nothing left to tidy.
                Err(EngineError::NoSuchCf(_)) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// The groups from `first` on that have a pack and a row key of a
    /// version 0 beside it, ascending. Unlocked: a hint that each group's
    /// re-pack checks again.
    fn groups_to_repack(&self, cf: CfRef, entry: &TableEntry, first: u64) -> Result<Vec<u64>, EngineError> {
        let handle = self.handle(cf, entry)?;
        let start = pack_key(first);
        let end = [RESERVED_KEY_PREFIX];
        let mut iter = self.db.raw_iterator_cf_opt(&handle, range_read_options(&start, &end));
        iter.seek(start);
        let mut groups = Vec::new();
        // The group of the last pack passed, and whether a key of a
        // version 0 of its rows followed it.
        let mut open: Option<(u64, bool)> = None;
        while let Some(key) = iter.key() {
            if key.len() == PACK_KEY_LEN {
                if let Some((base, true)) = open {
                    groups.push(base);
                }
                open = decode_pack_key(key).map(|base| (base, false));
            } else if let (Some((base, found)), Some((rowid, 0))) = (open.as_mut(), decode_row_key(key)) {
                if group_base(rowid) == *base {
                    *found = true;
                }
            }
            iter.next();
        }
        iter.status().map_err(rocks_with(|| format!("find the groups of {} to re-pack", entry.name)))?;
        if let Some((base, true)) = open {
            groups.push(base);
        }
        Ok(groups)
    }

    /// Re-packs group `base` under the table's `packs_stay` lock; returns
    /// the row keys it folded (0: nothing to do).
    fn repack_group(&self, cf: CfRef, entry: &TableEntry, base: u64) -> Result<u64, EngineError> {
        let _no_writers = entry.packs_stay.write().unwrap_or_else(PoisonError::into_inner);
        let handle = self.handle(cf, entry)?;
        let what = || format!("re-pack rows {base}.. of {}", entry.name);
        let Some(bytes) = self.db.get_pinned_cf(&handle, pack_key(base)).map_err(rocks_with(what))? else {
            return Ok(0);
        };
        let pack = Pack::parse(base, &bytes).map_err(|e| EngineError::Corruption(format!("{}: pack of rows {base}..: {e}", entry.name)))?;
        // The group's row keys of a version 0, ascending: (rowid, key, the
        // value, or None for a marker).
        let (lo, hi) = row_range(base, base + group_rows(base));
        let mut iter = self.db.raw_iterator_cf_opt(&handle, range_read_options(&lo, &hi));
        iter.seek(lo);
        let mut changes: Vec<(u64, [u8; ROW_KEY_LEN], Option<Vec<u8>>)> = Vec::new();
        while let Some((key, value)) = iter.item() {
            if let (Some((rowid, 0)), Ok(key)) = (decode_row_key(key), <[u8; ROW_KEY_LEN]>::try_from(key)) {
                changes.push((rowid, key, (!is_hidden(value)).then(|| value.to_vec())));
            }
            iter.next();
        }
        iter.status().map_err(rocks_with(what))?;
        drop(iter);
        if changes.is_empty() {
            return Ok(0);
        }
        let (rebuilt, rebuilt_len) = merge(base, &pack, &changes)
            .ok_or_else(|| EngineError::Corruption(format!("{}: pack of rows {base}.. and its row keys do not merge", entry.name)))?;
        // The planner's estimate of packed rows beyond their packs' keys.
        let (before, after) = (pack.len().saturating_sub(1) as u64, rebuilt_len.saturating_sub(1) as u64);
        let adjust = |n: u64| (n + after).saturating_sub(before);
        let folded = entry.folded_rows.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(adjust(n))).map_or(0, adjust);
        let build = || {
            let mut write = WriteBatch::default();
            write.put_cf(&handle, FOLDED_ROWS_KEY, folded.to_le_bytes());
            if rebuilt_len == 0 {
                write.delete_cf(&handle, pack_key(base));
            } else {
                write.put_cf(&handle, pack_key(base), &rebuilt);
            }
            for (_, key, _) in &changes {
                write.delete_cf(&handle, key);
            }
            write
        };
        self.write_batch(build, what)?;
        Ok(changes.len() as u64)
    }
}

/// The bytes and entry count of the pack of group `base` that holds the
/// entries of `pack` (each a version 0) with `changes` (ascending rowids of
/// the group, at most one each) applied: a value replaces or adds the
/// row's entry, a marker (`None`) removes it. `None` if the pack holds
/// another version (no pack may) or an entry would not fit.
fn merge(base: u64, pack: &Pack<'_>, changes: &[(u64, [u8; ROW_KEY_LEN], Option<Vec<u8>>)]) -> Option<(Vec<u8>, usize)> {
    let mut builder = PackBuilder::new(base);
    let mut ok = true;
    let mut put = |builder: &mut PackBuilder, rowid: u64, value: Option<&[u8]>| {
        if let Some(value) = value {
            ok &= builder.push(rowid, 0, value);
        }
    };
    let mut c = 0;
    for i in 0..pack.len() {
        let (rowid, version, value) = pack.entry(i);
        if version != 0 {
            return None;
        }
        while let Some((changed, _, new)) = changes.get(c).filter(|(changed, _, _)| *changed < rowid) {
            put(&mut builder, *changed, new.as_deref());
            c += 1;
        }
        match changes.get(c) {
            Some((changed, _, new)) if *changed == rowid => {
                put(&mut builder, rowid, new.as_deref());
                c += 1;
            }
            _ => put(&mut builder, rowid, Some(value)),
        }
    }
    for (rowid, _, new) in &changes[c..] {
        put(&mut builder, *rowid, new.as_deref());
    }
    let len = builder.len();
    ok.then(|| (builder.finish(), len))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{assert_same, config, scan_all, value, xorshift, Rows, TempDir, T};
    use super::*;
    use crate::keys::{row_key, MAX_ROWID};
    use crate::protocol::BatchBuilder;
    use crate::row::{RowHeader, FLAG_FROZEN};

    fn open(dir: &TempDir, pack: bool) -> Engine {
        let mut cfg = config(dir);
        cfg.pack_new_rows = pack;
        let engine = Engine::open(cfg).expect("open engine");
        if engine.lookup(T).is_none() {
            engine.create_cf(T).unwrap();
        }
        engine
    }

    fn frozen(rowid: u64) -> Vec<u8> {
        let header = RowHeader { flags: FLAG_FROZEN, cid: 0, xid: 2, moved_to: 0 };
        [header.encode().as_slice(), &value(rowid, 9)[crate::row::HEADER_LEN..]].concat()
    }

    fn all(engine: &Engine) -> Rows {
        let (lo, hi) = row_range(0, MAX_ROWID);
        scan_all(engine, T, &lo, &hi, 4096, 0).0
    }

    /// Every row read alone, its newest versions first, as a fetch by TID
    /// reads it.
    fn one_by_one(engine: &Engine, rows: std::ops::Range<u64>) -> Vec<Rows> {
        rows.map(|rowid| {
            let (lo, hi) = row_range(rowid, rowid + 1);
            scan_all(engine, T, &lo, &hi, 4096, 4).0
        })
        .collect()
    }

    /// RocksDB's own entries of the table: (packs, row keys of a version
    /// 0 in a packed group).
    fn raw_counts(engine: &Engine) -> (usize, usize) {
        let handle = engine.db.cf_handle(&engine.table_entry_name(T)).unwrap();
        let mut iter = engine.db.raw_iterator_cf(&handle);
        iter.seek_to_first();
        let (mut packs, mut beside) = (0, 0);
        let mut group = None;
        while let Some(key) = iter.key() {
            if key.len() == PACK_KEY_LEN {
                packs += 1;
                group = decode_pack_key(key);
            } else if let Some((rowid, 0)) = decode_row_key(key) {
                beside += usize::from(group == Some(group_base(rowid)));
            }
            iter.next();
        }
        (packs, beside)
    }

    /// VACUUM's shapes on a packed table: frozen copies of a few rows, the
    /// removal of others (markers), a later version kept as a row key.
    /// Re-packing folds the copies and markers (and only those) and every
    /// read is what it was; a later delete of a folded row hides it, and
    /// a group whose rows are all gone loses its pack.
    #[test]
    fn frozen_copies_and_markers_fold_into_packs() {
        let dir = TempDir::new();
        let engine = open(&dir, true);
        let mut load = BatchBuilder::new();
        for rowid in 0..200 {
            load.push(&row_key(rowid, 0), &value(rowid, 20)).unwrap();
        }
        engine.put_batch(T, load.as_batch()).unwrap();
        let mut vacuum = BatchBuilder::new();
        for rowid in [3, 4, 70, 100] {
            vacuum.push(&row_key(rowid, 0), &frozen(rowid)).unwrap();
        }
        for rowid in [5, 71, 199] {
            vacuum.push(&row_key(rowid, 0), &[]).unwrap();
        }
        // Group 128..192 loses every row.
        for rowid in 128..192 {
            vacuum.push(&row_key(rowid, 0), &[]).unwrap();
        }
        vacuum.push(&row_key(9, 1), &value(9, 3)).unwrap();
        engine.put_batch(T, vacuum.as_batch()).unwrap();
        let packs_before = raw_counts(&engine).0;
        assert_eq!(raw_counts(&engine).1, 4 + 3 + 64, "copies and markers lie beside the packs");
        let (before, rows_before) = (all(&engine), one_by_one(&engine, 0..210));

        let done = engine.repack_cf(T).unwrap();
        assert_eq!(done, Repacked { groups: 4, keys: 4 + 3 + 64 });
        assert_eq!(raw_counts(&engine), (packs_before - 1, 0), "folded; the empty group has no pack");
        assert_eq!(all(&engine), before);
        assert_eq!(one_by_one(&engine, 0..210), rows_before);
        assert_eq!(engine.repack_cf(T).unwrap(), Repacked::default(), "nothing left to fold");

        // A folded row is in the pack now: its delete writes a marker.
        let mut delete = BatchBuilder::new();
        delete.push(&row_key(70, 0), &[]).unwrap();
        engine.put_batch(T, delete.as_batch()).unwrap();
        let handle = engine.db.cf_handle(&engine.table_entry_name(T)).unwrap();
        assert_eq!(engine.db.get_cf(&handle, row_key(70, 0)).unwrap().as_deref(), Some(crate::pack::HIDDEN));
        assert!(!all(&engine).iter().any(|(k, _)| decode_row_key(k) == Some((70, 0))));
        // And it survives a reopening, as every write does once flushed.
        engine.flush_cf(T).unwrap();
        let after = all(&engine);
        drop(handle);
        drop(engine);
        let engine = open(&dir, true);
        assert_eq!(all(&engine), after);
    }

    /// Random loads, freezes, removals of first and later versions, new
    /// versions, flushes and re-packs, applied to an engine that packs and
    /// to one that does not: every read returns the same, and after each
    /// re-pack no row key of a version 0 is left beside a pack.
    #[test]
    fn repacked_tables_read_as_unpacked_ones() {
        for seed in 1..=6u64 {
            let (dir_a, dir_b) = (TempDir::new(), TempDir::new());
            let engines = [open(&dir_a, true), open(&dir_b, false)];
            let mut next = xorshift(seed * 0x2545_F491);
            let mut end = 0u64;
            let mut repacks = 0;
            for step in 0..250 {
                let mut batch = BatchBuilder::new();
                match next(10) {
                    0..=1 => {
                        let n = 1 + next(300);
                        for rowid in end..end + n {
                            batch.push(&row_key(rowid, 0), &value(rowid, 5 + (rowid % 40) as usize)).unwrap();
                        }
                        end += n;
                    }
                    2..=3 if end > 0 => {
                        let first = next(end);
                        for rowid in first..(first + next(80)).min(end) {
                            batch.push(&row_key(rowid, 0), &frozen(rowid)).unwrap();
                        }
                    }
                    4..=5 if end > 0 => {
                        for _ in 0..1 + next(20) {
                            let rowid = next(end);
                            let version = if next(3) == 0 { 1 + next(3) as u32 } else { 0 };
                            batch.push(&row_key(rowid, version), &[]).unwrap();
                        }
                    }
                    6 if end > 0 => {
                        for _ in 0..1 + next(10) {
                            let rowid = next(end);
                            batch.push(&row_key(rowid, 1 + next(3) as u32), &value(rowid + step, 7)).unwrap();
                        }
                    }
                    7 => {
                        for e in &engines {
                            e.flush_cf(T).unwrap();
                        }
                    }
                    _ => {
                        let done = engines[0].repack_cf(T).unwrap();
                        repacks += usize::from(done.groups > 0);
                        assert_eq!(raw_counts(&engines[0]).1, 0, "seed {seed} step {step}");
                        assert_same(&all(&engines[0]), &all(&engines[1]), &format!("seed {seed} step {step}"));
                    }
                }
                if !batch.is_empty() {
                    for e in &engines {
                        e.put_batch(T, batch.as_batch()).unwrap();
                    }
                }
            }
            assert!(repacks > 3, "seed {seed}: {repacks} re-packs did something");
            assert_same(&all(&engines[0]), &all(&engines[1]), &format!("seed {seed}"));
            assert_eq!(one_by_one(&engines[0], 0..end + 2), one_by_one(&engines[1], 0..end + 2), "seed {seed}");
        }
    }

    /// Writers and re-packs at once: a thread re-packs over and over while
    /// another removes and freezes rows of packed groups. With the lock, no
    /// removed row comes back (a delete that read the pack before a re-pack
    /// folded its row would have written a RocksDB delete the new pack
    /// ignores).
    #[test]
    fn repacks_beside_writers_lose_no_delete() {
        for seed in 1..=5u64 {
            let (dir_a, dir_b) = (TempDir::new(), TempDir::new());
            let packed = std::sync::Arc::new(open(&dir_a, true));
            let plain = open(&dir_b, false);
            let mut load = BatchBuilder::new();
            for rowid in 0..4000 {
                load.push(&row_key(rowid, 0), &value(rowid, 30)).unwrap();
            }
            packed.put_batch(T, load.as_batch()).unwrap();
            plain.put_batch(T, load.as_batch()).unwrap();
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let repacker = {
                let (engine, stop) = (packed.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut rounds = 0u32;
                    while !stop.load(Ordering::Relaxed) && rounds < 100_000 {
                        engine.repack_cf(T).unwrap();
                        rounds += 1;
                    }
                })
            };
            let mut next = xorshift(seed * 77);
            for _ in 0..400 {
                let mut batch = BatchBuilder::new();
                let first = next(3990);
                for rowid in first..first + 8 {
                    if next(2) == 0 {
                        batch.push(&row_key(rowid, 0), &frozen(rowid)).unwrap();
                    } else {
                        batch.push(&row_key(rowid, 0), &[]).unwrap();
                    }
                }
                packed.put_batch(T, batch.as_batch()).unwrap();
                plain.put_batch(T, batch.as_batch()).unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            repacker.join().unwrap();
            packed.repack_cf(T).unwrap();
            assert_same(&all(&packed), &all(&plain), &format!("seed {seed}: after writers and re-packs at once"));
        }
    }
}

