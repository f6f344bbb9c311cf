//! The storage engine: one RocksDB instance holding every pasv table.
//!
//! This file owns the [`Engine`] value itself: opening RocksDB with the
//! options every CF shares, rebuilding the table map from the CF names and
//! the meta CF, and closing. Each thing the engine does lives in its own
//! file, as an `impl Engine` block over the same fields:
//!
//! * `cf_registry` — which CF is a table's current incarnation; create,
//!   drop and truncate; a table's statistics.
//! * `rowid_allocation` — where a new row gets its rowid, and why no rowid
//!   is ever handed out twice.
//! * `put_batch` — atomic writes of row versions and deletes.
//! * `packing` — new rows written as packs, the count of packed rows, and
//!   which deletes must hide a packed entry (those of rows a pack holds,
//!   all at or above the CF's pack floor).
//! * `repacking` — a packed group's later first versions (VACUUM's frozen
//!   copies, the markers of removals) folded back into its pack.
//! * `row_view` — the rows as readers see them, packs opened.
//! * `scan` — range reads: every entry, or a row's few newest versions.
//! * `persistence` — flush flags, memtable flushes, the persistence report.
//! * `delete_markers` — the options that keep deleted keys from slowing
//!   scans.
//! * `locks` — the in-memory row lock table, reached through the engine.
//! * `config`, `error` — how it is opened and what can fail.
//!
//! May call RocksDB and this crate's codecs (keys, CF names, flush flags,
//! protocol types, WAL ordering); never PostgreSQL or shared memory. The
//! engine worker reaches it through [`crate::server`].
//!
//! Invariants kept by this file (each concept's file states its own):
//! * RocksDB's WAL is off for every write: PostgreSQL's WAL already holds
//!   each change. Only the `engine_wal` mode, the double-logging baseline of
//!   DESIGN §7, turns it on.
//! * No memtable reaches disk ahead of the PostgreSQL WAL that logged it:
//!   writers raise their CF's `max_lsn` first, and the flush listener of
//!   [`crate::wal_order`] waits for the WAL to be durable that far.
//! * Memory stays bounded however many tables exist: all CFs draw on one
//!   memtable budget (`WriteBufferManager`) and one LRU block cache, which
//!   is charged for index and filter blocks too.
//! * `opened_clean` is true only if no memtable content was lost: a clean
//!   `close` leaves a marker in the meta CF, and `open` deletes it durably
//!   before it writes anything else.
//! * [`Engine`] is `Send + Sync`: the worker's service threads share one.

mod cf_registry;
mod cf_spares;
mod config;
mod delete_markers;
mod error;
mod locks;
mod packing;
mod persistence;
mod put_batch;
mod repacking;
mod row_view;
mod rowid_allocation;
mod scan;
mod stall;
#[cfg(test)]
pub(crate) mod test_support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use rocksdb::{
    BlockBasedOptions, BoundColumnFamily, Cache, ColumnFamilyDescriptor, DBCompressionType,
    DBWithThreadMode, MultiThreaded, Options, SliceTransform, WriteBufferManager, WriteOptions,
    DEFAULT_COLUMN_FAMILY_NAME,
};

use crate::cf_name::{TableCf, META_CF};
use crate::keys::ROWID_PREFIX_LEN;
use crate::protocol::CfRef;
use crate::row_cache::RowCache;
use crate::row_locks::RowLockTable;
use crate::wal_order::{self, LsnBook, NoWal, WalDurability};

use cf_registry::{created_lsn_key, read_next_incarnation, Ddl, TableEntry, FIRST_INCARNATION};
use error::{rocks, rocks_with};
use persistence::read_flag;
use rowid_allocation::{next_rowid_from_data, rowid_floor_key};

pub use crate::row_locks::LockOutcome;
pub use cf_registry::CfInfo;
pub use cf_spares::SPARE_TARGET;
pub use config::{Durability, EngineConfig};
pub use error::EngineError;
pub use persistence::CfPersistence;
pub use repacking::Repacked;

type Db = DBWithThreadMode<MultiThreaded>;

/// The size of an SST data block (before compression).
const DATA_BLOCK_BYTES: usize = 16 * 1024;

/// Meta CF key present only between a clean close and the next open.
const CLEAN_CLOSE_KEY: &[u8] = b"clean_close";

/// The storage engine. See the module documentation for its invariants.
pub struct Engine {
    // Field order is drop order: the DB (and its CF handles) closes before the
    // options, cache and write buffer manager it uses are released.
    db: Db,
    tables: RwLock<HashMap<CfRef, Arc<TableEntry>>>,
    ddl: Mutex<Ddl>,
    /// CFs created ahead of need (`cf_spares.rs`).
    spares: cf_spares::Spares,
    row_locks: Mutex<RowLockTable>,
    write_options: WriteOptions,
    /// `write_options` without `no_slowdown`: for writes RocksDB delays.
    paced_write_options: WriteOptions,
    cf_options: Options,
    lsn_book: Arc<LsnBook>,
    background_error: Arc<stall::BackgroundError>,
    row_cache: Option<RowCache>,
    retired_cfs: Mutex<std::collections::HashSet<CfRef>>,
    durability: Durability,
    /// [`EngineConfig::pack_new_rows`].
    pack_new_rows: bool,
    opened_clean: bool,
    /// Flushes of the meta CF since open: each is a DDL statement's wait
    /// for the disk, so tests count them.
    meta_flushes: std::sync::atomic::AtomicU64,
    _block_cache: Cache,
    _write_buffer_manager: WriteBufferManager,
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Engine>();
};

impl Engine {
    /// Opens the engine for use outside PostgreSQL (tests): no WAL to wait for.
    pub fn open(cfg: EngineConfig) -> Result<Engine, EngineError> {
        Engine::open_with_wal(cfg, Arc::new(NoWal))
    }

    /// Opens (creating if needed) the RocksDB instance and every CF in it;
    /// `wal` makes PostgreSQL's WAL durable before any memtable flush.
    pub fn open_with_wal(cfg: EngineConfig, wal: Arc<dyn WalDurability>) -> Result<Engine, EngineError> {
        let lsn_book = Arc::new(LsnBook::new(wal));
        let background_error = Arc::new(stall::BackgroundError::default());
        // HyperClockCache: lookups take no shard mutex (the LRU cache's were
        // in every profile of point reads); 0 lets it size its table itself.
        let block_cache = Cache::new_hyper_clock_cache(cfg.block_cache_bytes, 0);
        // allow_stall = false: over budget, RocksDB flushes the largest memtable
        // instead of blocking writers (a stalled writer could hold up the thread
        // that must XLogFlush for that very flush).
        let write_buffer_manager =
            WriteBufferManager::new_write_buffer_manager(cfg.memtable_budget_bytes, false);

        let mut table_options = BlockBasedOptions::default();
        table_options.set_block_cache(&block_cache);
        table_options.set_cache_index_and_filter_blocks(true);
        // 16 KiB data blocks (RocksDB's default is 4 KiB; MyRocks uses 16):
        // a pack of 64 rows is about one 4 KiB block, so a scan switched
        // blocks at nearly every pack (a cache lookup and a new block
        // iterator each). A scan of packs with a tenth of rows changed whose
        // blocks were not cached: 35-36 → 25-26 ms for 220 000 entries; a
        // one-row read of an uncached block 7.7-8.4 → 8.3-9.5 µs; cached,
        // both as before (HOT_PATH.md §49).
        table_options.set_block_size(DATA_BLOCK_BYTES);
        table_options.set_pin_l0_filter_and_index_blocks_in_cache(true);
        // A bloom filter over each key's rowid (the prefix below), so that a
        // read of one row skips every SST file and memtable that has no
        // version of it instead of searching each one's index. No row is
        // ever read by its whole key, so whole keys are not filtered.
        table_options.set_bloom_filter(10.0, false);
        table_options.set_whole_key_filtering(false);

        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.set_write_buffer_manager(&write_buffer_manager);
        options.set_block_based_table_factory(&table_options);
        options.set_compression_type(DBCompressionType::Lz4);
        options.set_bottommost_compression_type(DBCompressionType::Zstd);
        // Every iterator is total-order (scan::range_read_options) unless its
        // range lies within one rowid; only then do the filters apply.
        options.set_prefix_extractor(SliceTransform::create_fixed_prefix(ROWID_PREFIX_LEN));
        // No memtable bloom (the SST files keep theirs). RocksDB sizes a
        // memtable's prefix bloom by the write buffer, not by what the
        // memtable holds: 5 % of 64 MB, 3.2 MB zeroed for every memtable of
        // every table, empty ones too, and charged to the shared memtable
        // budget. 150 empty tables took 480 MB of it, so every write then
        // made the budget flush some memtable (127 flushes for 400 000
        // rows into two tables; none without the bloom), and each table
        // cost the engine 3.4 MB of memory. TPC-B and select-only showed no
        // loss without it (HOT_PATH §54): point reads are the row cache's.
        options.set_memtable_prefix_bloom_ratio(0.0);
        options.set_max_open_files(cfg.max_open_files);
        if cfg.background_jobs > 0 {
            options.set_max_background_jobs(cfg.background_jobs);
        }
        delete_markers::configure(&mut options);
        {
            use rocksdb::AsRawPtr;
            // SAFETY: the options object is alive; the listener holds its own
            // reference to the book.
            unsafe { wal_order::install(options.as_raw_ptr() as *mut std::ffi::c_void, &lsn_book) };
            // SAFETY: as above.
            unsafe { stall::install(options.as_raw_ptr() as *mut std::ffi::c_void, &background_error) };
        }

        let mut names = BTreeSet::from([DEFAULT_COLUMN_FAMILY_NAME.to_owned(), META_CF.to_owned()]);
        if cfg.path.join("CURRENT").exists() {
            names.extend(Db::list_cf(&options, &cfg.path).map_err(rocks("list column families"))?);
        }
        let descriptors = names.iter().map(|name| ColumnFamilyDescriptor::new(name, options.clone()));
        let db = Db::open_cf_descriptors(&options, &cfg.path, descriptors).map_err(rocks_with(
            || format!("open RocksDB at {}", cfg.path.display()),
        ))?;

        let meta = db
            .cf_handle(META_CF)
            .ok_or_else(|| EngineError::Corruption(format!("column family {META_CF} is missing")))?;

        // A table's CF is named after it (`t.`/`u.`) or is a spare bound to it.
        let names: Vec<String> = names.into_iter().collect();
        let (spares, max_spare_number) = cf_spares::read_at_open(&db, &meta, &names)?;
        cf_spares::clean_at_open(&db, &meta, &spares)?;
        let table_cfs = names
            .iter()
            .filter_map(|name| TableCf::parse(name).map(|cf| (cf, name.clone())))
            .chain(spares.bound.iter().cloned());

        // The newest incarnation of each table wins; older ones are unreachable.
        let mut newest: BTreeMap<CfRef, (TableCf, String)> = BTreeMap::new();
        let mut shadowed = Vec::new();
        let mut max_incarnation = max_spare_number;
        for (cf, name) in table_cfs {
            max_incarnation = max_incarnation.max(cf.incarnation);
            let key = CfRef {
                db: cf.db,
                rel: cf.rel,
            };
            match newest.get(&key) {
                Some((kept, _)) if kept.incarnation > cf.incarnation => shadowed.push(name),
                Some(_) => {
                    if let Some((_, kept_name)) = newest.insert(key, (cf, name)) {
                        shadowed.push(kept_name);
                    }
                }
                None => {
                    newest.insert(key, (cf, name));
                }
            }
        }
        for name in &shadowed {
            db.drop_cf(name)
                .map_err(rocks_with(|| format!("drop shadowed {name}")))?;
        }

        let persisted = read_next_incarnation(&db)?;
        let next_incarnation = persisted.max(max_incarnation.saturating_add(1)).max(FIRST_INCARNATION);

        let mut tables = HashMap::with_capacity(newest.len());
        for (key, (cf, name)) in newest {
            let floor = read_meta_u64(&db, &meta, &rowid_floor_key(&name), "read a rowid floor")?.unwrap_or(0);
            let written_end = next_rowid_from_data(&db, &name)?;
            let next_rowid = written_end.max(floor);
            let created_lsn = read_meta_u64(&db, &meta, &created_lsn_key(&name), "read a creation LSN")?.unwrap_or(0);
            let pack_floor =
                read_meta_u64(&db, &meta, &packing::pack_floor_key(&name), "read a pack floor")?.unwrap_or(u64::MAX);
            let entry = Arc::new(TableEntry::new(cf, name.clone(), next_rowid, created_lsn));
            entry.size_end.store(written_end, Ordering::Relaxed);
            entry.pack_floor.store(pack_floor, Ordering::Relaxed);
            if pack_floor != u64::MAX {
                let handle = db.cf_handle(&name).ok_or_else(|| EngineError::Corruption(format!("column family {name} is missing")))?;
                let folded = read_meta_u64(&db, &handle, packing::FOLDED_ROWS_KEY, "read a count of packed rows")?;
                entry.folded_rows.store(folded.unwrap_or(0), Ordering::Relaxed);
            }
            if let Some(flag) = read_flag(&db, &name, true)? {
                entry.flag.lock().unwrap_or_else(PoisonError::into_inner).newest = flag.commit_lsn;
            }
            lsn_book.register(&name, Arc::clone(&entry.max_lsn));
            tables.insert(key, entry);
        }

        // The marker goes durably before anything else can be written, so a
        // crash from here on is never mistaken for a clean close.
        let opened_clean = db
            .get_cf(&meta, CLEAN_CLOSE_KEY)
            .map_err(rocks("read the clean-close marker"))?
            .is_some();
        if opened_clean {
            let mut once = WriteOptions::default();
            once.disable_wal(true);
            db.delete_cf_opt(&meta, CLEAN_CLOSE_KEY, &once)
                .map_err(rocks("remove the clean-close marker"))?;
            db.flush_cf(&meta).map_err(rocks("flush the meta column family"))?;
        }
        drop(meta);

        let mut write_options = WriteOptions::default();
        write_options.disable_wal(cfg.durability != Durability::EngineWal);
        // A write into a CF dropped meanwhile (a flag racing a DROP) must fail
        // only itself: without this RocksDB turns it into a background error
        // that refuses every later write to any CF. `put_batch_at` checks
        // afterwards whether its CF still exists.
        write_options.set_ignore_missing_column_families(true);
        let mut paced_write_options = WriteOptions::default();
        paced_write_options.disable_wal(cfg.durability != Durability::EngineWal);
        paced_write_options.set_ignore_missing_column_families(true);
        // A stall comes back at once; `write_batch` waits it out unless
        // only free disk space can end it (stall.rs).
        write_options.set_no_slowdown(true);

        let engine = Engine {
            db,
            tables: RwLock::new(tables),
            ddl: Mutex::new(Ddl { next_incarnation }),
            spares: cf_spares::Spares::with_ready(spares.ready),
            row_locks: Mutex::new(RowLockTable::new()),
            write_options,
            paced_write_options,
            cf_options: options,
            lsn_book,
            background_error,
            row_cache: cfg.row_cache,
            retired_cfs: Mutex::new(std::collections::HashSet::new()),
            durability: cfg.durability,
            pack_new_rows: cfg.pack_new_rows,
            opened_clean,
            meta_flushes: std::sync::atomic::AtomicU64::new(0),
            _block_cache: block_cache,
            _write_buffer_manager: write_buffer_manager,
        };
        // Unlogged and temporary tables lost their memtables, and nothing
        // replays them: like heap's, they come back empty after a crash.
        if !opened_clean {
            engine.truncate_unlogged()?;
        }
        // Whatever a cache that outlived an earlier engine holds is stale.
        engine.cache_changed_cfs();
        Ok(engine)
    }

    /// The row cache this engine keeps current, if any.
    pub fn row_cache(&self) -> Option<RowCache> {
        self.row_cache
    }

    /// After a table's (db, rel) got new rows other than by writes: a
    /// TRUNCATE, a copy, or a relfilenumber created again after a drop. No
    /// answer cached before is returned again (row_cache.rs).
    pub fn cache_changed_cfs(&self) {
        if let Some(cache) = &self.row_cache {
            cache.new_generation();
        }
    }

    /// Flushes everything, marks the close clean if `clean` and closes
    /// RocksDB. The caller has made the WAL durable past every write (no
    /// flush waits). Not clean: a database is still recovering, so the next
    /// open must recover again (DESIGN §6: a store is marked clean only by a
    /// shutdown that left no database recovering).
    pub fn close(self, clean: bool) -> Result<(), EngineError> {
        self.flush_all()?;
        if !clean {
            drop(self);
            return Ok(());
        }
        self.persist_meta(CLEAN_CLOSE_KEY, &[1u8], "write the clean-close marker")?;
        drop(self);
        Ok(())
    }

    /// Whether the last close was clean (nothing in memtables was lost).
    pub fn opened_clean(&self) -> bool {
        self.opened_clean
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    fn meta_handle(&self) -> Result<Arc<BoundColumnFamily<'_>>, EngineError> {
        self.db
            .cf_handle(META_CF)
            .ok_or_else(|| EngineError::Corruption(format!("column family {META_CF} is missing")))
    }

    /// Writes `key` in the meta CF durably ([`Engine::write_meta_durably`]).
    fn persist_meta(&self, key: &[u8], value: &[u8], what: &str) -> Result<(), EngineError> {
        let mut batch = rocksdb::WriteBatch::default();
        batch.put_cf(&self.meta_handle()?, key, value);
        self.write_meta_durably(batch, what)
    }

    /// Writes a meta batch, waiting out write stalls as every engine write
    /// does (`stall.rs`), and flushes the meta CF: RocksDB's WAL is off, so
    /// only a flush makes it durable.
    fn write_meta_durably(&self, batch: rocksdb::WriteBatch, what: &str) -> Result<(), EngineError> {
        self.write_batch(|| rocksdb::WriteBatch::from_data(batch.data()), || what.to_owned())?;
        self.meta_flushes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.db.flush_cf(&self.meta_handle()?).map_err(rocks("flush the meta column family"))
    }

    /// [`Engine::meta_flushes`]'s count.
    #[cfg(test)]
    pub(crate) fn meta_flushes(&self) -> u64 {
        self.meta_flushes.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The u64 (little-endian) stored under `key` in `cf` (the meta CF, or a
/// table's for its reserved keys); `None` if there is none (or it is not 8
/// bytes).
fn read_meta_u64(db: &Db, cf: &impl rocksdb::AsColumnFamilyRef, key: &[u8], what: &'static str) -> Result<Option<u64>, EngineError> {
    Ok(db
        .get_cf(cf, key)
        .map_err(rocks(what))?
        .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
        .map(u64::from_le_bytes))
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("path", &self.db.path())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{config, open, put_rows, rowids_of, scan_all, TempDir, T};
    use super::*;
    use crate::flush_flag::FLAG_KEY;
    use crate::keys::{row_key, row_range};
    #[test]
    fn a_write_into_a_cf_dropped_meanwhile_fails_alone() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        let name = engine.table_entry_name(T);
        let stale = engine.db.cf_handle(&name).unwrap();
        engine.drop_cf(T).unwrap();
        // What a flag write racing the DROP does: its handle outlived the CF.
        let _ = engine.db.put_cf_opt(&stale, FLAG_KEY, [0u8; 8], &engine.write_options);
        drop(stale);
        // No background error: DDL and writes to other CFs still work.
        let other = CfRef { db: T.db, rel: T.rel + 1 };
        engine.create_cf(other).unwrap();
        put_rows(&engine, other, [1, 2]);
        let (lo, hi) = row_range(0, 10);
        assert_eq!(rowids_of(&scan_all(&engine, other, &lo, &hi, 4096, 0).0), [1, 2]);
    }

    /// The meta CF is flushed at every floor it persists, and each flush
    /// builds its next memtable in the flushing thread: with a prefix bloom
    /// sized by the write buffer (3.2 MB zeroed page by page each time)
    /// that was 14 % of a COPY's CPU. Counted as this thread's page faults
    /// (Linux's /proc): about 200 a flush with the bloom here, 0-1 without.
    #[test]
    fn a_meta_flush_zeroes_no_bloom() {
        fn minor_faults() -> u64 {
            let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
            // Fields after the command name's closing parenthesis: state is
            // the first, minflt the eighth.
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            after.split(' ').nth(7).unwrap().parse().unwrap()
        }
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.persist_meta(b"warm", &[0], "warm up").unwrap();
        let before = minor_faults();
        const FLUSHES: u64 = 8;
        for i in 0..FLUSHES {
            engine.persist_meta(b"test_floor", &i.to_le_bytes(), "persist a test floor").unwrap();
        }
        let faults = minor_faults() - before;
        assert!(faults < FLUSHES * 50, "{FLUSHES} flushes of the meta CF took {faults} page faults");
    }

    /// An empty table's memtable takes next to nothing of the shared
    /// memtable budget: with RocksDB's prefix bloom sized by the write
    /// buffer (3.2 MB each) 150 empty tables filled the budget and every
    /// later write flushed a memtable.
    #[test]
    fn empty_tables_leave_the_memtable_budget_free() {
        let dir = TempDir::new();
        let engine = open(&dir);
        const TABLES: u32 = 40;
        let before = engine._write_buffer_manager.get_usage();
        for rel in 0..TABLES {
            engine.create_cf(CfRef { db: T.db, rel: T.rel + 100 + rel }).unwrap();
        }
        let per_table = (engine._write_buffer_manager.get_usage() - before) / TABLES as usize;
        assert!(per_table < 256 << 10, "an empty table takes {per_table} bytes of the memtable budget");
    }

    /// A flushed table's data blocks are the configured size, not
    /// RocksDB's default 4 KiB (scans step over several packs a block).
    #[test]
    fn a_tables_data_blocks_hold_16_kib() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        let mut batch = crate::protocol::BatchBuilder::new();
        for rowid in 0..4000u64 {
            batch.push(&row_key(rowid, 0), &test_support::value(rowid, 100)).unwrap();
        }
        engine.put_batch(T, batch.as_batch()).unwrap();
        engine.flush_cf(T).unwrap();
        let handle = engine.db.cf_handle(&engine.table_entry_name(T)).unwrap();
        let props = engine.db.property_value_cf(&handle, "rocksdb.aggregated-table-properties").unwrap().unwrap();
        let field = |name: &str| -> u64 {
            let at = props.find(name).unwrap_or_else(|| panic!("no {name} in {props}")) + name.len();
            props[at..].trim_start_matches(['=', ' ']).split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
        };
        let (raw, blocks) = (field("raw key size") + field("raw value size"), field("# data blocks"));
        assert!(blocks > 0 && raw / blocks > 12 * 1024, "{blocks} data blocks for {raw} bytes: {props}");
    }

    #[test]
    fn a_close_that_is_not_clean_leaves_no_marker() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        put_rows(&engine, T, [1]);
        engine.close(false).unwrap();
        let engine = open(&dir);
        assert!(!engine.opened_clean(), "a store closed while recovering was marked clean");
        let (lo, hi) = row_range(0, 10);
        assert_eq!(rowids_of(&scan_all(&engine, T, &lo, &hi, 4096, 0).0), [1], "close still flushes");
    }

    #[test]
    fn close_is_clean_and_the_marker_is_consumed_by_open() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        engine.close(true).unwrap();
        let engine = open(&dir);
        assert!(engine.opened_clean());
        drop(engine); // a crash: no close
        assert!(!open(&dir).opened_clean());
    }

    #[test]
    fn open_keeps_the_newest_of_duplicate_incarnations() {
        let dir = TempDir::new();
        let cfg = config(&dir);
        {
            // What a crash inside truncate_cf leaves: two incarnations of one table.
            let mut opts = Options::default();
            opts.create_if_missing(true);
            let raw = rocksdb::DB::open(&opts, &cfg.path).unwrap();
            for (incarnation, rowid) in [(3, 1), (9, 2)] {
                let name = TableCf { db: 5, rel: 16384, incarnation, logged: true }.name();
                raw.create_cf(&name, &opts).unwrap();
                let handle = raw.cf_handle(&name).unwrap();
                raw.put_cf(&handle, row_key(rowid, 0), b"x").unwrap();
            }
            raw.create_cf("unrelated", &opts).unwrap();
            raw.flush().unwrap();
            drop(raw);
        }
        let engine = Engine::open(cfg.clone()).unwrap();
        assert_eq!(
            engine.list_table_cfs(),
            [TableCf { db: 5, rel: 16384, incarnation: 9, logged: true }]
        );
        assert_eq!(engine.cf_info(T).unwrap().next_rowid, 3);
        let other = CfRef { db: 1, rel: 1 };
        assert!(engine.create_cf(other).unwrap().incarnation >= 10);
        drop(engine);
        let names = rocksdb::DB::list_cf(&Options::default(), &cfg.path).unwrap();
        assert!(
            !names.contains(
                &TableCf { db: 5, rel: 16384, incarnation: 3, logged: true }.name()
            ),
            "{names:?}"
        );
        assert!(names.contains(&"unrelated".to_owned()));
    }
}
