//! The engine side of the channel: one request in, one response out.
//!
//! Owns the mapping from a decoded [`Request`] to an [`Engine`] call and from
//! its result to a [`Response`]. Knows nothing of shared memory: the engine
//! worker hands it the bytes of a request slot and of a response slot.
//!
//! Invariants:
//! * Every request gets exactly one well-formed response. Malformed input,
//!   engine errors and even a panic in the engine become [`Response::Error`];
//!   nothing here panics on what a backend sends (DESIGN §1: "a bad request
//!   gets an error reply, never a crash").
//! * A request is not executed when its answer could not be written (a
//!   response buffer shorter than [`MIN_RESPONSE_LEN`]): `handle` returns 0.
//! * Work a request leaves for later ([`after_reply`]: warming the row
//!   cache around a missed row, raising a rowid floor an allocation came
//!   near) runs only after the answer is published, on the same thread, and
//!   never changes what any answer says (it only fills the row cache, under
//!   the cache's ticket rule, or moves a durable floor further ahead).
//! * Scan paging: a scan stops when the next entry does not fit or
//!   `max_entries` is reached, and answers `more = true`; the client resumes
//!   with `start` = the last key returned ‖ `0x00` (its immediate successor in
//!   byte order). An entry too large for an empty response is `TooLarge`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::engine::{Engine, EngineError};
use crate::row_cache;
use crate::protocol::{
    decode_request, encode_error, encode_persistence, encode_response, ErrorCode, PersistenceRow,
    Request, Response, ScanWriter, MIN_RESPONSE_LEN,
};

/// Readies the calling thread to serve requests: RocksDB's per-thread
/// performance counters off. They are on (counts) by default, and every
/// iterator step and point read bumped them through thread-locals that a
/// dlopen'ed library reaches by `__tls_get_addr` (with their lazy
/// initialisation check, 6 % of a scan's engine time); nothing reads them.
pub fn prepare_service_thread() {
    rocksdb::perf::set_perf_stats(rocksdb::perf::PerfStatsLevel::Disable);
}

thread_local! {
    /// A run of rows the last request found worth caching
    /// (`RowCache::run_to_warm`), read by [`after_reply`].
    static TO_WARM: std::cell::Cell<Option<(crate::protocol::CfRef, (u64, u64))>> = const { std::cell::Cell::new(None) };
    /// The answer buffer of those reads.
    static WARM_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Bytes of the buffer a warming read answers into: a run's rows with
/// [`row_cache::WINDOW_PER_ROW`] versions each, as large as they come
/// (a row that does not fit is simply not warmed).
const WARM_BUFFER_BYTES: usize = 64 * 1024;

/// Work the last request left for after its answer was published, so the
/// backend does not wait for it: raising the rowid floors its allocations
/// came near (`Engine::raise_floors_ahead`), and caching the run of rows
/// around a row whose one-row read missed the cache, read with tickets like
/// any fill (`row_cache.rs` invariants) and installed into free ways only.
/// Errors and panics of the warming are dropped: the cache is only a hint.
pub fn after_reply(engine: &Engine) {
    engine.raise_floors_ahead();
    let Some((cf, (lo, hi))) = TO_WARM.with(|w| w.take()) else { return };
    let Some(cache) = engine.row_cache() else { return };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let mut tickets = [None; row_cache::MAX_WINDOW_ROWS as usize];
        cache.window_tickets(cf, lo, hi, &mut tickets);
        let (start, end) = crate::keys::row_range(lo, hi);
        WARM_BUFFER.with(|b| {
            let mut buf = b.borrow_mut();
            buf.resize(WARM_BUFFER_BYTES, 0);
            let mut writer = ScanWriter::new(&mut buf[..], 0);
            if let Ok(more) = engine.scan_rows(cf, &start, &end, row_cache::WINDOW_PER_ROW, &mut writer) {
                let len = writer.finish(more);
                cache.warm_window(&tickets, cf, lo, row_cache::WINDOW_PER_ROW, &buf[..len]);
            }
        });
    }));
}

/// Decodes `request`, executes it, and encodes the answer into `response`.
/// Returns the response length (0 only if `response` is shorter than
/// [`MIN_RESPONSE_LEN`], in which case nothing was executed).
pub fn handle(engine: &Engine, request: &[u8], response: &mut [u8]) -> usize {
    if response.len() < MIN_RESPONSE_LEN {
        return 0;
    }
    engine.note_request();
    let request = match decode_request(request) {
        Ok(request) => request,
        Err(e) => return encode_error(e.code(), &e.to_string(), response),
    };
    // The engine's locks recover from poisoning and RocksDB state is not
    // touched half-way by a panic in our code, so answering and carrying on
    // is sound; the panic message goes back to the backend.
    match catch_unwind(AssertUnwindSafe(|| execute(engine, request, response))) {
        Ok(Ok(len)) => len,
        Ok(Err(e)) => encode_error(e.code(), &e.to_string(), response),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("unknown panic");
            encode_error(
                ErrorCode::Other,
                &format!("internal engine error: {what}"),
                response,
            )
        }
    }
}

fn execute(
    engine: &Engine,
    request: Request<'_>,
    response: &mut [u8],
) -> Result<usize, EngineError> {
    let answer = match request {
        Request::Ping => Response::Ok,
        Request::CreateCf { cf, created_lsn, logged } => {
            engine.create_cf_at(cf, created_lsn, logged)?;
            Response::Ok
        }
        Request::DropCf(cf) => {
            engine.drop_cf(cf)?;
            Response::Ok
        }
        Request::DropDatabase { db } => {
            engine.drop_database(db)?;
            Response::Ok
        }
        Request::TruncateCf { cf, created_lsn } => {
            engine.truncate_cf_at(cf, created_lsn)?;
            Response::Ok
        }
        Request::AllocRowids { cf, count } => Response::Rowids {
            first: engine.alloc_rowids(cf, count)?,
        },
        Request::PutBatch { cf, lsn, batch } => {
            engine.put_batch_at(cf, lsn, batch)?;
            Response::Ok
        }
        Request::PutBatches { parts } => {
            // Each part as the `PutBatch` it would have been alone.
            for part in parts.iter() {
                let (cf, lsn, batch) = part?;
                engine.put_batch_at(cf, lsn, batch)?;
            }
            Response::Ok
        }
        Request::Committed { db, xid, commit_lsn, first_lsn, last_lsn, rels, release_locks } => {
            // Locks first: they are released whatever happens to the flags.
            if release_locks {
                engine.release_locks(xid);
            }
            engine.write_flags(db, rels.iter(), xid, commit_lsn, first_lsn, last_lsn)?;
            Response::Ok
        }
        Request::Persistence { db, after } => {
            let mut writer = ScanWriter::new(response, 0);
            let mut more = false;
            let rows = engine.persistence((db != 0).then_some(db))?;
            for cf in rows.into_iter().filter(|cf| (cf.cf.db, cf.cf.rel) > (after.db, after.rel)) {
                let row = PersistenceRow {
                    db: cf.cf.db,
                    rel: cf.cf.rel,
                    incarnation: cf.cf.incarnation,
                    persisted_lsn: cf.persisted.map_or(0, |f| f.commit_lsn),
                    persisted_xid: cf.persisted.map_or(0, |f| u64::from(f.xid)),
                    latest_flag_lsn: cf.latest_flag_lsn,
                    dirty: cf.dirty,
                    memtable_bytes: cf.memtable_bytes,
                    sst_bytes: cf.sst_bytes,
                    max_lsn: cf.max_lsn,
                    created_lsn: cf.created_lsn,
                };
                let (key, value) = encode_persistence(&row);
                if !writer.try_push(&key, &value) {
                    more = true;
                    break;
                }
            }
            return Ok(writer.finish(more));
        }
        Request::FlushCf(cf) => {
            engine.flush_cf(cf)?;
            Response::Ok
        }
        Request::RepackCf(cf) => {
            let done = engine.repack_cf(cf)?;
            Response::Repacked { groups: done.groups, keys: done.keys }
        }
        Request::CopyCf { from, to_rel } => {
            engine.copy_cf(from, crate::protocol::CfRef { db: from.db, rel: to_rel })?;
            Response::Ok
        }
        Request::CopyDatabase { from, to, created_lsn } => {
            engine.copy_database(from, to, created_lsn)?;
            Response::Ok
        }
        Request::SyncWal => {
            engine.sync_wal()?;
            Response::Ok
        }
        Request::Scan {
            cf,
            start,
            end,
            max_entries,
            per_row,
        } => {
            // A backend's fetch by TID: its answer goes into the row cache,
            // unless a write into the row's set came between (row_cache.rs).
            let fill = engine.row_cache().and_then(|cache| {
                let rowid = row_cache::cached_read(start, end, per_row, max_entries)?;
                Some((cache, rowid, cache.ticket(cf, rowid)?))
            });
            // An index fetch's read-ahead window fills it row by row.
            let mut tickets = [None; row_cache::MAX_WINDOW_ROWS as usize];
            let window = engine.row_cache().and_then(|cache| {
                let (lo, hi) = row_cache::window_read(start, end, per_row, max_entries)?;
                cache.window_tickets(cf, lo, hi, &mut tickets);
                Some((cache, lo))
            });
            let mut writer = ScanWriter::new(response, max_entries);
            let more = engine.scan_rows(cf, start, end, per_row, &mut writer)?;
            let found = !writer.is_empty();
            let len = writer.finish(more);
            if let Some((cache, rowid, ticket)) = fill {
                cache.fill(ticket, cf, rowid, &response[..len]);
                // The row exists: its neighbours likely do too. Read after
                // the reply ([`after_reply`]).
                if let Some(run) = cache.run_to_warm(cf, rowid).filter(|_| found) {
                    TO_WARM.with(|w| w.set(Some((cf, run))));
                }
            }
            if let Some((cache, lo)) = window {
                cache.fill_window(&tickets, cf, lo, per_row, &response[..len]);
            }
            return Ok(len);
        }
        Request::CfInfo(cf) | Request::TrimSize(cf) => {
            if matches!(request, Request::TrimSize(_)) {
                engine.trim_size(cf)?;
            }
            let info = engine.cf_info(cf)?;
            Response::CfInfo {
                next_rowid: info.next_rowid,
                approx_keys: info.approx_keys,
                approx_bytes: info.approx_bytes,
                entries: info.entries,
                size_end: info.size_end,
            }
        }
        Request::FlushAll => {
            engine.flush_all()?;
            Response::Ok
        }
        Request::ListCfs => {
            let mut writer = ScanWriter::new(response, 0);
            let mut more = false;
            for t in engine.list_table_cfs() {
                let mut key = [0u8; 8];
                key[..4].copy_from_slice(&t.db.to_be_bytes());
                key[4..].copy_from_slice(&t.rel.to_be_bytes());
                if !writer.try_push(&key, t.name().as_bytes()) {
                    more = true;
                    break;
                }
            }
            return Ok(writer.finish(more));
        }
        Request::LockRow {
            cf,
            rowid,
            xid,
            mode,
            evict,
            read,
        } => {
            let outcome = engine.lock_row(cf, rowid, xid, mode, evict);
            if outcome.granted && read > 0 {
                // Lock, then read under it: the versions answered are the
                // ones no other writer can change until this one ends.
                // The row cache answers when it can (row_cache.rs: sound
                // under the lock); RocksDB otherwise.
                let cached = engine.row_cache().and_then(|cache| {
                    let mut writer = ScanWriter::new(response, u32::from(read));
                    let more = cache.read_versions(cf, rowid, usize::from(read), &mut writer)?;
                    Some(writer.finish(more))
                });
                let len = match cached {
                    Some(len) => len,
                    None => {
                        let (start, end) = crate::keys::row_range(rowid, rowid + 1);
                        let mut writer = ScanWriter::new(response, u32::from(read));
                        let more = engine.scan_rows(cf, &start, &end, 0, &mut writer)?;
                        writer.finish(more)
                    }
                };
                return Ok(crate::protocol::entries_into_granted_lock(response, len, outcome.already_held));
            }
            Response::Lock {
                granted: outcome.granted,
                already_held: outcome.already_held,
                holder: outcome.holder,
                more: false,
                versions: Default::default(),
            }
        }
        Request::ReleaseLocks { xid } => {
            engine.release_locks(xid);
            Response::Ok
        }
    };
    Ok(encode_response(&answer, response)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_support::{open, TempDir};
    use crate::keys::{decode_row_key, row_key, row_range, MAX_ROWID};
    use crate::protocol::{
        decode_response, encode_put_batch, encode_request, BatchBuilder, CfRef, LockMode,
    };

    const T: CfRef = CfRef { db: 5, rel: 16384 };

    /// Sends `request` through `handle` with a response buffer of `response_len` bytes.
    fn call(engine: &Engine, request: &Request<'_>, response_len: usize) -> Vec<u8> {
        let mut req = vec![0u8; 1 << 16];
        let len = encode_request(request, &mut req).unwrap();
        let mut resp = vec![0u8; response_len];
        let n = handle(engine, &req[..len], &mut resp);
        resp.truncate(n);
        resp
    }

    fn assert_ok(bytes: &[u8]) {
        assert_eq!(decode_response(bytes).unwrap(), Response::Ok);
    }

    fn error_code(bytes: &[u8]) -> ErrorCode {
        match decode_response(bytes).unwrap() {
            Response::Error { code, .. } => code,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn the_persistence_report_pages_through_every_cf() {
        let dir = TempDir::new();
        let engine = open(&dir);
        let cfs: Vec<CfRef> = (0..40).map(|i| CfRef { db: 1 + i % 2, rel: 100 + i }).collect();
        for &cf in &cfs {
            assert_ok(&call(&engine, &Request::CreateCf { cf, created_lsn: 0, logged: true }, 64));
        }
        // A buffer for a few rows per answer, as with many tables.
        let mut seen = Vec::new();
        let mut after = CfRef { db: 0, rel: 0 };
        for _ in 0..100 {
            let bytes = call(&engine, &Request::Persistence { db: 0, after }, 512);
            let Response::Entries { more, batch } = decode_response(&bytes).unwrap() else {
                panic!("not Entries");
            };
            let page: Vec<_> = batch.iter().filter_map(|(k, v)| crate::protocol::decode_persistence(k, v)).collect();
            assert!(!page.is_empty() && page.len() < cfs.len());
            after = CfRef { db: page.last().unwrap().db, rel: page.last().unwrap().rel };
            seen.extend(page.iter().map(|r| CfRef { db: r.db, rel: r.rel }));
            if !more {
                break;
            }
        }
        let mut expected = cfs.clone();
        expected.sort();
        assert_eq!(seen, expected, "every CF once, in order");
    }

    #[test]
    fn requests_through_handle() {
        let dir = TempDir::new();
        let engine = open(&dir);
        assert_ok(&call(&engine, &Request::Ping, 64));
        assert_ok(&call(&engine, &Request::CreateCf { cf: T, created_lsn: 0, logged: true }, 64));
        let Response::Rowids { first } = decode_response(&call(
            &engine,
            &Request::AllocRowids { cf: T, count: 100 },
            64,
        ))
        .unwrap() else {
            panic!("not Rowids");
        };
        assert_eq!(first, 0);

        let mut batch = BatchBuilder::new();
        for rowid in 0..100 {
            batch.push(&row_key(rowid, 0), &[rowid as u8; 40]).unwrap();
        }
        let mut req = vec![0u8; batch.encoded_len()];
        let len = encode_put_batch(T, &batch, &mut req).unwrap();
        let mut resp = [0u8; 64];
        let n = handle(&engine, &req[..len], &mut resp);
        assert_ok(&resp[..n]);

        // Page through with a 512-byte response buffer, resuming at last key ‖ 0x00.
        let (lo, end) = row_range(0, MAX_ROWID + 1);
        let mut start = lo.to_vec();
        let mut seen = Vec::new();
        loop {
            let resp = call(
                &engine,
                &Request::Scan {
                    cf: T,
                    start: &start,
                    end: &end,
                    max_entries: 7,
                    per_row: 0,
                },
                512,
            );
            let Response::Entries { more, batch } = decode_response(&resp).unwrap() else {
                panic!("not Entries");
            };
            assert!(batch.len() <= 7);
            for (key, value) in batch.iter() {
                let rowid = decode_row_key(key).unwrap().0;
                assert_eq!(value, &[rowid as u8; 40]);
                seen.push(rowid);
            }
            if !more {
                break;
            }
            start = seen.last().map(|&r| row_key(r, 0).to_vec()).unwrap();
            start.push(0);
        }
        assert_eq!(seen, (0..100).collect::<Vec<_>>());

        let Response::CfInfo {
            next_rowid,
            approx_keys,
            ..
        } = decode_response(&call(&engine, &Request::CfInfo(T), 64)).unwrap()
        else {
            panic!("not CfInfo");
        };
        assert_eq!(next_rowid, 100);
        assert!(approx_keys > 0);

        assert_ok(&call(&engine, &Request::FlushAll, 64));
        match decode_response(&call(&engine, &Request::ListCfs, 4096)).unwrap() {
            Response::Entries { more, batch } => {
                assert!(!more);
                assert_eq!(batch.len(), 1);
                let names: Vec<String> =
                    batch.iter().map(|(_, v)| String::from_utf8(v.to_vec()).unwrap()).collect();
                assert!(names.iter().all(|n| crate::cf_name::TableCf::parse(n).is_some()), "{names:?}");
            }
            other => panic!("ListCfs answered {other:?}"),
        }
        assert_ok(&call(&engine, &Request::TruncateCf { cf: T, created_lsn: 0 }, 64));
        assert_ok(&call(&engine, &Request::DropCf(T), 64));
        assert_ok(&call(&engine, &Request::DropCf(T), 64));
        assert_eq!(
            error_code(&call(&engine, &Request::CfInfo(T), 64)),
            ErrorCode::NoSuchCf
        );
        assert_ok(&call(&engine, &Request::CreateCf { cf: T, created_lsn: 0, logged: true }, 64));
        assert_ok(&call(&engine, &Request::DropDatabase { db: T.db }, 64));
        assert!(engine.list_table_cfs().is_empty());
    }

    #[test]
    fn lock_requests_through_handle() {
        let dir = TempDir::new();
        let engine = open(&dir);
        let lock = |xid, mode, evict| {
            lock_answer(&call(
                &engine,
                &Request::LockRow {
                    cf: T,
                    rowid: 42,
                    xid,
                    mode,
                    evict, read: 0,
                },
                64,
            ))
        };
        assert_eq!(lock(100, LockMode::Exclusive, 0), (true, false, 0));
        assert_eq!(lock(100, LockMode::Shared, 0), (true, true, 0));
        assert_eq!(lock(101, LockMode::Shared, 0), (false, false, 100));
        assert_eq!(engine.lock_count(), 1);

        assert_ok(&call(&engine, &Request::ReleaseLocks { xid: 100 }, 64));
        assert_eq!(engine.lock_count(), 0);
        assert_eq!(lock(101, LockMode::Shared, 0), (true, false, 0));
        // Releasing what is not held is fine (the transaction took no locks).
        assert_ok(&call(&engine, &Request::ReleaseLocks { xid: 100 }, 64));
        assert_eq!(engine.lock_count(), 1);

        // A Lock answer needs only the 8-byte header.
        let resp = call(
            &engine,
            &Request::LockRow {
                cf: T,
                rowid: 42,
                xid: 102,
                mode: LockMode::Exclusive,
                evict: 0, read: 0,
            },
            MIN_RESPONSE_LEN,
        );
        assert_eq!(lock_answer(&resp), (false, false, 101));
        // Evicting the ended holder takes the row over.
        assert_eq!(lock(102, LockMode::Exclusive, 101), (true, false, 0));
    }

    #[test]
    fn a_granted_lock_brings_the_newest_versions_asked_for() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        let mut batch = BatchBuilder::new();
        for version in 0..3u32 {
            batch.push(&row_key(7, version), &[version as u8 + 1; 24]).unwrap();
        }
        batch.push(&row_key(8, 0), &[9; 24]).unwrap();
        engine.put_batch(T, batch.as_batch()).unwrap();
        let ask = |xid, read| {
            call(&engine, &Request::LockRow { cf: T, rowid: 7, xid, mode: LockMode::Exclusive, evict: 0, read }, 4096)
        };
        let answer = ask(100, 2);
        let Response::Lock { granted: true, more: true, versions, holder: 0, .. } = decode_response(&answer).unwrap() else {
            panic!("not a granted lock with more versions: {:?}", decode_response(&answer));
        };
        let got: Vec<_> = versions.iter().map(|(k, v)| (decode_row_key(k).unwrap(), v[0])).collect();
        assert_eq!(got, vec![((7, 2), 3), ((7, 1), 2)], "newest first, this row only");
        // All of them: no more; the next row is never included.
        let answer = ask(100, 10);
        let Response::Lock { granted: true, already_held: true, more: false, versions, .. } = decode_response(&answer).unwrap() else {
            panic!("not granted");
        };
        assert_eq!(versions.len(), 3);
        // Refused: the holder and no versions.
        let answer = ask(101, 2);
        assert_eq!(
            decode_response(&answer).unwrap(),
            Response::Lock { granted: false, already_held: false, holder: 100, more: false, versions: Default::default() }
        );
    }

    /// `(granted, already_held, holder)` of a `Lock` answer.
    fn lock_answer(bytes: &[u8]) -> (bool, bool, u32) {
        match decode_response(bytes).unwrap() {
            Response::Lock {
                granted,
                already_held,
                holder,
                ..
            } => (granted, already_held, holder),
            other => panic!("expected Lock, got {other:?}"),
        }
    }

    #[test]
    fn scan_of_an_entry_too_large_for_the_buffer_is_too_large() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        let mut batch = BatchBuilder::new();
        batch.push(&row_key(0, 0), &[0; 1000]).unwrap();
        engine.put_batch(T, batch.as_batch()).unwrap();
        let (start, end) = row_range(0, 1);
        let resp = call(
            &engine,
            &Request::Scan {
                cf: T,
                start: &start,
                end: &end,
                max_entries: 0,
                per_row: 0,
            },
            256,
        );
        assert_eq!(error_code(&resp), ErrorCode::TooLarge);
        // An answer that does not fit is TooLarge too, not a truncated answer.
        assert_eq!(
            error_code(&call(&engine, &Request::CfInfo(T), 16)),
            ErrorCode::TooLarge
        );
    }

    /// A one-row read that missed the row cache caches its row, and after
    /// the answer the rest of the row's run (into free ways); a read of a
    /// row that was never written warms nothing.
    #[test]
    fn a_missed_row_read_warms_its_run_after_the_answer() {
        use crate::engine::test_support::{open_with_row_cache, put_rows};
        use crate::row_cache::PER_ROW;
        let dir = TempDir::new();
        let (_mem, cache, engine) = open_with_row_cache(&dir, 512);
        assert_ok(&call(&engine, &Request::CreateCf { cf: T, created_lsn: 0, logged: true }, 64));
        // Unlogged writes (lsn 0) cache nothing; rowid 150 is never written.
        put_rows(&engine, T, (0..200).filter(|&r| r != 150));
        let cached = |rowid: u64| cache.lookup(T, rowid, &mut [0u8; 4096]).is_some();
        assert!(!(0..200).any(cached));
        let read = |rowid: u64| {
            let (start, end) = row_range(rowid, rowid + 1);
            call(&engine, &Request::Scan { cf: T, start: &start, end: &end, max_entries: 0, per_row: PER_ROW }, 4096)
        };
        read(70);
        assert!(cached(70) && !cached(71), "the answer caches its own row");
        after_reply(&engine);
        assert!((64..128).all(cached), "then its run of 64 rows");
        assert!(!cached(63) && !cached(128), "and nothing beyond it");
        read(150);
        after_reply(&engine);
        assert!(!(128..192).any(cached), "a row never written warms nothing, not even its written neighbours");
    }

    /// The row cache against RocksDB, differentially: random writes of the
    /// kinds backends and VACUUM make (new rows, updates that prune the
    /// version below or an aborted head, frozen copies of old versions,
    /// removals, replayed writes), random reads that fill the cache (one-row
    /// reads and the runs they warm, index windows, row locks) and random
    /// DDL (a new generation). After every step, whatever the cache answers
    /// for a row is what RocksDB holds: its newest versions, and all of them
    /// when it says so. (It caught a frozen version 0 cached as a new row,
    /// and one-row reads cut short by runs of deleted versions.)
    #[test]
    fn the_row_cache_always_agrees_with_rocksdb() {
        use crate::engine::test_support::{open_with_row_cache, scan_all, xorshift};
        use crate::row::{RowHeader, FLAG_FROZEN, FLAG_TOMBSTONE};
        use crate::row_cache::{MAX_WINDOW_ROWS, PER_ROW, WINDOW_PER_ROW};
        const ROWS: u64 = 48;
        let dir = TempDir::new();
        // Few sets: answers are evicted and refilled often.
        let (mem, cache, engine) = open_with_row_cache(&dir, 4);
        assert_ok(&call(&engine, &Request::CreateCf { cf: T, created_lsn: 0, logged: true }, 64));
        let mut rng = xorshift(0x9e37_79b9_7f4a_7c15);
        let value = |version: u32, flags: u8, xid: u64| {
            let mut v = RowHeader { flags, cid: 0, xid, moved_to: 0 }.encode().to_vec();
            v.extend_from_slice(&version.to_le_bytes());
            v
        };
        let stored = |rowid: u64| {
            let (lo, hi) = row_range(rowid, rowid + 1);
            scan_all(&engine, T, &lo, &hi, 1 << 16, 0).0
        };
        let newest = |rowid: u64| stored(rowid).first().map(|(k, _)| decode_row_key(k).unwrap().1);
        let mut lsn = 1u64;
        let mut written = 0u64;
        let (mut compared, mut compared_complete) = (0u32, 0u32);
        for step in 0..4000u64 {
            let rowid = rng(ROWS);
            let mut batch = BatchBuilder::new();
            let mut write_lsn = lsn;
            match rng(30) {
                // A new row: its version 0 alone.
                0..=2 if written < ROWS => {
                    batch.push(&row_key(written, 0), &value(0, 0, step)).unwrap();
                    written += 1;
                }
                // An update: a new head, pruning the version below the old
                // head or (an aborted writer's pruning) the old head itself.
                3..=10 => {
                    if let Some(head) = newest(rowid) {
                        let flags = if rng(8) == 0 { FLAG_TOMBSTONE } else { 0 };
                        batch.push(&row_key(rowid, head + 1), &value(head + 1, flags, step)).unwrap();
                        let pruned = if rng(2) == 0 { Some(head) } else { head.checked_sub(1) };
                        if let Some(p) = pruned {
                            batch.push(&row_key(rowid, p), &[]).unwrap();
                        }
                    }
                }
                // VACUUM's freeze: a frozen copy of any version, of a few rows.
                11..=13 => {
                    for r in [rowid, rng(ROWS)] {
                        let versions = stored(r);
                        if !versions.is_empty() {
                            let (key, _) = &versions[rng(versions.len() as u64) as usize];
                            let version = decode_row_key(key).unwrap().1;
                            batch.push(key, &value(version, FLAG_FROZEN, 1)).unwrap();
                        }
                    }
                }
                // VACUUM's removal of a row's oldest versions.
                14 | 15 => {
                    let versions = stored(rowid);
                    let keep = rng(versions.len() as u64 + 1) as usize;
                    for (key, _) in versions.iter().skip(keep) {
                        batch.push(key, &[]).unwrap();
                    }
                }
                // Replay: an existing version written again, unlogged.
                16 => {
                    if let Some((key, v)) = stored(rowid).last() {
                        batch.push(key, v).unwrap();
                        write_lsn = 0;
                    }
                }
                // Reads that fill the cache, and the run a miss warms.
                17..=21 => {
                    let (lo, hi) = row_range(rowid, rowid + 1);
                    call(&engine, &Request::Scan { cf: T, start: &lo, end: &hi, max_entries: 0, per_row: PER_ROW }, 4096);
                    after_reply(&engine);
                }
                22..=25 => {
                    let first = rowid.min(ROWS - 2);
                    let (lo, hi) = row_range(first, (first + 2 + rng(MAX_WINDOW_ROWS - 2)).min(ROWS));
                    call(&engine, &Request::Scan { cf: T, start: &lo, end: &hi, max_entries: 0, per_row: WINDOW_PER_ROW }, 1 << 16);
                }
                // A row lock's read: what it answers is RocksDB's too.
                26..=28 => {
                    let answer = call(&engine, &Request::LockRow { cf: T, rowid, xid: 7, mode: LockMode::Exclusive, evict: 0, read: 2 }, 4096);
                    engine.release_locks(7);
                    if let Response::Lock { granted: true, more, versions, .. } = decode_response(&answer).unwrap() {
                        let got: Vec<_> = versions.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
                        let all = stored(rowid);
                        assert_eq!(got[..], all[..got.len().min(all.len())], "step {step}: the lock's versions of row {rowid}");
                        assert!(more || got.len() == all.len(), "step {step}: the lock said row {rowid} has no more");
                    }
                }
                // DDL elsewhere: every cached answer is stale.
                29 => cache.new_generation(),
                _ => {}
            }
            if !batch.is_empty() {
                engine.put_batch_at(T, write_lsn, batch.as_batch()).unwrap();
                lsn += 1;
            }
            for r in 0..ROWS {
                let mut cached = Vec::new();
                let answer = cache.versions(T, r, PER_ROW as usize, |k, v| {
                    cached.push((k.to_vec(), v.to_vec()));
                    true
                });
                let Some(more) = answer else { continue };
                compared += 1;
                compared_complete += u32::from(!more);
                let all = stored(r);
                assert!(all.starts_with(&cached), "step {step}: row {r} cached {:?}, stored {:?}", keys_of(&cached), keys_of(&all));
                assert!(more || cached.len() == all.len(), "step {step}: row {r} cached complete {:?}, stored {:?}", keys_of(&cached), keys_of(&all));
            }
        }
        assert!(compared > 10_000 && compared_complete > 5_000, "the cache answered too rarely to tell: {compared} / {compared_complete}");
        drop(mem);
    }

    fn keys_of(entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<u32> {
        entries.iter().map(|(k, _)| decode_row_key(k).unwrap().1).collect()
    }

    #[test]
    fn tiny_response_buffer_executes_nothing() {
        let dir = TempDir::new();
        let engine = open(&dir);
        assert!(call(&engine, &Request::CreateCf { cf: T, created_lsn: 0, logged: true }, MIN_RESPONSE_LEN - 1).is_empty());
        assert!(engine.list_table_cfs().is_empty());
        assert_ok(&call(&engine, &Request::Ping, MIN_RESPONSE_LEN));
    }

    #[test]
    fn garbage_gets_an_error_response() {
        let dir = TempDir::new();
        let engine = open(&dir);
        let mut resp = [0u8; 256];
        for garbage in [
            &b""[..],
            b"\x00",
            b"\xFF\xFF\xFF\xFF",
            &[0xAB; 40],
            &[7, 0, 0, 0, 5, 0, 0, 0],
        ] {
            let n = handle(&engine, garbage, &mut resp);
            assert_eq!(error_code(&resp[..n]), ErrorCode::BadRequest, "{garbage:?}");
        }
    }

    #[test]
    fn random_and_mutated_requests_never_panic() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();

        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        };

        // Valid requests to mutate, so the fuzz reaches past the header checks.
        let mut batch = BatchBuilder::new();
        batch.push(&row_key(1, 0), b"value one").unwrap();
        batch.push(&row_key(2, 0), b"").unwrap();
        let (start, end) = row_range(0, 10);
        let seeds = [
            Request::PutBatch {
                cf: T,
                lsn: 0,
                batch: batch.as_batch(),
            },
            Request::Scan {
                cf: T,
                start: &start,
                end: &end,
                max_entries: 3,
                per_row: 0,
            },
            Request::AllocRowids { cf: T, count: 2 },
            Request::CfInfo(T),
            Request::LockRow {
                cf: T,
                rowid: 3,
                xid: 100,
                mode: LockMode::Shared,
                evict: 0, read: 0,
            },
            Request::ReleaseLocks { xid: 100 },
        ];
        let mut encoded = Vec::new();
        for seed in &seeds {
            let mut buf = vec![0u8; 256];
            let len = encode_request(seed, &mut buf).unwrap();
            buf.truncate(len);
            encoded.push(buf);
        }

        let mut resp = vec![0u8; 512];
        for i in 0..4000 {
            let mut req: Vec<u8> = if i % 4 == 0 {
                (0..next() % 80).map(|_| next() as u8).collect()
            } else {
                encoded[(next() % encoded.len() as u64) as usize].clone()
            };
            if i % 4 != 0 {
                for _ in 0..1 + next() % 3 {
                    let at = (next() % req.len() as u64) as usize;
                    req[at] = next() as u8;
                }
                if next() % 4 == 0 {
                    req.truncate((next() % req.len() as u64) as usize);
                }
            }
            let resp_len = (next() % resp.len() as u64) as usize;
            let n = handle(&engine, &req, &mut resp[..resp_len]);
            assert!(n <= resp_len);
            if resp_len >= MIN_RESPONSE_LEN {
                decode_response(&resp[..n]).expect("handle's answer decodes");
            } else {
                assert_eq!(n, 0);
            }
        }
    }
}
