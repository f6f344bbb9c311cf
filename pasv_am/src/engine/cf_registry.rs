//! The table registry: which column family holds each table `(db, rel)`.
//!
//! Owns the map from a table to the [`TableEntry`] of its current
//! incarnation, the incarnation counter in the meta CF, the DDL that changes
//! them (create, drop, drop database, truncate, truncate all) and a table's
//! statistics (`cf_info`). Every other part of the engine finds its table
//! through `lookup` and `handle` here. Calls RocksDB's column-family
//! management, the rowid floor (`rowid_allocation`) and the row lock table
//! (`locks`).
//!
//! Invariants:
//! * An incarnation number names at most one CF, ever: the counter is
//!   written and flushed before a CF or a binding carries the number, and
//!   `open` moves it past the largest number found among CF names and
//!   bindings.
//! * A table has one reachable CF. A new CF is a bound spare
//!   (`cf_spares.rs`); TRUNCATE binds the new one and unbinds the old in one
//!   durable meta batch. A CF named after its table (`t.`/`u.`, made before
//!   spares) is dropped after its successor is bound, so a crash in between
//!   leaves two incarnations, and `open` keeps the higher one and drops the
//!   others.
//! * One mutex (`Engine::ddl`) orders all DDL; the map's `RwLock` is held
//!   for a single lookup, insert or remove only.
//! * DDL that creates or removes a table's CF also clears the row locks of
//!   its `(db, rel)`: from then on those rowids name other rows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use rocksdb::{properties, BoundColumnFamily, WriteBatch};

use super::cf_spares::{binding_key, encode_binding};
use super::packing::pack_floor_key;
use super::rowid_allocation::rowid_floor_key;
use super::error::{rocks, rocks_with};
use super::persistence::FlagState;
use super::{packing, Db, Engine, EngineError};
use crate::cf_name::{parse_spare, spare_name, TableCf, META_CF};
use crate::keys::RESERVED_KEY_PREFIX;
use crate::protocol::CfRef;

/// A table copy is written in batches of about this many bytes.
const COPY_BATCH_BYTES: usize = 4 << 20;
/// Meta CF key of the next incarnation to hand out (u64 little-endian).
pub(super) const NEXT_INCARNATION_KEY: &[u8] = b"next_incarnation";
/// Incarnations start at 1; 0 never names a CF.
pub(super) const FIRST_INCARNATION: u64 = 1;
/// Meta CF key prefix of a CF's creation LSN (followed by the CF name).
const CREATED_LSN_PREFIX: &[u8] = b"created_lsn.";

/// A table's statistics (answer to `CfInfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CfInfo {
    /// The next rowid `alloc_rowids` would hand out.
    pub next_rowid: u64,
    /// One past the highest rowid that may hold a row: the table's size
    /// (PostgreSQL's `pg_relation_size`, BRIN's ranges, sampling), kept like
    /// heap's length. Rowids reserved but never written and rowids above the
    /// durable floor do not count; VACUUM's truncation lowers it.
    pub size_end: u64,
    /// RocksDB's estimate of the number of keys (all versions).
    pub approx_keys: u64,
    /// Estimated live data in SST files plus the memtables' size.
    pub approx_bytes: u64,
    /// Entries a full scan walks: every version and delete marker in the
    /// memtables plus RocksDB's estimate of the SST files' keys, a pack
    /// counted as the rows it holds. Hot rows pile versions and pruning's
    /// delete markers up here until a flush.
    pub entries: u64,
}

/// The current incarnation of one table.
#[derive(Debug)]
pub(super) struct TableEntry {
    pub(super) cf: TableCf,
    /// The CF's RocksDB name: [`TableCf::name`] for CFs created before
    /// spares (and in tests), otherwise the bound spare's `s.{n}`. Meta keys
    /// of the CF (creation LSN, rowid and pack floors) are keyed by it.
    pub(super) name: String,
    pub(super) next_rowid: AtomicU64,
    /// [`CfInfo::size_end`]: set at open and by [`Engine::trim_size`] from
    /// the rows present, raised by every write of a row. Not persisted.
    pub(super) size_end: AtomicU64,
    /// The durable rowid floor: rowids below it may be handed out. Raised
    /// (and persisted first) under `floor_raise`.
    pub(super) rowid_floor: AtomicU64,
    pub(super) floor_raise: Mutex<()>,
    /// The lowest group that may hold a pack (`u64::MAX`: none), persisted
    /// before it is lowered (`packing.rs`), under `floor_raise`.
    pub(super) pack_floor: AtomicU64,
    /// Rows packs hold beyond their keys: entries of the view that
    /// RocksDB's key count misses (an estimate, `packing::FOLDED_ROWS_KEY`).
    pub(super) folded_rows: AtomicU64,
    /// Held shared by every write of rows, from its read of packs to its
    /// write, and exclusively by the re-pack of a group (`repacking.rs`).
    pub(super) packs_stay: RwLock<()>,
    /// Highest PostgreSQL LSN whose effect may be in this CF's memtables
    /// (shared with the flush listener).
    pub(super) max_lsn: Arc<AtomicU64>,
    /// The newest flag and whether it still waits to be written.
    pub(super) flag: Mutex<FlagState>,
    /// WAL insert position when the CF was created: replay never applies a
    /// transaction that committed before it (a reused relfilenumber's past).
    pub(super) created_lsn: u64,
}

impl TableEntry {
    /// `name`: the CF's RocksDB name (`cf.name()`, or a bound spare's).
    pub(super) fn new(cf: TableCf, name: String, next_rowid: u64, created_lsn: u64) -> TableEntry {
        TableEntry {
            cf,
            name,
            next_rowid: AtomicU64::new(next_rowid),
            size_end: AtomicU64::new(0),
            rowid_floor: AtomicU64::new(next_rowid),
            floor_raise: Mutex::new(()),
            pack_floor: AtomicU64::new(u64::MAX),
            folded_rows: AtomicU64::new(0),
            packs_stay: RwLock::new(()),
            max_lsn: Arc::new(AtomicU64::new(0)),
            flag: Mutex::new(FlagState::default()),
            created_lsn,
        }
    }
}

/// DDL state, guarded by `Engine::ddl`.
#[derive(Debug)]
pub(super) struct Ddl {
    pub(super) next_incarnation: u64,
}

impl Engine {
    /// Creates the table's CF with a new incarnation and rowids from 0. An
    /// existing CF for `(db, rel)` is an orphan (its creator aborted or
    /// crashed and the relfilenumber was reused) and is dropped first.
    pub fn create_cf(&self, cf: CfRef) -> Result<TableCf, EngineError> {
        self.create_cf_at(cf, 0, true)
    }

    /// [`Engine::create_cf`], recording `created_lsn` (the WAL insert
    /// position, already durable) as the CF's creation point. `logged`:
    /// false for an unlogged or temporary table (see [`TableCf::logged`]).
    pub fn create_cf_at(&self, cf: CfRef, created_lsn: u64, logged: bool) -> Result<TableCf, EngineError> {
        let mut ddl = self.lock_ddl();
        if let Some(orphan) = self.lookup(cf) {
            self.drop_table(cf, &orphan)?;
        }
        let entry = self.create_incarnation(&mut ddl, cf, created_lsn, logged, None)?;
        let created = entry.cf;
        self.tables_mut().insert(cf, entry);
        // A new table has no rows: any lock on (db, rel) is from a past life
        // (e.g. taken while it had no CF).
        self.row_locks().forget_cf(cf);
        // A relfilenumber used before: rows cached for the old table must go.
        if self.retired_cfs().contains(&cf) {
            self.cache_changed_cfs();
        }
        // Its answers from now on are a live table's, not a dropped one's
        // (also after an engine restart, which forgot `retired_cfs`).
        if let Some(cache) = &self.row_cache {
            cache.unforget_cf(cf);
        }
        Ok(created)
    }

    /// Drops the table's CF; a missing CF is not an error (drop is idempotent).
    pub fn drop_cf(&self, cf: CfRef) -> Result<(), EngineError> {
        let _ddl = self.lock_ddl();
        match self.lookup(cf) {
            Some(entry) => self.drop_table(cf, &entry),
            // Locks may have been taken on a table that has no CF.
            None => {
                self.row_locks().forget_cf(cf);
                Ok(())
            }
        }
    }

    /// Drops every CF of database `db`; returns how many were dropped.
    ///
    /// The tables' bindings go in one meta batch and one flush: one each
    /// made DROP DATABASE cost a meta flush per table (100 tables: 0.25-0.9
    /// s against heap's 0.02-0.3).
    pub fn drop_database(&self, db: u32) -> Result<usize, EngineError> {
        let _ddl = self.lock_ddl();
        let victims: Vec<(CfRef, Arc<TableEntry>)> = self
            .tables()
            .iter()
            .filter(|(key, _)| key.db == db)
            .map(|(key, entry)| (*key, Arc::clone(entry)))
            .collect();
        let (bound, named): (Vec<_>, Vec<_>) = victims.iter().partition(|(_, entry)| parse_spare(&entry.name).is_some());
        let mut unbound = false;
        if !bound.is_empty() {
            let meta = self.meta_handle()?;
            let mut batch = WriteBatch::default();
            for (_, entry) in &bound {
                batch.delete_cf(&meta, binding_key(&entry.name));
            }
            // On failure each table is dropped alone below, with the
            // fallback a single DROP has (`drop_table`).
            unbound = self.write_meta_durably(batch, "unbind a dropped database's tables").is_ok();
        }
        for (key, entry) in &bound {
            if unbound {
                self.forget_dropped(*key, entry, true);
            } else {
                self.drop_table(*key, entry)?;
            }
        }
        for (key, entry) in &named {
            self.drop_table(*key, entry)?;
        }
        // Also the locks on tables of db that have no CF.
        self.row_locks().forget_database(db);
        Ok(victims.len())
    }

    /// Copies every table of database `from` into database `to`, which has
    /// none yet (`CREATE DATABASE ... TEMPLATE`, which copied the catalogs
    /// and with them the relfilenumbers): each gets a CF of the same kind
    /// (logged ones created at `created_lsn`) holding every row version
    /// with the same keys, so the copied indexes point at the right rows;
    /// logged copies are flushed before this returns ([`Engine::copy_cf`]).
    /// Returns the number of tables copied.
    pub fn copy_database(&self, from: u32, to: u32, created_lsn: u64) -> Result<usize, EngineError> {
        let sources: Vec<(CfRef, bool)> = {
            let _ddl = self.lock_ddl();
            self.tables().iter().filter(|(key, _)| key.db == from).map(|(key, entry)| (*key, entry.cf.logged)).collect()
        };
        for &(source, logged) in &sources {
            let target = CfRef { db: to, rel: source.rel };
            self.create_cf_at(target, if logged { created_lsn } else { 0 }, logged)?;
            self.copy_rows(source, target)?;
        }
        self.cache_changed_cfs();
        Ok(sources.len())
    }

    /// Empties the table: a new, empty incarnation of the same kind replaces
    /// the CF, and its rowids restart at 0. Returns the new incarnation.
    ///
    /// The new CF is bound before (or as) the old one is unbound or dropped,
    /// so a crash never leaves the table without a CF, and open keeps the
    /// new (empty) one.
    pub fn truncate_cf(&self, cf: CfRef) -> Result<TableCf, EngineError> {
        self.truncate_cf_at(cf, 0)
    }

    /// [`Engine::truncate_cf`] with the new CF's creation LSN.
    pub fn truncate_cf_at(&self, cf: CfRef, created_lsn: u64) -> Result<TableCf, EngineError> {
        let mut ddl = self.lock_ddl();
        let old = self.lookup(cf).ok_or(EngineError::NoSuchCf(cf))?;
        let entry = self.create_incarnation(&mut ddl, cf, created_lsn, old.cf.logged, Some(&old))?;
        let created = entry.cf;
        self.tables_mut().insert(cf, entry);
        // Rowids restart at 0 from now on; even if dropping the old CF fails.
        self.row_locks().forget_cf(cf);
        self.lsn_book.forget(&old.name);
        // Same (db, rel), new rows: nothing cached for the old ones holds.
        self.cache_changed_cfs();
        if parse_spare(&old.name).is_some() {
            // Unbound in the new binding's batch: the keeper drops it.
            self.retire(old.name.clone());
        } else {
            self.db
                .drop_cf(&old.name)
                .map_err(rocks_with(|| format!("drop truncated {}", old.name)))?;
        }
        Ok(created)
    }

    /// Empties every table (the `unlogged` mode after a crash: like
    /// PostgreSQL's unlogged tables, their contents are gone). Unlike
    /// TRUNCATE, rowids do not restart: PostgreSQL indexes on the tables
    /// survive the crash, and their stale entries must never point at new
    /// rows. The floor is stored durably for each new CF.
    pub fn truncate_all(&self) -> Result<usize, EngineError> {
        self.truncate_where(|_| true)
    }

    /// Empties every unlogged (and temporary) table, as [`truncate_all`]
    /// does; `open` calls it after a crash, when their memtables are lost
    /// and only whatever RocksDB happened to flush is left.
    ///
    /// [`truncate_all`]: Engine::truncate_all
    pub fn truncate_unlogged(&self) -> Result<usize, EngineError> {
        self.truncate_where(|entry| !entry.cf.logged)
    }

    fn truncate_where(&self, pick: impl Fn(&TableEntry) -> bool) -> Result<usize, EngineError> {
        let all: Vec<(CfRef, u64)> = self
            .tables()
            .iter()
            .filter(|(_, entry)| pick(entry))
            .map(|(cf, entry)| (*cf, entry.next_rowid.load(Ordering::Relaxed)))
            .collect();
        for (cf, floor) in &all {
            self.truncate_cf(*cf)?;
            let entry = self.lookup(*cf).ok_or(EngineError::NoSuchCf(*cf))?;
            self.skip_rowids_below(&entry, *floor)?;
        }
        Ok(all.len())
    }

    /// Copies every row version of `from` into `to`, a new and empty table
    /// (`ALTER TABLE ... SET TABLESPACE` gives the table a new
    /// relfilenumber): the same keys, so PostgreSQL's indexes still point at
    /// the right rows. `to`'s rowid floor is raised to `from`'s next rowid,
    /// so no rowid `from` handed out is handed out again. The copy is not
    /// logged: a logged table's copy is flushed before this returns (a
    /// crash after the transaction commits finds it on disk, and messages
    /// logged before `to` was created never replay into it). Flags are not
    /// copied; `to` gets its own at its next commit. Returns the entries
    /// copied. Rows cached for `to` are retired, whether or not it succeeds.
    pub fn copy_cf(&self, from: CfRef, to: CfRef) -> Result<u64, EngineError> {
        let copied = self.copy_rows(from, to);
        self.cache_changed_cfs();
        copied
    }

    fn copy_rows(&self, from: CfRef, to: CfRef) -> Result<u64, EngineError> {
        let _ddl = self.lock_ddl();
        let source = self.lookup(from).ok_or(EngineError::NoSuchCf(from))?;
        let target = self.lookup(to).ok_or(EngineError::NoSuchCf(to))?;
        let source_handle = self.handle(from, &source)?;
        let target_handle = self.handle(to, &target)?;
        // Rows only: the flag and any other metadata key sort above them.
        let mut read_options = rocksdb::ReadOptions::default();
        read_options.set_iterate_upper_bound([RESERVED_KEY_PREFIX]);
        read_options.set_total_order_seek(true);
        read_options.fill_cache(false);
        let mut iter = self.db.raw_iterator_cf_opt(&source_handle, read_options);
        iter.seek_to_first();
        // The copy holds the source's packs: its deletes must hide their entries too.
        let pack_floor = source.pack_floor.load(Ordering::Acquire);
        if pack_floor != u64::MAX {
            self.lower_pack_floor(&target, pack_floor)?;
        }
        let mut batch = rocksdb::WriteBatch::default();
        let mut copied = 0u64;
        while let (Some(key), Some(value)) = (iter.key(), iter.value()) {
            batch.put_cf(&target_handle, key, value);
            copied += 1;
            if batch.size_in_bytes() >= COPY_BATCH_BYTES {
                self.write_copy(&mut batch, &target.name)?;
            }
            iter.next();
        }
        iter.status().map_err(rocks_with(|| format!("read {} to copy it", source.name)))?;
        let folded = source.folded_rows.load(Ordering::Relaxed);
        if folded > 0 {
            target.folded_rows.store(folded, Ordering::Relaxed);
            batch.put_cf(&target_handle, packing::FOLDED_ROWS_KEY, folded.to_le_bytes());
        }
        self.write_copy(&mut batch, &target.name)?;
        self.skip_rowids_below(&target, source.next_rowid.load(Ordering::Relaxed))?;
        target.size_end.fetch_max(source.size_end.load(Ordering::Relaxed), Ordering::Relaxed);
        if target.cf.logged {
            self.db
                .flush_cf(&target_handle)
                .map_err(rocks_with(|| format!("flush the copy {}", target.name)))?;
        }
        Ok(copied)
    }

    fn write_copy(&self, batch: &mut rocksdb::WriteBatch, name: &str) -> Result<(), EngineError> {
        if batch.is_empty() {
            return Ok(());
        }
        let full = std::mem::take(batch);
        self.write_batch(|| rocksdb::WriteBatch::from_data(full.data()), || format!("write the copy {name}"))
    }

    /// The table's next rowid and RocksDB's size estimates.
    pub fn cf_info(&self, cf: CfRef) -> Result<CfInfo, EngineError> {
        let entry = self.lookup(cf).ok_or(EngineError::NoSuchCf(cf))?;
        let handle = self.handle(cf, &entry)?;
        let property = |name: &properties::PropName| {
            self.db
                .property_int_value_cf(&handle, name)
                .map(Option::unwrap_or_default)
                .map_err(rocks_with(|| format!("read properties of {}", entry.name)))
        };
        let approx_keys = property(properties::ESTIMATE_NUM_KEYS)?;
        let memtable_entries = property(properties::NUM_ENTRIES_ACTIVE_MEM_TABLE)?
            .saturating_add(property(properties::NUM_ENTRIES_IMM_MEM_TABLES)?);
        // Every entry of the table's SST files, delete markers and the keys
        // they hide included: a scan steps over all of them until a
        // compaction drops them. (RocksDB's key estimate subtracts each
        // delete twice, the marker and the put it hides, and reached 0 for
        // a 16-row table whose pruned versions sat in another file: the
        // planner then took the table for empty. PostgreSQL's core suite,
        // select_parallel.)
        let sst_entries = self
            .db
            .property_value_cf(&handle, properties::AGGREGATED_TABLE_PROPERTIES)
            .map_err(rocks_with(|| format!("read table properties of {}", entry.name)))?
            .and_then(|props| table_property(&props, "# entries"))
            .unwrap_or(0);
        Ok(CfInfo {
            next_rowid: entry.next_rowid.load(Ordering::Relaxed),
            size_end: entry.size_end.load(Ordering::Relaxed),
            approx_keys,
            approx_bytes: property(properties::ESTIMATE_LIVE_DATA_SIZE)?
                .saturating_add(property(properties::CUR_SIZE_ALL_MEM_TABLES)?),
            // A pack is one entry in RocksDB's counts and as many rows as
            // it holds.
            entries: memtable_entries
                .saturating_add(sst_entries)
                .saturating_add(entry.folded_rows.load(Ordering::Relaxed)),
        })
    }

    /// The current incarnation of every table, ordered.
    pub fn list_table_cfs(&self) -> Vec<TableCf> {
        let mut cfs: Vec<TableCf> = self.tables().values().map(|entry| entry.cf).collect();
        cfs.sort();
        cfs
    }

    #[cfg(test)]
    pub(super) fn table_entry_name(&self, cf: CfRef) -> String {
        self.lookup(cf).expect("table exists").name.clone()
    }

    /// The current incarnation of one table.
    pub fn table_cf(&self, cf: CfRef) -> Option<TableCf> {
        self.lookup(cf).map(|entry| entry.cf)
    }

    pub(super) fn lookup(&self, cf: CfRef) -> Option<Arc<TableEntry>> {
        self.tables().get(&cf).cloned()
    }

    pub(super) fn handle(
        &self,
        cf: CfRef,
        entry: &TableEntry,
    ) -> Result<Arc<BoundColumnFamily<'_>>, EngineError> {
        // Missing only if a concurrent DDL dropped it after the lookup.
        self.db
            .cf_handle(&entry.name)
            .ok_or(EngineError::NoSuchCf(cf))
    }

    /// Hands out the next incarnation and gives it a CF: a ready spare
    /// (`cf_spares.rs`), or one created now if none is ready. The binding,
    /// the counter and the creation LSN are durable (one meta flush) before
    /// this returns, with the removal of `replacing`'s binding if that is a
    /// spare (TRUNCATE: the new CF and the old one's end in one batch). The
    /// caller holds the DDL lock, publishes the entry and retires the old.
    fn create_incarnation(
        &self,
        ddl: &mut Ddl,
        cf: CfRef,
        created_lsn: u64,
        logged: bool,
        replacing: Option<&TableEntry>,
    ) -> Result<Arc<TableEntry>, EngineError> {
        let spare = self.take_spare();
        let incarnation = ddl.next_incarnation;
        // Without a spare, the next number names the CF created below.
        let number = spare.unwrap_or(incarnation.saturating_add(1));
        let next = incarnation.max(number).checked_add(1).ok_or_else(|| {
            if let Some(number) = spare {
                self.return_spare(number);
            }
            EngineError::Corruption("incarnation counter overflow".into())
        })?;
        let table = TableCf { db: cf.db, rel: cf.rel, incarnation, logged };
        let name = spare_name(number);
        let meta = self.meta_handle()?;
        let mut batch = WriteBatch::default();
        batch.put_cf(&meta, NEXT_INCARNATION_KEY, next.to_le_bytes());
        batch.put_cf(&meta, binding_key(&name), encode_binding(table));
        batch.put_cf(&meta, created_lsn_key(&name), created_lsn.to_le_bytes());
        // A spare may be a dropped table's CF that a crash left unbound and
        // empty (`cf_spares.rs`): what meta still says of it is not ours.
        batch.delete_cf(&meta, rowid_floor_key(&name));
        batch.delete_cf(&meta, pack_floor_key(&name));
        if let Some(old) = replacing.filter(|old| parse_spare(&old.name).is_some()) {
            batch.delete_cf(&meta, binding_key(&old.name));
        }
        if let Err(e) = self.write_meta_durably(batch, "persist a binding") {
            if let Some(number) = spare {
                self.return_spare(number);
            }
            return Err(e);
        }
        ddl.next_incarnation = next;
        if spare.is_none() {
            // A binding already durable for a CF that creation fails to make
            // is removed at the next open (its number is never used again).
            self.db
                .create_cf(&name, &self.cf_options)
                .map_err(rocks_with(|| format!("create column family {name} for {table}")))?;
        }
        let entry = Arc::new(TableEntry::new(table, name, 0, created_lsn));
        self.lsn_book.register(&entry.name, Arc::clone(&entry.max_lsn));
        Ok(entry)
    }

    /// Drops `entry`'s CF, then forgets it and the locks on it. A bound
    /// spare is unbound durably (one meta flush) and left to the keeper to
    /// drop: RocksDB's drop costs what a creation does. The caller holds the
    /// DDL lock.
    fn drop_table(&self, cf: CfRef, entry: &TableEntry) -> Result<(), EngineError> {
        let mut spare = parse_spare(&entry.name).is_some();
        if spare {
            let meta = self.meta_handle()?;
            let mut batch = WriteBatch::default();
            batch.delete_cf(&meta, binding_key(&entry.name));
            if let Err(unbind) = self.write_meta_durably(batch, "unbind a dropped table") {
                // No room for the meta flush (a full disk, when dropping a
                // table is how a user makes room): RocksDB's own drop may
                // still work; the binding left behind names no CF then and
                // open removes it.
                if self.db.drop_cf(&entry.name).is_err() {
                    return Err(unbind);
                }
                spare = false;
            }
        } else if self.db.cf_handle(&entry.name).is_some() {
            // A handle already gone means an earlier attempt got as far as
            // RocksDB's drop: only our map entry is left.
            self.db
                .drop_cf(&entry.name)
                .map_err(rocks_with(|| format!("drop column family {}", entry.name)))?;
        }
        self.forget_dropped(cf, entry, spare);
        Ok(())
    }

    /// What dropping `entry` leaves to do once its CF is unbound (`spare`:
    /// the keeper drops it) or dropped: the engine forgets the table.
    fn forget_dropped(&self, cf: CfRef, entry: &TableEntry, spare: bool) {
        {
            let mut tables = self.tables_mut();
            if tables
                .get(&cf)
                .is_some_and(|current| current.cf == entry.cf)
            {
                tables.remove(&cf);
            }
        }
        self.row_locks().forget_cf(cf);
        self.lsn_book.forget(&entry.name);
        if spare {
            self.retire(entry.name.clone());
        }
        // Creating (db, rel) again retires what may still be cached of it.
        self.retired_cfs().insert(cf);
        // Its cached answers are never asked for again: bulk loads may take
        // their ways (row_cache.rs, `forget_cf`).
        if let Some(cache) = &self.row_cache {
            cache.forget_cf(cf);
        }
    }

    /// Tables dropped since the engine opened: creating one again retires
    /// every cached row (see `cache_changed_cfs`). Other DDL leaves the row
    /// cache alone, so dropping the old files of a TRUNCATE or a rewrite
    /// does not empty it.
    fn retired_cfs(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<CfRef>> {
        self.retired_cfs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    // The map is only ever changed by single insert/remove calls, so a panic
    // while it was locked cannot have left it half-updated: poisoning is ignored.
    pub(super) fn tables(&self) -> RwLockReadGuard<'_, HashMap<CfRef, Arc<TableEntry>>> {
        self.tables.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn tables_mut(&self) -> RwLockWriteGuard<'_, HashMap<CfRef, Arc<TableEntry>>> {
        self.tables.write().unwrap_or_else(PoisonError::into_inner)
    }

    // `next_incarnation` is advanced only after the counter is durable, so it is
    // never ahead of what is persisted: poisoning is ignored here too.
    pub(super) fn lock_ddl(&self) -> MutexGuard<'_, Ddl> {
        self.ddl.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The number RocksDB's table-properties text (`# entries=33; # deletions=0;
/// ...`) gives for `name`.
fn table_property(props: &str, name: &str) -> Option<u64> {
    props.split(';').find_map(|field| field.trim().strip_prefix(name)?.trim_start().strip_prefix('=')?.trim().parse().ok())
}

pub(super) fn created_lsn_key(cf_name: &str) -> Vec<u8> {
    [CREATED_LSN_PREFIX, cf_name.as_bytes()].concat()
}

pub(super) fn read_next_incarnation(db: &Db) -> Result<u64, EngineError> {
    let meta = db
        .cf_handle(META_CF)
        .ok_or_else(|| EngineError::Corruption(format!("column family {META_CF} is missing")))?;
    let Some(bytes) = db
        .get_cf(&meta, NEXT_INCARNATION_KEY)
        .map_err(rocks("read the incarnation counter"))?
    else {
        return Ok(FIRST_INCARNATION);
    };
    let bytes: [u8; 8] = bytes.as_slice().try_into().map_err(|_| {
        EngineError::Corruption(format!("incarnation counter of {} bytes", bytes.len()))
    })?;
    Ok(u64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{open, put_rows, rowids_of, scan_all, TempDir, T};
    use super::*;
    use crate::keys::{row_key, row_range, MAX_ROWID};
    use crate::protocol::{BatchBuilder, ErrorCode, ScanWriter};
    /// A table's entries are what a scan walks, delete markers and the
    /// versions they hide in other SST files included: RocksDB's key
    /// estimate subtracts deletes, and said 0 for a 16-row table of
    /// PostgreSQL's core suite (select_parallel's f_star), which the
    /// planner then took for empty.
    #[test]
    fn entries_count_sst_files_with_deletes() {
        use super::super::test_support::value;
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        // 16 rows, each with an old version, flushed; then the old
        // versions removed (an empty value deletes) beside 17 new rows,
        // flushed apart. (The new rows keep the markers under half of their
        // file: a file of markers only is compacted at once, in the
        // background, by the delete-triggered rule (`delete_markers.rs`), and
        // the markers were sometimes gone before the count was read.)
        let mut batch = BatchBuilder::new();
        for rowid in 0..16u64 {
            batch.push(&row_key(rowid, 1), &value(rowid, 8)).unwrap();
            batch.push(&row_key(rowid, 0), &value(rowid, 8)).unwrap();
        }
        engine.put_batch(T, batch.as_batch()).unwrap();
        engine.flush_cf(T).unwrap();
        let mut batch = BatchBuilder::new();
        for rowid in 0..16u64 {
            batch.push(&row_key(rowid, 0), &[]).unwrap();
        }
        for rowid in 16..33u64 {
            batch.push(&row_key(rowid, 0), &value(rowid, 8)).unwrap();
        }
        engine.put_batch(T, batch.as_batch()).unwrap();
        engine.flush_cf(T).unwrap();
        // A scan walks all 65: 49 versions and 16 markers.
        let info = engine.cf_info(T).unwrap();
        assert_eq!(info.entries, 65, "{info:?}");
        assert_eq!(table_property("# data blocks=1; # entries=33; # deletions=16", "# entries"), Some(33));
        assert_eq!(table_property("# entries=33", "# deletions"), None);
    }

    /// A dropped table's cached answers give their ways to a later bulk
    /// load: before, they kept them until replaced, and a bulk load takes
    /// only free ways, so a TPC-C load after the bulk benchmark's dropped
    /// tables started with a fifth of its rows uncached.
    #[test]
    fn a_dropped_tables_cached_rows_make_room_for_a_bulk_load() {
        use super::super::test_support::{open_with_row_cache, value};
        let dir = TempDir::new();
        let (mem, cache, engine) = open_with_row_cache(&dir, 1);
        let load = |cf: CfRef, lsn: u64| {
            let mut bulk = BatchBuilder::new();
            for rowid in 0..200 {
                bulk.push(&row_key(rowid, 0), &value(rowid, 8)).unwrap();
            }
            engine.put_batch_at(cf, lsn, bulk.as_batch()).unwrap();
            (0..200).filter(|&r| cache.lookup(cf, r, &mut [0u8; 4096]).is_some()).count()
        };
        let (a, b, c) = (T, CfRef { db: T.db, rel: T.rel + 1 }, CfRef { db: T.db, rel: T.rel + 2 });
        engine.create_cf(a).unwrap();
        let cached_a = load(a, 10);
        assert!(cached_a > 0 && cached_a < 200, "the one set takes some of a's rows ({cached_a})");
        engine.create_cf(b).unwrap();
        assert_eq!(load(b, 20), 0, "a full set of a live table's answers takes no bulk row");
        engine.drop_cf(a).unwrap();
        engine.create_cf(c).unwrap();
        assert_eq!(load(c, 30), cached_a, "c's bulk rows take the ways a's answers held");
        drop(mem);
    }

    #[test]
    fn truncate_empties_and_restarts_rowids() {
        let dir = TempDir::new();
        let engine = open(&dir);
        let before = engine.create_cf(T).unwrap();
        engine.alloc_rowids(T, 100).unwrap();
        put_rows(&engine, T, 0..100);
        let after = engine.truncate_cf(T).unwrap();
        assert!(after.incarnation > before.incarnation);
        assert_eq!(engine.table_cf(T), Some(after));
        assert_eq!(engine.list_table_cfs(), [after]);
        let (lo, hi) = row_range(0, MAX_ROWID + 1);
        assert!(scan_all(&engine, T, &lo, &hi, 4096, 0).0.is_empty());
        assert_eq!(engine.alloc_rowids(T, 1).unwrap(), 0);
        assert!(matches!(
            engine.truncate_cf(CfRef { db: 5, rel: 1 }),
            Err(EngineError::NoSuchCf(_))
        ));
    }

    #[test]
    fn truncate_all_keeps_rowids_from_restarting_across_reopen() {
        let dir = TempDir::new();
        {
            let engine = open(&dir);
            engine.create_cf(T).unwrap();
            let mut batch = BatchBuilder::new();
            batch.push(&row_key(41, 0), b"row").unwrap();
            engine.put_batch(T, batch.as_batch()).unwrap();
            assert_eq!(engine.truncate_all().unwrap(), 1);
            assert_eq!(engine.cf_info(T).unwrap().next_rowid, 42);
        }
        let engine = open(&dir);
        assert_eq!(engine.cf_info(T).unwrap().next_rowid, 42);
        assert_eq!(engine.alloc_rowids(T, 1).unwrap(), 42);
    }

    #[test]
    fn unlogged_tables_survive_a_clean_close_and_come_back_empty_after_a_crash() {
        let dir = TempDir::new();
        let logged = CfRef { db: 5, rel: 1 };
        let unlogged = CfRef { db: 5, rel: 2 };
        let all = || row_range(0, MAX_ROWID + 1);
        {
            let engine = open(&dir);
            engine.create_cf_at(logged, 0x10, true).unwrap();
            let u = engine.create_cf_at(unlogged, 0, false).unwrap();
            assert!(!u.logged);
            put_rows(&engine, logged, 0..5);
            put_rows(&engine, unlogged, 0..5);
            // No flags and no persistence row: nothing replays it.
            let written = engine.write_flags(5, [1, 2].into_iter(), 9, 0x100, 0x20, 0x30).unwrap();
            assert_eq!(written, 1);
            let report = engine.persistence(Some(5)).unwrap();
            assert_eq!(report.iter().map(|p| p.cf.rel).collect::<Vec<_>>(), [1]);
            // TRUNCATE keeps the kind.
            engine.alloc_rowids(unlogged, 5).unwrap();
            assert!(!engine.truncate_cf(unlogged).unwrap().logged);
            put_rows(&engine, unlogged, 0..5);
            engine.close(true).unwrap();
        }
        {
            let engine = open(&dir);
            assert!(engine.opened_clean());
            assert_eq!(engine.table_cf(unlogged).map(|t| t.logged), Some(false));
            let (lo, hi) = all();
            assert_eq!(scan_all(&engine, unlogged, &lo, &hi, 4096, 0).0.len(), 5, "kept by a clean close");
            put_rows(&engine, unlogged, 5..8);
            // Some of its rows reach SST files before the crash.
            engine.flush_cf(unlogged).unwrap();
            put_rows(&engine, unlogged, 8..9);
            engine.flush_cf(logged).unwrap();
            // Dropped without close: a crash.
        }
        let engine = open(&dir);
        assert!(!engine.opened_clean());
        let (lo, hi) = all();
        assert!(scan_all(&engine, unlogged, &lo, &hi, 4096, 0).0.is_empty(), "emptied after a crash");
        assert_eq!(scan_all(&engine, logged, &lo, &hi, 4096, 0).0.len(), 5, "logged rows stay");
        assert_eq!(engine.table_cf(unlogged).map(|t| t.logged), Some(false));
        // Rowids do not restart: indexes may still name the lost rows.
        assert!(engine.alloc_rowids(unlogged, 1).unwrap() >= 9);
    }

    #[test]
    fn copy_keeps_every_version_and_rowid_and_survives_a_crash() {
        let dir = TempDir::new();
        let to = CfRef { db: T.db, rel: T.rel + 1 };
        let all = || row_range(0, MAX_ROWID + 1);
        let before;
        {
            let engine = open(&dir);
            engine.create_cf(T).unwrap();
            engine.alloc_rowids(T, 500).unwrap();
            put_rows(&engine, T, 0..50);
            engine.flush_cf(T).unwrap();
            // A second version of some rows, and rows only in the memtable.
            let mut batch = BatchBuilder::new();
            for rowid in 0..10 {
                batch.push(&row_key(rowid, 1), b"newer").unwrap();
            }
            engine.put_batch(T, batch.as_batch()).unwrap();
            put_rows(&engine, T, 50..60);
            engine.write_flags(T.db, [T.rel].into_iter(), 3, 0x100, 0, 0).unwrap();
            let (lo, hi) = all();
            before = scan_all(&engine, T, &lo, &hi, 1 << 16, 0).0;
            assert_eq!(before.len(), 70);
            engine.create_cf(to).unwrap();
            assert_eq!(engine.copy_cf(T, to).unwrap(), 70);
            assert_eq!(scan_all(&engine, to, &lo, &hi, 1 << 16, 0).0, before);
            // The source's reserved rowids are not handed out again.
            assert_eq!(engine.alloc_rowids(to, 1).unwrap(), 500);
            assert!(matches!(engine.copy_cf(CfRef { db: 9, rel: 9 }, to), Err(EngineError::NoSuchCf(_))));
            // Dropped without close: a crash.
        }
        let engine = open(&dir);
        assert!(!engine.opened_clean());
        let (lo, hi) = all();
        assert_eq!(scan_all(&engine, to, &lo, &hi, 1 << 16, 0).0, before, "the copy was durable");
        assert!(engine.alloc_rowids(to, 1).unwrap() >= 501);
    }

    #[test]
    fn copy_database_copies_every_table_with_its_kind_and_survives_a_crash() {
        let dir = TempDir::new();
        let logged = T;
        let unlogged = CfRef { db: T.db, rel: T.rel + 1 };
        let other_db = CfRef { db: T.db + 1, rel: T.rel + 2 };
        let to = T.db + 10;
        let all = || row_range(0, MAX_ROWID + 1);
        let (lo, hi) = all();
        let (before_logged, before_unlogged);
        {
            let engine = open(&dir);
            engine.create_cf(logged).unwrap();
            engine.create_cf_at(unlogged, 0, false).unwrap();
            engine.create_cf(other_db).unwrap();
            engine.alloc_rowids(logged, 300).unwrap();
            put_rows(&engine, logged, 0..40);
            engine.flush_cf(logged).unwrap();
            put_rows(&engine, logged, 40..60); // memtable only
            put_rows(&engine, unlogged, 0..7);
            put_rows(&engine, other_db, 0..5);
            before_logged = scan_all(&engine, logged, &lo, &hi, 1 << 16, 0).0;
            before_unlogged = scan_all(&engine, unlogged, &lo, &hi, 1 << 16, 0).0;
            assert_eq!(engine.copy_database(T.db, to, 0x500).unwrap(), 2, "the two tables of the source only");
            let copy = |cf: CfRef| CfRef { db: to, rel: cf.rel };
            assert_eq!(scan_all(&engine, copy(logged), &lo, &hi, 1 << 16, 0).0, before_logged);
            assert_eq!(scan_all(&engine, copy(unlogged), &lo, &hi, 1 << 16, 0).0, before_unlogged);
            assert_eq!(engine.table_cf(copy(logged)).map(|t| t.logged), Some(true));
            assert_eq!(engine.table_cf(copy(unlogged)).map(|t| t.logged), Some(false));
            assert_eq!(engine.table_cf(CfRef { db: to, rel: other_db.rel }), None, "another database's table stays");
            // The source's reserved rowids are not handed out again in the copy.
            assert_eq!(engine.alloc_rowids(copy(logged), 1).unwrap(), 300);
            // Dropped without close: a crash.
        }
        let engine = open(&dir);
        let copy = CfRef { db: to, rel: logged.rel };
        assert_eq!(scan_all(&engine, copy, &lo, &hi, 1 << 16, 0).0, before_logged, "the logged copy was durable");
        assert_eq!(scan_all(&engine, logged, &lo, &hi, 1 << 16, 0).0, before_logged, "the source is unchanged");
    }

    #[test]
    fn drop_and_recreate_gives_an_empty_new_incarnation() {
        let dir = TempDir::new();
        let engine = open(&dir);
        let first = engine.create_cf(T).unwrap();
        put_rows(&engine, T, 0..10);
        engine.drop_cf(T).unwrap();
        assert_eq!(engine.table_cf(T), None);
        engine.drop_cf(T).unwrap(); // idempotent
        assert!(matches!(engine.cf_info(T), Err(EngineError::NoSuchCf(T))));
        let (lo, hi) = row_range(0, 10);
        let mut out = [0u8; 64];
        assert_eq!(
            engine
                .scan(T, &lo, &hi, &mut ScanWriter::new(&mut out, 0))
                .unwrap_err()
                .code(),
            ErrorCode::NoSuchCf
        );

        let second = engine.create_cf(T).unwrap();
        assert!(second.incarnation > first.incarnation);
        assert!(scan_all(&engine, T, &lo, &hi, 4096, 0).0.is_empty());
        assert_eq!(engine.cf_info(T).unwrap().next_rowid, 0);
    }

    #[test]
    fn create_over_an_orphan_replaces_it() {
        let dir = TempDir::new();
        let engine = open(&dir);
        let orphan = engine.create_cf(T).unwrap();
        put_rows(&engine, T, 0..10);
        let fresh = engine.create_cf(T).unwrap();
        assert!(fresh.incarnation > orphan.incarnation);
        assert_eq!(engine.list_table_cfs(), [fresh]);
        let (lo, hi) = row_range(0, 10);
        assert!(scan_all(&engine, T, &lo, &hi, 4096, 0).0.is_empty());
    }

    #[test]
    fn drop_database_drops_only_its_tables() {
        let dir = TempDir::new();
        let engine = open(&dir);
        let keep = CfRef { db: 6, rel: 16384 };
        for cf in [CfRef { db: 5, rel: 1 }, CfRef { db: 5, rel: 2 }, keep] {
            engine.create_cf(cf).unwrap();
            put_rows(&engine, cf, 0..3);
        }
        assert_eq!(engine.drop_database(5).unwrap(), 2);
        assert_eq!(engine.drop_database(5).unwrap(), 0);
        let remaining: Vec<CfRef> = engine
            .list_table_cfs()
            .iter()
            .map(|t| CfRef {
                db: t.db,
                rel: t.rel,
            })
            .collect();
        assert_eq!(remaining, [keep]);
        engine.close(true).unwrap();
        let engine = open(&dir);
        assert_eq!(engine.list_table_cfs().len(), 1);
        let (lo, hi) = row_range(0, 10);
        assert_eq!(scan_all(&engine, keep, &lo, &hi, 4096, 0).0.len(), 3);
    }

    #[test]
    fn drop_database_unbinds_its_tables_in_one_flush() {
        let dir = TempDir::new();
        let engine = open(&dir);
        let keep = CfRef { db: 6, rel: 16384 };
        let doomed: Vec<CfRef> = (1..=20).map(|rel| CfRef { db: 5, rel }).collect();
        for &cf in doomed.iter().chain([&keep]) {
            engine.create_cf(cf).unwrap();
            put_rows(&engine, cf, 0..3);
        }
        let before = engine.meta_flushes();
        assert_eq!(engine.drop_database(5).unwrap(), doomed.len());
        assert_eq!(engine.meta_flushes() - before, 1, "one flush for every binding");
        for &cf in &doomed {
            assert!(engine.lookup(cf).is_none());
        }
        // Durable: a crash (no clean close) brings back only the other database's table.
        drop(engine);
        let engine = open(&dir);
        let remaining: Vec<(u32, u32)> = engine.list_table_cfs().iter().map(|t| (t.db, t.rel)).collect();
        assert_eq!(remaining, [(keep.db, keep.rel)]);
        let (lo, hi) = row_range(0, 10);
        assert_eq!(scan_all(&engine, keep, &lo, &hi, 4096, 0).0.len(), 3);
        // The dropped tables' rows are gone with their CFs: a new table of
        // the same relfilenumber starts empty.
        engine.create_cf(doomed[0]).unwrap();
        assert!(scan_all(&engine, doomed[0], &lo, &hi, 4096, 0).0.is_empty());
    }

    #[test]
    fn reopen_keeps_data_tables_and_incarnations() {
        let dir = TempDir::new();
        let engine = open(&dir);
        let a = CfRef { db: 1, rel: 100 };
        let b = CfRef { db: 1, rel: 200 };
        engine.create_cf(a).unwrap();
        let dropped = engine.create_cf(b).unwrap();
        put_rows(&engine, a, 0..300);
        engine.drop_cf(b).unwrap();
        let tables = engine.list_table_cfs();
        let info = engine.cf_info(a).unwrap();
        assert!(info.approx_keys > 0 && info.approx_bytes > 0, "{info:?}");
        engine.close(true).unwrap();

        let engine = open(&dir);
        assert_eq!(engine.list_table_cfs(), tables);
        let (lo, hi) = row_range(0, MAX_ROWID + 1);
        let (rows, _) = scan_all(&engine, a, &lo, &hi, 1 << 16, 0);
        assert_eq!(rowids_of(&rows), (0..300).collect::<Vec<_>>());
        assert_eq!(engine.cf_info(a).unwrap().next_rowid, 300);
        // The counter was persisted: the dropped table's incarnation is not reused.
        let again = engine.create_cf(b).unwrap();
        assert!(again.incarnation > dropped.incarnation);
    }
}
