//! New rows a backend still holds in its write-behind buffer
//! (`engine_client`), published in its main slot's header so that another
//! backend's unique check can tell that a rowid it reached through an index
//! entry belongs to an insert in progress. Heap's dirty snapshot reports
//! such an inserter in `xmin` and the check waits for it; a pasv row that
//! is still buffered is not in the engine, so without this the check would
//! find nothing and admit a duplicate key.
//!
//! A publication is one CF, the (sub)transaction id that creates the rows,
//! and a rowid range `[lo, hi)`: the rows of one buffer are consecutive
//! rowids of one reservation (a new reservation is a request, and every
//! request sends the buffer first). Only the owning backend writes it.
//!
//! Fences:
//! * `hi` covers a row (SeqCst store) before `tuple_insert` returns, so
//!   before the executor inserts the row's index entry; a backend that
//!   found that entry (under the index page's lock, released after the
//!   insert) loads `hi` after it and sees the row covered.
//! * The publication is withdrawn only after the batch holding its rows was
//!   posted (`client::post_checked`'s SeqCst `SUBMITTED` or `QUEUED`
//!   store): a reader that finds the rowid no longer covered then fences
//!   (`client::fence_others`, SeqCst loads) and reads the row from the
//!   engine.
//! * The other fields change under `seq` (odd while being written, a
//!   seqlock): a reader retries until it saw one even value around its
//!   loads, so it never pairs one publication's CF with another's range.

use super::client::{self, channel};
use pasv_am::protocol::CfRef;
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The published range of one backend (in its main slot's header).
#[repr(C)]
pub struct BufferedRows {
    seq: AtomicU32,
    db: AtomicU32,
    rel: AtomicU32,
    xid: AtomicU32,
    lo: AtomicU64,
    hi: AtomicU64,
}

/// What this backend last published (it is the only writer, so it need
/// not read its own slot back).
#[derive(Clone, Copy)]
struct Published {
    cf: CfRef,
    xid: u32,
    hi: u64,
}

thread_local! {
    static MINE: Cell<Option<Published>> = const { Cell::new(None) };
}

/// Run `f` on this backend's publication, if it has a slot.
fn with_mine<R>(f: impl FnOnce(&BufferedRows) -> R) -> Option<R> {
    let chan = channel()?;
    let i = client::my_slot(&chan).ok()?;
    Some(f(&chan.slot(i).buffered))
}

/// Cover new row `rowid` of `cf`, created by `xid`, before its index
/// entries exist. Rowids from `own_from` on are this backend's own, so
/// the range may grow over those it skipped (`engine_client::next_rowid`
/// starts a new block past the rest of a full one): nobody writes them,
/// so nobody waits for them. False when the buffer's range cannot take it
/// (another CF or xid, or a rowid past one it does not own): the caller
/// sends the buffer, which withdraws the publication, and asks again.
pub fn cover(cf: CfRef, xid: u32, rowid: u64, own_from: u64) -> bool {
    let mine = MINE.with(|m| m.get());
    with_mine(|slot| match mine {
        Some(p) if p.cf == cf && p.xid == xid && (p.hi == rowid || (p.hi >= own_from && p.hi < rowid)) => {
            slot.hi.store(rowid + 1, Ordering::SeqCst);
            MINE.with(|m| m.set(Some(Published { hi: rowid + 1, ..p })));
            true
        }
        Some(_) => false,
        None => {
            let seq = slot.seq.load(Ordering::Relaxed);
            slot.seq.store(seq.wrapping_add(1) | 1, Ordering::SeqCst);
            slot.db.store(cf.db, Ordering::SeqCst);
            slot.rel.store(cf.rel, Ordering::SeqCst);
            slot.xid.store(xid, Ordering::SeqCst);
            slot.lo.store(rowid, Ordering::SeqCst);
            slot.hi.store(rowid + 1, Ordering::SeqCst);
            slot.seq.store((seq | 1).wrapping_add(1), Ordering::SeqCst);
            MINE.with(|m| m.set(Some(Published { cf, xid, hi: rowid + 1 })));
            true
        }
    })
    .unwrap_or(true)
}

/// Withdraw this backend's publication: its rows were posted (or died with
/// their transaction).
pub fn withdraw() {
    if MINE.with(|m| m.take()).is_none() {
        return;
    }
    // An empty range (`hi` down to `lo`): no reader finds a row covered.
    with_mine(|slot| slot.hi.store(slot.lo.load(Ordering::Relaxed), Ordering::SeqCst));
}

/// The creator of row `rowid` of `cf` if another backend holds it in its
/// buffer (published, so its index entries may exist), else `None`.
pub fn buffered_creator(cf: CfRef, rowid: u64) -> Option<u32> {
    let chan = channel()?;
    let me = client::my_slot(&chan).ok();
    for j in (0..chan.procs()).filter(|&j| Some(j) != me) {
        let slot = &chan.slot(j).buffered;
        // Cheap test first: most slots publish nothing that covers it.
        let hi = slot.hi.load(Ordering::SeqCst);
        if hi <= rowid {
            continue;
        }
        if let Some(xid) = read_covering(slot, cf, rowid) {
            return Some(xid);
        }
    }
    None
}

/// The xid of `slot`'s publication if it covers `(cf, rowid)`.
fn read_covering(slot: &BufferedRows, cf: CfRef, rowid: u64) -> Option<u32> {
    // A writer is odd only for six stores, and never blocks in between
    // except by preemption: spin, then yield the core to it.
    let mut attempt = 0u32;
    loop {
        let before = slot.seq.load(Ordering::SeqCst);
        if before & 1 == 0 {
            let db = slot.db.load(Ordering::SeqCst);
            let rel = slot.rel.load(Ordering::SeqCst);
            let xid = slot.xid.load(Ordering::SeqCst);
            let lo = slot.lo.load(Ordering::SeqCst);
            let hi = slot.hi.load(Ordering::SeqCst);
            if slot.seq.load(Ordering::SeqCst) == before {
                let covers = db == cf.db && rel == cf.rel && lo <= rowid && rowid < hi;
                return covers.then_some(xid);
            }
        }
        if attempt < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        attempt = attempt.saturating_add(1);
    }
}
