//! Flush flags (DESIGN §5, PASV §5.2): the reserved key in every table CF
//! that says how far the CF's contents are complete.
//!
//! A flag `<cf, commit_lsn, xid, first_lsn, last_lsn>` is written into a CF's
//! memtable after transaction `xid` committed with its commit record ending
//! at `commit_lsn`, and after every write of that transaction (and of every
//! transaction that committed before it) reached the same CF. It becomes
//! durable only with the CF's own ordinary flush, so the flag read back with
//! `ReadTier::Persisted` proves: every transaction whose commit record ends at
//! or before `commit_lsn` is fully persisted in this CF. That LSN is the CF's
//! *local data persistence point* (DPP).
//!
//! Owns the flag's key and byte layout; the engine writes and reads flags.

use crate::cf_name::TableCf;
use crate::keys::RESERVED_KEY_PREFIX;
use crate::protocol::PersistenceRow;

/// The flag's key: reserved prefix (no row key starts with it) ‖ "flag".
pub const FLAG_KEY: &[u8] = &[RESERVED_KEY_PREFIX, b'f', b'l', b'a', b'g'];

/// Encoded length: db u32 ‖ rel u32 ‖ incarnation u64 ‖ commit_lsn u64 ‖
/// first_lsn u64 ‖ last_lsn u64 ‖ xid u32 ‖ 4 zero bytes, little-endian.
pub const FLAG_LEN: usize = 48;

/// One flush flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushFlag {
    /// The CF the flag was written into (a flag copied elsewhere is refused).
    pub cf: TableCf,
    /// End of the commit record of the last transaction the flag covers.
    pub commit_lsn: u64,
    /// That transaction's first and last pasv message (diagnostics).
    pub first_lsn: u64,
    pub last_lsn: u64,
    /// That transaction's id (diagnostics).
    pub xid: u32,
}

impl FlushFlag {
    pub fn encode(&self) -> [u8; FLAG_LEN] {
        let mut out = [0u8; FLAG_LEN];
        out[0..4].copy_from_slice(&self.cf.db.to_le_bytes());
        out[4..8].copy_from_slice(&self.cf.rel.to_le_bytes());
        out[8..16].copy_from_slice(&self.cf.incarnation.to_le_bytes());
        out[16..24].copy_from_slice(&self.commit_lsn.to_le_bytes());
        out[24..32].copy_from_slice(&self.first_lsn.to_le_bytes());
        out[32..40].copy_from_slice(&self.last_lsn.to_le_bytes());
        out[40..44].copy_from_slice(&self.xid.to_le_bytes());
        out
    }

    /// Decodes a flag; `None` if the bytes are not a well-formed flag.
    pub fn decode(bytes: &[u8]) -> Option<FlushFlag> {
        if bytes.len() != FLAG_LEN || bytes[44..48] != [0; 4] {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        Some(FlushFlag {
            cf: TableCf {
                db: u32_at(0),
                rel: u32_at(4),
                incarnation: u64_at(8),
                // Only logged tables get flags.
                logged: true,
            },
            commit_lsn: u64_at(16),
            first_lsn: u64_at(24),
            last_lsn: u64_at(32),
            xid: u32_at(40),
        })
    }
}

/// The local DPP of one CF: every transaction that committed at or before it
/// is persisted there (its persisted flag, or its creation point if later).
pub fn local_dpp(row: &PersistenceRow) -> u64 {
    row.persisted_lsn.max(row.created_lsn)
}

/// The global DPP of one database's CFs at WAL position `now` (read before
/// the report was taken): the minimum local DPP over CFs with unpersisted
/// data, or `now` when every memtable is empty. Its slot may move up to it.
pub fn global_dpp(rows: &[PersistenceRow], now: u64) -> u64 {
    rows.iter().filter(|r| r.dirty).map(local_dpp).min().unwrap_or(now).min(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(rel: u32, persisted: u64, created: u64, dirty: bool) -> PersistenceRow {
        PersistenceRow { db: 5, rel, persisted_lsn: persisted, created_lsn: created, dirty, ..Default::default() }
    }

    #[test]
    fn global_dpp_is_the_minimum_over_dirty_cfs() {
        let rows = [row(1, 100, 0, true), row(2, 50, 0, false), row(3, 300, 0, true)];
        assert_eq!(global_dpp(&rows, 1000), 100);
        // A CF created after its last flag counts from its creation.
        let rows = [row(1, 0, 400, true), row(3, 300, 0, true)];
        assert_eq!(global_dpp(&rows, 1000), 300);
        // Nothing unpersisted: everything up to now is safe.
        assert_eq!(global_dpp(&[row(2, 50, 0, false)], 1000), 1000);
        assert_eq!(global_dpp(&[], 77), 77);
    }

    #[test]
    fn flag_round_trips_and_rejects_garbage() {
        let flag = FlushFlag {
            cf: TableCf { db: 5, rel: 16384, incarnation: 7, logged: true },
            commit_lsn: 0x1_0000_0028,
            first_lsn: 0x1_0000_0000,
            last_lsn: 0x1_0000_0010,
            xid: 742,
        };
        let bytes = flag.encode();
        assert_eq!(FlushFlag::decode(&bytes), Some(flag));
        assert_eq!(FlushFlag::decode(&bytes[..FLAG_LEN - 1]), None);
        let mut dirty = bytes;
        dirty[47] = 1;
        assert_eq!(FlushFlag::decode(&dirty), None);
    }

    #[test]
    fn flag_key_is_not_a_row_key() {
        assert!(crate::keys::decode_row_key(FLAG_KEY).is_none());
        assert_eq!(FLAG_KEY[0], RESERVED_KEY_PREFIX);
    }
}
