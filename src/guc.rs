//! pasv's settings (`pasv.*`). Sizes are in the units PostgreSQL shows.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::time::Duration;

pub static MEMTABLE_BUDGET_MB: GucSetting<i32> = GucSetting::<i32>::new(256);
pub static BLOCK_CACHE_MB: GucSetting<i32> = GucSetting::<i32>::new(256);
pub static ENGINE_THREADS: GucSetting<i32> = GucSetting::<i32>::new(2);
pub static CHANNEL_BUFFER_KB: GucSetting<i32> = GucSetting::<i32>::new(64);
pub static ENGINE_START_TIMEOUT_S: GucSetting<i32> = GucSetting::<i32>::new(60);

pub fn register() {
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
