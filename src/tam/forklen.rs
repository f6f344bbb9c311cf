//! The main fork of a pasv table holds no data, but PostgreSQL 16's ANALYZE
//! picks its sample from `RelationGetNumberOfBlocks()` blocks of it (there
//! is no table-AM hook for that). So pasv keeps the fork as *long* as the
//! table's rowid space (291 rowids a block) by writing one zero page at the
//! end: a sparse file whose holes take no disk space. The analyze callbacks
//! then read the sampled rowid blocks from the engine.
//!
//! `pg_relation_size` reads the file itself, so the fork's length is also
//! the size users see: VACUUM truncates it when it trims the table's size
//! end ([`trim`]), as heap's VACUUM truncates empty pages at the end.
//!
//! A new rowid block used to cost a page write (11 % of a 200 000-row
//! COPY's backend time, one write per 60-odd rows; 3 % of an UPDATE of
//! 60 000 rows, whose new versions take new rowids): a batch of rows is
//! covered once, and a backend inserting in bulk stretches the fork
//! [`AHEAD`] blocks at a time within the rowids it reserved, as heap's
//! bulk extension (PostgreSQL 16's `RelationAddBlocks`) adds up to 64
//! pages at once. The blocks that stay empty at the end count in
//! `pg_relation_size` until VACUUM trims them, as heap's do.
//!
//! Not WAL-logged and not fsynced: after a crash the fork may be shorter,
//! which only makes ANALYZE sample fewer blocks until the next insert
//! stretches it again.

use pasv_am::keys::ROWS_PER_BLOCK;
use pgrx::pg_sys;
use std::cell::RefCell;
use rustc_hash::FxHashMap;

thread_local! {
    /// Known fork lengths by (db, relfilenumber), so the file is looked at
    /// once per new rowid block, not once per row. Emptied by every relcache
    /// invalidation: a VACUUM elsewhere may have shortened a fork.
    static KNOWN: RefCell<FxHashMap<(u32, u32), pg_sys::BlockNumber>> = RefCell::new(FxHashMap::default());
}

/// Make the main fork of `smgr` `blocks` long by writing only its last page:
/// everything before it is a hole.
///
/// # Safety
/// `smgr` is open; the caller holds what keeps others from extending it.
pub unsafe fn extend_sparse(smgr: pg_sys::SMgrRelation, blocks: pg_sys::BlockNumber) {
    if blocks == 0 {
        return;
    }
    let page = pg_sys::palloc0(pg_sys::BLCKSZ as usize);
    pg_sys::smgrextend(smgr, pg_sys::ForkNumber::MAIN_FORKNUM, blocks - 1, page, true);
    pg_sys::pfree(page);
}

/// Blocks a bulk-inserting backend stretches the fork by at a time.
const AHEAD: u64 = 16;
/// Rowid chunk size from which a backend's inserts count as a bulk load
/// (chunks double from 64 while it keeps inserting: about 1 600 rows of
/// 120 bytes in a row).
const BULK_CHUNK: u32 = 1 << 13;

/// Make `rel`'s main fork cover `rowid`, the highest rowid this backend
/// just took from its reservation for new rows or row versions: a bulk
/// load or a large UPDATE stretches it further (module docs).
///
/// # Safety
/// `rel` must be an open pasv relation.
pub unsafe fn cover_inserted(rel: pg_sys::Relation, rowid: u64) {
    let need = rowid / ROWS_PER_BLOCK + 1;
    stretch(rel, need, |cf| match crate::engine_client::rowid_reservation(cf) {
        Some((end, chunk)) if chunk >= BULK_CHUNK => (need + AHEAD - 1).min(end.div_ceil(ROWS_PER_BLOCK)),
        _ => need,
    });
}

/// Make `rel`'s main fork at least `blocks` blocks long.
///
/// # Safety
/// `rel` must be an open pasv relation.
pub unsafe fn cover_blocks(rel: pg_sys::Relation, blocks: u64) {
    stretch(rel, blocks, |_| blocks);
}

/// Make `rel`'s main fork `stretch_to(its CF)` blocks long (at least
/// `blocks`) if it is shorter than `blocks`. `stretch_to` runs only then:
/// a row's usual path is the known-length check.
unsafe fn stretch(rel: pg_sys::Relation, blocks: u64, stretch_to: impl FnOnce(pasv_am::protocol::CfRef) -> u64) {
    // MaxBlockNumber (0xFFFFFFFE) is a macro in C.
    let target = blocks.min(0xFFFF_FFFE) as pg_sys::BlockNumber;
    let cf = super::cf_of(rel);
    let key = (cf.db, cf.rel);
    if KNOWN.with(|k| k.borrow().get(&key).is_some_and(|&len| len >= target)) {
        return;
    }
    let stretch_to = stretch_to(cf).max(blocks).min(0xFFFF_FFFE) as pg_sys::BlockNumber;
    let lock = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    pg_sys::LockRelationForExtension(rel, lock);
    let smgr = pg_sys::RelationGetSmgr(rel);
    let mut len = pg_sys::smgrnblocks(smgr, pg_sys::ForkNumber::MAIN_FORKNUM);
    if len < target {
        extend_sparse(smgr, stretch_to);
        len = stretch_to;
    }
    pg_sys::UnlockRelationForExtension(rel, lock);
    KNOWN.with(|k| k.borrow_mut().insert(key, len));
}

/// Shorten `rel`'s main fork to `blocks` blocks if it is longer (VACUUM's
/// truncation), and make every backend look at the file again before it
/// next stretches it.
///
/// # Safety
/// `rel` must be an open pasv relation, locked AccessExclusive.
pub unsafe fn trim(rel: pg_sys::Relation, blocks: u64) {
    let target = blocks.min(0xFFFF_FFFE) as pg_sys::BlockNumber;
    let smgr = pg_sys::RelationGetSmgr(rel);
    let mut fork = pg_sys::ForkNumber::MAIN_FORKNUM;
    if pg_sys::smgrnblocks(smgr, fork) > target {
        let mut nblocks = target;
        pg_sys::smgrtruncate(smgr, &mut fork, 1, &mut nblocks);
        pg_sys::CacheInvalidateRelcache(rel);
    }
    forget_lengths();
}

/// Forget the known fork lengths (a relcache invalidation: a VACUUM
/// elsewhere may have shortened a fork).
pub fn forget_lengths() {
    KNOWN.with(|k| k.borrow_mut().clear());
}
