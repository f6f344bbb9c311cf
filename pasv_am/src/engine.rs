//! The RocksDB instance: column families, rowid allocation, batched writes, scans.
//!
//! Owns the one RocksDB handle of the cluster (DESIGN §1-2) and the map from a
//! table, `(db, rel)`, to the CF of its current incarnation. Calls RocksDB and
//! the codecs of this crate; knows nothing of PostgreSQL or the channel.
//! [`Engine`] is `Send + Sync`: the engine worker's service threads share one.
//!
//! Invariants:
//! * Every write uses `disable_wal` (DESIGN §4: PostgreSQL's WAL is the only
//!   log), except in the `engine_wal` durability mode (the double-logging
//!   baseline of DESIGN §7).
//! * WAL before data ([`crate::wal_order`]): a CF's `max_lsn` is raised before
//!   any write that carries an LSN, and no memtable flush starts before the
//!   PostgreSQL WAL is durable up to it.
//! * Flush flags ([`crate::flush_flag`]) of one CF only ever move forward:
//!   a flag is written only if its commit LSN is above the CF's last one.
//! * A clean close leaves a marker in the meta CF; open removes it durably
//!   before anything else is written, so "opened clean" means no memtable
//!   was lost since the last close.
//! * All CFs share one `WriteBufferManager` (memtable budget) and one LRU block
//!   cache, with index and filter blocks charged to it, so memory stays bounded
//!   however many tables exist.
//! * Incarnations are never reused: the counter in the meta CF is advanced and
//!   flushed before a CF with the new incarnation is created, and on open it is
//!   raised past every incarnation found in a CF name.
//! * At most one CF per `(db, rel)`. If a crash left several (between creating
//!   a truncated table's new CF and dropping the old one), open keeps the newest
//!   incarnation and drops the others: no `CfRef` can reach them.
//! * `next_rowid` of a table is above every rowid in its CF and every rowid
//!   ever handed out: a rowid is handed out only below the CF's durable
//!   *rowid floor* (meta CF), raised and flushed ahead of allocation; on open
//!   `next_rowid` is the larger of the floor and 1 + the largest rowid
//!   present, and every `put_batch` raises it past the rowids it writes. So a
//!   rowid is never handed out twice, not even after a crash lost its row
//!   (PostgreSQL's btree entries for it survive through PostgreSQL's WAL).
//! * DDL (create, drop, truncate, the incarnation counter) is serialised by one
//!   mutex; the table map's `RwLock` is held only to look up, insert or remove.
//! * Row locks ([`crate::row_locks`]) live in memory only, behind their own
//!   mutex, which is a leaf: nothing else is locked while it is held. They are
//!   keyed by `(db, rel)`, not by incarnation, so every DDL that removes a CF
//!   (drop, truncate, drop database) or creates one (a new table has no rows)
//!   forgets the locks on that `(db, rel)`: its rowids are about to mean other
//!   rows.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use rocksdb::{
    properties, BlockBasedOptions, BoundColumnFamily, Cache, ColumnFamilyDescriptor,
    DBCompressionType, DBWithThreadMode, ErrorKind, FlushOptions, MultiThreaded, Options,
    ReadOptions, WriteBatch, WriteBufferManager, WriteOptions, DEFAULT_COLUMN_FAMILY_NAME,
};
use thiserror::Error;

use crate::cf_name::{TableCf, META_CF};
use crate::flush_flag::{FlushFlag, FLAG_KEY};
use crate::keys::{decode_row_key, row_key, MAX_ROWID, RESERVED_KEY_PREFIX};
use crate::wal_order::{self, LsnBook, NoWal, WalDurability};

/// Deleted keys one iterator step of a per-row scan may skip before the
/// scan seeks instead (pruning leaves delete markers behind live versions
/// until compaction; stepping over thousands of them made hot rows slow).
const MAX_SKIPPED_PER_STEP: u64 = 16;
/// Older versions a per-row scan steps over before it seeks past the row:
/// a step costs a key comparison per sorted run, a seek an index search in
/// each (profiled: seeking after every updated row made scans of tables
/// whose rows had 2-3 versions several times slower).
const STEPS_BEFORE_SEEK: u32 = 8;

fn is_incomplete<D: rocksdb::DBAccess>(iter: &rocksdb::DBRawIteratorWithThreadMode<'_, D>) -> bool {
    matches!(iter.status(), Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete)
}
use crate::protocol::{CfRef, EntryBatch, ErrorCode, LockMode, ProtocolError, ScanWriter};
use crate::row_locks::RowLockTable;

pub use crate::row_locks::LockOutcome;

type Db = DBWithThreadMode<MultiThreaded>;

/// Meta CF key of the next incarnation to hand out (u64 little-endian).
const NEXT_INCARNATION_KEY: &[u8] = b"next_incarnation";
/// Incarnations start at 1; 0 never names a CF.
const FIRST_INCARNATION: u64 = 1;
/// Meta CF key prefix of a CF's durable rowid floor (followed by the CF
/// name; u64 little-endian): no rowid at or above it was ever handed out, so
/// after a crash allocation resumes there (DESIGN §3: keys are never reused).
const ROWID_FLOOR_PREFIX: &[u8] = b"rowid_floor.";
/// The floor is raised ahead of allocation by at least this many rowids (or
/// an eighth of the rowids used, if more), so raising it, which flushes the
/// meta CF, is rare.
const ROWID_FLOOR_STEP: u64 = 1 << 16;
/// Meta CF key present only between a clean close and the next open.
const CLEAN_CLOSE_KEY: &[u8] = b"clean_close";
/// Meta CF key prefix of a CF's creation LSN (followed by the CF name).
const CREATED_LSN_PREFIX: &[u8] = b"created_lsn.";

/// How changes are made durable (`pasv.durability`, DESIGN §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// PostgreSQL WAL only; flush flags and partial replay (the product).
    Pasv,
    /// RocksDB WAL on and synced at commit, as well as the PostgreSQL WAL.
    EngineWal,
    /// PostgreSQL WAL only; no flags, replay everything retained.
    Naive,
    /// No log at all; a crash empties every table.
    Unlogged,
}

impl Durability {
    pub fn name(self) -> &'static str {
        match self {
            Durability::Pasv => "pasv",
            Durability::EngineWal => "engine_wal",
            Durability::Naive => "naive",
            Durability::Unlogged => "unlogged",
        }
    }

    pub fn from_name(name: &str) -> Option<Durability> {
        [Durability::Pasv, Durability::EngineWal, Durability::Naive, Durability::Unlogged]
            .into_iter()
            .find(|d| d.name() == name)
    }
}

/// How to open the engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// RocksDB directory (`$PGDATA/pasv`); created if missing.
    pub path: PathBuf,
    /// Memtable memory shared by all CFs (`pasv.memtable_budget`).
    pub memtable_budget_bytes: usize,
    /// Block cache shared by all CFs (`pasv.block_cache_size`).
    pub block_cache_bytes: usize,
    /// RocksDB background flush + compaction threads; ≤ 0 keeps RocksDB's default.
    pub background_jobs: i32,
    /// `pasv.durability`.
    pub durability: Durability,
}

/// What the engine failed to do, classified for the backend by [`EngineError::code`].
#[derive(Debug, Error)]
pub enum EngineError {
    #[error("no column family for table {0}")]
    NoSuchCf(CfRef),
    #[error("{context}: {source}")]
    RocksDb {
        context: String,
        #[source]
        source: rocksdb::Error,
    },
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("entry with a {key_len}-byte key and a {value_len}-byte value does not fit in an empty response")]
    EntryTooLarge { key_len: usize, value_len: usize },
    #[error("rowids of table {0} are exhausted")]
    RowidsExhausted(CfRef),
    #[error("corruption: {0}")]
    Corruption(String),
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

impl EngineError {
    /// The wire error class.
    pub fn code(&self) -> ErrorCode {
        match self {
            EngineError::NoSuchCf(_) => ErrorCode::NoSuchCf,
            EngineError::RocksDb { source, .. } => classify(source),
            EngineError::BadRequest(_) => ErrorCode::BadRequest,
            EngineError::EntryTooLarge { .. } => ErrorCode::TooLarge,
            EngineError::RowidsExhausted(_) => ErrorCode::Other,
            EngineError::Corruption(_) => ErrorCode::Corruption,
            EngineError::Protocol(e) => e.code(),
        }
    }
}

/// RocksDB reports ENOSPC as an IO error whose text says so; it gets its own class.
fn classify(error: &rocksdb::Error) -> ErrorCode {
    if error.as_ref().contains("No space left") {
        return ErrorCode::DiskFull;
    }
    match error.kind() {
        ErrorKind::Corruption => ErrorCode::Corruption,
        ErrorKind::IOError => ErrorCode::Io,
        ErrorKind::Busy | ErrorKind::TryAgain | ErrorKind::TimedOut => ErrorCode::Busy,
        _ => ErrorCode::Other,
    }
}

/// `map_err` adapter for a fixed context.
fn rocks(context: &'static str) -> impl FnOnce(rocksdb::Error) -> EngineError {
    move |source| EngineError::RocksDb {
        context: context.to_owned(),
        source,
    }
}

/// `map_err` adapter whose context is only formatted on failure (hot paths).
fn rocks_with(context: impl FnOnce() -> String) -> impl FnOnce(rocksdb::Error) -> EngineError {
    move |source| EngineError::RocksDb {
        context: context(),
        source,
    }
}

/// A table's statistics (answer to `CfInfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CfInfo {
    /// The next rowid `alloc_rowids` would hand out.
    pub next_rowid: u64,
    /// RocksDB's estimate of the number of keys (all versions).
    pub approx_keys: u64,
    /// Estimated live data in SST files plus the memtables' size.
    pub approx_bytes: u64,
}

/// The current incarnation of one table.
#[derive(Debug)]
struct TableEntry {
    cf: TableCf,
    name: String,
    next_rowid: AtomicU64,
    /// The durable rowid floor: rowids below it may be handed out. Raised
    /// (and persisted first) under `floor_raise`.
    rowid_floor: AtomicU64,
    floor_raise: Mutex<()>,
    /// Highest PostgreSQL LSN whose effect may be in this CF's memtables
    /// (shared with the flush listener).
    max_lsn: Arc<AtomicU64>,
    /// The newest flag and whether it still waits to be written.
    flag: Mutex<FlagState>,
    /// WAL insert position when the CF was created: replay never applies a
    /// transaction that committed before it (a reused relfilenumber's past).
    created_lsn: u64,
}

impl TableEntry {
    fn new(cf: TableCf, next_rowid: u64, created_lsn: u64) -> TableEntry {
        TableEntry {
            cf,
            name: cf.name(),
            next_rowid: AtomicU64::new(next_rowid),
            rowid_floor: AtomicU64::new(next_rowid),
            floor_raise: Mutex::new(()),
            max_lsn: Arc::new(AtomicU64::new(0)),
            flag: Mutex::new(FlagState::default()),
            created_lsn,
        }
    }
}

/// Minimum time between two flag writes into one CF. A commit inside it
/// leaves its flag pending: written by the CF's next commit after the
/// interval, before any explicit flush, and when the replay worker asks for
/// the persistence report (once a second). A flag written late is still
/// correct: it only makes the CF's persistence point lag (DESIGN §5:
/// "fewer is cheaper and still correct").
const FLAG_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

/// One CF's flush-flag bookkeeping.
#[derive(Debug, Default)]
struct FlagState {
    /// Commit LSN of the newest flag (written or pending).
    newest: u64,
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

/// DDL state, guarded by `Engine::ddl`.
#[derive(Debug)]
struct Ddl {
    next_incarnation: u64,
}

/// The storage engine. See the module documentation for its invariants.
pub struct Engine {
    // Field order is drop order: the DB (and its CF handles) closes before the
    // options, cache and write buffer manager it uses are released.
    db: Db,
    tables: RwLock<HashMap<CfRef, Arc<TableEntry>>>,
    ddl: Mutex<Ddl>,
    row_locks: Mutex<RowLockTable>,
    write_options: WriteOptions,
    cf_options: Options,
    lsn_book: Arc<LsnBook>,
    durability: Durability,
    opened_clean: bool,
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
        let block_cache = Cache::new_lru_cache(cfg.block_cache_bytes);
        // allow_stall = false: over budget, RocksDB flushes the largest memtable
        // instead of blocking writers (a stalled writer could hold up the thread
        // that must XLogFlush for that very flush).
        let write_buffer_manager =
            WriteBufferManager::new_write_buffer_manager(cfg.memtable_budget_bytes, false);

        let mut table_options = BlockBasedOptions::default();
        table_options.set_block_cache(&block_cache);
        table_options.set_cache_index_and_filter_blocks(true);
        table_options.set_pin_l0_filter_and_index_blocks_in_cache(true);

        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.set_write_buffer_manager(&write_buffer_manager);
        options.set_block_based_table_factory(&table_options);
        options.set_compression_type(DBCompressionType::Lz4);
        options.set_bottommost_compression_type(DBCompressionType::Zstd);
        if cfg.background_jobs > 0 {
            options.set_max_background_jobs(cfg.background_jobs);
        }
        {
            use rocksdb::AsRawPtr;
            // SAFETY: the options object is alive; the listener holds its own
            // reference to the book.
            unsafe { wal_order::install(options.as_raw_ptr() as *mut std::ffi::c_void, &lsn_book) };
        }

        let mut names = BTreeSet::from([DEFAULT_COLUMN_FAMILY_NAME.to_owned(), META_CF.to_owned()]);
        if cfg.path.join("CURRENT").exists() {
            names.extend(Db::list_cf(&options, &cfg.path).map_err(rocks("list column families"))?);
        }
        let descriptors = names
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(name, options.clone()));
        let db = Db::open_cf_descriptors(&options, &cfg.path, descriptors).map_err(rocks_with(
            || format!("open RocksDB at {}", cfg.path.display()),
        ))?;

        // The newest incarnation of each table wins; older ones are unreachable.
        let mut newest: BTreeMap<CfRef, TableCf> = BTreeMap::new();
        let mut shadowed = Vec::new();
        for cf in names.iter().filter_map(|name| TableCf::parse(name)) {
            let key = CfRef {
                db: cf.db,
                rel: cf.rel,
            };
            match newest.get(&key) {
                Some(kept) if kept.incarnation > cf.incarnation => shadowed.push(cf),
                Some(kept) => {
                    shadowed.push(*kept);
                    newest.insert(key, cf);
                }
                None => {
                    newest.insert(key, cf);
                }
            }
        }
        for cf in &shadowed {
            db.drop_cf(&cf.name())
                .map_err(rocks_with(|| format!("drop shadowed {cf}")))?;
        }

        let persisted = read_next_incarnation(&db)?;
        let past_names = names
            .iter()
            .filter_map(|name| TableCf::parse(name))
            .map(|cf| cf.incarnation.saturating_add(1))
            .max()
            .unwrap_or(FIRST_INCARNATION);
        let next_incarnation = persisted.max(past_names).max(FIRST_INCARNATION);

        let meta = db
            .cf_handle(META_CF)
            .ok_or_else(|| EngineError::Corruption(format!("column family {META_CF} is missing")))?;
        let mut tables = HashMap::with_capacity(newest.len());
        for (key, cf) in newest {
            let name = cf.name();
            let floor = db
                .get_cf(&meta, rowid_floor_key(&name))
                .map_err(rocks("read a rowid floor"))?
                .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
                .map_or(0, u64::from_le_bytes);
            let next_rowid = next_rowid_from_data(&db, &name)?.max(floor);
            let created_lsn = db
                .get_cf(&meta, created_lsn_key(&name))
                .map_err(rocks("read a creation LSN"))?
                .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
                .map_or(0, u64::from_le_bytes);
            let entry = Arc::new(TableEntry::new(cf, next_rowid, created_lsn));
            if let Some(flag) = read_flag(&db, &name, true)? {
                entry.flag.lock().unwrap_or_else(PoisonError::into_inner).newest = flag.commit_lsn;
            }
            lsn_book.register(cf, Arc::clone(&entry.max_lsn));
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

        Ok(Engine {
            db,
            tables: RwLock::new(tables),
            ddl: Mutex::new(Ddl { next_incarnation }),
            row_locks: Mutex::new(RowLockTable::new()),
            write_options,
            cf_options: options,
            lsn_book,
            durability: cfg.durability,
            opened_clean,
            _block_cache: block_cache,
            _write_buffer_manager: write_buffer_manager,
        })
    }

    /// Creates the table's CF with a new incarnation and rowids from 0. An
    /// existing CF for `(db, rel)` is an orphan (its creator aborted or
    /// crashed and the relfilenumber was reused) and is dropped first.
    pub fn create_cf(&self, cf: CfRef) -> Result<TableCf, EngineError> {
        self.create_cf_at(cf, 0)
    }

    /// [`Engine::create_cf`], recording `created_lsn` (the WAL insert
    /// position, already durable) as the CF's creation point.
    pub fn create_cf_at(&self, cf: CfRef, created_lsn: u64) -> Result<TableCf, EngineError> {
        let mut ddl = self.lock_ddl();
        if let Some(orphan) = self.lookup(cf) {
            self.drop_table(cf, &orphan)?;
        }
        let entry = self.create_incarnation(&mut ddl, cf, created_lsn)?;
        let created = entry.cf;
        self.tables_mut().insert(cf, entry);
        // A new table has no rows: any lock on (db, rel) is from a past life
        // (e.g. taken while it had no CF).
        self.row_locks().forget_cf(cf);
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
    pub fn drop_database(&self, db: u32) -> Result<usize, EngineError> {
        let _ddl = self.lock_ddl();
        let victims: Vec<(CfRef, Arc<TableEntry>)> = self
            .tables()
            .iter()
            .filter(|(key, _)| key.db == db)
            .map(|(key, entry)| (*key, Arc::clone(entry)))
            .collect();
        for (key, entry) in &victims {
            self.drop_table(*key, entry)?;
        }
        // Also the locks on tables of db that have no CF.
        self.row_locks().forget_database(db);
        Ok(victims.len())
    }

    /// Empties the table: a new, empty incarnation replaces the CF, and its
    /// rowids restart at 0. Returns the new incarnation.
    ///
    /// The new CF is created before the old one is dropped, so a crash in
    /// between leaves two incarnations, and open keeps the new (empty) one.
    pub fn truncate_cf(&self, cf: CfRef) -> Result<TableCf, EngineError> {
        self.truncate_cf_at(cf, 0)
    }

    /// [`Engine::truncate_cf`] with the new CF's creation LSN.
    pub fn truncate_cf_at(&self, cf: CfRef, created_lsn: u64) -> Result<TableCf, EngineError> {
        let mut ddl = self.lock_ddl();
        let old = self.lookup(cf).ok_or(EngineError::NoSuchCf(cf))?;
        let entry = self.create_incarnation(&mut ddl, cf, created_lsn)?;
        let created = entry.cf;
        self.tables_mut().insert(cf, entry);
        // Rowids restart at 0 from now on; even if dropping the old CF fails.
        self.row_locks().forget_cf(cf);
        self.lsn_book.forget(old.cf);
        self.db
            .drop_cf(&old.name)
            .map_err(rocks_with(|| format!("drop truncated {}", old.name)))?;
        Ok(created)
    }

    /// Reserves `count` consecutive rowids; returns the first.
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
        self.raise_rowid_floor(&entry, first + u64::from(count))?;
        Ok(first)
    }

    /// Makes the durable rowid floor of `entry` at least `end` before any
    /// rowid below `end` is handed out (a crash must not hand them out again).
    fn raise_rowid_floor(&self, entry: &TableEntry, end: u64) -> Result<(), EngineError> {
        if end <= entry.rowid_floor.load(Ordering::Acquire) {
            return Ok(());
        }
        let _raising = entry.floor_raise.lock().unwrap_or_else(PoisonError::into_inner);
        if end <= entry.rowid_floor.load(Ordering::Acquire) {
            return Ok(());
        }
        let floor = end.saturating_add(ROWID_FLOOR_STEP.max(end / 8)).min(MAX_ROWID + 1);
        self.persist_rowid_floor(&entry.name, floor)?;
        entry.rowid_floor.store(floor, Ordering::Release);
        Ok(())
    }

    /// Writes and flushes the rowid floor of the CF `name` (RocksDB's WAL is
    /// off: only a flush makes it durable).
    fn persist_rowid_floor(&self, name: &str, floor: u64) -> Result<(), EngineError> {
        let meta = self.meta_handle()?;
        self.db
            .put_cf_opt(&meta, rowid_floor_key(name), floor.to_le_bytes(), &self.write_options)
            .map_err(rocks("persist a rowid floor"))?;
        self.db.flush_cf(&meta).map_err(rocks("flush the meta column family"))
    }

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
        let mut write = WriteBatch::with_capacity_bytes(batch.encoded_len() + 16 * batch.len());
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
            if value.is_empty() {
                // An empty value deletes the key (see protocol::Request::PutBatch).
                write.delete_cf(&handle, key);
            } else {
                max_rowid = max_rowid.max(Some(rowid));
                write.put_cf(&handle, key, value);
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        // Raised before the write, so no allocation can hand out a rowid that
        // is already visible in the CF (replay writes rows nobody allocated).
        if let Some(max_rowid) = max_rowid {
            entry.next_rowid.fetch_max(max_rowid + 1, Ordering::Relaxed);
        }
        // Before the write: a flush that sees the write also sees its LSN.
        entry.max_lsn.fetch_max(lsn, Ordering::SeqCst);
        self.db
            .write_opt(write, &self.write_options)
            .map_err(rocks_with(|| {
                format!("write {} entries into {}", batch.len(), entry.name)
            }))?;
        // Written into nothing if a DDL dropped the CF meanwhile.
        self.handle(cf, &entry).map(drop)
    }

    /// Appends the entries with keys in `[start, end)` to `out`, ascending,
    /// until `out` is full or an entry does not fit. Returns whether entries
    /// remain: the caller resumes from the successor of the last key returned.
    /// An entry that does not fit into the still empty `out` is an error.
    pub fn scan(
        &self,
        cf: CfRef,
        start: &[u8],
        end: &[u8],
        out: &mut ScanWriter<'_>,
    ) -> Result<bool, EngineError> {
        self.scan_rows(cf, start, end, 0, out)
    }

    /// As [`Engine::scan`], returning at most `per_row` entries of each rowid
    /// (0: all): after them the iterator *seeks* to the next rowid, so a
    /// row's older versions, and the delete markers that pruning leaves
    /// behind them until compaction, are never stepped over one by one.
    /// The answer never steps past its last entry either (`more` may then
    /// be true with nothing left).
    #[allow(clippy::too_many_lines)]
    pub fn scan_rows(
        &self,
        cf: CfRef,
        start: &[u8],
        end: &[u8],
        per_row: u32,
        out: &mut ScanWriter<'_>,
    ) -> Result<bool, EngineError> {
        let entry = self.lookup(cf).ok_or(EngineError::NoSuchCf(cf))?;
        let handle = self.handle(cf, &entry)?;
        if start >= end {
            return Ok(false);
        }
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_upper_bound(end);
        if per_row > 0 {
            // A step that would skip more deleted keys than this stops with
            // an Incomplete status; the scan then seeks instead (below).
            read_options.set_max_skippable_internal_keys(MAX_SKIPPED_PER_STEP);
        }
        let mut iter = self.db.raw_iterator_cf_opt(&handle, read_options);
        // Positions `iter` at the first entry >= target. A capped iterator
        // that gives up is repositioned through an uncapped one (a seek jumps
        // over deleted keys; only stepping walks them).
        let reposition = |iter: &mut rocksdb::DBRawIteratorWithThreadMode<'_, Db>, target: &[u8]| {
            iter.seek(target);
            if per_row > 0 && is_incomplete(iter) {
                let mut options = ReadOptions::default();
                options.set_iterate_upper_bound(end);
                let mut uncapped = self.db.raw_iterator_cf_opt(&handle, options);
                uncapped.seek(target);
                match uncapped.key() {
                    Some(key) => iter.seek(key),
                    None => iter.seek(end),
                }
            }
        };
        reposition(&mut iter, start);
        let mut row: Option<u64> = None;
        let mut in_row = 0u32;
        loop {
            let Some((key, value)) = iter.item() else {
                if per_row > 0 && is_incomplete(&iter) {
                    // Stepping hit a run of deleted keys: seek past the row.
                    let target = match row {
                        Some(r) if r < MAX_ROWID => row_key(r + 1, u32::MAX),
                        Some(_) => break,
                        None => start.try_into().unwrap_or(row_key(0, u32::MAX)),
                    };
                    reposition(&mut iter, &target);
                    in_row = 0;
                    row = None;
                    continue;
                }
                break;
            };
            if !out.try_push(key, value) {
                if out.is_empty() {
                    return Err(EngineError::EntryTooLarge {
                        key_len: key.len(),
                        value_len: value.len(),
                    });
                }
                return Ok(true);
            }
            if out.is_full() {
                return Ok(true);
            }
            let rowid = decode_row_key(key).map(|(r, _)| r);
            if per_row > 0 && rowid.is_some() {
                if rowid != row {
                    row = rowid;
                    in_row = 0;
                }
                in_row += 1;
                if in_row >= per_row {
                    // A range that ends with this row (a point lookup) is
                    // done: do not step into its older versions.
                    if let Some(r) = rowid {
                        if r >= MAX_ROWID || row_key(r + 1, u32::MAX).as_slice() >= end {
                            return Ok(true);
                        }
                    }
                    // Step over the row's older versions: a few steps
                    // are far cheaper than a seek (which searches every
                    // level's index); a long chain is sought past.
                    let mut steps = 0;
                    loop {
                        iter.next();
                        steps += 1;
                        let same_row = iter.key().and_then(decode_row_key).map(|(r, _)| r) == rowid;
                        if !same_row {
                            break;
                        }
                        if steps >= STEPS_BEFORE_SEEK {
                            match rowid {
                                Some(r) if r < MAX_ROWID => reposition(&mut iter, &row_key(r + 1, u32::MAX)),
                                _ => iter.seek(end),
                            }
                            break;
                        }
                    }
                    continue;
                }
            }
            iter.next();
        }
        iter.status()
            .map_err(rocks_with(|| format!("scan {}", entry.name)))?;
        Ok(false)
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
        Ok(CfInfo {
            next_rowid: entry.next_rowid.load(Ordering::Relaxed),
            approx_keys: property(properties::ESTIMATE_NUM_KEYS)?,
            approx_bytes: property(properties::ESTIMATE_LIVE_DATA_SIZE)?
                .saturating_add(property(properties::CUR_SIZE_ALL_MEM_TABLES)?),
        })
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
        let meta = self.meta_handle()?;
        self.db
            .put_cf_opt(&meta, CLEAN_CLOSE_KEY, [1u8], &self.write_options)
            .map_err(rocks("write the clean-close marker"))?;
        self.db.flush_cf(&meta).map_err(rocks("flush the meta column family"))?;
        drop(meta);
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

    /// Empties every table (the `unlogged` mode after a crash: like
    /// PostgreSQL's unlogged tables, their contents are gone). Unlike
    /// TRUNCATE, rowids do not restart: PostgreSQL indexes on the tables
    /// survive the crash, and their stale entries must never point at new
    /// rows. The floor is stored durably for each new CF.
    pub fn truncate_all(&self) -> Result<usize, EngineError> {
        let all: Vec<(CfRef, u64)> = self
            .tables()
            .iter()
            .map(|(cf, entry)| (*cf, entry.next_rowid.load(Ordering::Relaxed)))
            .collect();
        for (cf, floor) in &all {
            self.truncate_cf(*cf)?;
            let entry = self.lookup(*cf).ok_or(EngineError::NoSuchCf(*cf))?;
            self.persist_rowid_floor(&entry.name, *floor)?;
            entry.rowid_floor.fetch_max(*floor, Ordering::AcqRel);
            entry.next_rowid.fetch_max(*floor, Ordering::Relaxed);
        }
        Ok(all.len())
    }

    // --- flush flags and persistence points (DESIGN §5) ---------------------

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
            let Some(entry) = self.lookup(cf) else {
                continue; // dropped since: nothing to describe
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
        self.db
            .put_cf_opt(&handle, FLAG_KEY, flag.encode(), &self.write_options)
            .map_err(rocks_with(|| format!("write the flush flag of {}", entry.name)))?;
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

    /// Where every CF of database `db` (every database: `None`) stands.
    pub fn persistence(&self, db: Option<u32>) -> Result<Vec<CfPersistence>, EngineError> {
        self.write_pending_flags(db)?;
        let mut entries: Vec<(CfRef, Arc<TableEntry>)> = self
            .tables()
            .iter()
            .filter(|(key, _)| db.is_none_or(|d| key.db == d))
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

    /// The current incarnation of every table, ordered.
    pub fn list_table_cfs(&self) -> Vec<TableCf> {
        let mut cfs: Vec<TableCf> = self.tables().values().map(|entry| entry.cf).collect();
        cfs.sort();
        cfs
    }

    #[cfg(test)]
    fn table_entry_name(&self, cf: CfRef) -> String {
        self.lookup(cf).expect("table exists").name.clone()
    }

    /// The current incarnation of one table.
    pub fn table_cf(&self, cf: CfRef) -> Option<TableCf> {
        self.lookup(cf).map(|entry| entry.cf)
    }

    // --- row locks (memory only, DESIGN §3) --------------------------------------

    /// Asks for a row lock for top-level transaction `xid` (never 0). Refused:
    /// `holder` names a conflicting transaction to wait for. `evict` (0: none)
    /// is a transaction known to have ended whose holdings on this row are
    /// removed first. The CF need not exist. See [`crate::row_locks`].
    pub fn lock_row(
        &self,
        cf: CfRef,
        rowid: u64,
        xid: u32,
        mode: LockMode,
        evict: u32,
    ) -> LockOutcome {
        self.row_locks().lock(cf, rowid, xid, mode, evict)
    }

    /// Drops every row lock `xid` holds; returns how many rows it held.
    pub fn release_locks(&self, xid: u32) -> usize {
        self.row_locks().release(xid)
    }

    /// Rows with at least one lock holder (diagnostics, tests).
    pub fn lock_count(&self) -> usize {
        self.row_locks().locked_rows()
    }

    // --- internals -----------------------------------------------------------

    fn lookup(&self, cf: CfRef) -> Option<Arc<TableEntry>> {
        self.tables().get(&cf).cloned()
    }

    fn handle(
        &self,
        cf: CfRef,
        entry: &TableEntry,
    ) -> Result<Arc<BoundColumnFamily<'_>>, EngineError> {
        // Missing only if a concurrent DDL dropped it after the lookup.
        self.db
            .cf_handle(&entry.name)
            .ok_or(EngineError::NoSuchCf(cf))
    }

    /// Hands out the next incarnation (persisting the counter first) and
    /// creates its CF. The caller holds the DDL lock and publishes the entry.
    fn create_incarnation(
        &self,
        ddl: &mut Ddl,
        cf: CfRef,
        created_lsn: u64,
    ) -> Result<Arc<TableEntry>, EngineError> {
        let incarnation = ddl.next_incarnation;
        let next = incarnation
            .checked_add(1)
            .ok_or_else(|| EngineError::Corruption("incarnation counter overflow".into()))?;
        let meta = self.meta_handle()?;
        self.db
            .put_cf_opt(
                &meta,
                NEXT_INCARNATION_KEY,
                next.to_le_bytes(),
                &self.write_options,
            )
            .map_err(rocks("persist the incarnation counter"))?;
        let name = TableCf { db: cf.db, rel: cf.rel, incarnation }.name();
        self.db
            .put_cf_opt(&meta, created_lsn_key(&name), created_lsn.to_le_bytes(), &self.write_options)
            .map_err(rocks("persist a creation LSN"))?;
        // The WAL is off: only a flush makes the counter durable, and it must
        // be durable before any CF carries the incarnation.
        self.db
            .flush_cf(&meta)
            .map_err(rocks("flush the meta column family"))?;
        ddl.next_incarnation = next;

        let table = TableCf {
            db: cf.db,
            rel: cf.rel,
            incarnation,
        };
        self.db
            .create_cf(&name, &self.cf_options)
            .map_err(rocks_with(|| format!("create column family {name}")))?;
        let entry = Arc::new(TableEntry::new(table, 0, created_lsn));
        self.lsn_book.register(table, Arc::clone(&entry.max_lsn));
        Ok(entry)
    }

    /// Drops `entry`'s CF, then forgets it and the locks on it. The caller
    /// holds the DDL lock.
    fn drop_table(&self, cf: CfRef, entry: &TableEntry) -> Result<(), EngineError> {
        // A handle already gone means an earlier attempt got as far as
        // RocksDB's drop: only our map entry is left.
        if self.db.cf_handle(&entry.name).is_some() {
            self.db
                .drop_cf(&entry.name)
                .map_err(rocks_with(|| format!("drop column family {}", entry.name)))?;
        }
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
        self.lsn_book.forget(entry.cf);
        Ok(())
    }

    fn meta_handle(&self) -> Result<Arc<BoundColumnFamily<'_>>, EngineError> {
        self.db
            .cf_handle(META_CF)
            .ok_or_else(|| EngineError::Corruption(format!("column family {META_CF} is missing")))
    }

    // The map is only ever changed by single insert/remove calls, so a panic
    // while it was locked cannot have left it half-updated: poisoning is ignored.
    fn tables(&self) -> RwLockReadGuard<'_, HashMap<CfRef, Arc<TableEntry>>> {
        self.tables.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn tables_mut(&self) -> RwLockWriteGuard<'_, HashMap<CfRef, Arc<TableEntry>>> {
        self.tables.write().unwrap_or_else(PoisonError::into_inner)
    }

    // `next_incarnation` is advanced only after the counter is durable, so it is
    // never ahead of what is persisted: poisoning is ignored here too.
    fn lock_ddl(&self) -> MutexGuard<'_, Ddl> {
        self.ddl.lock().unwrap_or_else(PoisonError::into_inner)
    }

    // The lock table's operations leave it consistent, or with only the index
    // over-approximation it tolerates, at every step (row_locks invariants):
    // poisoning is ignored.
    fn row_locks(&self) -> MutexGuard<'_, RowLockTable> {
        self.row_locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("path", &self.db.path())
            .finish_non_exhaustive()
    }
}

fn created_lsn_key(cf_name: &str) -> Vec<u8> {
    [CREATED_LSN_PREFIX, cf_name.as_bytes()].concat()
}

fn rowid_floor_key(cf_name: &str) -> Vec<u8> {
    [ROWID_FLOOR_PREFIX, cf_name.as_bytes()].concat()
}

/// The CF's flush flag: the persisted one (SST files only) or the newest.
fn read_flag(db: &Db, name: &str, persisted: bool) -> Result<Option<FlushFlag>, EngineError> {
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

fn read_next_incarnation(db: &Db) -> Result<u64, EngineError> {
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

/// 1 + the largest rowid in the CF (keys at or above the reserved 0xFF prefix
/// are metadata, not rows), or 0 if it has no rows.
fn next_rowid_from_data(db: &Db, name: &str) -> Result<u64, EngineError> {
    let handle = db.cf_handle(name).ok_or_else(|| {
        EngineError::Corruption(format!("column family {name} vanished during open"))
    })?;
    let mut read_options = ReadOptions::default();
    read_options.set_iterate_upper_bound([RESERVED_KEY_PREFIX]);
    read_options.fill_cache(false);
    let mut iter = db.raw_iterator_cf_opt(&handle, read_options);
    iter.seek_to_last();
    let last = match iter.key() {
        Some(key) => match decode_row_key(key) {
            Some((rowid, _)) if rowid <= MAX_ROWID => Some(rowid),
            _ => {
                return Err(EngineError::Corruption(format!(
                    "last key of {name} ({} bytes) is not a row key",
                    key.len()
                )))
            }
        },
        None => None,
    };
    iter.status()
        .map_err(rocks_with(|| format!("find the last row of {name}")))?;
    Ok(last.map_or(0, |rowid| rowid + 1))
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::{Engine, EngineConfig};

    /// A unique directory under the system temp dir, removed on drop.
    pub struct TempDir(PathBuf);

    impl TempDir {
        pub fn new() -> TempDir {
            static COUNTER: AtomicU64 = AtomicU64::new(0);
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let dir = std::env::temp_dir().join(format!(
                "pasv_am-test-{}-{}-{nanos}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).expect("create temp dir");
            TempDir(dir)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub fn config(dir: &TempDir) -> EngineConfig {
        EngineConfig {
            path: dir.path().join("db"),
            memtable_budget_bytes: 32 << 20,
            block_cache_bytes: 8 << 20,
            background_jobs: 2,
            durability: super::Durability::Pasv,
        }
    }

    pub fn open(dir: &TempDir) -> Engine {
        Engine::open(config(dir)).expect("open engine")
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{config, open, TempDir};
    use super::*;
    use crate::keys::row_range;
    use crate::protocol::{decode_response, BatchBuilder, Response};
    use crate::row::RowHeader;

    const T: CfRef = CfRef { db: 5, rel: 16384 };

    fn value(rowid: u64, len: usize) -> Vec<u8> {
        let mut v = RowHeader {
            flags: 0,
            cid: 0,
            xid: 100 + rowid,
            moved_to: 0,
        }
        .encode()
        .to_vec();
        v.extend((0..len).map(|i| (rowid as usize + i) as u8));
        v
    }

    fn put_rows(engine: &Engine, cf: CfRef, rowids: impl IntoIterator<Item = u64>) {
        let mut batch = BatchBuilder::new();
        for rowid in rowids {
            batch
                .push(&row_key(rowid, 0), &value(rowid, (rowid % 50) as usize))
                .unwrap();
        }
        engine.put_batch(cf, batch.as_batch()).unwrap();
    }

    type Rows = Vec<(Vec<u8>, Vec<u8>)>;

    /// Scans `[start, end)` the way the backend will: small buffers, resuming
    /// at the successor of the last key while `more`. Returns the rows and the
    /// number of scan calls.
    fn scan_all(
        engine: &Engine,
        cf: CfRef,
        start: &[u8],
        end: &[u8],
        buf_len: usize,
        max: u32,
    ) -> (Rows, usize) {
        let mut out = vec![0u8; buf_len];
        let mut rows = Vec::new();
        let mut next_start = start.to_vec();
        let mut rounds = 0;
        loop {
            rounds += 1;
            let mut writer = ScanWriter::new(&mut out, max);
            let more = engine.scan(cf, &next_start, end, &mut writer).unwrap();
            let len = writer.finish(more);
            let Response::Entries {
                more: got_more,
                batch,
            } = decode_response(&out[..len]).unwrap()
            else {
                panic!("not Entries");
            };
            assert_eq!(got_more, more);
            assert!(!batch.is_empty() || !more);
            for (k, v) in batch.iter() {
                rows.push((k.to_vec(), v.to_vec()));
            }
            if !more {
                return (rows, rounds);
            }
            next_start = rows.last().unwrap().0.clone();
            next_start.push(0);
        }
    }

    fn rowids_of(rows: &[(Vec<u8>, Vec<u8>)]) -> Vec<u64> {
        rows.iter()
            .map(|(k, _)| decode_row_key(k).unwrap().0)
            .collect()
    }

    #[test]
    fn create_put_scan_resumes_across_more() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        put_rows(&engine, T, 0..500);
        put_rows(&engine, T, 500..1000);

        let (start, end) = row_range(0, MAX_ROWID + 1);
        let (rows, rounds) = scan_all(&engine, T, &start, &end, 1024, 0);
        assert_eq!(rowids_of(&rows), (0..1000).collect::<Vec<_>>());
        assert!(
            rounds > 10,
            "a 1 kB buffer must need many rounds, got {rounds}"
        );
        for (k, v) in &rows {
            let rowid = decode_row_key(k).unwrap().0;
            assert_eq!(v, &value(rowid, (rowid % 50) as usize));
        }

        // The count limit alone, and a sub-range.
        let (rows, rounds) = scan_all(&engine, T, &start, &end, 1 << 20, 100);
        assert_eq!(rows.len(), 1000);
        // A full batch does not step past its last entry: one more round
        // learns that nothing follows.
        assert_eq!(rounds, 11);
        let (lo, hi) = row_range(10, 20);
        let (rows, _) = scan_all(&engine, T, &lo, &hi, 1 << 20, 0);
        assert_eq!(rowids_of(&rows), (10..20).collect::<Vec<_>>());
        let (rows, _) = scan_all(&engine, T, &hi, &lo, 1 << 20, 0);
        assert!(rows.is_empty());
    }

    #[test]
    fn per_row_limit_returns_the_newest_versions_of_each_row() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        // Rows 0..5 with versions 0..=3; row 2's older versions deleted.
        let mut batch = BatchBuilder::new();
        for rowid in 0..5u64 {
            for version in 0..4u32 {
                batch.push(&row_key(rowid, version), &value(rowid, 8)).unwrap();
            }
        }
        engine.put_batch(T, batch.as_batch()).unwrap();
        let mut batch = BatchBuilder::new();
        for version in 0..3u32 {
            batch.push(&row_key(2, version), &[]).unwrap();
        }
        engine.put_batch(T, batch.as_batch()).unwrap();
        let (start, end) = row_range(0, MAX_ROWID + 1);
        let mut out = vec![0u8; 1 << 16];
        for (per_row, expect) in [(1u32, vec![(0, 3), (1, 3), (2, 3), (3, 3), (4, 3)]),
                                  (2, vec![(0, 3), (0, 2), (1, 3), (1, 2), (2, 3), (3, 3), (3, 2), (4, 3), (4, 2)])] {
            let mut writer = ScanWriter::new(&mut out, 0);
            let more = engine.scan_rows(T, &start, &end, per_row, &mut writer).unwrap();
            let len = writer.finish(more);
            let Response::Entries { more, batch } = decode_response(&out[..len]).unwrap() else {
                panic!("not Entries")
            };
            assert!(!more);
            let keys: Vec<_> = batch.iter().map(|(k, _)| decode_row_key(k).unwrap()).collect();
            assert_eq!(keys, expect, "per_row {per_row}");
        }
    }

    #[test]
    fn per_row_scan_seeks_past_runs_of_deleted_versions() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        // Row 1 has one live version (500) above 200 deleted ones: far more
        // than one iterator step may skip.
        let mut batch = BatchBuilder::new();
        for version in 300..=500u32 {
            batch.push(&row_key(1, version), &value(1, 8)).unwrap();
        }
        batch.push(&row_key(0, 0), &value(0, 8)).unwrap();
        batch.push(&row_key(2, 0), &value(2, 8)).unwrap();
        engine.put_batch(T, batch.as_batch()).unwrap();
        let mut batch = BatchBuilder::new();
        for version in 300..500u32 {
            batch.push(&row_key(1, version), &[]).unwrap();
        }
        engine.put_batch(T, batch.as_batch()).unwrap();
        let (start, end) = row_range(0, MAX_ROWID + 1);
        let mut out = vec![0u8; 1 << 16];
        for per_row in [1u32, 2, 0] {
            let mut writer = ScanWriter::new(&mut out, 0);
            let more = engine.scan_rows(T, &start, &end, per_row, &mut writer).unwrap();
            let len = writer.finish(more);
            let Response::Entries { batch, .. } = decode_response(&out[..len]).unwrap() else {
                panic!("not Entries")
            };
            let keys: Vec<_> = batch.iter().map(|(k, _)| decode_row_key(k).unwrap()).collect();
            assert_eq!(keys, vec![(0, 0), (1, 500), (2, 0)], "per_row {per_row}");
        }
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
    fn versions_scan_newest_first() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        let mut batch = BatchBuilder::new();
        for version in [0, 2, 1] {
            batch.push(&row_key(7, version), &[version as u8]).unwrap();
        }
        engine.put_batch(T, batch.as_batch()).unwrap();
        let (lo, hi) = row_range(7, 8);
        let (rows, _) = scan_all(&engine, T, &lo, &hi, 4096, 0);
        let versions: Vec<u32> = rows
            .iter()
            .map(|(k, _)| decode_row_key(k).unwrap().1)
            .collect();
        assert_eq!(versions, [2, 1, 0]);
    }

    #[test]
    fn first_entry_too_large_is_an_error() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        let mut batch = BatchBuilder::new();
        batch.push(&row_key(0, 0), &[1; 2000]).unwrap();
        engine.put_batch(T, batch.as_batch()).unwrap();
        let mut out = vec![0u8; 1024];
        let mut writer = ScanWriter::new(&mut out, 0);
        let (lo, hi) = row_range(0, 1);
        let err = engine.scan(T, &lo, &hi, &mut writer).unwrap_err();
        assert!(matches!(
            err,
            EngineError::EntryTooLarge {
                key_len: 12,
                value_len: 2000
            }
        ));
        assert_eq!(err.code(), ErrorCode::TooLarge);
    }

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
        engine.create_cf_at(T, 0x100).unwrap();
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
                let name = TableCf {
                    db: 5,
                    rel: 16384,
                    incarnation,
                }
                .name();
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
            [TableCf {
                db: 5,
                rel: 16384,
                incarnation: 9
            }]
        );
        assert_eq!(engine.cf_info(T).unwrap().next_rowid, 3);
        let other = CfRef { db: 1, rel: 1 };
        assert!(engine.create_cf(other).unwrap().incarnation >= 10);
        drop(engine);
        let names = rocksdb::DB::list_cf(&Options::default(), &cfg.path).unwrap();
        assert!(
            !names.contains(
                &TableCf {
                    db: 5,
                    rel: 16384,
                    incarnation: 3
                }
                .name()
            ),
            "{names:?}"
        );
        assert!(names.contains(&"unrelated".to_owned()));
    }

    #[test]
    fn row_locks_through_the_engine() {
        use LockMode::{Exclusive, Shared};
        let dir = TempDir::new();
        let engine = open(&dir);
        // Locks are about rowids: the table need not have a CF.
        let ghost = CfRef { db: 9, rel: 9 };
        assert!(engine.lock_row(ghost, 1, 100, Exclusive, 0).granted);
        engine.create_cf(T).unwrap();
        let granted = LockOutcome {
            granted: true,
            already_held: false,
            holder: 0,
        };
        assert_eq!(engine.lock_row(T, 1, 100, Shared, 0), granted);
        assert_eq!(engine.lock_row(T, 1, 101, Shared, 0), granted);
        assert_eq!(
            engine.lock_row(T, 1, 100, Exclusive, 0),
            LockOutcome {
                granted: false,
                already_held: false,
                holder: 101
            }
        );
        assert_eq!(engine.lock_row(T, 1, 100, Exclusive, 101), granted);
        assert!(engine.lock_row(T, 1, 100, Shared, 0).already_held);
        assert_eq!(engine.lock_count(), 2);
        assert_eq!(engine.release_locks(100), 2);
        assert_eq!(engine.release_locks(101), 0, "evicted");
        assert_eq!(engine.lock_count(), 0);
    }

    #[test]
    fn ddl_forgets_the_locks_of_the_cfs_it_removes() {
        use LockMode::Exclusive;
        let dir = TempDir::new();
        let engine = open(&dir);
        let sibling = CfRef { db: 5, rel: 1 };
        let other_db = CfRef { db: 6, rel: 16384 };
        for cf in [T, sibling, other_db] {
            engine.create_cf(cf).unwrap();
            for rowid in [0, 1] {
                assert!(engine.lock_row(cf, rowid, 100, Exclusive, 0).granted);
            }
        }
        assert_eq!(engine.lock_count(), 6);

        engine.drop_cf(T).unwrap();
        assert_eq!(engine.lock_count(), 4);
        assert!(
            engine.lock_row(T, 0, 101, Exclusive, 0).granted,
            "old holder forgotten"
        );
        // Dropping a table without a CF still forgets its locks.
        engine.drop_cf(T).unwrap();
        assert_eq!(engine.lock_count(), 4);
        assert!(engine.lock_row(T, 0, 101, Exclusive, 0).granted);
        engine.create_cf(T).unwrap();
        assert_eq!(engine.lock_count(), 4, "a new table starts without locks");

        assert!(engine.lock_row(T, 5, 100, Exclusive, 0).granted);
        engine.truncate_cf(T).unwrap();
        assert_eq!(engine.lock_count(), 4);
        assert!(engine.lock_row(T, 5, 101, Exclusive, 0).granted);

        assert!(
            engine
                .lock_row(CfRef { db: 5, rel: 77 }, 0, 101, Exclusive, 0)
                .granted
        );
        engine.drop_database(5).unwrap();
        assert_eq!(engine.lock_count(), 2);
        assert!(engine.lock_row(other_db, 0, 101, Exclusive, 0).holder == 100);
        assert_eq!(engine.release_locks(101), 0);
        assert_eq!(engine.release_locks(100), 2);
        assert_eq!(engine.lock_count(), 0);
    }

    #[test]
    fn concurrent_exclusive_requests_grant_exactly_one() {
        let dir = TempDir::new();
        let engine = open(&dir);
        let engine = &engine;
        let start = std::sync::Barrier::new(8);
        let start = &start;
        let outcomes: Vec<(u32, LockOutcome)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..8u32)
                .map(|i| {
                    s.spawn(move || {
                        let xid = 1000 + i;
                        start.wait();
                        (xid, engine.lock_row(T, 7, xid, LockMode::Exclusive, 0))
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let winners: Vec<u32> = outcomes
            .iter()
            .filter(|(_, o)| o.granted)
            .map(|&(xid, _)| xid)
            .collect();
        assert_eq!(winners.len(), 1, "{outcomes:?}");
        for (_, o) in outcomes.iter().filter(|(_, o)| !o.granted) {
            assert_eq!(o.holder, winners[0]);
        }
        assert_eq!(engine.release_locks(winners[0]), 1);
        assert_eq!(engine.lock_count(), 0);
    }

    #[test]
    fn errors_map_to_codes() {
        let dir = TempDir::new();
        let engine = open(&dir);
        assert_eq!(
            engine
                .put_batch(T, EntryBatch::default())
                .unwrap_err()
                .code(),
            ErrorCode::NoSuchCf
        );
        assert_eq!(
            engine.alloc_rowids(T, 1).unwrap_err().code(),
            ErrorCode::NoSuchCf
        );
        assert_eq!(EngineError::RowidsExhausted(T).code(), ErrorCode::Other);
        assert_eq!(
            EngineError::Corruption("x".into()).code(),
            ErrorCode::Corruption
        );
    }
}
