//! Row locks: which transactions hold which rows, in engine memory only.
//!
//! Owns the lock table behind DESIGN §3 ("writers serialise per row through
//! row locks held in the engine's memory"). A pure data structure: no RocksDB,
//! no threads, no waiting. The [`crate::engine::Engine`] wraps it in a mutex;
//! a backend that is refused waits on the reported holder's transaction with
//! PostgreSQL's `XactLockTableWait` (so the deadlock detector sees every wait)
//! and asks again.
//!
//! Nothing here is persisted or logged: a restart ends every transaction, so
//! it may forget every lock.
//!
//! Invariants:
//! * A row is `(CfRef, rowid)`; a holder is a top-level transaction id, never
//!   0 (InvalidTransactionId). A row lists each holder at most once, with the
//!   strongest mode it was granted; a row with no holder is not in the table.
//! * Compatibility: Shared with Shared; Exclusive with nothing held by another
//!   transaction. A transaction never conflicts with itself.
//! * Every holding is in the per-transaction index (`by_xid`), so
//!   [`RowLockTable::release`] costs O(locks of that transaction). The index
//!   may over-approximate (name a row that no longer lists the transaction):
//!   holdings are indexed before they are added and removed before they are
//!   unindexed, so even an operation cut short leaves only that harmless
//!   kind of difference, which `release` skips.

use std::collections::{HashMap, HashSet};

use crate::protocol::{CfRef, LockMode};

/// The answer to a lock request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockOutcome {
    /// The requester now holds the row in (at least) the requested mode.
    pub granted: bool,
    /// Granted because the requester already held a mode at least as strong.
    pub already_held: bool,
    /// When not granted: one transaction whose holding conflicts (wait for it,
    /// then retry). 0 when granted.
    pub holder: u32,
}

impl LockOutcome {
    const fn granted(already_held: bool) -> LockOutcome {
        LockOutcome {
            granted: true,
            already_held,
            holder: 0,
        }
    }

    const fn conflict(holder: u32) -> LockOutcome {
        LockOutcome {
            granted: false,
            already_held: false,
            holder,
        }
    }
}

/// One row's holders: `(xid, mode)`, each xid once. Almost always one entry,
/// so a vector beats a map.
type Holders = Vec<(u32, LockMode)>;

/// The lock table. See the module documentation for its invariants.
#[derive(Debug, Default)]
pub struct RowLockTable {
    /// Rows by CF, so dropping a CF forgets its locks without a full sweep.
    rows: HashMap<CfRef, HashMap<u64, Holders>>,
    /// Every row each transaction holds.
    by_xid: HashMap<u32, HashSet<(CfRef, u64)>>,
}

impl RowLockTable {
    pub fn new() -> RowLockTable {
        RowLockTable::default()
    }

    /// Asks for `mode` on row `(cf, rowid)` for transaction `xid`.
    ///
    /// `evict` (0: none) names a transaction the caller knows has ended: its
    /// holdings on this row are removed first. This heals locks that a lost
    /// [`RowLockTable::release`] left behind, and is how a waiter that saw
    /// the holder end takes over the row.
    ///
    /// `xid` must not be 0 (the protocol rejects it before it gets here).
    pub fn lock(
        &mut self,
        cf: CfRef,
        rowid: u64,
        xid: u32,
        mode: LockMode,
        evict: u32,
    ) -> LockOutcome {
        if evict != 0 {
            self.remove_holding(cf, rowid, evict);
        }
        let holders: &[(u32, LockMode)] = self
            .rows
            .get(&cf)
            .and_then(|rows| rows.get(&rowid))
            .map_or(&[], Vec::as_slice);
        let mine = holders.iter().find(|&&(h, _)| h == xid).map(|&(_, m)| m);
        if mine.is_some_and(|held| held >= mode) {
            return LockOutcome::granted(true);
        }
        let conflicting = holders.iter().find(|&&(h, held)| {
            h != xid && (mode == LockMode::Exclusive || held == LockMode::Exclusive)
        });
        if let Some(&(holder, _)) = conflicting {
            return LockOutcome::conflict(holder);
        }

        // Granted: a new holding, or Shared upgraded to Exclusive in place.
        // Index first (see the module invariants).
        self.by_xid.entry(xid).or_default().insert((cf, rowid));
        let holders = self.rows.entry(cf).or_default().entry(rowid).or_default();
        match holders.iter_mut().find(|(h, _)| *h == xid) {
            Some((_, held)) => *held = mode,
            None => holders.push((xid, mode)),
        }
        LockOutcome::granted(false)
    }

    /// Drops every lock `xid` holds, on every row. Returns how many rows it held.
    pub fn release(&mut self, xid: u32) -> usize {
        let Some(rows) = self.by_xid.remove(&xid) else {
            return 0;
        };
        let mut released = 0;
        for (cf, rowid) in rows {
            released += usize::from(self.unlist(cf, rowid, xid));
        }
        released
    }

    /// Forgets every lock on `cf` (the table was dropped or truncated: its
    /// rowids mean nothing any more). Returns how many rows were locked.
    pub fn forget_cf(&mut self, cf: CfRef) -> usize {
        let Some(rows) = self.rows.remove(&cf) else {
            return 0;
        };
        for (rowid, holders) in &rows {
            for &(xid, _) in holders {
                self.unindex(cf, *rowid, xid);
            }
        }
        rows.len()
    }

    /// Forgets every lock on every CF of database `db`. Returns how many rows
    /// were locked.
    pub fn forget_database(&mut self, db: u32) -> usize {
        let cfs: Vec<CfRef> = self.rows.keys().filter(|cf| cf.db == db).copied().collect();
        cfs.into_iter().map(|cf| self.forget_cf(cf)).sum()
    }

    /// Rows with at least one holder.
    pub fn locked_rows(&self) -> usize {
        self.rows.values().map(HashMap::len).sum()
    }

    /// The holders of one row, in the order they were granted (diagnostics, tests).
    pub fn holders(&self, cf: CfRef, rowid: u64) -> &[(u32, LockMode)] {
        self.rows
            .get(&cf)
            .and_then(|rows| rows.get(&rowid))
            .map_or(&[], Vec::as_slice)
    }

    /// Removes `xid`'s holding of one row, from the row and then the index.
    fn remove_holding(&mut self, cf: CfRef, rowid: u64, xid: u32) {
        if self.unlist(cf, rowid, xid) {
            self.unindex(cf, rowid, xid);
        }
    }

    /// Removes `xid` from the row's holders (and the row, and the CF, when
    /// they become empty). Returns whether it was listed.
    fn unlist(&mut self, cf: CfRef, rowid: u64, xid: u32) -> bool {
        let Some(rows) = self.rows.get_mut(&cf) else {
            return false;
        };
        let Some(holders) = rows.get_mut(&rowid) else {
            return false;
        };
        let Some(at) = holders.iter().position(|&(h, _)| h == xid) else {
            return false;
        };
        holders.swap_remove(at);
        if holders.is_empty() {
            rows.remove(&rowid);
            if rows.is_empty() {
                self.rows.remove(&cf);
            }
        }
        true
    }

    fn unindex(&mut self, cf: CfRef, rowid: u64, xid: u32) {
        if let Some(rows) = self.by_xid.get_mut(&xid) {
            rows.remove(&(cf, rowid));
            if rows.is_empty() {
                self.by_xid.remove(&xid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LockMode::{Exclusive, Shared};

    const A: CfRef = CfRef { db: 5, rel: 16384 };
    const B: CfRef = CfRef { db: 5, rel: 16385 };
    const OTHER_DB: CfRef = CfRef { db: 6, rel: 16384 };

    const GRANTED: LockOutcome = LockOutcome::granted(false);
    const ALREADY: LockOutcome = LockOutcome::granted(true);

    fn conflict(holder: u32) -> LockOutcome {
        LockOutcome::conflict(holder)
    }

    /// The per-xid index names exactly the rows that list each xid.
    fn assert_consistent(t: &RowLockTable) {
        let mut listed: HashMap<u32, HashSet<(CfRef, u64)>> = HashMap::new();
        for (&cf, rows) in &t.rows {
            assert!(!rows.is_empty(), "empty CF map left for {cf}");
            for (&rowid, holders) in rows {
                assert!(!holders.is_empty(), "empty row {cf}:{rowid} left");
                for &(xid, _) in holders {
                    assert_ne!(xid, 0);
                    assert!(
                        listed.entry(xid).or_default().insert((cf, rowid)),
                        "xid {xid} twice"
                    );
                }
            }
        }
        assert_eq!(listed, t.by_xid);
    }

    #[test]
    fn re_entrant_requests_are_already_held() {
        let mut t = RowLockTable::new();
        assert_eq!(t.lock(A, 1, 10, Shared, 0), GRANTED);
        assert_eq!(t.lock(A, 1, 10, Shared, 0), ALREADY);
        assert_eq!(t.lock(A, 2, 10, Exclusive, 0), GRANTED);
        assert_eq!(t.lock(A, 2, 10, Exclusive, 0), ALREADY);
        // Exclusive covers Shared, and asking for less does not downgrade.
        assert_eq!(t.lock(A, 2, 10, Shared, 0), ALREADY);
        assert_eq!(t.holders(A, 2), [(10, Exclusive)]);
        assert_eq!(t.locked_rows(), 2);
        assert_consistent(&t);
    }

    #[test]
    fn shared_is_compatible_with_shared() {
        let mut t = RowLockTable::new();
        for xid in [10, 11, 12] {
            assert_eq!(t.lock(A, 1, xid, Shared, 0), GRANTED);
        }
        assert_eq!(t.holders(A, 1), [(10, Shared), (11, Shared), (12, Shared)]);
        assert_eq!(t.locked_rows(), 1);
        assert_consistent(&t);
    }

    #[test]
    fn shared_and_exclusive_conflict_both_ways() {
        let mut t = RowLockTable::new();
        assert_eq!(t.lock(A, 1, 10, Shared, 0), GRANTED);
        assert_eq!(t.lock(A, 1, 11, Exclusive, 0), conflict(10));

        assert_eq!(t.lock(A, 2, 10, Exclusive, 0), GRANTED);
        assert_eq!(t.lock(A, 2, 11, Shared, 0), conflict(10));
        assert_eq!(t.lock(A, 2, 11, Exclusive, 0), conflict(10));

        // A refused request leaves nothing behind.
        assert_eq!(t.holders(A, 1), [(10, Shared)]);
        assert_eq!(t.holders(A, 2), [(10, Exclusive)]);
        assert_eq!(t.release(11), 0);
        assert_consistent(&t);
    }

    #[test]
    fn rows_and_cfs_are_independent() {
        let mut t = RowLockTable::new();
        assert_eq!(t.lock(A, 1, 10, Exclusive, 0), GRANTED);
        assert_eq!(t.lock(A, 2, 11, Exclusive, 0), GRANTED);
        assert_eq!(t.lock(B, 1, 11, Exclusive, 0), GRANTED);
        assert_eq!(t.lock(OTHER_DB, 1, 11, Exclusive, 0), GRANTED);
        assert_eq!(t.locked_rows(), 4);
        assert_consistent(&t);
    }

    #[test]
    fn a_lone_sharer_upgrades() {
        let mut t = RowLockTable::new();
        assert_eq!(t.lock(A, 1, 10, Shared, 0), GRANTED);
        // Not already held: it did not hold Exclusive before.
        assert_eq!(t.lock(A, 1, 10, Exclusive, 0), GRANTED);
        assert_eq!(t.holders(A, 1), [(10, Exclusive)]);
        assert_eq!(t.lock(A, 1, 11, Shared, 0), conflict(10));
        assert_eq!(t.release(10), 1, "one row, however many requests");
        assert_consistent(&t);
    }

    #[test]
    fn a_sharer_cannot_upgrade_past_another_sharer() {
        let mut t = RowLockTable::new();
        assert_eq!(t.lock(A, 1, 10, Shared, 0), GRANTED);
        assert_eq!(t.lock(A, 1, 11, Shared, 0), GRANTED);
        assert_eq!(t.lock(A, 1, 10, Exclusive, 0), conflict(11));
        assert_eq!(t.lock(A, 1, 11, Exclusive, 0), conflict(10));
        // Both keep their shared locks.
        assert_eq!(t.holders(A, 1), [(10, Shared), (11, Shared)]);
        // Once the other sharer is gone, the upgrade goes through.
        assert_eq!(t.release(11), 1);
        assert_eq!(t.lock(A, 1, 10, Exclusive, 0), GRANTED);
        assert_consistent(&t);
    }

    #[test]
    fn evict_heals_a_lock_left_by_an_ended_transaction() {
        let mut t = RowLockTable::new();
        assert_eq!(t.lock(A, 1, 10, Exclusive, 0), GRANTED);
        assert_eq!(t.lock(A, 2, 10, Exclusive, 0), GRANTED);
        assert_eq!(t.lock(A, 1, 11, Exclusive, 0), conflict(10));
        // 11 waited for 10 to end; 10's release never arrived.
        assert_eq!(t.lock(A, 1, 11, Exclusive, 10), GRANTED);
        assert_eq!(t.holders(A, 1), [(11, Exclusive)]);
        // Only this row: 10 still holds row 2, and its index says so.
        assert_eq!(t.holders(A, 2), [(10, Exclusive)]);
        assert_consistent(&t);
        assert_eq!(t.release(10), 1);
        assert_eq!(t.holders(A, 1), [(11, Exclusive)]);
        assert_consistent(&t);
    }

    #[test]
    fn evict_removes_only_the_named_transaction() {
        let mut t = RowLockTable::new();
        assert_eq!(t.lock(A, 1, 10, Shared, 0), GRANTED);
        assert_eq!(t.lock(A, 1, 11, Shared, 0), GRANTED);
        assert_eq!(t.lock(A, 1, 12, Exclusive, 10), conflict(11));
        assert_eq!(t.holders(A, 1), [(11, Shared)]);
        // Evicting a transaction that holds nothing here, or 0, changes nothing.
        assert_eq!(t.lock(A, 1, 12, Exclusive, 99), conflict(11));
        assert_eq!(t.lock(A, 1, 12, Exclusive, 0), conflict(11));
        assert_eq!(t.lock(A, 1, 12, Exclusive, 11), GRANTED);
        assert_eq!(t.locked_rows(), 1);
        assert_consistent(&t);
    }

    #[test]
    fn release_drops_all_of_one_xid_and_nothing_else() {
        let mut t = RowLockTable::new();
        for rowid in 0..100 {
            assert_eq!(t.lock(A, rowid, 10, Exclusive, 0), GRANTED);
        }
        assert_eq!(t.lock(B, 7, 10, Shared, 0), GRANTED);
        assert_eq!(t.lock(B, 7, 11, Shared, 0), GRANTED);
        assert_eq!(t.lock(B, 8, 11, Exclusive, 0), GRANTED);
        assert_eq!(t.lock(OTHER_DB, 0, 10, Shared, 0), GRANTED);
        assert_eq!(t.locked_rows(), 103);

        assert_eq!(t.release(10), 102);
        assert_consistent(&t);
        assert_eq!(t.locked_rows(), 2);
        assert_eq!(t.holders(B, 7), [(11, Shared)]);
        assert_eq!(t.holders(B, 8), [(11, Exclusive)]);
        assert!(t.holders(A, 0).is_empty());
        assert_eq!(t.release(10), 0);
        assert_eq!(t.release(12345), 0);
        // The rows are free again.
        assert_eq!(t.lock(A, 0, 12, Exclusive, 0), GRANTED);
        assert_eq!(t.release(11), 2);
        assert_eq!(t.release(12), 1);
        assert_eq!(t.locked_rows(), 0);
        assert!(t.rows.is_empty() && t.by_xid.is_empty());
    }

    #[test]
    fn release_skips_index_entries_without_a_holding() {
        // The over-approximation the module invariants allow.
        let mut t = RowLockTable::new();
        assert_eq!(t.lock(A, 1, 10, Exclusive, 0), GRANTED);
        t.by_xid.entry(10).or_default().insert((B, 9));
        assert_eq!(t.release(10), 1);
        assert_eq!(t.locked_rows(), 0);
    }

    #[test]
    fn forget_cf_and_database_drop_their_locks_only() {
        let mut t = RowLockTable::new();
        assert_eq!(t.lock(A, 1, 10, Exclusive, 0), GRANTED);
        assert_eq!(t.lock(A, 2, 10, Shared, 0), GRANTED);
        assert_eq!(t.lock(A, 2, 11, Shared, 0), GRANTED);
        assert_eq!(t.lock(B, 1, 10, Exclusive, 0), GRANTED);
        assert_eq!(t.lock(OTHER_DB, 1, 11, Exclusive, 0), GRANTED);

        assert_eq!(t.forget_cf(A), 2);
        assert_consistent(&t);
        assert!(t.holders(A, 1).is_empty());
        assert_eq!(t.lock(A, 1, 12, Exclusive, 0), GRANTED);
        assert_eq!(t.forget_cf(A), 1);
        assert_eq!(t.forget_cf(A), 0);

        assert_eq!(t.forget_database(5), 1);
        assert_consistent(&t);
        assert_eq!(t.holders(OTHER_DB, 1), [(11, Exclusive)]);
        assert_eq!(t.release(10), 0);
        assert_eq!(t.release(11), 1);
        assert!(t.rows.is_empty() && t.by_xid.is_empty());
    }
}
