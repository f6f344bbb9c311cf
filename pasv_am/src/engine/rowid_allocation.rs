//! Where a row gets its rowid: allocation from a table's counter, and the
//! durable floor that keeps a rowid from ever being handed out twice.
//!
//! Owns `alloc_rowids`, the per-CF rowid floor kept in the meta CF, how
//! `open` recovers a table's `next_rowid`, and the table's size end (one
//! past its highest row), which VACUUM trims with `trim_size`. Calls RocksDB (meta CF writes and
//! flushes; a backward walk per CF at open, over the rows removed at its end).
//!
//! Invariants:
//! * `next_rowid` is above every rowid in the CF and every rowid handed out
//!   before, across crashes too. Three rules give this: allocation stays
//!   below the durable floor, which is raised and flushed ahead of it
//!   (before the answer when an allocation would pass it; otherwise, once
//!   the room left is less than the next allocation may take, after the
//!   answer is out: `raise_floors_ahead`, so a bulk load does not wait for
//!   the meta CF's flush); `open`
//!   starts from the larger of the floor and one past the highest row key;
//!   and `put_batch` moves `next_rowid` past the rowids it writes (replay
//!   writes rows nobody allocated).
//! * It matters because PostgreSQL's indexes point at rows by TID, that is
//!   by rowid, and their entries outlive a crash through PostgreSQL's WAL
//!   even where the row itself was lost.
//! * Rowids end at `MAX_ROWID`: allocation past it fails, it never wraps.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;

use rocksdb::ReadOptions;

use super::cf_registry::TableEntry;
use super::error::rocks_with;
use super::{Db, Engine, EngineError};
use crate::keys::{decode_row_key, MAX_ROWID, RESERVED_KEY_PREFIX, ROWS_PER_BLOCK, ROW_KEY_LEN};
use crate::pack::{decode_pack_key, group_base, is_hidden, Pack};
use crate::protocol::CfRef;

/// Meta CF key prefix of a CF's durable rowid floor (followed by the CF
/// name; u64 little-endian): no rowid at or above it was ever handed out, so
/// after a crash allocation resumes there (DESIGN §3: keys are never reused).
const ROWID_FLOOR_PREFIX: &[u8] = b"rowid_floor.";
/// The floor is raised ahead of allocation by at least this many rowids (or
/// an eighth of the rowids used, or four times the allocation that raises
/// it, if more), so raising it, which flushes the meta CF, is rare.
const ROWID_FLOOR_STEP: u64 = 1 << 16;

thread_local! {
    /// Floors this service thread's allocations came near, as (table, new
    /// floor): raised by [`Engine::raise_floors_ahead`] after the answer.
    static RAISE_AHEAD: RefCell<Vec<(CfRef, u64)>> = const { RefCell::new(Vec::new()) };
}

/// Where the floor goes when an allocation ending at `end` of `count`
/// rowids raises it.
fn floor_after(end: u64, count: u32) -> u64 {
    let ahead = ROWID_FLOOR_STEP.max(end / 8).max(4 * u64::from(count));
    end.saturating_add(ahead).min(MAX_ROWID + 1)
}

/// Whether the room left below `floor` after an allocation ending at `end`
/// of `count` rowids may not hold the next one: backends double their
/// chunks and may ask for a block's rowids more (`engine_client::reserve`
/// in the extension).
fn floor_is_near(floor: u64, end: u64, count: u32) -> bool {
    floor.saturating_sub(end) < 2 * u64::from(count) + ROWS_PER_BLOCK
}

impl Engine {
    /// Reserves `count` consecutive rowids; returns the first. The durable
    /// floor is above them before they are returned; if the room left
    /// below it is small, a raise is noted for [`Engine::raise_floors_ahead`].
    pub fn alloc_rowids(&self, cf: CfRef, count: u32) -> Result<u64, EngineError> {
        if count == 0 {
            return Err(EngineError::BadRequest("alloc_rowids of 0 rowids".into()));
        }
        let entry = self.lookup(cf).ok_or(EngineError::NoSuchCf(cf))?;
        let first = entry
            .next_rowid
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |next| {
                next.checked_add(u64::from(count))
                    .filter(|&end| end <= MAX_ROWID + 1)
            })
            .map_err(|_| EngineError::RowidsExhausted(cf))?;
        let end = first + u64::from(count);
        let durable = entry.rowid_floor.load(Ordering::Acquire);
        if end > durable {
            self.raise_rowid_floor(&entry, end, floor_after(end, count))?;
        } else if floor_is_near(durable, end, count) {
            let floor = floor_after(end, count);
            RAISE_AHEAD.with(|r| {
                let mut due = r.borrow_mut();
                match due.iter_mut().find(|(c, _)| *c == cf) {
                    Some(noted) => noted.1 = noted.1.max(floor),
                    None => due.push((cf, floor)),
                }
            });
        }
        Ok(first)
    }

    /// Raises the floors this thread's allocations noted as near (after
    /// their answers went out: the service loop's `after_reply`). A raise
    /// that fails is left to the allocation that reaches the floor, which
    /// raises it before answering and reports the error.
    pub fn raise_floors_ahead(&self) {
        let due = RAISE_AHEAD.with(|r| std::mem::take(&mut *r.borrow_mut()));
        for (cf, floor) in due {
            if let Some(entry) = self.lookup(cf) {
                let _ = self.raise_rowid_floor(&entry, floor, floor);
            }
        }
    }

    /// VACUUM's truncation: sets the table's size end to one past the
    /// highest row present (0 if none) and returns it. The caller keeps
    /// other writers out (VACUUM truncates under an AccessExclusiveLock);
    /// should one raise the end meanwhile anyway, its end stands. Rowids
    /// stay as they are: none is handed out again.
    pub fn trim_size(&self, cf: CfRef) -> Result<u64, EngineError> {
        let entry = self.lookup(cf).ok_or(EngineError::NoSuchCf(cf))?;
        let before = entry.size_end.load(Ordering::Acquire);
        let present = next_rowid_from_data(&self.db, &entry.name)?;
        if present < before {
            // Fails only if a write raised it meanwhile: then that stands.
            let _ = entry.size_end.compare_exchange(before, present, Ordering::AcqRel, Ordering::Acquire);
        }
        Ok(entry.size_end.load(Ordering::Acquire))
    }

    /// Makes the durable rowid floor of `entry` at least `end`, raising it
    /// to `floor` if it is not, before any rowid below `end` is handed out
    /// (a crash must not hand them out again).
    fn raise_rowid_floor(&self, entry: &TableEntry, end: u64, floor: u64) -> Result<(), EngineError> {
        if end <= entry.rowid_floor.load(Ordering::Acquire) {
            return Ok(());
        }
        let _raising = entry.floor_raise.lock().unwrap_or_else(PoisonError::into_inner);
        if end <= entry.rowid_floor.load(Ordering::Acquire) {
            return Ok(());
        }
        self.persist_rowid_floor(&entry.name, floor)?;
        entry.rowid_floor.store(floor, Ordering::Release);
        Ok(())
    }

    /// A table that takes over rowids handed out elsewhere (an emptied or
    /// copied table): none below `floor` is handed out again, durably, and
    /// the next one is at least `floor`.
    pub(super) fn skip_rowids_below(&self, entry: &TableEntry, floor: u64) -> Result<(), EngineError> {
        let floor = floor.max(entry.next_rowid.load(Ordering::Relaxed));
        self.persist_rowid_floor(&entry.name, floor)?;
        entry.rowid_floor.fetch_max(floor, Ordering::AcqRel);
        entry.next_rowid.fetch_max(floor, Ordering::Relaxed);
        Ok(())
    }

    /// Writes and flushes the rowid floor of the CF `name` (RocksDB's WAL is
    /// off: only a flush makes it durable).
    pub(super) fn persist_rowid_floor(&self, name: &str, floor: u64) -> Result<(), EngineError> {
        self.persist_meta(&rowid_floor_key(name), &floor.to_le_bytes(), "persist a rowid floor")
    }
}

pub(super) fn rowid_floor_key(cf_name: &str) -> Vec<u8> {
    [ROWID_FLOOR_PREFIX, cf_name.as_bytes()].concat()
}

/// 1 + the largest rowid of a row in the CF, or 0 if it has none. Keys at
/// or above the reserved 0xFF prefix are metadata, not rows; a `HIDDEN`
/// marker is a row removed, and so is a packed entry it hides (`row_view`'s
/// rules): the walk back steps over them.
pub(super) fn next_rowid_from_data(db: &Db, name: &str) -> Result<u64, EngineError> {
    let handle = db.cf_handle(name).ok_or_else(|| {
        EngineError::Corruption(format!("column family {name} vanished during open"))
    })?;
    let mut read_options = ReadOptions::default();
    read_options.set_iterate_upper_bound([RESERVED_KEY_PREFIX]);
    read_options.set_total_order_seek(true); // across rows: no prefix filter
    read_options.fill_cache(false);
    let mut iter = db.raw_iterator_cf_opt(&handle, read_options);
    iter.seek_to_last();
    let last = last_row(&mut iter, name)?;
    iter.status()
        .map_err(rocks_with(|| format!("find the last row of {name}")))?;
    Ok(last.map_or(0, |rowid| rowid + 1))
}

/// Walking back from the iterator's position: the highest rowid with a
/// live entry. A group's keys come, backwards, as its row keys and then its
/// pack (the pack key sorts before them), so the markers of a group are
/// all known when its pack is reached.
fn last_row(iter: &mut rocksdb::DBRawIteratorWithThreadMode<'_, Db>, name: &str) -> Result<Option<u64>, EngineError> {
    // The group whose keys are being walked, its markers, and its highest
    // live row key.
    let mut group: Option<u64> = None;
    let mut hidden: Vec<[u8; ROW_KEY_LEN]> = Vec::new();
    let mut live: Option<u64> = None;
    while let Some((key, value)) = iter.item() {
        let (base, rowid) = match (decode_row_key(key), decode_pack_key(key)) {
            (Some((rowid, _)), _) if rowid <= MAX_ROWID => (group_base(rowid), Some(rowid)),
            (None, Some(base)) => (base, None),
            _ => {
                return Err(EngineError::Corruption(format!(
                    "a key of {name} ({} bytes) is neither a row key nor a pack key",
                    key.len()
                )))
            }
        };
        if group != Some(base) {
            // The group above had no pack: its live row key is the last row.
            if live.is_some() {
                return Ok(live);
            }
            group = Some(base);
            hidden.clear();
        }
        match rowid {
            Some(_) if is_hidden(value) => hidden.push(key.try_into().unwrap_or_default()),
            Some(rowid) => live = live.or(Some(rowid)),
            None => {
                let pack = Pack::parse(base, value)
                    .map_err(|e| EngineError::Corruption(format!("{name}: pack of rows {base}..: {e}")))?;
                let packed = (0..pack.len()).rev().find(|&i| !hidden.contains(&pack.key(i))).map(|i| pack.entry(i).0);
                if live.max(packed).is_some() {
                    return Ok(live.max(packed));
                }
                // Every row of the group was removed: on to the one below.
                group = None;
            }
        }
        iter.prev();
    }
    Ok(live)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{open, put_rows, TempDir, T};
    use super::*;
    use crate::keys::row_key;
    use crate::protocol::BatchBuilder;
    #[test]
    fn alloc_rowids_is_monotonic_and_survives_reopen() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        assert_eq!(engine.alloc_rowids(T, 10).unwrap(), 0);
        assert_eq!(engine.alloc_rowids(T, 1).unwrap(), 10);
        assert_eq!(engine.alloc_rowids(T, 5).unwrap(), 11);
        assert!(matches!(
            engine.alloc_rowids(T, 0),
            Err(EngineError::BadRequest(_))
        ));
        put_rows(&engine, T, [0, 3, 12]);
        drop(engine); // a crash: rows 13..16 were handed out, never written

        // A rowid handed out is never handed out again (PostgreSQL's btree
        // may still point at it): allocation resumes at the durable floor.
        let engine = open(&dir);
        let next = engine.cf_info(T).unwrap().next_rowid;
        assert!(next >= 16, "next_rowid {next} reuses handed-out rowids");
        assert_eq!(engine.alloc_rowids(T, 2).unwrap(), next);
        assert_eq!(engine.alloc_rowids(T, 1).unwrap(), next + 2);
        engine.close(true).unwrap();
        assert!(open(&dir).cf_info(T).unwrap().next_rowid >= next + 3);
    }

    #[test]
    fn the_size_end_follows_rows_written_and_trimmed_not_rowids_handed_out() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        let size = |engine: &Engine| engine.cf_info(T).unwrap().size_end;
        assert_eq!(engine.alloc_rowids(T, 64).unwrap(), 0);
        assert_eq!(size(&engine), 0, "rowids handed out are not rows");
        put_rows(&engine, T, [0, 1, 2, 5]);
        assert_eq!(size(&engine), 6);
        // VACUUM removed rows 2 and 5: the end comes down to row 1.
        let mut removal = BatchBuilder::new();
        removal.push(&row_key(2, 0), &[]).unwrap();
        removal.push(&row_key(5, 0), &[]).unwrap();
        engine.put_batch(T, removal.as_batch()).unwrap();
        assert_eq!(size(&engine), 6, "deletes alone do not shrink the size");
        assert_eq!(engine.trim_size(T).unwrap(), 2);
        assert_eq!(size(&engine), 2);
        assert!(engine.cf_info(T).unwrap().next_rowid >= 64, "trimming hands no rowid out again");
        put_rows(&engine, T, [9]);
        assert_eq!(size(&engine), 10);
        // A restart takes the end from the rows, not from the rowid floor.
        engine.close(true).unwrap();
        let engine = open(&dir);
        assert_eq!(size(&engine), 10);
        assert!(engine.cf_info(T).unwrap().next_rowid >= 64);
        // Emptied: the end is 0; a copy takes its source's.
        put_rows(&engine, T, [20]);
        let other = CfRef { db: T.db, rel: T.rel + 1 };
        engine.create_cf(other).unwrap();
        engine.copy_cf(T, other).unwrap();
        assert_eq!(engine.cf_info(other).unwrap().size_end, 21);
        engine.truncate_cf(T).unwrap();
        assert_eq!(size(&engine), 0);
        assert_eq!(engine.trim_size(T).unwrap(), 0);
    }

    /// Removed rows at a packed table's end (markers over packed entries)
    /// are not rows: VACUUM's trim and a reopening end the size below them,
    /// at a row key or a packed entry left alive.
    #[test]
    fn the_size_end_steps_back_over_rows_removed_from_packs() {
        let dir = TempDir::new();
        let mut cfg = super::super::test_support::config(&dir);
        cfg.pack_new_rows = true;
        let engine = Engine::open(cfg.clone()).unwrap();
        engine.create_cf(T).unwrap();
        assert_eq!(engine.alloc_rowids(T, 192).unwrap(), 0);
        put_rows(&engine, T, 0..192);
        let remove = |engine: &Engine, rowids: std::ops::Range<u64>| {
            let mut removal = BatchBuilder::new();
            for rowid in rowids {
                removal.push(&row_key(rowid, 0), &[]).unwrap();
            }
            engine.put_batch(T, removal.as_batch()).unwrap();
        };
        // The last group wholly removed, the one before from row 100 on.
        remove(&engine, 100..192);
        assert_eq!(engine.trim_size(T).unwrap(), 100);
        // A row key (an updated row) below the packed entries left alive.
        let mut update = BatchBuilder::new();
        update.push(&row_key(70, 1), &super::super::test_support::value(70, 4)).unwrap();
        engine.put_batch(T, update.as_batch()).unwrap();
        remove(&engine, 71..100);
        assert_eq!(engine.trim_size(T).unwrap(), 71);
        // Now the row key is the highest row of its group; after a
        // reopening too.
        remove(&engine, 64..70);
        remove(&engine, 70..71);
        assert_eq!(engine.trim_size(T).unwrap(), 71);
        engine.flush_cf(T).unwrap();
        drop(engine);
        let engine = Engine::open(cfg).unwrap();
        assert_eq!(engine.cf_info(T).unwrap().size_end, 71);
        assert!(engine.cf_info(T).unwrap().next_rowid >= 192, "rowids handed out stay used");
        let mut last = BatchBuilder::new();
        last.push(&row_key(70, 1), &[]).unwrap();
        engine.put_batch(T, last.as_batch()).unwrap();
        assert_eq!(engine.trim_size(T).unwrap(), 64);
        remove(&engine, 0..64);
        assert_eq!(engine.trim_size(T).unwrap(), 0);
    }

    #[test]
    fn the_rowid_floor_stays_ahead_of_large_allocations_across_crashes() {
        let dir = TempDir::new();
        let mut handed_out = 0;
        for _ in 0..3 {
            let engine = open(&dir);
            if engine.table_cf(T).is_none() {
                engine.create_cf(T).unwrap();
            }
            for _ in 0..40 {
                let first = engine.alloc_rowids(T, 4096).unwrap();
                assert!(first >= handed_out, "rowid {first} handed out again (already {handed_out})");
                handed_out = first + 4096;
            }
            drop(engine); // crash, nothing written
        }
    }

    /// A bulk load's reservations, doubling as a backend's do
    /// (`engine_client::reserve` in the extension): only the table's first
    /// allocation waits for the meta CF's flush; the others find room below
    /// the floor and leave its raise for after their answers. The floor
    /// stays above every rowid handed out, across a crash. (Raised only
    /// when an allocation passed it, the floor made three of these wait.)
    #[test]
    fn doubling_allocations_raise_the_floor_after_their_answers() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        let (mut waited, mut handed_out, mut count) = (0, 0, 64u32);
        for _ in 0..14 {
            let before = engine.meta_flushes();
            let first = engine.alloc_rowids(T, count).unwrap();
            waited += engine.meta_flushes() - before;
            handed_out = first + u64::from(count);
            let floor = engine.lookup(T).unwrap().rowid_floor.load(Ordering::Acquire);
            assert!(floor >= handed_out, "floor {floor} below handed-out rowid {handed_out}");
            engine.raise_floors_ahead(); // the service loop, after the answer
            count = (count * 2).min(1 << 17);
        }
        assert_eq!(waited, 1, "allocations that waited for a raise of the floor");
        drop(engine); // a crash
        let next = open(&dir).cf_info(T).unwrap().next_rowid;
        assert!(next >= handed_out, "next_rowid {next} reuses handed-out rowids (up to {handed_out})");
    }

    #[test]
    fn concurrent_allocations_never_overlap() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        let engine = &engine;
        let mut firsts: Vec<u64> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(move || {
                        (0..1000)
                            .map(|_| engine.alloc_rowids(T, 3).unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        firsts.sort_unstable();
        assert_eq!(firsts, (0..4000).map(|i| i * 3).collect::<Vec<_>>());
    }

    #[test]
    fn rowids_are_bounded_by_max_rowid() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        put_rows(&engine, T, [MAX_ROWID - 1]);
        assert_eq!(engine.alloc_rowids(T, 1).unwrap(), MAX_ROWID);
        assert!(matches!(
            engine.alloc_rowids(T, 1),
            Err(EngineError::RowidsExhausted(T))
        ));
        let mut batch = BatchBuilder::new();
        batch.push(&row_key(MAX_ROWID + 1, 0), b"").unwrap();
        assert!(matches!(
            engine.put_batch(T, batch.as_batch()),
            Err(EngineError::BadRequest(_))
        ));
    }
}
