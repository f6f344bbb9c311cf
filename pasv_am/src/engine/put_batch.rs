//! Writing rows: the entries of one request as one atomic RocksDB write.
//!
//! Owns `put_batch` and `put_batch_at`. An entry with an empty value deletes
//! its key, so a version chain's new head and the removal of its dead
//! versions land together. Calls RocksDB; finds the table in the registry.
//!
//! Invariants:
//! * Every key is the row key of a rowid ≤ `MAX_ROWID`; a batch holding any
//!   other key is refused whole, before anything is written.
//! * Before the write, the CF's `max_lsn` covers the batch's LSN (WAL before
//!   data) and `next_rowid` is past every rowid the batch creates.
//! * The RocksDB write is `packing::build_write`'s, which keeps the rules
//!   of packs (`packing.rs`) in a CF that has them.
//! * A batch racing a DROP of its CF fails alone: the write options let
//!   RocksDB skip a CF that vanished, and the CF is looked up again after.

use std::sync::atomic::Ordering;
use std::sync::PoisonError;

use super::{packing, Engine, EngineError};
use crate::keys::{decode_row_key, MAX_ROWID};
use crate::protocol::{CfRef, EntryBatch};

impl Engine {
    /// Writes the entries atomically (one WriteBatch, RocksDB WAL off). Every
    /// key must be a row key ([`crate::keys::row_key`]) of a rowid ≤ `MAX_ROWID`.
    pub fn put_batch(&self, cf: CfRef, batch: EntryBatch<'_>) -> Result<(), EngineError> {
        self.put_batch_at(cf, 0, batch)
    }

    /// [`Engine::put_batch`] of the change logged by the WAL record ending at
    /// `lsn` (0: already durable, e.g. replay).
    pub fn put_batch_at(&self, cf: CfRef, lsn: u64, batch: EntryBatch<'_>) -> Result<(), EngineError> {
        let entry = self.lookup(cf).ok_or(EngineError::NoSuchCf(cf))?;
        let handle = self.handle(cf, &entry)?;
        let mut max_rowid: Option<u64> = None;
        for (key, value) in batch.iter() {
            let rowid = match decode_row_key(key) {
                Some((rowid, _)) if rowid <= MAX_ROWID => rowid,
                _ => {
                    return Err(EngineError::BadRequest(format!(
                        "{}-byte key is not a row key",
                        key.len()
                    )))
                }
            };
            if !value.is_empty() {
                max_rowid = max_rowid.max(Some(rowid));
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        // Raised before the write, so no allocation can hand out a rowid that
        // is already visible in the CF (replay writes rows nobody allocated).
        let mut size_end_before = u64::MAX;
        if let Some(max_rowid) = max_rowid {
            entry.next_rowid.fetch_max(max_rowid + 1, Ordering::Relaxed);
            size_end_before = entry.size_end.fetch_max(max_rowid + 1, Ordering::Relaxed);
        }
        let packs = if self.pack_new_rows { packing::packable_groups(batch, size_end_before) } else { Vec::new() };
        if let Some(lowest) = packs.first() {
            self.lower_pack_floor(&entry, lowest.base)?;
        }
        // From the read of packs to the write: no group is re-packed
        // meanwhile (repacking.rs).
        let packs_stay = entry.packs_stay.read().unwrap_or_else(PoisonError::into_inner);
        let pack_floor = entry.pack_floor.load(Ordering::Acquire);
        let hide = if pack_floor == u64::MAX { Vec::new() } else { self.rows_to_hide(&handle, batch, pack_floor, &entry.name)? };
        let folded = packing::folded_rows(&packs);
        let folded = if folded > 0 { entry.folded_rows.fetch_add(folded, Ordering::Relaxed) + folded } else { 0 };
        // Before the write: a flush that sees the write also sees its LSN.
        entry.max_lsn.fetch_max(lsn, Ordering::SeqCst);
        let build = || packing::build_write(&handle, batch, &packs, &hide, folded);
        self.write_batch(build, || format!("write {} entries into {}", batch.len(), entry.name))?;
        drop(packs_stay);
        // Written, not yet acknowledged: the cache follows (row_cache.rs).
        if let Some(cache) = &self.row_cache {
            update_cache(cache, cf, lsn, batch);
        }
        // Written into nothing if a DDL dropped the CF meanwhile.
        self.handle(cf, &entry).map(drop)
    }
}

/// Entries of a batch above which it is a bulk write, whose new rows are
/// cached only into free ways (`update_cache`).
const BULK_ENTRIES: usize = 32;
/// How many entries ahead a bulk batch's cache update warms a set's words
/// (far: every row's, since a change looks its row up there and a bulk
/// UPDATE's or DELETE's rows are mostly not cached) and then the lines of
/// the way a new row will take (near).
const STORE_PREFETCH_FAR: usize = 6;
const STORE_PREFETCH_NEAR: usize = 3;

/// Brings the cached answers of the rows `batch` wrote up to date. A row
/// is cached anew only when the batch is a live logged write (`lsn` > 0, so
/// not replay, which re-applies old versions) that puts its version 0 and
/// nothing else, unfrozen: a new row, whose rowid no earlier write used.
/// (VACUUM's freeze puts a frozen copy of a version 0 that newer versions
/// may sit above: cached as the whole row, it hid them from index fetches
/// and row locks.) New rows of a batch of more than [`BULK_ENTRIES`]
/// entries (INSERT … SELECT, COPY; not the heap-only versions of an
/// UPDATE's rows) go only into free ways (`RowCache::write_new_if_room`):
/// caching a bulk load's every row with evictions cost half of the engine's time for it
/// (each row a miss on a random set, and heads read to evict) and pushed
/// the rows OLTP reads out of the cache; caching none left a freshly
/// loaded table cold (pgbench's select-only after `pgbench -i`: 0.93
/// misses a query, a quarter of the warm speed).
fn update_cache(cache: &crate::row_cache::RowCache, cf: CfRef, lsn: u64, batch: EntryBatch<'_>) {
    use crate::row_cache::RowOp;
    let bulk = batch.len() > BULK_ENTRIES;
    let mut ops: Vec<(u64, u32, RowOp<'_>)> = batch
        .iter()
        .filter_map(|(key, value)| {
            let (rowid, version) = decode_row_key(key)?;
            Some((rowid, version, RowOp { key, value: (!value.is_empty()).then_some(value) }))
        })
        .collect();
    // Stable: a row's operations keep their order.
    ops.sort_by_key(|(rowid, _, _)| *rowid);
    let mut row_ops = Vec::new();
    let mut rest = &mut ops[..];
    while let Some(&(rowid, _, _)) = rest.first() {
        // The rows a few entries ahead (most of a bulk batch is new rows).
        let far = rest.get(STORE_PREFETCH_FAR).map(|(r, _, _)| *r);
        let near = rest.get(STORE_PREFETCH_NEAR).map(|(r, _, _)| *r);
        let n = rest.iter().take_while(|(r, _, _)| *r == rowid).count();
        let (run, tail) = rest.split_at_mut(n);
        let fresh = lsn > 0 && n == 1 && run[0].1 == 0 && run[0].2.value.is_some_and(is_unfrozen);
        if let Some(far) = far.filter(|_| bulk) {
            cache.prefetch_store(cf, far, false);
        }
        // A heap-only row is an UPDATE's new version of a row just read
        // (its root redirects index fetches to it): cached as any change.
        if fresh && bulk && !run[0].2.value.is_some_and(is_heap_only) {
            if let Some(near) = near {
                cache.prefetch_store(cf, near, true);
            }
            if let [(_, _, RowOp { key, value: Some(value) })] = run {
                cache.write_new_if_room(cf, rowid, key, value);
            }
            rest = tail;
            continue;
        }
        row_ops.clear();
        row_ops.extend(run.iter().map(|(_, _, op)| RowOp { key: op.key, value: op.value }));
        if row_ops.iter().any(|op| op.value.is_some_and(moves_member_on)) {
            cache.write_moved_on(cf, rowid, &row_ops);
        } else {
            cache.write(cf, rowid, &row_ops, fresh);
        }
        rest = tail;
    }
}

/// Whether a stored value's header is not marked frozen (VACUUM's copy).
fn is_unfrozen(value: &[u8]) -> bool {
    crate::row::RowHeader::decode(value).is_ok_and(|(header, _)| !header.is_frozen())
}

/// Whether a stored value is the tombstone a HOT move leaves on a chain
/// member other than the root (the root keeps redirecting index fetches).
fn moves_member_on(value: &[u8]) -> bool {
    crate::row::RowHeader::decode(value).is_ok_and(|(header, _)| header.is_moved_on_member())
}

/// Whether a stored value is a heap-only row version (`crate::row`).
fn is_heap_only(value: &[u8]) -> bool {
    crate::row::RowHeader::decode(value).is_ok_and(|(header, _)| header.is_heap_only())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{heap_row_cache, open, put_rows, scan_all, value, TempDir, T};
    use super::*;
    use crate::keys::{row_key, row_range};
    use crate::protocol::{BatchBuilder, ErrorCode};
    /// Rows 0..BULK_ENTRIES as new rows of one small batch (LSN 1).
    fn cache_small_batch(cache: &crate::row_cache::RowCache) {
        let mut small = BatchBuilder::new();
        for rowid in 0..BULK_ENTRIES as u64 {
            small.push(&row_key(rowid, 0), &value(rowid, 8)).unwrap();
        }
        update_cache(cache, T, 1, small.as_batch());
    }

    /// New rows are cached by a small batch; a bulk batch's new rows only
    /// fill free ways and evict nothing, and its changes to rows already
    /// cached still reach the cache.
    #[test]
    fn new_rows_of_a_bulk_batch_only_fill_free_ways() {
        let (mem, cache) = heap_row_cache(1);
        let cached = |rowid: u64| cache.lookup(T, rowid, &mut [0u8; 4096]).is_some();
        cache_small_batch(&cache);
        assert!((0..BULK_ENTRIES as u64).all(cached), "a small batch's new rows are cached");
        let mut bulk = BatchBuilder::new();
        bulk.push(&row_key(0, 1), &value(0, 9)).unwrap(); // a new version of cached row 0
        let new_rows = 100..100 + 2 * BULK_ENTRIES as u64; // more than the one set's free ways
        for rowid in new_rows.clone() {
            bulk.push(&row_key(rowid, 0), &value(rowid, 8)).unwrap();
        }
        update_cache(&cache, T, 2, bulk.as_batch());
        let filled = new_rows.clone().filter(|&r| cached(r)).count();
        assert!(filled > 0, "free ways take a bulk batch's new rows");
        assert!(filled < new_rows.count(), "a full set takes no more of them");
        assert!((0..BULK_ENTRIES as u64).all(cached), "and they evicted nothing");
        let mut out = [0u8; 4096];
        let n = cache.lookup(T, 0, &mut out).expect("row 0 stays cached, with its new version");
        let Ok(crate::protocol::Response::Entries { batch, .. }) = crate::protocol::decode_response(&out[..n]) else {
            panic!("not an Entries answer");
        };
        let entries: Vec<_> = batch.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        assert_eq!(entries, vec![(row_key(0, 1).to_vec(), value(0, 9)), (row_key(0, 0).to_vec(), value(0, 8))]);
        // After a DDL (a new generation) the full set's answers are stale:
        // a bulk batch's new rows take their ways.
        cache.new_generation();
        let later = 1000..1001 + BULK_ENTRIES as u64; // a bulk batch: more than BULK_ENTRIES
        let mut bulk = BatchBuilder::new();
        for rowid in later.clone() {
            bulk.push(&row_key(rowid, 0), &value(rowid, 8)).unwrap();
        }
        update_cache(&cache, T, 3, bulk.as_batch());
        assert!(later.clone().all(cached), "stale answers give their ways to a bulk batch's new rows");
        drop(mem);
    }

    /// A member a HOT move leaves keeps its cached answer (with the
    /// tombstone merged in) but not its reference bit: when its full set
    /// needs room, the hand evicts it before rows that were read. Before,
    /// it kept the bit the mover's read had set, and the hand took the
    /// first row read instead.
    #[test]
    fn a_member_that_moved_on_is_evicted_first() {
        use crate::row::{RowHeader, FLAG_HOT, FLAG_MOVED, FLAG_TOMBSTONE};
        let (mem, cache) = heap_row_cache(1);
        let cached = |rowid: u64| cache.lookup(T, rowid, &mut [0u8; 4096]).is_some();
        let rows = 0..crate::row_cache::WAYS as u64; // one way each: the set full
        for rowid in rows.clone() {
            let mut one = BatchBuilder::new();
            one.push(&row_key(rowid, 0), &value(rowid, 8)).unwrap();
            update_cache(&cache, T, 1, one.as_batch());
        }
        assert!(rows.clone().all(cached), "every row cached, and read");
        let moved = 37;
        let tombstone = RowHeader { flags: FLAG_TOMBSTONE | FLAG_MOVED | FLAG_HOT, cid: 0, xid: 900, moved_to: 500 };
        let mut batch = BatchBuilder::new();
        batch.push(&row_key(moved, 1), &tombstone.encode()).unwrap();
        update_cache(&cache, T, 2, batch.as_batch());
        assert!(cached(moved), "the member that moved on stays cached for old snapshots");
        // `cached` set its bit again: the move clears it, as in the mix,
        // where nobody reads the member after its move.
        update_cache(&cache, T, 3, batch.as_batch());
        let mut new_row = BatchBuilder::new();
        new_row.push(&row_key(500, 0), &value(500, 8)).unwrap();
        update_cache(&cache, T, 4, new_row.as_batch());
        assert!(cached(500), "the new row is cached");
        assert!(!cached(moved), "in the ways of the member that moved on");
        assert!(rows.clone().filter(|&r| r != moved).all(cached), "and no row that was read lost its answer");
        drop(mem);
    }

    /// The heap-only versions of a large UPDATE (its rows' new versions,
    /// which index fetches reach through their roots) are cached as
    /// changes, evicting if they must, not only into free ways as a bulk
    /// load's new rows: before, the TPC-C-like mix missed 5.8 times a
    /// transaction, each miss a round trip.
    #[test]
    fn heap_only_rows_of_a_bulk_batch_are_cached() {
        use crate::row::{heap_only_link, FLAG_HEAP_ONLY};
        let (mem, cache) = heap_row_cache(1);
        let cached = |rowid: u64| cache.lookup(T, rowid, &mut [0u8; 4096]).is_some();
        // The one set full of rows read before.
        cache_small_batch(&cache);
        let members = 200..200 + 2 * BULK_ENTRIES as u64;
        let mut bulk = BatchBuilder::new();
        for rowid in members.clone() {
            let mut v = value(rowid, 8);
            let mut h = crate::row::RowHeader::decode(&v).unwrap().0;
            h.flags |= FLAG_HEAP_ONLY;
            h.moved_to = heap_only_link(rowid - 100, Some(1));
            v[..crate::row::HEADER_LEN].copy_from_slice(&h.encode());
            bulk.push(&row_key(rowid, 0), &v).unwrap();
        }
        update_cache(&cache, T, 2, bulk.as_batch());
        assert!(cached(members.end - 1), "the last member written is cached, in a full set");
        drop(mem);
    }

    /// VACUUM's frozen copy of a version 0 is not a new row: newer versions
    /// may sit above it, so it must not be cached as the row's whole answer.
    #[test]
    fn a_frozen_version_0_is_not_cached_as_a_new_row() {
        use crate::row::FLAG_FROZEN;
        let (mem, cache) = heap_row_cache(1);
        let cached = |rowid: u64| cache.lookup(T, rowid, &mut [0u8; 4096]).is_some();
        let mut frozen = value(5, 8);
        frozen[1] |= FLAG_FROZEN; // the flags byte
        assert!(crate::row::RowHeader::decode(&frozen).unwrap().0.is_frozen(), "the test's value is frozen");
        let mut batch = BatchBuilder::new();
        batch.push(&row_key(5, 0), &frozen).unwrap();
        batch.push(&row_key(6, 0), &value(6, 8)).unwrap();
        update_cache(&cache, T, 1, batch.as_batch());
        assert!(!cached(5), "a frozen copy is not a new row");
        assert!(cached(6), "an unfrozen version 0 alone is");
        drop(mem);
    }

    #[test]
    fn empty_value_deletes_in_the_same_batch() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        put_rows(&engine, T, 0..3);
        // One batch: a new version of row 1 and the removal of rows 0 and 2.
        let mut batch = BatchBuilder::new();
        batch.push(&row_key(1, 7), &value(1, 3)).unwrap();
        batch.push(&row_key(0, 0), &[]).unwrap();
        batch.push(&row_key(2, 0), &[]).unwrap();
        engine.put_batch(T, batch.as_batch()).unwrap();
        let (start, end) = row_range(0, MAX_ROWID + 1);
        let (rows, _) = scan_all(&engine, T, &start, &end, 1 << 20, 0);
        let keys: Vec<_> = rows.iter().map(|(k, _)| decode_row_key(k).unwrap()).collect();
        assert_eq!(keys, vec![(1, 7), (1, 0)]);
        // Deleting a missing key is not an error; next_rowid ignores deletes.
        let mut batch = BatchBuilder::new();
        batch.push(&row_key(900, 0), &[]).unwrap();
        engine.put_batch(T, batch.as_batch()).unwrap();
        assert_eq!(engine.cf_info(T).unwrap().next_rowid, 3);
    }

    #[test]
    fn put_batch_rejects_non_row_keys_and_raises_next_rowid() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        let mut batch = BatchBuilder::new();
        batch.push(&row_key(1, 0), b"ok").unwrap();
        batch.push(b"short", b"bad").unwrap();
        let err = engine.put_batch(T, batch.as_batch()).unwrap_err();
        assert_eq!(err.code(), ErrorCode::BadRequest);
        // Atomic: nothing of the rejected batch was written.
        let (lo, hi) = row_range(0, 100);
        assert!(scan_all(&engine, T, &lo, &hi, 4096, 0).0.is_empty());
        assert_eq!(engine.cf_info(T).unwrap().next_rowid, 0);

        // A write of rows nobody allocated (replay) moves allocation past them.
        put_rows(&engine, T, [41]);
        assert_eq!(engine.alloc_rowids(T, 1).unwrap(), 42);
        engine.put_batch(T, EntryBatch::default()).unwrap();
    }
}
