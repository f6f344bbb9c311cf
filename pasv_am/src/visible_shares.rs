//! The share of each table's live rows that its last VACUUM found visible to
//! every transaction, in memory every backend reads: the planner's
//! all-visible fraction for pasv tables.
//!
//! Why not `pg_class.relallvisible` alone: PostgreSQL's ANALYZE (also the
//! one in `VACUUM ANALYZE`, and autoanalyze) writes that column from the
//! visibility map, and a pasv table has none, so every ANALYZE set it to 0
//! and index-only-scan plans came and went with autovacuum's timing (the
//! core suite's tenk1 plans). VACUUM records the share here too, where
//! ANALYZE does not reach. For pasv the figure only steers the planner: an
//! index-only scan of a pasv table fetches every row whatever it says.
//!
//! Layout (one region in PostgreSQL shared memory, or on the heap in tests):
//! a header, then a power of two of slots `(key, share)`, probed linearly
//! from the key's hash. A key is written once (0 → key, compare-and-swap)
//! and never removed; a table whose slot cannot be found or made has no
//! share (the planner then uses `pg_class` alone). Memory only: a restart
//! forgets the shares until each table's next VACUUM.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::protocol::CfRef;
use crate::region::{power_of_two_fit, Stamp};

const MAGIC: u64 = 0x7061_7376_5653_0001; // "pasvVS" v1
/// Slots probed for one key.
const PROBES: usize = 16;
/// The share's unit: `ONE` means every live row.
pub const ONE: u32 = 1 << 16;

#[repr(C)]
struct Header {
    /// The slot count.
    stamp: Stamp,
}

#[repr(C)]
struct Slot {
    /// `db << 32 | rel`; 0: free.
    key: AtomicU64,
    /// The share in units of 1 / [`ONE`], plus one (0: none recorded).
    share: AtomicU32,
    _pad: u32,
}

/// A handle on a formatted region (a pointer: cheap to copy).
#[derive(Clone, Copy)]
pub struct VisibleShares {
    base: *mut u8,
    slots: usize,
}

// SAFETY: every shared word is an atomic; the region outlives every handle.
unsafe impl Send for VisibleShares {}
unsafe impl Sync for VisibleShares {}

/// Bytes of a region with `slots` slots.
pub const fn region_bytes(slots: usize) -> usize {
    std::mem::size_of::<Header>() + slots * std::mem::size_of::<Slot>()
}

impl VisibleShares {
    /// Formats a zeroed, 8-aligned region of `bytes` bytes; `None` if it is
    /// too small for one slot.
    ///
    /// # Safety
    /// `base` points to `bytes` writable, zeroed, 8-aligned bytes that live
    /// as long as every handle made from them.
    pub unsafe fn format(base: *mut u8, bytes: usize) -> Option<VisibleShares> {
        let slots = power_of_two_fit(bytes, std::mem::size_of::<Header>(), std::mem::size_of::<Slot>())?;
        let shares = VisibleShares { base, slots };
        shares.header().stamp.mark(MAGIC, slots);
        Some(shares)
    }

    /// A handle on a region [`VisibleShares::format`] prepared.
    ///
    /// # Safety
    /// As for `format`, for a region formatted before.
    pub unsafe fn attach(base: *mut u8) -> Option<VisibleShares> {
        let slots = (*(base as *const Header)).stamp.count(MAGIC)?;
        Some(VisibleShares { base, slots })
    }

    fn header(&self) -> &Header {
        // SAFETY: the region starts with a Header (format's contract).
        unsafe { &*(self.base as *const Header) }
    }

    fn slot(&self, i: usize) -> &Slot {
        // SAFETY: `i` is masked below `slots`; the slots follow the header.
        unsafe { &*((self.base.add(std::mem::size_of::<Header>()) as *const Slot).add(i & (self.slots - 1))) }
    }

    fn key(cf: CfRef) -> u64 {
        u64::from(cf.db) << 32 | u64::from(cf.rel)
    }

    fn start(key: u64) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize
    }

    /// Records `share` (units of 1 / [`ONE`], at most `ONE`) for `cf`.
    /// Does nothing when every probed slot belongs to other tables.
    pub fn set(&self, cf: CfRef, share: u32) {
        let key = Self::key(cf);
        if key == 0 {
            return;
        }
        let start = Self::start(key);
        for n in 0..PROBES.min(self.slots) {
            let slot = self.slot(start + n);
            let found = match slot.key.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => true,
                Err(current) => current == key,
            };
            if found {
                slot.share.store(share.min(ONE) + 1, Ordering::Release);
                return;
            }
        }
    }

    /// The share last recorded for `cf`, if any.
    pub fn get(&self, cf: CfRef) -> Option<u32> {
        let key = Self::key(cf);
        let start = Self::start(key);
        for n in 0..PROBES.min(self.slots) {
            let slot = self.slot(start + n);
            match slot.key.load(Ordering::Acquire) {
                0 => return None,
                k if k == key => return slot.share.load(Ordering::Acquire).checked_sub(1),
                _ => {}
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Region(#[allow(dead_code)] Vec<u64>, VisibleShares); // the Vec keeps the memory alive

    fn region(slots: usize) -> Region {
        let bytes = region_bytes(slots);
        let mut mem = vec![0u64; bytes.div_ceil(8)];
        // SAFETY: zeroed, aligned, owned by the Region for the test's length.
        let shares = unsafe { VisibleShares::format(mem.as_mut_ptr() as *mut u8, bytes) }.unwrap();
        Region(mem, shares)
    }

    #[test]
    fn shares_are_kept_per_table_and_overwritten() {
        let r = region(64);
        let (a, b) = (CfRef { db: 5, rel: 16384 }, CfRef { db: 6, rel: 16384 });
        assert_eq!(r.1.get(a), None);
        r.1.set(a, 0);
        assert_eq!(r.1.get(a), Some(0), "zero is a recorded share");
        r.1.set(a, ONE / 2);
        r.1.set(b, ONE + 7);
        assert_eq!(r.1.get(a), Some(ONE / 2));
        assert_eq!(r.1.get(b), Some(ONE), "capped at every row");
    }

    #[test]
    fn a_full_neighbourhood_records_nothing() {
        let r = region(4);
        let tables: Vec<CfRef> = (1..=6).map(|rel| CfRef { db: 1, rel }).collect();
        for (i, cf) in tables.iter().enumerate() {
            r.1.set(*cf, i as u32);
        }
        let kept = tables.iter().enumerate().filter(|(i, cf)| r.1.get(**cf) == Some(*i as u32)).count();
        assert_eq!(kept, 4, "four slots, four tables; the others have no share");
    }
}
