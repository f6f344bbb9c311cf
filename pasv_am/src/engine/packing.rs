//! Where packs come from: a batch of new rows written as packs of up to
//! `pack::PACK_ROWS` rows; which later deletes must hide a packed entry;
//! the per-CF pack floor, below which no group has a pack.
//!
//! Owns the packing rule for `put_batch`, the pack floor (kept in the meta
//! CF), the count of packed rows, and how a delete is written at or above
//! the floor. Calls RocksDB (meta CF writes and flushes, reads of a
//! group's pack) and `crate::pack`.
//!
//! Invariants:
//! * A pack holds version 0 of rows of a group no write touched before,
//!   written by one batch that writes nothing else: the first write of new
//!   rows (a bulk INSERT or COPY, or its replay). So only the delete of a
//!   version 0 can meet a packed entry, and no batch overwrites a pack.
//!   (A re-pack writes a pack anew, with version 0 entries only:
//!   `repacking.rs`.)
//! * The floor is durable, and at or below every pack's group, before any
//!   pack is written: a crash cannot leave a pack that a delete after
//!   recovery would miss. A delete of a version 0 at or above the floor
//!   that its group's pack holds is written as `pack::HIDDEN` (a row key
//!   hides the packed entry; a RocksDB delete would not reach into the
//!   pack); the pack is read when the delete is written, and every write
//!   before it (the pack's own among them: a row is deleted only after it
//!   was written, and replay keeps commit order) is already applied. No
//!   re-pack runs between that read and the write (the table's
//!   `packs_stay` lock).
//! * Packing changes how rows are stored, never what a read returns
//!   (`row_view`'s rules).

use std::sync::atomic::Ordering;
use std::sync::PoisonError;

use rocksdb::WriteBatch;

use super::cf_registry::TableEntry;
use super::error::rocks_with;
use super::{Engine, EngineError};
use crate::keys::{decode_row_key, RESERVED_KEY_PREFIX};
use crate::pack::{group_base, group_rows, pack_key, Pack, PackBuilder, HIDDEN};
use crate::protocol::EntryBatch;

/// Meta CF key prefix of a CF's pack floor (followed by the CF name; u64
/// little-endian). No key: the CF has no pack.
const PACK_FLOOR_PREFIX: &[u8] = b"pack_floor.";

pub(super) fn pack_floor_key(cf_name: &str) -> Vec<u8> {
    [PACK_FLOOR_PREFIX, cf_name.as_bytes()].concat()
}

/// Table CF key of the rows packs hold beyond their keys (u64
/// little-endian): the entries of the view that RocksDB's key count misses.
/// Put by the write of every batch that packs, it reaches disk with those
/// packs, and a replay that writes them again counts them again. An
/// estimate for the planner's sizes (`CfInfo::entries`): two batches may
/// put their totals in the other order, and rows hidden later still count.
pub(super) const FOLDED_ROWS_KEY: &[u8] = &[RESERVED_KEY_PREFIX, b'f', b'o', b'l', b'd', b'e', b'd'];

/// Fewer rows of a group than this stay row keys: a pack saves a
/// scan one RocksDB step per row it holds beyond the first, and costs a
/// read of one row an extra seek.
pub(super) const MIN_PACK_ROWS: usize = 8;

/// A group of a batch to write as one pack: its `len` entries are the
/// batch's entries of rows of the group, the first at index `first` and
/// the last at `last`; entries of older rows may lie between them (an
/// UPDATE's batch interleaves each new row with its old row's changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PackRun {
    pub(super) first: usize,
    pub(super) last: usize,
    pub(super) len: usize,
    pub(super) base: u64,
}

/// The groups of `batch` to write as packs. The batch's *new rows* are
/// its entries at or past `size_end` (one past the highest row written
/// before the batch); entries of older rows (an UPDATE's changes of the
/// rows it moves, their pruned versions) are written as they come and
/// pack nothing. Nothing packs unless every entry of a new row is its
/// version 0, not frozen, each rowid once and ascending; then every group
/// with at least [`MIN_PACK_ROWS`] new rows in the batch and none written
/// before it (its first rowid at or past `size_end`: so the group has no
/// pack yet) packs. VACUUM's freeze rewrites version 0 of rows that exist,
/// in the same shape; those are older rows, whose packed copies would lose
/// to the row keys the rows may already have.
///
/// A batch that also changes older rows packs only the groups it fills
/// whole (a bulk UPDATE's, past its first group). An OLTP transaction's
/// few moved rows stay row keys: such rows are hot, and each later move
/// of a packed row leaves a marker that stays until the table is
/// rewritten (`rows_to_hide`).
pub(super) fn packable_groups(batch: EntryBatch<'_>, size_end: u64) -> Vec<PackRun> {
    let mut runs = Vec::new();
    let mut previous: Option<u64> = None;
    let mut run: Option<PackRun> = None;
    let mut older = false;
    for (i, (key, value)) in batch.iter().enumerate() {
        let Some((rowid, version)) = decode_row_key(key) else { return Vec::new() };
        if rowid < size_end {
            older = true;
            continue;
        }
        let frozen = crate::row::RowHeader::decode(value).map_or(true, |(h, _)| h.flags & crate::row::FLAG_FROZEN != 0);
        if version != 0 || frozen || previous.is_some_and(|p| rowid <= p) {
            return Vec::new();
        }
        previous = Some(rowid);
        let base = group_base(rowid);
        match run.as_mut() {
            Some(r) if r.base == base => {
                r.len += 1;
                r.last = i;
            }
            _ => {
                runs.extend(run.take());
                run = Some(PackRun { first: i, last: i, len: 1, base });
            }
        }
    }
    runs.extend(run);
    runs.retain(|r| r.base >= size_end && if older { r.len as u64 == group_rows(r.base) } else { r.len >= MIN_PACK_ROWS });
    runs
}

impl Engine {
    /// Makes the CF's pack floor at most `base`, durably, before a pack of
    /// that group is written.
    pub(super) fn lower_pack_floor(&self, entry: &TableEntry, base: u64) -> Result<(), EngineError> {
        if entry.pack_floor.load(Ordering::Acquire) <= base {
            return Ok(());
        }
        let _lowering = entry.floor_raise.lock().unwrap_or_else(PoisonError::into_inner);
        if entry.pack_floor.load(Ordering::Acquire) <= base {
            return Ok(());
        }
        self.persist_pack_floor(&entry.name, base)?;
        entry.pack_floor.store(base, Ordering::Release);
        Ok(())
    }

    fn persist_pack_floor(&self, name: &str, floor: u64) -> Result<(), EngineError> {
        self.persist_meta(&pack_floor_key(name), &floor.to_le_bytes(), "persist a pack floor")
    }

    /// The rowids whose delete in `batch` must be written as a marker,
    /// ascending: deletes of a version 0 that a pack of the CF holds. Each
    /// group's pack is read once. Only rows written packed need one: a
    /// marker is a put, which compaction never drops, so writing one for
    /// every delete at or above the floor piled them up without bound (an
    /// UPDATE moves a row to a new rowid, and its old version 0 is deleted
    /// later: TPC-C's hot district rows gave a marker per update, and the
    /// prepared mix's sequential scans of them stepped over thousands).
    pub(super) fn rows_to_hide(
        &self,
        handle: &impl rocksdb::AsColumnFamilyRef,
        batch: EntryBatch<'_>,
        pack_floor: u64,
        name: &str,
    ) -> Result<Vec<u64>, EngineError> {
        let mut hide = Vec::new();
        // The group last read and the rowids of version 0 its pack holds.
        let mut group: Option<(u64, Vec<u64>)> = None;
        for (key, value) in batch.iter() {
            let Some((rowid, 0)) = decode_row_key(key).filter(|_| value.is_empty()) else { continue };
            if rowid < pack_floor {
                continue;
            }
            let base = group_base(rowid);
            if group.as_ref().is_none_or(|(b, _)| *b != base) {
                group = Some((base, self.packed_first_versions(handle, base, name)?));
            }
            if group.as_ref().is_some_and(|(_, rows)| rows.binary_search(&rowid).is_ok()) {
                hide.push(rowid);
            }
        }
        hide.sort_unstable();
        Ok(hide)
    }

    /// The rowids whose version 0 the pack of group `base` holds (none
    /// without a pack), ascending.
    fn packed_first_versions(&self, handle: &impl rocksdb::AsColumnFamilyRef, base: u64, name: &str) -> Result<Vec<u64>, EngineError> {
        let Some(bytes) = self
            .db
            .get_pinned_cf(handle, pack_key(base))
            .map_err(rocks_with(|| format!("read the pack of rows {base}.. of {name}")))?
        else {
            return Ok(Vec::new());
        };
        let pack = Pack::parse(base, &bytes).map_err(|e| EngineError::Corruption(format!("{name}: pack of rows {base}..: {e}")))?;
        Ok((0..pack.len()).map(|i| pack.entry(i)).filter(|&(_, version, _)| version == 0).map(|(rowid, _, _)| rowid).collect())
    }
}

/// The RocksDB write of `batch`: the groups in `packs` (from
/// [`packable_groups`]) as packs, every other entry as its own key (an
/// empty value deletes it), and the deletes of version 0 of the rowids in
/// `hide` (ascending, from [`Engine::rows_to_hide`]) as markers. A CF
/// without packs passes no group and no rowid to hide: every entry is then
/// written as it comes. `folded`: the
/// CF's [`FOLDED_ROWS_KEY`] count with `packs` in it, put when `packs` is
/// not empty.
pub(super) fn build_write(
    handle: &impl rocksdb::AsColumnFamilyRef,
    batch: EntryBatch<'_>,
    packs: &[PackRun],
    hide: &[u64],
    folded: u64,
) -> WriteBatch {
    let mut write = WriteBatch::with_capacity_bytes(batch.encoded_len() + 16 * batch.len());
    if !packs.is_empty() {
        write.put_cf(handle, FOLDED_ROWS_KEY, folded.to_le_bytes());
    }
    let mut next_pack = packs.iter().copied().peekable();
    let mut pack: Option<(PackBuilder, PackRun)> = None;
    for (i, (key, value)) in batch.iter().enumerate() {
        if let Some(run) = next_pack.next_if(|run| run.first == i) {
            pack = Some((PackBuilder::new(run.base), run));
        }
        if let Some((builder, run)) = pack.as_mut() {
            // packable_groups gave a group of new rows in order; between
            // its first and last entries, every entry of a row of the
            // group is one of them (the others are older rows').
            if let Some((rowid, version)) = decode_row_key(key).filter(|&(rowid, _)| group_base(rowid) == run.base) {
                let pushed = builder.push(rowid, version, value);
                debug_assert!(pushed);
                if i == run.last {
                    if let Some((done, _)) = pack.take() {
                        write.put_cf(handle, pack_key(done.base()), done.finish());
                    }
                }
                continue;
            }
        }
        if value.is_empty() {
            match decode_row_key(key) {
                // An empty value deletes the key (see protocol::Request::PutBatch).
                Some((rowid, 0)) if hide.binary_search(&rowid).is_ok() => write.put_cf(handle, key, HIDDEN),
                _ => write.delete_cf(handle, key),
            }
        } else {
            write.put_cf(handle, key, value);
        }
    }
    write
}

/// Entries the packs of `runs` fold away: their rows beyond each pack's key.
pub(super) fn folded_rows(runs: &[PackRun]) -> u64 {
    runs.iter().map(|r| r.len as u64 - 1).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::row_key;
    use crate::protocol::{BatchBuilder, CfRef};

    fn groups_of(rows: &[(u64, u32, bool)], size_end: u64) -> Vec<(usize, usize)> {
        let mut batch = BatchBuilder::new();
        for &(rowid, version, put) in rows {
            let value = if put { crate::engine::test_support::value(rowid, 3) } else { Vec::new() };
            batch.push(&row_key(rowid, version), &value).unwrap();
        }
        packable_groups(batch.as_batch(), size_end).into_iter().map(|r| (r.first, r.len)).collect()
    }

    #[test]
    fn groups_of_new_rows_pack() {
        let new = |range: std::ops::Range<u64>| range.map(|r| (r, 0, true)).collect::<Vec<_>>();
        assert_eq!(groups_of(&new(0..64), 0), vec![(0, 64)]);
        // Block 1 (rowids 291..582) starts a group; the groups of block 0
        // end at 64, 128, 192, 256 and 291.
        assert_eq!(groups_of(&new(250..400), 0), vec![(6, 35), (41, 64), (105, 45)]);
        assert_eq!(groups_of(&new(260..400), 260), vec![(31, 64), (95, 45)], "a group written before stays as it is");
        assert_eq!(groups_of(&new(0..7), 0), Vec::<(usize, usize)>::new(), "too few rows");
        let mut gap = new(0..130);
        gap.remove(100);
        assert_eq!(groups_of(&gap, 0), vec![(0, 64), (64, 63), (127, 2)].into_iter().filter(|g| g.1 >= MIN_PACK_ROWS).collect::<Vec<_>>());
        // Any other kind of entry of a new row, or new rows out of order,
        // pack nothing.
        let mut update = new(0..128);
        update.push((500, 1, true));
        assert!(groups_of(&update, 0).is_empty());
        let mut delete = new(0..128);
        delete.push((500, 0, false));
        assert!(groups_of(&delete, 0).is_empty());
        let mut unordered = new(0..128);
        unordered.swap(3, 4);
        assert!(groups_of(&unordered, 0).is_empty());
        let mut twice = new(0..128);
        twice.insert(10, (9, 0, true));
        assert!(groups_of(&twice, 0).is_empty());
        // Entries of older rows pack nothing and stop nothing: an UPDATE
        // moving rows 0..70 (a marker and a pruned version each) to new
        // rows 1000.. interleaves them.
        let mut moved = Vec::new();
        for (i, old) in (0..70u64).enumerate() {
            moved.push((old, 1, true));
            moved.push((old, 0, false));
            moved.push((1000 + i as u64, 0, true));
        }
        // Rowids 1000.. are in block 3 (873..1164): groups at 1001 and 1065.
        let first_of = |rowid: u64| moved.iter().position(|&(r, _, _)| r == rowid).unwrap();
        assert_eq!(groups_of(&moved, 1000), vec![(first_of(1001), 64)], "the group of row 1000 was partly written before");
        assert_eq!(groups_of(&moved, 1000).len(), 1);
        assert_eq!(groups_of(&moved, 999), vec![(first_of(1001), 64)]);
        // With older rows' entries, a group packs only whole: an OLTP
        // transaction's ten moved rows do not, even from a group's start.
        let oltp: Vec<(u64, u32, bool)> = (0..10u64).flat_map(|i| [(i * 7, 1, true), (1001 + i, 0, true)]).collect();
        assert!(groups_of(&oltp, 1000).is_empty());
        let alone: Vec<(u64, u32, bool)> = (0..10u64).map(|i| (1001 + i, 0, true)).collect();
        assert_eq!(groups_of(&alone, 1000), vec![(0, 10)], "new rows alone pack from eight on");
        // Row 100 is below the size end: written as it comes. Its group's
        // other rows were not all new; of the next groups, the whole one
        // packs and the part of one (192..200) does not.
        assert_eq!(groups_of(&new(100..200), 101), vec![(28, 64)]);
    }

    /// A delete of a version 0 is a marker only where a pack holds the
    /// row: markers are puts, never compacted away, and one for every row
    /// deleted above the floor piled up without bound.
    /// An engine in `dir` that packs new rows (`pack`) or not, with the
    /// table `T`.
    fn engine_with_table(dir: &crate::engine::test_support::TempDir, pack: bool) -> Engine {
        let mut cfg = crate::engine::test_support::config(dir);
        cfg.pack_new_rows = pack;
        let engine = Engine::open(cfg).unwrap();
        engine.create_cf(crate::engine::test_support::T).unwrap();
        engine
    }

    #[test]
    fn only_packed_rows_are_hidden_by_markers() {
        use crate::engine::test_support::{put_rows, TempDir, T};
        let dir = TempDir::new();
        let engine = engine_with_table(&dir, true);
        put_rows(&engine, T, 0..20);
        put_rows(&engine, T, [40]);
        let mut deletes = BatchBuilder::new();
        for rowid in [5, 40] {
            deletes.push(&row_key(rowid, 0), &[]).unwrap();
        }
        engine.put_batch(T, deletes.as_batch()).unwrap();
        let handle = engine.db.cf_handle(&engine.table_entry_name(T)).unwrap();
        let raw = |rowid| engine.db.get_cf(&handle, row_key(rowid, 0)).unwrap();
        assert_eq!(raw(5).as_deref(), Some(HIDDEN), "row 5 is packed: its delete hides it");
        assert_eq!(raw(40), None, "row 40 was written alone: its delete is RocksDB's");
        assert!(engine.db.get_cf(&handle, pack_key(0)).unwrap().is_some());
    }

    /// An UPDATE's batch (per moved row: a marker on the old row, its
    /// pruned version 0, the new row) packs its new rows, and every read
    /// gives what an engine that packs nothing gives, also after later
    /// statements delete and move some of the packed rows.
    #[test]
    fn an_updates_new_rows_pack_and_read_as_row_keys() {
        use crate::engine::test_support::{put_rows, scan_all, value, TempDir, T};
        use crate::keys::row_range;
        let mut reads = Vec::new();
        for pack in [false, true] {
            let dir = TempDir::new();
            let engine = engine_with_table(&dir, pack);
            put_rows(&engine, T, 0..200);
            // Rows 0, 2, .., 148 move to 291..366 (block 1: the group at 291
            // is filled whole, the one at 355 is not).
            let mut update = BatchBuilder::new();
            for (i, old) in (0..150u64).step_by(2).enumerate() {
                let new = 291 + i as u64;
                update.push(&row_key(old, 1), &value(old, 5)).unwrap();
                update.push(&row_key(old, 0), &[]).unwrap();
                update.push(&row_key(new, 0), &value(new, 7)).unwrap();
            }
            engine.put_batch(T, update.as_batch()).unwrap();
            let handle = engine.db.cf_handle(&engine.table_entry_name(T)).unwrap();
            assert_eq!(engine.db.get_cf(&handle, pack_key(291)).unwrap().is_some(), pack, "group 291 packed: {pack}");
            assert!(engine.db.get_cf(&handle, pack_key(355)).unwrap().is_none(), "a group filled in part stays row keys");
            let mut later = BatchBuilder::new();
            for rowid in [291u64, 300, 360] {
                later.push(&row_key(rowid, 0), &[]).unwrap();
            }
            later.push(&row_key(310, 1), &value(310, 9)).unwrap();
            later.push(&row_key(310, 0), &[]).unwrap();
            later.push(&row_key(400, 0), &value(400, 3)).unwrap();
            engine.put_batch(T, later.as_batch()).unwrap();
            let (lo, hi) = row_range(0, 1000);
            let all = scan_all(&engine, T, &lo, &hi, 4096, 0).0;
            // One row at a time, newest versions first, as a fetch by TID reads.
            let mut one_by_one = Vec::new();
            for rowid in 0..420 {
                let (lo, hi) = row_range(rowid, rowid + 1);
                one_by_one.push(scan_all(&engine, T, &lo, &hi, 4096, 4).0);
            }
            reads.push((all, one_by_one));
        }
        assert!(!reads[0].0.is_empty());
        assert_eq!(reads[0], reads[1]);
    }

    /// The planner's entries count every packed row, after a reopening
    /// and in a copy too (one RocksDB key a pack once shrank them 64-fold).
    #[test]
    fn a_table_of_packs_counts_its_rows() {
        use crate::engine::test_support::{config, put_rows, TempDir, T};
        let dir = TempDir::new();
        let mut cfg = config(&dir);
        cfg.pack_new_rows = true;
        let engine = Engine::open(cfg.clone()).unwrap();
        engine.create_cf(T).unwrap();
        put_rows(&engine, T, 0..640);
        put_rows(&engine, T, 640..650);
        let rows = |engine: &Engine, cf| engine.cf_info(cf).unwrap().entries;
        assert!((650..=660).contains(&rows(&engine, T)), "{} entries", rows(&engine, T));
        engine.flush_cf(T).unwrap();
        drop(engine);
        let engine = Engine::open(cfg).unwrap();
        assert!((650..=660).contains(&rows(&engine, T)), "{} entries after reopening", rows(&engine, T));
        let copy = CfRef { db: T.db, rel: T.rel + 1 };
        engine.create_cf(copy).unwrap();
        engine.copy_cf(T, copy).unwrap();
        assert!((650..=660).contains(&rows(&engine, copy)), "{} entries in the copy", rows(&engine, copy));
    }
}
