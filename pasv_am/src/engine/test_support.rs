//! Test fixtures for the engine and for its callers inside this crate: a
//! temporary directory, an engine opened in it, one table, and helpers that
//! write and scan rows the way a backend would. Compiled only for tests.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::keys::{decode_row_key, row_key};
use crate::protocol::{decode_response, BatchBuilder, CfRef, Response, ScanWriter};
use crate::row::RowHeader;

use super::{Durability, Engine, EngineConfig};

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
        durability: Durability::Pasv,
        max_open_files: -1,
        row_cache: None,
        pack_new_rows: false,
    }
}

pub fn open(dir: &TempDir) -> Engine {
    Engine::open(config(dir)).expect("open engine")
}

/// The table most tests use.
pub const T: CfRef = CfRef { db: 5, rel: 16384 };

pub fn value(rowid: u64, len: usize) -> Vec<u8> {
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

pub fn put_rows(engine: &Engine, cf: CfRef, rowids: impl IntoIterator<Item = u64>) {
    let mut batch = BatchBuilder::new();
    for rowid in rowids {
        batch
            .push(&row_key(rowid, 0), &value(rowid, (rowid % 50) as usize))
            .unwrap();
    }
    engine.put_batch(cf, batch.as_batch()).unwrap();
}

pub type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// Scans `[start, end)` the way the backend will: small buffers, resuming
/// at the successor of the last key while `more`. Returns the rows and the
/// number of scan calls.
pub fn scan_all(
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

pub fn rowids_of(rows: &[(Vec<u8>, Vec<u8>)]) -> Vec<u64> {
    rows.iter()
        .map(|(k, _)| decode_row_key(k).unwrap().0)
        .collect()
}

/// A small deterministic generator for randomized tests: `next(n)` is in
/// `0..n` (xorshift64; `seed` must not be 0).
pub fn xorshift(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    }
}

/// Equal reads (the first from a packing engine, the second from one that
/// does not), or a panic naming the first entry where they part.
pub fn assert_same(packed: &Rows, plain: &Rows, what: &str) {
    let at = |rows: &Rows, i: usize| rows.get(i).map(|(k, v)| (decode_row_key(k), v.len()));
    if let Some(i) = (0..packed.len().max(plain.len())).find(|&i| packed.get(i) != plain.get(i)) {
        panic!("{what}: entry {i} of {}/{}: packed {:?}, plain {:?}", packed.len(), plain.len(), at(packed, i), at(plain, i));
    }
}

/// A row cache of `sets` sets on the heap. The Vec (u64s keep it 8-aligned)
/// holds the cache's memory: keep it as long as the cache is used.
pub fn heap_row_cache(sets: usize) -> (Vec<u64>, crate::row_cache::RowCache) {
    use crate::row_cache::{region_bytes, RowCache};
    let bytes = region_bytes(sets);
    let mut mem = vec![0u64; bytes.div_ceil(8)];
    // SAFETY: zeroed, aligned, owned by `mem`, which the caller keeps.
    let cache = unsafe { RowCache::format(mem.as_mut_ptr() as *mut u8, bytes) }.unwrap();
    (mem, cache)
}

/// An engine whose row cache has `sets` sets on the heap (the Vec keeps the
/// cache's memory; keep it as long as the engine).
pub fn open_with_row_cache(dir: &TempDir, sets: usize) -> (Vec<u64>, crate::row_cache::RowCache, Engine) {
    let (mem, cache) = heap_row_cache(sets);
    let mut cfg = config(dir);
    cfg.row_cache = Some(cache);
    (mem, cache, Engine::open(cfg).expect("open engine"))
}
