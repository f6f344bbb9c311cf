//! Column-family names: the only place in pasv where a CF name is spelled.
//!
//! Owns the mapping between a column family's identity and its RocksDB name.
//! Nothing else may build or take apart a CF name by hand (DESIGN §2).
//!
//! Invariants:
//! * A name starts with one ASCII letter naming its kind, then `.`: `t.` for
//!   a logged table's CF (`t.{db}.{rel}.{incarnation}`), `u.` for the CF of
//!   an unlogged or temporary table, whose changes are never logged and which
//!   the engine empties after a crash. [`META_CF`] and RocksDB's `default`
//!   contain no `.` and so can never be mistaken for a kind-prefixed name.
//! * Parsing is the exact inverse of formatting: numbers are plain decimal with
//!   no sign and no leading zeros, so one identity has exactly one name, and a
//!   name that does not round-trip is "not ours".
//! * The incarnation makes a reused (db, relfilenumber) pair a different CF, so
//!   replay meant for an old table can never land in a new one.
//! * `s.{incarnation}` names a CF the engine created ahead of need (a
//!   *spare*, `engine/cf_spares.rs`). Which table it holds, if any, is not in
//!   its name but in a meta-CF binding record, with the table's own
//!   incarnation: RocksDB has no rename, and creating a CF costs time that
//!   grows with the number of CFs. A spare's number comes from the same
//!   counter as incarnations, so it too names at most one CF ever.

use std::fmt;

/// The engine's own CF: the incarnation counter, each table CF's creation
/// LSN and the clean-close marker.
pub const META_CF: &str = "meta";

/// Kind letter of logged table CF names.
const TABLE_PREFIX: &str = "t.";
/// Kind letter of unlogged (and temporary) table CF names.
const UNLOGGED_TABLE_PREFIX: &str = "u.";
/// Kind letter of spare CF names (bound to a table or not).
const SPARE_PREFIX: &str = "s.";

/// The RocksDB name of the spare CF with this incarnation, `s.{incarnation}`.
pub fn spare_name(incarnation: u64) -> String {
    format!("{SPARE_PREFIX}{incarnation}")
}

/// The incarnation of a name produced by [`spare_name`]; `None` for anything
/// else.
pub fn parse_spare(name: &str) -> Option<u64> {
    parse_decimal(name.strip_prefix(SPARE_PREFIX)?)
}

/// Identity of one incarnation of a table's column family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableCf {
    /// Database OID.
    pub db: u32,
    /// Relfilenumber of the table.
    pub rel: u32,
    /// Engine-wide counter value given to this CF when it was created.
    pub incarnation: u64,
    /// Changes to the table are logged in PostgreSQL's WAL (a permanent
    /// table). An unlogged or temporary table's are not: it gets no flush
    /// flags, no replay, and is emptied after a crash, like heap's.
    pub logged: bool,
}

impl TableCf {
    /// The RocksDB name, `t.{db}.{rel}.{incarnation}` (`u.` if unlogged).
    pub fn name(&self) -> String {
        let kind = if self.logged { TABLE_PREFIX } else { UNLOGGED_TABLE_PREFIX };
        format!("{kind}{}.{}.{}", self.db, self.rel, self.incarnation)
    }

    /// Parses a name produced by [`TableCf::name`]; `None` for anything else
    /// (the meta CF, `default`, other kinds, non-canonical spellings).
    pub fn parse(name: &str) -> Option<TableCf> {
        let (logged, rest) = match name.strip_prefix(TABLE_PREFIX) {
            Some(rest) => (true, rest),
            None => (false, name.strip_prefix(UNLOGGED_TABLE_PREFIX)?),
        };
        let mut parts = rest.split('.');
        let db = parse_decimal(parts.next()?)?;
        let rel = parse_decimal(parts.next()?)?;
        let incarnation = parse_decimal(parts.next()?)?;
        if parts.next().is_some() {
            return None;
        }
        Some(TableCf {
            db: u32::try_from(db).ok()?,
            rel: u32::try_from(rel).ok()?,
            incarnation,
            logged,
        })
    }
}

impl fmt::Display for TableCf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Canonical unsigned decimal: digits only, no leading zero unless the value is 0.
fn parse_decimal(s: &str) -> Option<u64> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if canonical {
        s.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_name_round_trips() {
        for cf in [
            TableCf { db: 0, rel: 0, incarnation: 0, logged: true },
            TableCf { db: 5, rel: 16384, incarnation: 1, logged: true },
            TableCf { db: 5, rel: 16384, incarnation: 1, logged: false },
            TableCf { db: u32::MAX, rel: u32::MAX, incarnation: u64::MAX, logged: false },
        ] {
            assert_eq!(TableCf::parse(&cf.name()), Some(cf));
        }
        assert_eq!(TableCf { db: 5, rel: 16384, incarnation: 7, logged: true }.name(), "t.5.16384.7");
        assert_eq!(TableCf { db: 5, rel: 16384, incarnation: 7, logged: false }.name(), "u.5.16384.7");
    }

    #[test]
    fn foreign_and_non_canonical_names_are_rejected() {
        for name in [
            META_CF,
            "default",
            "",
            "t.",
            "t.1.2",
            "t.1.2.3.4",
            "t.01.2.3",
            "t.+1.2.3",
            "t.-1.2.3",
            "t.1..3",
            "t.4294967296.2.3",
            "t.1.2.18446744073709551616",
            "i.1.2.3",
            "T.1.2.3",
            "U.1.2.3",
            "u.1.2",
            "u.01.2.3",
            "s.7",
        ] {
            assert_eq!(TableCf::parse(name), None, "{name:?}");
        }
    }

    #[test]
    fn spare_names_round_trip() {
        for incarnation in [0, 1, 7, u64::MAX] {
            assert_eq!(parse_spare(&spare_name(incarnation)), Some(incarnation));
        }
        assert_eq!(spare_name(7), "s.7");
        for name in [META_CF, "default", "s.", "s.07", "s.+7", "s.7.1", "S.7", "t.5.16384.9"] {
            assert_eq!(parse_spare(name), None, "{name:?}");
        }
    }
}
