//! Spare column families: CFs created ahead of need, so that CREATE TABLE
//! and TRUNCATE bind one instead of waiting for RocksDB to create it, and
//! dropped tables' CFs, which DROP unbinds and leaves to RocksDB's drop later.
//!
//! Why: RocksDB rewrites, syncs and reads back its OPTIONS file, a section per
//! CF, at every column-family creation and drop, so the cost of creating one
//! grows with the number of CFs (about 4 ms with one CF, 65 ms with 100,
//! 100 ms with 200 on the project machine; HOT_PATH §55). A *keeper* thread
//! (started by the engine worker) creates spares and drops retired CFs off
//! every statement's path; a table takes a spare by writing a binding record
//! and gives it up by deleting it.
//!
//! Owns the spare pool, the retired list, the binding record's key and layout
//! in the meta CF, and reading the bindings back at open. `cf_registry` binds
//! and unbinds; nothing else knows that a table's CF may be a spare.
//!
//! Invariants:
//! * A spare is named `s.{n}` (`cf_name::spare_name`); `n` comes from the
//!   incarnation counter, durable before the CF exists, so it names at most
//!   one CF ever, like an incarnation.
//! * A spare holds nothing until it is bound. The binding (table, its own
//!   new incarnation), the counter and the creation LSN go in one meta
//!   batch that is flushed before the table's entry is published, so no
//!   write can reach the CF before its binding is durable. An unbound spare
//!   found at open is therefore empty; one that is not is dropped.
//! * DROP (and TRUNCATE, for the old CF) deletes the binding durably before
//!   the CF is handed to the keeper. A crash before the keeper dropped it
//!   leaves an unbound CF: open drops it if it holds anything and otherwise
//!   keeps it as a spare; a bind deletes the meta keys (rowid and pack
//!   floors) a past table left under the CF's name.
//! * A binding whose CF is gone (a crash between a drop and the record's
//!   removal, or between a failed creation and its cleanup) names a CF
//!   number never used again: open removes it.
//! * The keeper creates spares without the DDL lock; it holds that lock only
//!   to reserve their numbers. At most [`SPARE_TARGET`] spares wait, each an
//!   empty CF (a section more in every OPTIONS rewrite, a few hundred
//!   kilobytes of memory).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rocksdb::{AsColumnFamilyRef, IteratorMode, WriteBatch};

use super::error::{rocks, rocks_with};
use super::{Db, Engine, EngineError};
use crate::cf_name::{parse_spare, spare_name, TableCf};

/// Spares the keeper keeps ready: a burst of CREATE TABLEs (a schema
/// script) this long binds without waiting.
pub const SPARE_TARGET: usize = 16;

/// How long the keeper sleeps when nothing wakes it, and after a failure.
const KEEPER_IDLE: Duration = Duration::from_secs(1);

/// The keeper waits until no DDL took a spare or retired a CF for this long
/// before it works, unless the pool is down to [`LOW_WATER`]: its RocksDB
/// calls would otherwise hold up the meta flushes of a burst of DDL (a
/// schema script) and take a core from it.
const QUIET: Duration = Duration::from_millis(50);
const LOW_WATER: usize = 2;

/// While at least this many spares are ready, the keeper creates the next
/// one only once the engine served no request for [`QUIET`]: a creation
/// takes tens of milliseconds of a core (more with more CFs), and the pool
/// is topped up right after a schema's DDL, when its load begins (the
/// TPC-C-like schema's nine tables: 92-183 ms of the keeper's CPU during
/// its load before, 55-137 ms now; `src/ipc/HOT_PATH.md` §64). Below it
/// the keeper works as soon as DDL pauses, so a stream of CREATE TABLEs
/// under load still finds spares.
const REFILL_WHILE_BUSY: usize = SPARE_TARGET / 2;

/// How long a retired CF waits for a quiet engine before the keeper drops
/// it all the same (a drop rewrites RocksDB's OPTIONS file as a creation
/// does; DROP TABLE and a new table's load often follow each other).
const DROP_PATIENCE: Duration = Duration::from_secs(5);

/// Meta CF key prefix of a binding (followed by the spare's CF name).
const BINDING_PREFIX: &[u8] = b"binding.";

/// Encoded binding: db u32 ‖ rel u32 ‖ incarnation u64 ‖ logged u8, little-endian.
const BINDING_LEN: usize = 17;

pub(super) fn binding_key(cf_name: &str) -> Vec<u8> {
    [BINDING_PREFIX, cf_name.as_bytes()].concat()
}

pub(super) fn encode_binding(table: TableCf) -> [u8; BINDING_LEN] {
    let mut out = [0u8; BINDING_LEN];
    out[0..4].copy_from_slice(&table.db.to_le_bytes());
    out[4..8].copy_from_slice(&table.rel.to_le_bytes());
    out[8..16].copy_from_slice(&table.incarnation.to_le_bytes());
    out[16] = u8::from(table.logged);
    out
}

fn decode_binding(bytes: &[u8]) -> Option<TableCf> {
    if bytes.len() != BINDING_LEN || bytes[16] > 1 {
        return None;
    }
    Some(TableCf {
        db: u32::from_le_bytes(bytes[0..4].try_into().ok()?),
        rel: u32::from_le_bytes(bytes[4..8].try_into().ok()?),
        incarnation: u64::from_le_bytes(bytes[8..16].try_into().ok()?),
        logged: bytes[16] == 1,
    })
}

/// The pool: spares ready to bind, and whether the keeper should top it up.
#[derive(Debug, Default)]
pub(super) struct Spares {
    state: Mutex<PoolState>,
    wake: Condvar,
    /// Requests the engine served (`Engine::note_request`): the keeper
    /// compares two readings to tell whether the engine is busy.
    requests: AtomicU64,
}

#[derive(Debug, Default)]
struct PoolState {
    /// Numbers of unbound, existing, empty spare CFs.
    ready: Vec<u64>,
    /// Set at open and by a bind (or a miss); the keeper tops the pool up
    /// while it is.
    wanted: bool,
    /// Dropped tables' CFs, unbound, for the keeper to drop, with when
    /// each was retired.
    retired: Vec<(String, Instant)>,
    /// When DDL last took a spare or retired a CF.
    last_ddl: Option<Instant>,
}

impl PoolState {
    /// How long the keeper should still hold back (see [`QUIET`]).
    fn hold_back(&self) -> Option<Duration> {
        if self.ready.len() <= LOW_WATER {
            return None;
        }
        let since = self.last_ddl?.elapsed();
        (since < QUIET).then(|| QUIET - since)
    }
}

impl Spares {
    pub(super) fn with_ready(ready: Vec<u64>) -> Spares {
        // The keeper fills the pool when it starts, so that the first tables
        // of a new cluster bind spares too.
        Spares {
            state: Mutex::new(PoolState { ready, wanted: true, ..PoolState::default() }),
            wake: Condvar::new(),
            requests: AtomicU64::new(0),
        }
    }

    // The state is a list and a flag, each changed by single calls: a panic
    // while it was locked leaves it consistent, so poisoning is ignored.
    fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What open found among the CF names: table CFs with their RocksDB names,
/// ready spares, and CFs and binding records to remove.
#[derive(Debug, Default)]
pub(super) struct OpenedSpares {
    pub(super) bound: Vec<(TableCf, String)>,
    pub(super) ready: Vec<u64>,
    pub(super) to_drop: Vec<String>,
    pub(super) stale_bindings: Vec<Vec<u8>>,
}

/// Reads the binding of every spare CF in `names`, and every binding whose CF
/// is gone. Largest number among spares and bindings is `max_number`.
pub(super) fn read_at_open(db: &Db, meta: &impl AsColumnFamilyRef, names: &[String]) -> Result<(OpenedSpares, u64), EngineError> {
    let mut found = OpenedSpares::default();
    let mut max_number = 0;
    for name in names {
        let Some(number) = parse_spare(name) else { continue };
        max_number = max_number.max(number);
        let binding = db.get_cf(meta, binding_key(name)).map_err(rocks("read a spare's binding"))?;
        match binding {
            Some(bytes) => {
                let table = decode_binding(&bytes)
                    .ok_or_else(|| EngineError::Corruption(format!("malformed binding of column family {name}")))?;
                found.bound.push((table, name.clone()));
            }
            None => {
                let handle = db.cf_handle(name).ok_or_else(|| EngineError::Corruption(format!("column family {name} is missing")))?;
                let mut iter = db.iterator_cf(&handle, IteratorMode::Start);
                match iter.next() {
                    None => found.ready.push(number),
                    Some(Ok(_)) => found.to_drop.push(name.clone()),
                    Some(Err(e)) => return Err(rocks_with(|| format!("read spare {name}"))(e)),
                }
            }
        }
    }
    let present: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let mut read_options = rocksdb::ReadOptions::default();
    read_options.set_total_order_seek(true);
    let from = IteratorMode::From(BINDING_PREFIX, rocksdb::Direction::Forward);
    // Every binding, also those of CFs listed above: the incarnations.
    for item in db.iterator_cf_opt(meta, read_options, from) {
        let (key, value) = item.map_err(rocks("read the spares' bindings"))?;
        let Some(name) = key.strip_prefix(BINDING_PREFIX) else { break };
        if let Some(table) = decode_binding(&value) {
            max_number = max_number.max(table.incarnation);
        }
        let name = String::from_utf8_lossy(name);
        if let Some(number) = parse_spare(&name) {
            max_number = max_number.max(number);
        }
        if !present.contains(name.as_ref()) {
            found.stale_bindings.push(key.to_vec());
        }
    }
    found.ready.sort_unstable();
    Ok((found, max_number))
}

impl Engine {
    /// A ready spare's number, if any; asks the keeper to make another.
    pub(super) fn take_spare(&self) -> Option<u64> {
        let mut state = self.spares.state();
        state.wanted = true;
        state.last_ddl = Some(Instant::now());
        let taken = state.ready.pop();
        drop(state);
        self.spares.wake.notify_all();
        taken
    }

    /// Returns a spare taken by a bind that failed before its binding.
    pub(super) fn return_spare(&self, number: u64) {
        self.spares.state().ready.push(number);
    }

    /// Spares ready to bind.
    pub fn spares_ready(&self) -> usize {
        self.spares.state().ready.len()
    }

    /// [`Engine::create_spares`] without pacing (tests).
    #[cfg(test)]
    fn make_spares(&self, target: usize) -> Result<usize, EngineError> {
        self.create_spares(target, || true)
    }

    /// Creates spares until `target` are ready (at most `target` new ones),
    /// asking `go_on` before each creation and stopping at its first no;
    /// returns how many it created. Their numbers are reserved, and the
    /// counter flushed, under the DDL lock, once `go_on` allowed the first
    /// creation (numbers reserved for the ones it stopped are never used:
    /// they name no CF); the CFs are created outside the lock.
    fn create_spares(&self, target: usize, mut go_on: impl FnMut() -> bool) -> Result<usize, EngineError> {
        let missing = target.saturating_sub(self.spares_ready());
        if missing == 0 || !go_on() {
            return Ok(0);
        }
        let first = self.reserve_numbers(missing as u64)?;
        for (made, number) in (first..first + missing as u64).enumerate() {
            if made > 0 && !go_on() {
                return Ok(made);
            }
            let name = spare_name(number);
            if let Err(e) = self.db.create_cf(&name, &self.cf_options) {
                return if made == 0 { Err(rocks_with(|| format!("create spare column family {name}"))(e)) } else { Ok(made) };
            }
            self.spares.state().ready.push(number);
        }
        Ok(missing)
    }

    /// Counts a request served, for the keeper's busy test.
    pub fn note_request(&self) {
        self.spares.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the engine served no request for [`QUIET`] (it waits that
    /// long to tell).
    fn engine_quiet(&self) -> bool {
        let seen = self.spares.requests.load(Ordering::Relaxed);
        std::thread::sleep(QUIET);
        self.spares.requests.load(Ordering::Relaxed) == seen
    }

    /// Drops retired CFs and keeps [`SPARE_TARGET`] spares ready until
    /// `stop` is set (and [`Engine::wake_spare_keeper`] called): the keeper
    /// thread's body. Tops the pool up once a table has taken a spare or
    /// found none and DDL paused (the upper half of the pool only while the
    /// engine is quiet: [`REFILL_WHILE_BUSY`]); sleeps otherwise. What it
    /// leaves undone at a stop (or a crash) open finishes: retired CFs are
    /// unbound.
    pub fn keep_spares(&self, stop: &AtomicBool) {
        while !stop.load(Ordering::Acquire) {
            let (wanted, retired) = {
                let state = self.spares.state();
                let (mut state, _) = self
                    .spares
                    .wake
                    .wait_timeout_while(state, KEEPER_IDLE, |s| {
                        !s.wanted && s.retired.is_empty() && !stop.load(Ordering::Acquire)
                    })
                    .unwrap_or_else(PoisonError::into_inner);
                if let Some(wait) = state.hold_back() {
                    drop(state);
                    std::thread::sleep(wait);
                    continue;
                }
                (std::mem::take(&mut state.wanted), std::mem::take(&mut state.retired))
            };
            // A retired CF holds its dropped table's files until it goes:
            // it waits for a quiet engine only so long. The others wait for
            // the next round.
            let mut later = Vec::new();
            for (name, since) in retired {
                if stop.load(Ordering::Acquire) || since.elapsed() < DROP_PATIENCE && !self.engine_quiet() {
                    later.push((name, since));
                    continue;
                }
                // A failure leaves it unbound: open drops it.
                let _ = self.db.drop_cf(&name);
            }
            if !later.is_empty() {
                self.spares.state().retired.extend(later);
            }
            if !wanted || stop.load(Ordering::Acquire) {
                continue;
            }
            match self.create_spares(SPARE_TARGET, || self.spares_ready() < REFILL_WHILE_BUSY || self.engine_quiet()) {
                Ok(_) if self.spares_ready() >= SPARE_TARGET => {}
                // Held back by a busy engine: the next round goes on.
                Ok(_) => self.spares.state().wanted = true,
                Err(_) => {
                    // DDL meets the same error and reports it; try again later.
                    std::thread::sleep(KEEPER_IDLE);
                    self.spares.state().wanted = true;
                }
            }
        }
    }

    /// Hands a dropped table's unbound CF to the keeper to drop.
    pub(super) fn retire(&self, cf_name: String) {
        let mut state = self.spares.state();
        let now = Instant::now();
        state.retired.push((cf_name, now));
        state.last_ddl = Some(now);
        drop(state);
        self.spares.wake.notify_all();
    }

    /// Wakes the keeper (to notice `stop`).
    pub fn wake_spare_keeper(&self) {
        let _state = self.spares.state();
        self.spares.wake.notify_all();
    }

    /// Hands out `count` consecutive numbers from the incarnation counter,
    /// which is durable when this returns.
    fn reserve_numbers(&self, count: u64) -> Result<u64, EngineError> {
        let mut ddl = self.lock_ddl();
        let first = ddl.next_incarnation;
        let next = first
            .checked_add(count)
            .ok_or_else(|| EngineError::Corruption("incarnation counter overflow".into()))?;
        self.persist_meta(super::cf_registry::NEXT_INCARNATION_KEY, &next.to_le_bytes(), "persist the incarnation counter")?;
        ddl.next_incarnation = next;
        Ok(first)
    }

}

/// Removes what open found left over: non-empty unbound spares and bindings
/// whose CF is gone.
pub(super) fn clean_at_open(db: &Db, meta: &impl AsColumnFamilyRef, found: &OpenedSpares) -> Result<(), EngineError> {
    for name in &found.to_drop {
        db.drop_cf(name).map_err(rocks_with(|| format!("drop non-empty unbound spare {name}")))?;
    }
    if !found.stale_bindings.is_empty() {
        let mut batch = WriteBatch::default();
        for key in &found.stale_bindings {
            batch.delete_cf(meta, key);
        }
        let mut options = rocksdb::WriteOptions::default();
        options.disable_wal(true);
        db.write_opt(batch, &options).map_err(rocks("remove stale bindings"))?;
    }
    Ok(())
}

/// The table a binding names, for tests.
#[cfg(test)]
pub(super) fn binding_of(engine: &Engine, cf: crate::protocol::CfRef) -> Option<TableCf> {
    let entry = engine.lookup(cf)?;
    let meta = engine.meta_handle().ok()?;
    engine.db.get_cf(&meta, binding_key(&entry.name)).ok()?.and_then(|b| decode_binding(&b))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{open, put_rows, rowids_of, scan_all, TempDir, T};
    use super::*;
    use crate::keys::{row_range, MAX_ROWID};
    use crate::protocol::CfRef;

    /// Every CF RocksDB holds, read from its MANIFEST.
    fn rocksdb_cfs(dir: &TempDir) -> Vec<String> {
        let mut names = Db::list_cf(&rocksdb::Options::default(), dir.path().join("db")).unwrap();
        names.sort();
        names
    }

    fn rows(engine: &Engine, cf: CfRef) -> Vec<u64> {
        let (lo, hi) = row_range(0, MAX_ROWID + 1);
        rowids_of(&scan_all(engine, cf, &lo, &hi, 1 << 16, 0).0)
    }

    /// Waits (bounded) until `done` holds.
    fn eventually(what: &str, done: impl Fn() -> bool) {
        for _ in 0..2_000 {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{what}: not within 20 s");
    }

    /// The keeper refills the lower half of the pool whatever the engine
    /// does, and the upper half only once the engine serves nothing (a
    /// schema's load is not slowed by CF creations; before, the keeper
    /// created every missing spare at once).
    #[test]
    fn keeper_tops_up_the_upper_half_only_while_the_engine_is_quiet() {
        use std::sync::Arc;
        let dir = TempDir::new();
        let engine = Arc::new(open(&dir));
        assert_eq!(engine.spares_ready(), 0);
        let (stop, busy) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(true)));
        let requests = {
            let (engine, busy) = (Arc::clone(&engine), Arc::clone(&busy));
            std::thread::spawn(move || {
                while busy.load(Ordering::Acquire) {
                    engine.note_request();
                    std::thread::yield_now();
                }
            })
        };
        let keeper = {
            let (engine, stop) = (Arc::clone(&engine), Arc::clone(&stop));
            std::thread::spawn(move || engine.keep_spares(&stop))
        };
        eventually("the lower half under load", || engine.spares_ready() >= REFILL_WHILE_BUSY);
        for _ in 0..6 {
            std::thread::sleep(QUIET);
            assert_eq!(engine.spares_ready(), REFILL_WHILE_BUSY, "no spare past the lower half while requests come");
        }
        busy.store(false, Ordering::Release);
        requests.join().unwrap();
        eventually("a full pool once quiet", || engine.spares_ready() == SPARE_TARGET);
        stop.store(true, Ordering::Release);
        engine.wake_spare_keeper();
        keeper.join().unwrap();
    }

    #[test]
    fn create_binds_a_ready_spare_and_the_binding_survives_a_crash() {
        let dir = TempDir::new();
        let table;
        {
            let engine = open(&dir);
            assert_eq!(engine.make_spares(3).unwrap(), 3);
            assert_eq!(engine.make_spares(3).unwrap(), 0, "already ready");
            let before = rocksdb_cfs(&dir);
            table = engine.create_cf(T).unwrap();
            assert_eq!(rocksdb_cfs(&dir), before, "no CF was created: a spare was bound");
            assert_eq!(engine.spares_ready(), 2);
            assert_eq!(binding_of(&engine, T), Some(table));
            put_rows(&engine, T, 0..20);
            engine.flush_cf(T).unwrap();
            put_rows(&engine, T, 20..30);
            engine.write_flags(T.db, [T.rel].into_iter(), 9, 0x100, 0x20, 0x30).unwrap();
            engine.flush_cf(T).unwrap();
            // Dropped without close: a crash.
        }
        let engine = open(&dir);
        assert!(!engine.opened_clean());
        assert_eq!(engine.table_cf(T), Some(table));
        assert_eq!(rows(&engine, T), (0..30).collect::<Vec<_>>());
        let report = engine.persistence(Some(T.db)).unwrap();
        assert_eq!(report.iter().map(|p| (p.cf, p.persisted.map(|f| (f.cf, f.commit_lsn)))).collect::<Vec<_>>(), [(table, Some((table, 0x100)))]);
        assert_eq!(engine.spares_ready(), 2, "unbound spares come back as spares");
        assert!(engine.list_table_cfs() == [table]);
        // New incarnations stay above everything a spare or binding used.
        assert!(engine.create_cf(CfRef { db: T.db, rel: T.rel + 1 }).unwrap().incarnation > table.incarnation);
    }

    #[test]
    fn open_keeps_the_newest_binding_whatever_the_spare_numbers() {
        let dir = TempDir::new();
        let (old, newer);
        {
            let engine = open(&dir);
            engine.make_spares(2).unwrap();
            // The pool hands out its highest number first.
            old = engine.create_cf(T).unwrap();
            put_rows(&engine, T, 0..5);
            engine.flush_cf(T).unwrap();
            // What a TRUNCATE leaves when it crashes after binding the lower
            // spare and before dropping the old CF: two bindings of T.
            let low = *engine.spares.state().ready.last().unwrap();
            newer = TableCf { incarnation: old.incarnation + 1, ..old };
            let meta = engine.meta_handle().unwrap();
            let mut batch = WriteBatch::default();
            batch.put_cf(&meta, binding_key(&spare_name(low)), encode_binding(newer));
            engine.write_meta_durably(batch, "bind by hand").unwrap();
            assert!(low < parse_spare(&engine.lookup(T).unwrap().name).unwrap());
        }
        let engine = open(&dir);
        assert_eq!(engine.table_cf(T), Some(newer));
        assert!(rows(&engine, T).is_empty(), "the new, empty CF wins");
        assert_eq!(engine.spares_ready(), 0);
        assert_eq!(rocksdb_cfs(&dir).iter().filter(|n| parse_spare(n).is_some()).count(), 1, "the old CF was dropped");
    }

    #[test]
    fn open_drops_a_written_unbound_spare_and_forgets_bindings_without_a_cf() {
        let dir = TempDir::new();
        {
            let engine = open(&dir);
            engine.make_spares(2).unwrap();
            let written = spare_name(engine.spares.state().ready[0]);
            let handle = engine.db.cf_handle(&written).unwrap();
            engine.write_one(&handle, b"not a spare's", b"", String::new).unwrap();
            engine.db.flush_cf(&handle).unwrap();
            drop(handle);
            let meta = engine.meta_handle().unwrap();
            let mut batch = WriteBatch::default();
            batch.put_cf(&meta, binding_key(&spare_name(999)), encode_binding(TableCf { db: 1, rel: 2, incarnation: 1000, logged: true }));
            engine.write_meta_durably(batch, "bind by hand").unwrap();
        }
        let engine = open(&dir);
        assert_eq!(engine.spares_ready(), 1, "the written spare is gone");
        assert_eq!(rocksdb_cfs(&dir).iter().filter(|n| parse_spare(n).is_some()).count(), 1);
        assert_eq!(engine.table_cf(CfRef { db: 1, rel: 2 }), None, "a binding without its CF names nothing");
        let meta = engine.meta_handle().unwrap();
        assert_eq!(engine.db.get_cf(&meta, binding_key(&spare_name(999))).unwrap(), None);
        drop(meta);
        // Numbers a stale binding used are not handed out again.
        assert!(engine.create_cf(T).unwrap().incarnation > 1000);
    }

    #[test]
    fn drop_and_truncate_of_a_bound_spare_do_not_come_back() {
        let dir = TempDir::new();
        let u = CfRef { db: T.db, rel: T.rel + 1 };
        let truncated;
        {
            let engine = open(&dir);
            engine.make_spares(4).unwrap();
            engine.create_cf(T).unwrap();
            engine.create_cf(u).unwrap();
            put_rows(&engine, T, 0..5);
            put_rows(&engine, u, 0..5);
            engine.flush_cf(T).unwrap();
            engine.flush_cf(u).unwrap();
            engine.drop_cf(u).unwrap();
            truncated = engine.truncate_cf(T).unwrap();
            assert_eq!(engine.spares_ready(), 1);
            put_rows(&engine, T, 7..8);
            engine.flush_cf(T).unwrap();
        }
        let engine = open(&dir);
        assert_eq!(engine.table_cf(u), None);
        assert_eq!(engine.table_cf(T), Some(truncated));
        assert_eq!(rows(&engine, T), [7]);
        assert_eq!(engine.spares_ready(), 1);
        // Open dropped the two unbound CFs that held rows (nothing dropped
        // them before the crash: no keeper ran).
        assert_eq!(rocksdb_cfs(&dir).iter().filter(|n| parse_spare(n).is_some()).count(), 2);
    }

    #[test]
    fn the_keeper_tops_the_pool_up_after_a_create_and_stops() {
        let dir = TempDir::new();
        let engine = open(&dir);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let keeper = s.spawn(|| engine.keep_spares(&stop));
            // It fills the pool when it starts, and again after a create.
            let mut waited = 0;
            while engine.spares_ready() < SPARE_TARGET && waited < 3000 {
                std::thread::sleep(Duration::from_millis(10));
                waited += 1;
            }
            assert_eq!(engine.spares_ready(), SPARE_TARGET);
            engine.create_cf(T).unwrap();
            let mut waited = 0;
            while engine.spares_ready() < SPARE_TARGET && waited < 3000 {
                std::thread::sleep(Duration::from_millis(10));
                waited += 1;
            }
            assert_eq!(engine.spares_ready(), SPARE_TARGET);
            engine.create_cf(CfRef { db: T.db, rel: T.rel + 1 }).unwrap();
            // A dropped table's CF is dropped by the keeper, not by DROP.
            let name = engine.lookup(T).unwrap().name.clone();
            engine.drop_cf(T).unwrap();
            let mut waited = 0;
            while rocksdb_cfs(&dir).contains(&name) && waited < 3000 {
                std::thread::sleep(Duration::from_millis(10));
                waited += 1;
            }
            assert!(!rocksdb_cfs(&dir).contains(&name));
            stop.store(true, Ordering::Release);
            engine.wake_spare_keeper();
            keeper.join().unwrap();
        });
        assert!(engine.spares_ready() >= SPARE_TARGET - 1);
        assert!(engine.spares_ready() <= SPARE_TARGET);
    }
}
