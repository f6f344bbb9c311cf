//! Row locks as the engine serves them (DESIGN §3), over the lock table of
//! [`crate::row_locks`].
//!
//! Owns the mutex around the [`RowLockTable`] and the calls that reach it
//! (`lock_row`, `release_locks`, `lock_count`). Calls nothing else: locks
//! never touch RocksDB, and a row can be locked in a table that has no CF.
//!
//! Invariants:
//! * Locks live in memory only; an engine restart forgets them all.
//! * The lock table's mutex is a leaf: whoever holds it takes no other lock.
//! * Locks are keyed by `(db, rel)`, not by incarnation, so the registry's
//!   DDL clears them whenever that table's rowids start naming other rows.

use std::sync::{MutexGuard, PoisonError};

use super::{Engine, LockOutcome};
use crate::protocol::{CfRef, LockMode};
use crate::row_locks::RowLockTable;

impl Engine {
    /// Asks for a row lock for top-level transaction `xid` (never 0). Refused:
    /// `holder` names a conflicting transaction to wait for. `evict` (0: none)
    /// is a transaction known to have ended whose holdings on this row are
    /// removed first. The CF need not exist. See [`crate::row_locks`].
    pub fn lock_row(
        &self,
        cf: CfRef,
        rowid: u64,
        xid: u32,
        mode: LockMode,
        evict: u32,
    ) -> LockOutcome {
        self.row_locks().lock(cf, rowid, xid, mode, evict)
    }

    /// Drops every row lock `xid` holds; returns how many rows it held.
    pub fn release_locks(&self, xid: u32) -> usize {
        self.row_locks().release(xid)
    }

    /// Rows with at least one lock holder (diagnostics, tests).
    pub fn lock_count(&self) -> usize {
        self.row_locks().locked_rows()
    }

    // The lock table's operations leave it consistent, or with only the index
    // over-approximation it tolerates, at every step (row_locks invariants):
    // poisoning is ignored.
    pub(super) fn row_locks(&self) -> MutexGuard<'_, RowLockTable> {
        self.row_locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{open, TempDir, T};
    use super::*;
    #[test]
    fn row_locks_through_the_engine() {
        use LockMode::{Exclusive, Shared};
        let dir = TempDir::new();
        let engine = open(&dir);
        // Locks are about rowids: the table need not have a CF.
        let ghost = CfRef { db: 9, rel: 9 };
        assert!(engine.lock_row(ghost, 1, 100, Exclusive, 0).granted);
        engine.create_cf(T).unwrap();
        let granted = LockOutcome {
            granted: true,
            already_held: false,
            holder: 0,
        };
        assert_eq!(engine.lock_row(T, 1, 100, Shared, 0), granted);
        assert_eq!(engine.lock_row(T, 1, 101, Shared, 0), granted);
        assert_eq!(
            engine.lock_row(T, 1, 100, Exclusive, 0),
            LockOutcome {
                granted: false,
                already_held: false,
                holder: 101
            }
        );
        assert_eq!(engine.lock_row(T, 1, 100, Exclusive, 101), granted);
        assert!(engine.lock_row(T, 1, 100, Shared, 0).already_held);
        assert_eq!(engine.lock_count(), 2);
        assert_eq!(engine.release_locks(100), 2);
        assert_eq!(engine.release_locks(101), 0, "evicted");
        assert_eq!(engine.lock_count(), 0);
    }

    #[test]
    fn ddl_forgets_the_locks_of_the_cfs_it_removes() {
        use LockMode::Exclusive;
        let dir = TempDir::new();
        let engine = open(&dir);
        let sibling = CfRef { db: 5, rel: 1 };
        let other_db = CfRef { db: 6, rel: 16384 };
        for cf in [T, sibling, other_db] {
            engine.create_cf(cf).unwrap();
            for rowid in [0, 1] {
                assert!(engine.lock_row(cf, rowid, 100, Exclusive, 0).granted);
            }
        }
        assert_eq!(engine.lock_count(), 6);

        engine.drop_cf(T).unwrap();
        assert_eq!(engine.lock_count(), 4);
        assert!(
            engine.lock_row(T, 0, 101, Exclusive, 0).granted,
            "old holder forgotten"
        );
        // Dropping a table without a CF still forgets its locks.
        engine.drop_cf(T).unwrap();
        assert_eq!(engine.lock_count(), 4);
        assert!(engine.lock_row(T, 0, 101, Exclusive, 0).granted);
        engine.create_cf(T).unwrap();
        assert_eq!(engine.lock_count(), 4, "a new table starts without locks");

        assert!(engine.lock_row(T, 5, 100, Exclusive, 0).granted);
        engine.truncate_cf(T).unwrap();
        assert_eq!(engine.lock_count(), 4);
        assert!(engine.lock_row(T, 5, 101, Exclusive, 0).granted);

        assert!(
            engine
                .lock_row(CfRef { db: 5, rel: 77 }, 0, 101, Exclusive, 0)
                .granted
        );
        engine.drop_database(5).unwrap();
        assert_eq!(engine.lock_count(), 2);
        assert!(engine.lock_row(other_db, 0, 101, Exclusive, 0).holder == 100);
        assert_eq!(engine.release_locks(101), 0);
        assert_eq!(engine.release_locks(100), 2);
        assert_eq!(engine.lock_count(), 0);
    }

    #[test]
    fn concurrent_exclusive_requests_grant_exactly_one() {
        let dir = TempDir::new();
        let engine = open(&dir);
        let engine = &engine;
        let start = std::sync::Barrier::new(8);
        let start = &start;
        let outcomes: Vec<(u32, LockOutcome)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..8u32)
                .map(|i| {
                    s.spawn(move || {
                        let xid = 1000 + i;
                        start.wait();
                        (xid, engine.lock_row(T, 7, xid, LockMode::Exclusive, 0))
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let winners: Vec<u32> = outcomes
            .iter()
            .filter(|(_, o)| o.granted)
            .map(|&(xid, _)| xid)
            .collect();
        assert_eq!(winners.len(), 1, "{outcomes:?}");
        for (_, o) in outcomes.iter().filter(|(_, o)| !o.granted) {
            assert_eq!(o.holder, winners[0]);
        }
        assert_eq!(engine.release_locks(winners[0]), 1);
        assert_eq!(engine.lock_count(), 0);
    }
}
