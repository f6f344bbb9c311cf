//! Where packs come from: a batch of new rows written as packs of
//! `pack::PACK_ROWS`, and the per-CF pack floor that tells every later
//! delete whether it must hide a packed entry.
//!
//! Owns the packing rule for `put_batch`, the pack floor (kept in the meta
//! CF) and how a delete is written at or above it. Calls RocksDB (meta CF
//! writes and flushes) and `crate::pack`.
//!
//! Invariants:
//! * A pack holds version 0 of each row of a whole group, written by one
//!   batch that writes nothing else: the first write of new rows (a bulk
//!   INSERT or COPY, or its replay). So only the delete of a version 0 can
//!   meet a packed entry.
//! * The floor is durable, and at or below every pack's group, before any
//!   pack is written: a crash cannot leave a pack that a delete after
//!   recovery would miss. Deletes of version 0 at or above the floor are
//!   written as `pack::HIDDEN` (a row key hides the packed entry; a RocksDB
//!   delete would not reach into the pack).
//! * Packing changes how rows are stored, never what a read returns
//!   (`row_view`'s rules).

use std::sync::atomic::Ordering;
use std::sync::PoisonError;

use rocksdb::WriteBatch;

use super::cf_registry::TableEntry;
use super::{Engine, EngineError};
use crate::keys::decode_row_key;
use crate::pack::{group_base, pack_key, PackBuilder, HIDDEN, PACK_ROWS};
use crate::protocol::EntryBatch;

/// Meta CF key prefix of a CF's pack floor (followed by the CF name; u64
/// little-endian). No key: the CF has no pack.
const PACK_FLOOR_PREFIX: &[u8] = b"pack_floor.";

pub(super) fn pack_floor_key(cf_name: &str) -> Vec<u8> {
    [PACK_FLOOR_PREFIX, cf_name.as_bytes()].concat()
}

/// The whole groups of `batch` to write as packs: the index of each one's
/// first entry (its `PACK_ROWS` entries follow) and its first rowid, or none unless
/// every entry is a new row's version 0, in ascending rowid order. New:
/// at or past `size_end` (one past the highest row ever written before the
/// batch) and not frozen. VACUUM's freeze rewrites version 0 of rows that
/// exist, in the same shape; packed, its copies would lose to the row keys
/// the rows may already have.
pub(super) fn packable_groups(batch: EntryBatch<'_>, size_end: u64) -> Vec<(usize, u64)> {
    let mut groups = Vec::new();
    let mut previous: Option<u64> = None;
    // Where the current run of consecutive rowids began.
    let mut run_start = (0usize, 0u64);
    for (i, (key, value)) in batch.iter().enumerate() {
        let Some((rowid, 0)) = decode_row_key(key) else { return Vec::new() };
        let frozen = crate::row::RowHeader::decode(value).map_or(true, |(h, _)| h.flags & crate::row::FLAG_FROZEN != 0);
        if rowid < size_end || frozen || previous.is_some_and(|p| rowid <= p) {
            return Vec::new();
        }
        if previous != Some(rowid.wrapping_sub(1)) {
            run_start = (i, rowid);
        }
        previous = Some(rowid);
        // A group is whole once its last rowid arrives within the run.
        let base = group_base(rowid);
        if rowid == base + PACK_ROWS - 1 && run_start.1 <= base {
            groups.push((run_start.0 + (base - run_start.1) as usize, base));
        }
    }
    groups
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
}

/// The RocksDB write of `batch`: the groups in `groups` (from
/// [`packable_groups`]) as packs, every other entry as its own key (an
/// empty value deletes it), and the deletes of version 0 at or above
/// `pack_floor` as markers. A CF without packs passes no group and a floor
/// of `u64::MAX`: every entry is then written as it comes.
pub(super) fn build_write(handle: &impl rocksdb::AsColumnFamilyRef, batch: EntryBatch<'_>, groups: &[(usize, u64)], pack_floor: u64) -> WriteBatch {
    let mut write = WriteBatch::with_capacity_bytes(batch.encoded_len() + 16 * batch.len());
    let mut next_group = groups.iter().copied().peekable();
    let mut pack: Option<PackBuilder> = None;
    for (i, (key, value)) in batch.iter().enumerate() {
        if let Some((_, base)) = next_group.next_if(|&(first, _)| first == i) {
            pack = Some(PackBuilder::new(base));
        }
        if let Some(builder) = pack.as_mut() {
            if let Some((rowid, version)) = decode_row_key(key) {
                // packable_groups gave a whole group of new rows in order.
                let pushed = builder.push(rowid, version, value);
                debug_assert!(pushed);
                if builder.len() as u64 == PACK_ROWS {
                    if let Some(done) = pack.take() {
                        let base = done.base();
                        write.put_cf(handle, pack_key(base), done.finish());
                    }
                }
                continue;
            }
        }
        if value.is_empty() {
            match decode_row_key(key) {
                // An empty value deletes the key (see protocol::Request::PutBatch).
                Some((rowid, 0)) if rowid >= pack_floor => write.put_cf(handle, key, HIDDEN),
                _ => write.delete_cf(handle, key),
            }
        } else {
            write.put_cf(handle, key, value);
        }
    }
    write
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::row_key;
    use crate::protocol::BatchBuilder;

    fn groups_of(rows: &[(u64, u32, bool)]) -> Vec<usize> {
        let mut batch = BatchBuilder::new();
        for &(rowid, version, put) in rows {
            let value = if put { crate::engine::test_support::value(rowid, 3) } else { Vec::new() };
            batch.push(&row_key(rowid, version), &value).unwrap();
        }
        packable_groups(batch.as_batch(), 0).into_iter().map(|(first, _)| first).collect()
    }

    #[test]
    fn only_whole_groups_of_new_rows_pack() {
        let new = |range: std::ops::Range<u64>| range.map(|r| (r, 0, true)).collect::<Vec<_>>();
        assert_eq!(groups_of(&new(0..64)), vec![0]);
        assert_eq!(groups_of(&new(10..200)), vec![54, 118]);
        assert_eq!(groups_of(&new(0..63)), Vec::<usize>::new());
        // A gap inside a group, or any other kind of entry, packs nothing.
        let mut gap = new(0..130);
        gap.remove(100);
        assert_eq!(groups_of(&gap), vec![0]);
        let mut update = new(0..128);
        update.push((500, 1, true));
        assert!(groups_of(&update).is_empty());
        let mut delete = new(0..128);
        delete.push((500, 0, false));
        assert!(groups_of(&delete).is_empty());
        let mut unordered = new(0..128);
        unordered.swap(3, 4);
        assert!(groups_of(&unordered).is_empty());
    }
}
