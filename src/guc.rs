//! pasv's settings (`pasv.*`). Sizes are in the units PostgreSQL shows.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::PostgresGucEnum;
use std::time::Duration;

/// `pasv.durability` (DESIGN §7).
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum DurabilityMode {
    #[name = c"pasv"]
    Pasv,
    #[name = c"engine_wal"]
    EngineWal,
    #[name = c"naive"]
    Naive,
    #[name = c"unlogged"]
    Unlogged,
}

impl DurabilityMode {
    pub fn engine(self) -> pasv_am::engine::Durability {
        use pasv_am::engine::Durability;
        match self {
            DurabilityMode::Pasv => Durability::Pasv,
            DurabilityMode::EngineWal => Durability::EngineWal,
            DurabilityMode::Naive => Durability::Naive,
            DurabilityMode::Unlogged => Durability::Unlogged,
        }
    }

    /// Changes are written to PostgreSQL's WAL as pasv messages.
    pub fn logs_messages(self) -> bool {
        self != DurabilityMode::Unlogged
    }

    /// Recovery replays pasv messages through a replication slot.
    pub fn replays(self) -> bool {
        matches!(self, DurabilityMode::Pasv | DurabilityMode::Naive)
    }

    /// Commits write flush flags.
    pub fn writes_flags(self) -> bool {
        self == DurabilityMode::Pasv
    }
}

pub static DURABILITY: GucSetting<DurabilityMode> = GucSetting::<DurabilityMode>::new(DurabilityMode::Pasv);
pub static MAX_RECOVERY_LAG_MB: GucSetting<i32> = GucSetting::<i32>::new(1024);

pub static MEMTABLE_BUDGET_MB: GucSetting<i32> = GucSetting::<i32>::new(256);
pub static BLOCK_CACHE_MB: GucSetting<i32> = GucSetting::<i32>::new(256);
pub static ROW_CACHE_MB: GucSetting<i32> = GucSetting::<i32>::new(128);
pub static ENGINE_THREADS: GucSetting<i32> = GucSetting::<i32>::new(2);
pub static CHANNEL_BUFFER_KB: GucSetting<i32> = GucSetting::<i32>::new(64);
pub static READ_AHEAD_BUFFER_KB: GucSetting<i32> = GucSetting::<i32>::new(1024);
pub static ENGINE_START_TIMEOUT_S: GucSetting<i32> = GucSetting::<i32>::new(60);
pub static MOVE_UNINDEXED_UPDATES: GucSetting<bool> = GucSetting::<bool>::new(true);
pub static HOT_UPDATES: GucSetting<bool> = GucSetting::<bool>::new(true);
pub static PACK_NEW_ROWS: GucSetting<bool> = GucSetting::<bool>::new(true);
pub static PARALLEL_SCAN_MIN_CPUS: GucSetting<i32> = GucSetting::<i32>::new(4);

pub fn register() {
    GucRegistry::define_enum_guc(
        c"pasv.durability",
        c"How pasv makes changes durable: pasv, engine_wal, naive or unlogged.",
        c"pasv: PostgreSQL's WAL only, flush flags, partial replay (default). engine_wal: RocksDB's WAL \
          as well, synced at commit. naive: PostgreSQL's WAL only, replay everything retained. \
          unlogged: no log; a crash empties pasv tables. Change it only after a clean shutdown.",
        &DURABILITY,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pasv.max_recovery_lag",
        c"WAL distance behind which pasv flushes the most lagging tables (MB).",
        c"Bounds the WAL kept for recovery and the time recovery takes.",
        &MAX_RECOVERY_LAG_MB,
        16,
        1 << 20,
        GucContext::Sighup,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_int_guc(
        c"pasv.parallel_scan_min_cpus",
        c"Fewest CPUs on which the planner may give pasv tables' scans parallel workers (0: always).",
        c"Below it a worker would take its core from the engine. A table's parallel_workers still gives \
          workers, and so does a session that changed parallel_setup_cost, parallel_tuple_cost or \
          min_parallel_table_scan_size from the defaults, or set debug_parallel_query.",
        &PARALLEL_SCAN_MIN_CPUS,
        0,
        1 << 16,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pasv.memtable_budget",
        c"Memory shared by the memtables of all pasv column families (MB).",
        c"When exceeded, RocksDB flushes the largest memtable.",
        &MEMTABLE_BUDGET_MB,
        8,
        1 << 20,
        GucContext::Postmaster,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_int_guc(
        c"pasv.block_cache_size",
        c"RocksDB block cache shared by all pasv column families (MB).",
        c"",
        &BLOCK_CACHE_MB,
        8,
        1 << 20,
        GucContext::Postmaster,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_int_guc(
        c"pasv.row_cache_size",
        c"Shared memory for the row cache: recent row versions backends read without asking the engine (MB; 0 turns it off).",
        c"",
        &ROW_CACHE_MB,
        0,
        1 << 20,
        GucContext::Postmaster,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_int_guc(
        c"pasv.engine_threads",
        c"Number of engine threads serving the backend channel.",
        c"",
        &ENGINE_THREADS,
        1,
        64,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pasv.channel_buffer_size",
        c"Size of each backend's request/response buffer (kB).",
        c"Bounds the size of one row and of one scan batch.",
        &CHANNEL_BUFFER_KB,
        16,
        16384,
        GucContext::Postmaster,
        GucFlags::UNIT_KB,
    );
    GucRegistry::define_int_guc(
        c"pasv.read_ahead_buffer_size",
        c"Size of each backend's read-ahead buffer (kB): the largest batch a long scan gets at once.",
        c"A scan's batches after its first few are read ahead into this buffer, growing from the channel buffer's size \
          up to this one. Never smaller than pasv.channel_buffer_size.",
        &READ_AHEAD_BUFFER_KB,
        16,
        65536,
        GucContext::Postmaster,
        GucFlags::UNIT_KB,
    );
    GucRegistry::define_bool_guc(
        c"pasv.pack_new_rows",
        c"Stores each whole group of 64 new rows that one bulk write brings (INSERT ... SELECT, COPY) as one RocksDB entry.",
        c"Scans and bulk loads then step over a group at once (on by default; HOT_PATH.md section 44). Off writes every row \
          under its own key; packs already written are read either way.",
        &PACK_NEW_ROWS,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pasv.move_unindexed_updates",
        c"UPDATE of a pasv table without indexes moves the row to a new TID, as heap's new version goes after the others.",
        c"Scans then meet updated rows in heap's order (on by default). The next sequential scan removes what the \
          move left at the old TID once no snapshot needs it (tam/scan_prune.rs); off keeps every row at its TID.",
        &MOVE_UNINDEXED_UPDATES,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pasv.hot_updates",
        c"UPDATE of a pasv table with indexes that changes no indexed column moves the row within its chain, as heap's HOT update.",
        c"The new version gets a new TID after the others, reached through the index entries of the chain's root, and no \
          index gets an entry (on by default). Off keeps such a row at its TID.",
        &HOT_UPDATES,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pasv.engine_start_timeout",
        c"How long a backend waits for the pasv engine to start (s).",
        c"",
        &ENGINE_START_TIMEOUT_S,
        1,
        3600,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
}

pub fn engine_start_timeout() -> Duration {
    Duration::from_secs(ENGINE_START_TIMEOUT_S.get().max(1) as u64)
}

pub fn channel_buffer_bytes() -> usize {
    CHANNEL_BUFFER_KB.get() as usize * 1024
}

pub fn read_ahead_buffer_bytes() -> usize {
    (READ_AHEAD_BUFFER_KB.get() as usize * 1024).max(channel_buffer_bytes())
}

pub fn durability() -> DurabilityMode {
    DURABILITY.get()
}

pub fn durability_name(mode: DurabilityMode) -> &'static str {
    mode.engine().name()
}
