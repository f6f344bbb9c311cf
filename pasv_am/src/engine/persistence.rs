//! Flush flags and persistence points, engine side (DESIGN §5).
//!
//! Owns each CF's flag bookkeeping (the newest commit LSN, a flag waiting to
//! be written, when one last was), the calls that write flags and flush
//! memtables (`write_flags`, `flush_cf`, `flush_all`, `sync_wal`), and the
//! per-CF report from which the replay worker computes persistence points.
//! Calls RocksDB (writes, flushes, reads of the persisted tier, memtable
//! properties) and the flag codec of [`crate::flush_flag`].
//!
//! Invariants:
//! * A CF's flag only moves forward: a commit whose LSN is not above the
//!   CF's newest one writes nothing, as the later flag already covers it.
//! * A pending flag is written before any explicit flush of its CF and
//!   before any report, so neither misses it.
//! * The flag found in the CF's SST files (`ReadTier::Persisted`) is that
//!   CF's local data persistence point.
//! * `engine_wal` mode: RocksDB's WAL is synced only once PostgreSQL's WAL
//!   is durable past every write it logged.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use rocksdb::{properties, ErrorKind, FlushOptions, ReadOptions, DEFAULT_COLUMN_FAMILY_NAME};

use super::cf_registry::TableEntry;
use super::error::{rocks, rocks_with};
use super::{Db, Durability, Engine, EngineError};
use crate::cf_name::{TableCf, META_CF};
use crate::flush_flag::{FlushFlag, FLAG_KEY};
use crate::protocol::CfRef;

/// Minimum time between two flag writes into one CF. A commit inside it
/// leaves its flag pending: written by the CF's next commit after the
/// interval, before any explicit flush, and when the replay worker asks for
/// the persistence report (once a second). A flag written late is still
/// correct: it only makes the CF's persistence point lag (DESIGN §5:
/// "fewer is cheaper and still correct").
const FLAG_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

/// One CF's flush-flag bookkeeping.
#[derive(Debug, Default)]
pub(super) struct FlagState {
    /// Commit LSN of the newest flag (written or pending).
    pub(super) newest: u64,
    pending: Option<FlushFlag>,
    last_write: Option<std::time::Instant>,
}

/// Where one CF stands on persistence (answer to `persistence`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CfPersistence {
    pub cf: TableCf,
    /// The flag read with `ReadTier::Persisted`: its commit LSN is the local DPP.
    pub persisted: Option<FlushFlag>,
    /// Commit LSN of the newest flag written into the memtable (0: none).
    pub latest_flag_lsn: u64,
    /// The memtables hold entries not yet flushed.
    pub dirty: bool,
    pub memtable_bytes: u64,
    pub sst_bytes: u64,
    pub max_lsn: u64,
    pub created_lsn: u64,
}

impl Engine {
    /// Writes a flush flag for transaction `xid` (commit record ending at
    /// `commit_lsn`) into each of `rels` of database `db` that exists, or
    /// leaves it pending if the CF got a flag less than [`FLAG_INTERVAL`] ago.
    /// A CF whose newest flag is already later is left alone (flags only move
    /// forward; the later flag covers this commit too). Returns how many
    /// flags were written now.
    pub fn write_flags(
        &self,
        db: u32,
        rels: impl Iterator<Item = u32>,
        xid: u32,
        commit_lsn: u64,
        first_lsn: u64,
        last_lsn: u64,
    ) -> Result<usize, EngineError> {
        let mut written = 0;
        for rel in rels {
            let cf = CfRef { db, rel };
            let Some(entry) = self.lookup(cf).filter(|entry| entry.cf.logged) else {
                continue; // dropped since, or unlogged: nothing to describe
            };
            let mut state = entry.flag.lock().unwrap_or_else(PoisonError::into_inner);
            if state.newest >= commit_lsn {
                continue;
            }
            state.newest = commit_lsn;
            state.pending = Some(FlushFlag { cf: entry.cf, commit_lsn, first_lsn, last_lsn, xid });
            if state.last_write.is_none_or(|t| t.elapsed() >= FLAG_INTERVAL) {
                written += self.write_pending_flag(cf, &entry, &mut state)?;
            }
        }
        Ok(written)
    }

    /// Writes `entry`'s pending flag, if any; returns 1 if it did. The
    /// caller holds the entry's flag lock (flags of one CF are written in
    /// order).
    fn write_pending_flag(&self, cf: CfRef, entry: &TableEntry, state: &mut FlagState) -> Result<usize, EngineError> {
        let Some(flag) = state.pending.take() else {
            return Ok(0);
        };
        let Ok(handle) = self.handle(cf, entry) else {
            return Ok(0); // dropped meanwhile
        };
        // Before the write: a flush that sees the flag also sees its LSN.
        entry.max_lsn.fetch_max(flag.commit_lsn, Ordering::SeqCst);
        self.write_one(&handle, FLAG_KEY, &flag.encode(), || format!("write the flush flag of {}", entry.name))?;
        state.last_write = Some(std::time::Instant::now());
        Ok(1)
    }

    /// Writes every pending flag of database `db` (all: `None`).
    fn write_pending_flags(&self, db: Option<u32>) -> Result<(), EngineError> {
        let entries: Vec<(CfRef, Arc<TableEntry>)> = self
            .tables()
            .iter()
            .filter(|(key, _)| db.is_none_or(|d| key.db == d))
            .map(|(key, entry)| (*key, Arc::clone(entry)))
            .collect();
        for (cf, entry) in entries {
            let mut state = entry.flag.lock().unwrap_or_else(PoisonError::into_inner);
            self.write_pending_flag(cf, &entry, &mut state)?;
        }
        Ok(())
    }

    /// Where every logged CF of database `db` (every database: `None`)
    /// stands. Unlogged ones are left out: nothing replays them, so they
    /// hold no persistence point back.
    pub fn persistence(&self, db: Option<u32>) -> Result<Vec<CfPersistence>, EngineError> {
        self.write_pending_flags(db)?;
        let mut entries: Vec<(CfRef, Arc<TableEntry>)> = self
            .tables()
            .iter()
            .filter(|(key, entry)| entry.cf.logged && db.is_none_or(|d| key.db == d))
            .map(|(key, entry)| (*key, Arc::clone(entry)))
            .collect();
        entries.sort_by_key(|(key, _)| *key);
        let mut out = Vec::with_capacity(entries.len());
        for (key, entry) in entries {
            let Ok(handle) = self.handle(key, &entry) else {
                continue;
            };
            let property = |name: &properties::PropName| {
                self.db
                    .property_int_value_cf(&handle, name)
                    .map(Option::unwrap_or_default)
                    .map_err(rocks_with(|| format!("read properties of {}", entry.name)))
            };
            let unflushed = property(properties::NUM_ENTRIES_ACTIVE_MEM_TABLE)?
                + property(properties::NUM_ENTRIES_IMM_MEM_TABLES)?
                + property(properties::NUM_DELETES_ACTIVE_MEM_TABLE)?
                + property(properties::NUM_DELETES_IMM_MEM_TABLES)?;
            out.push(CfPersistence {
                cf: entry.cf,
                persisted: read_flag(&self.db, &entry.name, true)?,
                latest_flag_lsn: entry.flag.lock().unwrap_or_else(PoisonError::into_inner).newest,
                dirty: unflushed > 0,
                memtable_bytes: property(properties::CUR_SIZE_ALL_MEM_TABLES)?,
                sst_bytes: property(properties::TOTAL_SST_FILES_SIZE)?,
                max_lsn: entry.max_lsn.load(Ordering::SeqCst),
                created_lsn: entry.created_lsn,
            });
        }
        Ok(out)
    }

    /// Flushes one table's memtables and waits (bounded recovery).
    pub fn flush_cf(&self, cf: CfRef) -> Result<(), EngineError> {
        let entry = self.lookup(cf).ok_or(EngineError::NoSuchCf(cf))?;
        {
            let mut state = entry.flag.lock().unwrap_or_else(PoisonError::into_inner);
            self.write_pending_flag(cf, &entry, &mut state)?;
        }
        let handle = self.handle(cf, &entry)?;
        match self.db.flush_cf_opt(&handle, &FlushOptions::default()) {
            Err(e) if e.kind() == ErrorKind::ColumnFamilyDropped => Ok(()),
            result => result.map_err(rocks_with(|| format!("flush {}", entry.name))),
        }
    }

    /// `engine_wal` mode: makes the PostgreSQL WAL durable past every logged
    /// write (no transaction id may outlive its log), then syncs RocksDB's WAL.
    pub fn sync_wal(&self) -> Result<(), EngineError> {
        if self.durability != Durability::EngineWal {
            return Ok(());
        }
        let newest = self
            .tables()
            .values()
            .map(|entry| entry.max_lsn.load(Ordering::SeqCst))
            .max()
            .unwrap_or(0);
        if newest != 0 {
            self.lsn_book.wal.ensure_durable(newest);
        }
        self.db.flush_wal(true).map_err(rocks("sync the RocksDB WAL"))
    }

    /// Flushes every CF's memtables to SST files and waits for it.
    pub fn flush_all(&self) -> Result<(), EngineError> {
        self.write_pending_flags(None)?;
        let mut names: Vec<String> = self
            .tables()
            .values()
            .map(|entry| entry.name.clone())
            .collect();
        names.push(META_CF.to_owned());
        names.push(DEFAULT_COLUMN_FAMILY_NAME.to_owned());
        let flush_options = FlushOptions::default(); // waits
        for name in names {
            // A CF dropped since the list was taken has nothing left to flush.
            let Some(handle) = self.db.cf_handle(&name) else {
                continue;
            };
            match self.db.flush_cf_opt(&handle, &flush_options) {
                Err(e) if e.kind() == ErrorKind::ColumnFamilyDropped => {}
                result => result.map_err(rocks_with(|| format!("flush {name}")))?,
            }
        }
        Ok(())
    }
}

/// The CF's flush flag: the persisted one (SST files only) or the newest.
pub(super) fn read_flag(db: &Db, name: &str, persisted: bool) -> Result<Option<FlushFlag>, EngineError> {
    let Some(handle) = db.cf_handle(name) else {
        return Ok(None);
    };
    let mut read_options = ReadOptions::default();
    if persisted {
        read_options.set_read_tier(rocksdb::ReadTier::Persisted);
    }
    let bytes = db
        .get_cf_opt(&handle, FLAG_KEY, &read_options)
        .map_err(rocks_with(|| format!("read the flush flag of {name}")))?;
    match bytes {
        None => Ok(None),
        Some(bytes) => FlushFlag::decode(&bytes)
            .map(Some)
            .ok_or_else(|| EngineError::Corruption(format!("malformed flush flag in {name}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{config, open, put_rows, value, TempDir, T};
    use super::*;
    use crate::keys::row_key;
    use crate::protocol::BatchBuilder;
    use crate::wal_order::WalDurability;
    /// Records every LSN a flush asked to be durable.
    #[derive(Default)]
    struct RecordingWal(std::sync::Mutex<Vec<u64>>);

    impl WalDurability for RecordingWal {
        fn ensure_durable(&self, lsn: u64) {
            self.0.lock().unwrap().push(lsn);
        }
    }

    #[test]
    fn a_flush_first_makes_the_wal_durable_up_to_the_cfs_newest_lsn() {
        let dir = TempDir::new();
        let wal = Arc::new(RecordingWal::default());
        let engine = Engine::open_with_wal(config(&dir), wal.clone()).unwrap();
        engine.create_cf(T).unwrap();
        let mut batch = BatchBuilder::new();
        batch.push(&row_key(1, 0), &value(1, 8)).unwrap();
        engine.put_batch_at(T, 0x5000, batch.as_batch()).unwrap();
        engine.put_batch_at(T, 0x4000, batch.as_batch()).unwrap();
        assert!(wal.0.lock().unwrap().is_empty(), "no flush yet");
        engine.flush_cf(T).unwrap();
        assert_eq!(*wal.0.lock().unwrap(), vec![0x5000]);
        // A flag's commit LSN counts too (an asynchronous commit's record).
        engine.write_flags(T.db, [T.rel].into_iter(), 7, 0x9000, 0x4000, 0x5000).unwrap();
        engine.flush_cf(T).unwrap();
        assert_eq!(wal.0.lock().unwrap().last(), Some(&0x9000));
    }

    #[test]
    fn flags_reach_the_persisted_tier_only_with_a_flush_and_only_move_forward() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf_at(T, 0x100, true).unwrap();
        put_rows(&engine, T, [1, 2]);
        assert_eq!(engine.write_flags(T.db, [T.rel].into_iter(), 9, 0x2000, 0x1000, 0x1800).unwrap(), 1);
        let p = engine.persistence(Some(T.db)).unwrap();
        assert_eq!(p.len(), 1);
        assert!(p[0].dirty);
        assert_eq!(p[0].persisted, None, "the flag lives in the memtable only");
        assert_eq!(p[0].latest_flag_lsn, 0x2000);
        assert_eq!(p[0].created_lsn, 0x100);
        // An older commit after a newer one does not move the flag back.
        assert_eq!(engine.write_flags(T.db, [T.rel].into_iter(), 8, 0x1500, 0, 0).unwrap(), 0);
        engine.flush_cf(T).unwrap();
        let p = engine.persistence(Some(T.db)).unwrap();
        assert!(!p[0].dirty);
        let flag = p[0].persisted.expect("persisted by the flush");
        assert_eq!((flag.commit_lsn, flag.xid, flag.cf), (0x2000, 9, p[0].cf));
        // Flags of unknown tables are ignored; other databases are not listed.
        assert_eq!(engine.write_flags(T.db, [999].into_iter(), 1, 0x3000, 0, 0).unwrap(), 0);
        assert!(engine.persistence(Some(T.db + 1)).unwrap().is_empty());
        // The persisted flag and the creation LSN survive a reopen.
        drop(engine);
        let engine = open(&dir);
        let p = engine.persistence(None).unwrap();
        assert_eq!(p[0].persisted.map(|f| f.commit_lsn), Some(0x2000));
        assert_eq!(p[0].created_lsn, 0x100);
        assert!(!engine.opened_clean(), "dropped without close");
    }

    #[test]
    fn flags_within_the_interval_stay_pending_until_a_flush_or_report() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        put_rows(&engine, T, [1]);
        assert_eq!(engine.write_flags(T.db, [T.rel].into_iter(), 1, 0x100, 0, 0).unwrap(), 1);
        // Right after: pending (unless this thread was descheduled past the interval).
        let second = engine.write_flags(T.db, [T.rel].into_iter(), 2, 0x200, 0, 0).unwrap();
        assert!(second <= 1);
        let read_newest = |e: &Engine| read_flag(&e.db, &e.table_entry_name(T), false).unwrap().map(|f| f.commit_lsn);
        if second == 0 {
            assert_eq!(read_newest(&engine), Some(0x100), "the second flag waits");
        }
        // An explicit flush writes it first, so the flush persists it.
        engine.flush_cf(T).unwrap();
        let p = engine.persistence(Some(T.db)).unwrap();
        assert_eq!(p[0].persisted.map(|f| (f.commit_lsn, f.xid)), Some((0x200, 2)));
        // The report writes pending flags too.
        put_rows(&engine, T, [2]);
        std::thread::sleep(FLAG_INTERVAL);
        engine.write_flags(T.db, [T.rel].into_iter(), 3, 0x300, 0, 0).unwrap();
        engine.write_flags(T.db, [T.rel].into_iter(), 4, 0x400, 0, 0).unwrap();
        let p = engine.persistence(Some(T.db)).unwrap();
        assert_eq!(p[0].latest_flag_lsn, 0x400);
        assert_eq!(read_newest(&engine), Some(0x400));
    }
}
