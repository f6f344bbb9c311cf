//! Reading rows: range scans in key order, written straight into the
//! response buffer.
//!
//! Owns `scan` and `scan_rows` and the iterator tuning they rely on. A scan
//! finds its CF in the registry and holds no engine lock while it iterates.
//! Calls RocksDB iterators through `row_view` (which opens packs) and the
//! protocol's [`ScanWriter`].
//!
//! Invariants:
//! * Entries come in ascending key order, so a row's versions come newest
//!   first (the key holds the inverted version).
//! * An answer stops when the buffer or the count limit is reached and says
//!   `more`; it never steps past its last entry, and the next page starts at
//!   the successor of the last key returned.
//! * With a per-row limit, a row's older versions and the delete markers
//!   behind them are sought past, not walked, once a few steps did not do.

use rocksdb::ReadOptions;

use std::sync::atomic::Ordering;

use super::row_view::RowView;
use super::{Engine, EngineError};
use crate::keys::{decode_row_key, row_key, within_one_prefix, MAX_ROWID};
use crate::protocol::{CfRef, ScanWriter};

/// Deleted keys one iterator step of a per-row scan may skip before the
/// scan seeks instead (pruning leaves delete markers behind live versions
/// until compaction; stepping over thousands of them made hot rows slow).
const MAX_SKIPPED_PER_STEP: u64 = 16;
/// Older versions a per-row scan steps over before it seeks past the row:
/// a step costs a key comparison per sorted run, a seek an index search in
/// each (profiled: seeking after every updated row made scans of tables
/// whose rows had 2-3 versions several times slower).
const STEPS_BEFORE_SEEK: u32 = 8;

/// Read options for `[start, end)`: confined to one rowid prefix (so the
/// bloom filters skip SST files and memtables without the row) when the
/// range lies within one, total-order otherwise. Every iterator of a CF
/// with a prefix extractor must be one or the other: a default iterator
/// would use the seek key's prefix filter and miss rows of other prefixes.
pub(super) fn range_read_options(start: &[u8], end: &[u8]) -> ReadOptions {
    let mut options = ReadOptions::default();
    options.set_iterate_upper_bound(end);
    if within_one_prefix(start, end) {
        options.set_prefix_same_as_start(true);
    } else {
        options.set_total_order_seek(true);
    }
    options
}

/// The smallest rowid `r <= MAX_ROWID` whose smallest key,
/// `row_key(r, u32::MAX)` (the rowid, then four zero bytes), is `>= end`,
/// or `MAX_ROWID + 1` if none is. Worked out from `end`'s bytes, as every
/// one-row read asks it once.
fn first_row_at_or_past(end: &[u8]) -> u64 {
    let mut rowid = [0u8; 8];
    let head = end.len().min(8);
    rowid[..head].copy_from_slice(&end[..head]);
    let rowid = u64::from_be_bytes(rowid);
    // Row `rowid`'s smallest key reaches `end` unless `end` goes on past
    // the rowid with more than four bytes or with a nonzero one.
    let rest = end.get(8..).unwrap_or_default();
    let first = if rest.len() <= 4 && rest.iter().all(|&b| b == 0) { rowid } else { rowid.saturating_add(1) };
    first.min(MAX_ROWID + 1)
}

/// Copies to `out` the entries of the packed run at `iter`'s position
/// (`RowView::packed_run`) that `scan_rows`'s loop would copy one by one
/// with no other effect, without that loop's per-entry work (the view's
/// merge, a key decode, the row bookkeeping): the run's entries whose row
/// has no other entry in the answer so far, whose next entry (in the run,
/// or for its last the view's entry after it, when the view knows its
/// rowid) is of another row, and that do not end the range. The loop
/// takes over at the first entry that is not so, with
/// `row`, `in_row` and `last_version` as it would have left them. True
/// when `out` is full (the loop's "return with more").
///
/// A bulk-loaded table's scan is mostly such runs: 64 rows to a pack, one
/// version each (HOT_PATH §46).
fn copy_packed_run(
    iter: &mut RowView<'_>,
    out: &mut ScanWriter<'_>,
    per_row: u32,
    first_row_past_end: u64,
    row: &mut Option<u64>,
    in_row: &mut u32,
    last_version: &mut u32,
) -> bool {
    let mut copied = 0;
    let mut full = false;
    if let Some((pack, run, after_run)) = iter.packed_run() {
        let mut entries = pack.run(run).peekable();
        while let Some((rowid, version, value)) = entries.next() {
            // The run's last entry is alone when the view knows what comes
            // after the run (the entry of a row key between packed rows:
            // before, each such key sent its neighbour down the per-entry
            // path too).
            let Some(next_rowid) = entries.peek().map(|&(r, _, _)| r).or(after_run) else { break };
            let alone = next_rowid != rowid && (per_row == 0 || *row != Some(rowid));
            if !alone || rowid.saturating_add(1) >= first_row_past_end || !out.try_push(&row_key(rowid, version), value) {
                break;
            }
            copied += 1;
            if per_row > 0 {
                *row = Some(rowid);
                *in_row = 1;
                *last_version = version;
            }
            if out.is_full() {
                full = true;
                break;
            }
        }
    }
    if copied > 0 && !full {
        iter.pass_packed(copied);
    }
    full
}

impl Engine {
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
    pub fn scan_rows<'a>(
        &'a self,
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
        let mut read_options = range_read_options(start, end);
        if per_row > 0 {
            // A step that would skip more deleted keys than this stops with
            // an Incomplete status; the scan then seeks instead (below).
            read_options.set_max_skippable_internal_keys(MAX_SKIPPED_PER_STEP);
        }
        let pack_floor = entry.pack_floor.load(Ordering::Acquire);
        let mut iter = RowView::new(self.db.raw_iterator_cf_opt(&handle, read_options), end, pack_floor);
        // Whether `iter` still gives up after MAX_SKIPPED_PER_STEP deleted keys.
        let mut capped = per_row > 0;
        // Positions `iter` at the first entry >= target. A capped iterator
        // that gives up even there is replaced, for the rest of this answer,
        // by an uncapped one sought to the same target. (It once sought the
        // uncapped iterator's first key with the capped one instead: the two
        // read different points in time, so a key written between their
        // creations, such as a row just moved to the table's end, was
        // invisible to the capped one, which gave up again and again at the
        // same place, for ever.)
        let reposition = |iter: &mut RowView<'a>, capped: &mut bool, target: &[u8]| {
            iter.seek(target);
            if *capped && iter.is_incomplete() {
                *iter = RowView::new(self.db.raw_iterator_cf_opt(&handle, range_read_options(start, end)), end, pack_floor);
                *capped = false;
                iter.seek(target);
            }
        };
        reposition(&mut iter, &mut capped, start);
        // The first rowid whose smallest key is at or past `end`: the range
        // ends within the row before it. Computed once, so that the per-row
        // test below compares integers rather than building a key and
        // comparing it with `end` (a `memcmp` at every row of a scan took a
        // quarter of the engine's time, profiled in session 24).
        let first_row_past_end = first_row_at_or_past(end);
        let mut row: Option<u64> = None;
        let mut in_row = 0u32;
        // The version of `row` returned last.
        let mut last_version = 0u32;
        loop {
            if copy_packed_run(&mut iter, out, per_row, first_row_past_end, &mut row, &mut in_row, &mut last_version) {
                return Ok(true);
            }
            let Some((key, value)) = iter.item() else {
                if capped && iter.is_incomplete() {
                    // Stepping hit a run of deleted keys. Inside a row that
                    // still owes versions, go on just after the last one
                    // returned: a live older version may lie beyond the run
                    // (pruning by writers that aborted leaves such runs
                    // between a row's head and its visible version). Past
                    // the row's quota, seek to the next row.
                    let (target, same_row) = match row {
                        Some(r) if in_row < per_row && last_version > 0 => (row_key(r, last_version - 1), true),
                        Some(r) if r < MAX_ROWID => (row_key(r + 1, u32::MAX), false),
                        Some(_) => break,
                        None => (start.try_into().unwrap_or(row_key(0, u32::MAX)), false),
                    };
                    if target.as_slice() >= end {
                        break;
                    }
                    reposition(&mut iter, &mut capped, &target);
                    if !same_row {
                        in_row = 0;
                        row = None;
                    }
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
            let decoded = decode_row_key(key);
            let rowid = decoded.map(|(r, _)| r);
            if let Some((_, version)) = decoded.filter(|_| per_row > 0) {
                if rowid != row {
                    row = rowid;
                    in_row = 0;
                }
                in_row += 1;
                last_version = version;
                if in_row >= per_row {
                    // A range that ends with this row (a point lookup) is
                    // done: do not step into its older versions.
                    if let Some(r) = rowid {
                        if r >= MAX_ROWID || r + 1 >= first_row_past_end {
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
                                Some(r) if r < MAX_ROWID => reposition(&mut iter, &mut capped, &row_key(r + 1, u32::MAX)),
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
        iter.status(&entry.name)?;
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{open, put_rows, rowids_of, scan_all, value, TempDir, T};
    use super::*;
    use crate::keys::row_range;
    use crate::protocol::{decode_response, BatchBuilder, ErrorCode, Response};

    #[test]
    fn the_first_row_past_an_end_key_agrees_with_comparing_keys() {
        // Every shape of end a caller sends: a row's key at any version, a
        // bare rowid prefix, keys shorter or longer than a row's, the ends.
        let mut ends: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0xff; 20], MAX_ROWID.to_be_bytes().to_vec()];
        for rowid in [0, 1, 7, 255, 256, 1 << 40, MAX_ROWID - 1, MAX_ROWID] {
            for version in [0, 1, 17, u32::MAX - 1, u32::MAX] {
                let key = row_key(rowid, version);
                ends.push(key.to_vec());
                ends.push(key[..8].to_vec());
                ends.push(key[..10].to_vec());
                ends.push([key.as_slice(), &[0]].concat());
            }
        }
        // And odd ones: random lengths, bytes mostly 0, 0xff or the rowid
        // limit's.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..4000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 17) as usize;
            let limit = MAX_ROWID.to_be_bytes();
            ends.push((0..len).map(|i| match (seed >> (8 + 2 * i)) & 3 { 0 => 0, 1 => 0xff, 2 => limit[i % 8], _ => (seed >> i) as u8 }).collect());
        }
        for end in &ends {
            let first = first_row_at_or_past(end);
            assert!(first <= MAX_ROWID + 1);
            if first <= MAX_ROWID {
                assert!(row_key(first, u32::MAX).as_slice() >= end.as_slice(), "{end:?}");
            }
            if first > 0 {
                assert!(row_key(first - 1, u32::MAX).as_slice() < end.as_slice(), "{end:?}");
            }
        }
    }

    #[test]
    fn rows_spread_over_sst_files_and_memtables_are_all_found() {
        // Three sorted runs: two SST files and the memtable. A range across
        // rows is total-order; a one-row range is read in prefix mode (bloom
        // filters): both must find every version wherever it lives.
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        put_rows(&engine, T, 0..100);
        engine.flush_cf(T).unwrap();
        put_rows(&engine, T, 100..200);
        engine.flush_cf(T).unwrap();
        let mut batch = BatchBuilder::new();
        for rowid in 50..150 {
            batch.push(&row_key(rowid, 1), &value(rowid, 3)).unwrap();
        }
        engine.put_batch(T, batch.as_batch()).unwrap();

        let (start, end) = row_range(0, MAX_ROWID + 1);
        let (rows, _) = scan_all(&engine, T, &start, &end, 1 << 16, 0);
        assert_eq!(rows.len(), 300);
        let (start, end) = row_range(40, 160);
        assert_eq!(scan_all(&engine, T, &start, &end, 1 << 16, 0).0.len(), 220);
        for (rowid, versions) in [(10, 1), (60, 2), (120, 2), (199, 1), (200, 0)] {
            let (start, end) = row_range(rowid, rowid + 1);
            let (rows, _) = scan_all(&engine, T, &start, &end, 4096, 0);
            assert_eq!(rowids_of(&rows), vec![rowid; versions], "row {rowid}");
        }
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

    /// Rows 0 and 2 with one version each, and row 1 with versions
    /// `lo..=hi` written and all but `kept` of them deleted again.
    fn row_1_with_deleted_versions(engine: &Engine, lo: u32, hi: u32, kept: &[u32]) {
        let mut batch = BatchBuilder::new();
        for version in lo..=hi {
            batch.push(&row_key(1, version), &value(1, 8)).unwrap();
        }
        batch.push(&row_key(0, 0), &value(0, 8)).unwrap();
        batch.push(&row_key(2, 0), &value(2, 8)).unwrap();
        engine.put_batch(T, batch.as_batch()).unwrap();
        let mut batch = BatchBuilder::new();
        for version in (lo..=hi).filter(|v| !kept.contains(v)) {
            batch.push(&row_key(1, version), &[]).unwrap();
        }
        engine.put_batch(T, batch.as_batch()).unwrap();
    }

    /// The (rowid, version) pairs a per-row scan of `[start, end)` returns.
    fn per_row_keys(engine: &Engine, start: &[u8], end: &[u8], per_row: u32) -> Vec<(u64, u32)> {
        let mut out = vec![0u8; 1 << 16];
        let mut writer = ScanWriter::new(&mut out, 0);
        let more = engine.scan_rows(T, start, end, per_row, &mut writer).unwrap();
        let len = writer.finish(more);
        let Response::Entries { batch, .. } = decode_response(&out[..len]).unwrap() else {
            panic!("not Entries")
        };
        batch.iter().map(|(k, _)| decode_row_key(k).unwrap()).collect()
    }

    #[test]
    fn per_row_scan_seeks_past_runs_of_deleted_versions() {
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        // Row 1 has one live version (500) above 200 deleted ones: far more
        // than one iterator step may skip.
        row_1_with_deleted_versions(&engine, 300, 500, &[500]);
        let (start, end) = row_range(0, MAX_ROWID + 1);
        for per_row in [1u32, 2, 0] {
            assert_eq!(per_row_keys(&engine, &start, &end, per_row), vec![(0, 0), (1, 500), (2, 0)], "per_row {per_row}");
        }
    }

    #[test]
    fn per_row_scan_finds_a_live_version_below_a_run_of_deleted_ones() {
        // Row 1: a head (500) and an older live version (100) with 399
        // deleted versions between them, as rows updated again and again by
        // transactions that abort leave them (each aborted writer prunes the
        // aborted version below its own). A per-row read must return both
        // live versions: the older one is the row's visible version.
        let dir = TempDir::new();
        let engine = open(&dir);
        engine.create_cf(T).unwrap();
        row_1_with_deleted_versions(&engine, 100, 500, &[100, 500]);
        let ranges = [(row_range(0, MAX_ROWID + 1), vec![(0, 0), (1, 500), (1, 100), (2, 0)]), (row_range(1, 2), vec![(1, 500), (1, 100)])];
        for ((start, end), expect) in ranges {
            for per_row in [2u32, 3, 4, 0] {
                assert_eq!(per_row_keys(&engine, &start, &end, per_row), expect, "per_row {per_row}");
            }
        }
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
}
