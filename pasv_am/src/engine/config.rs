//! How the engine is opened: its directory, memory budgets, background
//! threads and durability mode.
//!
//! Plain data that the engine worker fills in from the `pasv.*` settings;
//! calls nothing. `Durability::from_name` accepts exactly the names that
//! `Durability::name` returns, which are the values of `pasv.durability`.

use std::path::PathBuf;

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
    /// SST files RocksDB keeps open at once (-1: all of them). Every table
    /// has its own files, so a cluster with many tables exceeds a default
    /// file-descriptor limit of 1 024 unless this bounds it.
    pub max_open_files: i32,
    /// The row cache the engine keeps current (None: no cache).
    pub row_cache: Option<crate::row_cache::RowCache>,
    /// Write whole groups of new rows as packs (`crate::pack`;
    /// `pasv.pack_new_rows`); packs already written are read either way.
    pub pack_new_rows: bool,
}
