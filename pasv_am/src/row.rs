//! Table-CF values: the MVCC header and the version-chain rule (DESIGN §3).
//!
//! Owns the byte layout of a row version's value and the rule that picks a
//! row's visible state from its versions. Visibility itself (snapshots, CLOG)
//! is the backend's: [`resolve`] only asks a caller-supplied predicate.
//!
//! Value = 24-byte header ‖ tuple bytes. Header, little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | format, [`FORMAT_V1`] |
//! | 1 | flags: [`FLAG_TOMBSTONE`], [`FLAG_MOVED`], [`FLAG_FROZEN`], [`FLAG_HEAP_ONLY`], [`FLAG_ROOT`], [`FLAG_BOOKKEEPING`], [`FLAG_HOT`] |
//! | 2..4 | zero |
//! | 4..8 | command id (u32) |
//! | 8..16 | creator FullTransactionId (u64) |
//! | 16..24 | link (u64): the moved-to rowid of a MOVED version; of a HEAP_ONLY one, the root (low [`ROOT_BITS`] bits) and the root's version that redirects to it (the rest, [`ROOT_VERSION_UNKNOWN`] if too large); else 0 |
//!
//! Invariants (checked by [`RowHeader::decode`], so a value that passes is well formed):
//! * [`HEADER_LEN`] is a multiple of 8: a tuple stored at an 8-aligned value
//!   offset stays 8-aligned (the backend reads tuples in place).
//! * Unknown flag bits and non-zero reserved bytes are corruption.
//! * MOVED implies TOMBSTONE (a moved row is deleted here and lives on at
//!   `moved_to`); HEAP_ONLY excludes TOMBSTONE; ROOT and BOOKKEEPING imply
//!   TOMBSTONE; HOT implies MOVED; ROOT with MOVED implies HOT;
//!   `moved_to` is 0 unless MOVED or HEAP_ONLY.
//!
//! Heap-only rows (HOT_PATH.md §37): an UPDATE of a table with indexes that
//! changes no indexed column moves the row, as heap's HOT update puts the
//! new version after the page's others, without new index entries. The
//! index entries keep pointing at the chain's *root*, the rowid the row had
//! before its first such update; the new version is HEAP_ONLY (its link is
//! the root) and the root gets a ROOT|MOVED tombstone pointing at the
//! newest member, which index fetches follow (a member that moves on gets
//! a MOVED|HOT tombstone, as a root's first move does). A ROOT tombstone
//! with MOVED is never dead by itself: the root lives as long as its chain.
//! When the chain ends (its last member deleted, or moved with new index
//! entries) the root gets a plain ROOT tombstone, and is dead like any
//! deleted row.

use thiserror::Error;

/// Length of the header in front of every tuple.
pub const HEADER_LEN: usize = 24;
/// The only value format so far.
pub const FORMAT_V1: u8 = 1;
/// The version deletes the row.
pub const FLAG_TOMBSTONE: u8 = 1 << 0;
/// The row moved to `moved_to` (an UPDATE that gave it a new rowid); implies TOMBSTONE.
pub const FLAG_MOVED: u8 = 1 << 1;
/// The creator is known committed and visible to everyone (VACUUM froze it).
pub const FLAG_FROZEN: u8 = 1 << 2;
/// A row version reached through its chain's root (`moved_to` holds the
/// root's rowid and version: [`heap_only_link`]): its index entries are
/// the root's.
pub const FLAG_HEAP_ONLY: u8 = 1 << 3;
/// A tombstone on a root of heap-only rows: with MOVED, it points at the
/// newest member and keeps the root alive; without, it ends the chain.
pub const FLAG_ROOT: u8 = 1 << 4;
/// The version records no change of the row at its rowid: a root's
/// tombstone written with a change of another member (logical decoding
/// passes over it).
pub const FLAG_BOOKKEEPING: u8 = 1 << 5;
/// On a MOVED tombstone: the row moved to a heap-only version of the same
/// chain (no new index entries).
pub const FLAG_HOT: u8 = 1 << 6;

/// The flags of a chain root's redirect to a member that a later move
/// within the chain reached (written with that move, beside the member's
/// tombstone).
pub const REDIRECT_FLAGS: u8 = FLAG_TOMBSTONE | FLAG_MOVED | FLAG_HOT | FLAG_ROOT | FLAG_BOOKKEEPING;

const KNOWN_FLAGS: u8 = FLAG_TOMBSTONE | FLAG_MOVED | FLAG_FROZEN | FLAG_HEAP_ONLY | FLAG_ROOT | FLAG_BOOKKEEPING | FLAG_HOT;

/// Bits of a heap-only version's link that hold its root's rowid (every
/// rowid is below `2^41`: `keys::MAX_ROWID`).
pub const ROOT_BITS: u32 = 41;
/// The root's rowid in a heap-only version's link.
pub const ROOT_MASK: u64 = (1 << ROOT_BITS) - 1;
/// The root version field of a link that does not know it.
pub const ROOT_VERSION_UNKNOWN: u32 = (1 << (64 - ROOT_BITS)) - 1;

/// The link of a heap-only version: its root, and the version of the
/// root that redirects to it (a writer that moves the row on writes the
/// root's next redirect above it without reading the root: HOT_PATH §37).
pub fn heap_only_link(root: u64, root_version: Option<u32>) -> u64 {
    let v = root_version.map_or(ROOT_VERSION_UNKNOWN, |v| v.min(ROOT_VERSION_UNKNOWN));
    root & ROOT_MASK | u64::from(v) << ROOT_BITS
}

const _: () = assert!(crate::keys::MAX_ROWID < 1 << ROOT_BITS);

const _: () = assert!(HEADER_LEN.is_multiple_of(8));

/// A value that is not a well-formed row version.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CodecError {
    #[error("row value of {len} bytes is shorter than its {HEADER_LEN}-byte header")]
    TooShort { len: usize },
    #[error("unknown row value format {0}")]
    UnknownFormat(u8),
    #[error("unknown row flags {0:#04x}")]
    UnknownFlags(u8),
    #[error("reserved row header bytes are not zero")]
    ReservedNotZero,
    #[error("row header flags {flags:#04x} disagree with moved_to {moved_to}")]
    InconsistentMove { flags: u8, moved_to: u64 },
    #[error("row versions out of order: {next} follows {previous} (expected newest first)")]
    VersionOrder { previous: u32, next: u32 },
}

/// The MVCC header of one row version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RowHeader {
    pub flags: u8,
    /// Command id of the creating command.
    pub cid: u32,
    /// Creator's FullTransactionId.
    pub xid: u64,
    /// New rowid of a moved row; 0 unless `flags` has [`FLAG_MOVED`].
    pub moved_to: u64,
}

impl RowHeader {
    pub fn is_tombstone(&self) -> bool {
        self.flags & FLAG_TOMBSTONE != 0
    }

    pub fn is_moved(&self) -> bool {
        self.flags & FLAG_MOVED != 0
    }

    pub fn is_frozen(&self) -> bool {
        self.flags & FLAG_FROZEN != 0
    }

    /// A heap-only row version; [`RowHeader::root`] gives its root.
    pub fn is_heap_only(&self) -> bool {
        self.flags & FLAG_HEAP_ONLY != 0
    }

    /// The root of a heap-only version, else None.
    pub fn root(&self) -> Option<u64> {
        self.is_heap_only().then_some(self.moved_to & ROOT_MASK)
    }

    /// A heap-only version: the version of its root that redirects to it,
    /// if the link holds it.
    pub fn root_version(&self) -> Option<u32> {
        let v = (self.moved_to >> ROOT_BITS) as u32;
        (self.is_heap_only() && v != ROOT_VERSION_UNKNOWN).then_some(v)
    }

    /// Moved to a heap-only version of the same chain.
    pub fn is_hot(&self) -> bool {
        self.flags & FLAG_HOT != 0
    }

    /// The tombstone a HOT move leaves on a chain member other than the
    /// root (whose tombstones carry [`FLAG_ROOT`]): the row moved on within
    /// its chain, and only the root's redirect leads to its newer member.
    pub fn is_moved_on_member(&self) -> bool {
        self.is_tombstone() && self.is_hot() && self.is_moved() && self.flags & FLAG_ROOT == 0
    }

    /// A root's pointer at the newest member of its chain: a tombstone that
    /// does not make the row dead.
    pub fn is_redirect(&self) -> bool {
        self.flags & (FLAG_ROOT | FLAG_MOVED) == FLAG_ROOT | FLAG_MOVED
    }

    /// A tombstone that makes its row dead once every snapshot sees it
    /// (a delete or a move; not a root's redirect).
    pub fn is_dead_end(&self) -> bool {
        self.is_tombstone() && !self.is_redirect()
    }

    /// Written with another member's change; no change of its own.
    pub fn is_bookkeeping(&self) -> bool {
        self.flags & FLAG_BOOKKEEPING != 0
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0] = FORMAT_V1;
        out[1] = self.flags;
        out[4..8].copy_from_slice(&self.cid.to_le_bytes());
        out[8..16].copy_from_slice(&self.xid.to_le_bytes());
        out[16..24].copy_from_slice(&self.moved_to.to_le_bytes());
        out
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `out`.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<(), CodecError> {
        let len = out.len();
        let dst = out
            .get_mut(..HEADER_LEN)
            .ok_or(CodecError::TooShort { len })?;
        dst.copy_from_slice(&self.encode());
        Ok(())
    }

    /// Splits a value into its validated header and the tuple bytes after it.
    #[inline]
    pub fn decode(value: &[u8]) -> Result<(RowHeader, &[u8]), CodecError> {
        if value.len() < HEADER_LEN {
            return Err(CodecError::TooShort { len: value.len() });
        }
        let (h, tuple) = value.split_at(HEADER_LEN);
        if h[0] != FORMAT_V1 {
            return Err(CodecError::UnknownFormat(h[0]));
        }
        let flags = h[1];
        if flags & !KNOWN_FLAGS != 0 {
            return Err(CodecError::UnknownFlags(flags));
        }
        if h[2] != 0 || h[3] != 0 {
            return Err(CodecError::ReservedNotZero);
        }
        let header = RowHeader {
            flags,
            cid: u32::from_le_bytes([h[4], h[5], h[6], h[7]]),
            xid: u64::from_le_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]),
            moved_to: u64::from_le_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]),
        };
        let link_consistent = if header.is_moved() {
            header.is_tombstone() && !header.is_heap_only()
        } else if header.is_heap_only() {
            !header.is_tombstone()
        } else {
            header.moved_to == 0
        };
        let consistent = link_consistent
            && (header.flags & (FLAG_ROOT | FLAG_BOOKKEEPING) == 0 || header.is_tombstone())
            && (!header.is_hot() || header.is_moved())
            && (!header.is_redirect() || header.is_hot());
        if !consistent {
            return Err(CodecError::InconsistentMove {
                flags,
                moved_to: header.moved_to,
            });
        }
        Ok((header, tuple))
    }
}

/// A row's state for one reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowState<'a> {
    /// The visible version holds a tuple.
    Live {
        version: u32,
        header: RowHeader,
        tuple: &'a [u8],
    },
    /// The visible version is a tombstone (possibly MOVED: see `header.moved_to`).
    Deleted { version: u32, header: RowHeader },
    /// No version is visible: the row does not exist for this reader.
    Absent,
}

/// The chain rule: the newest version whose header `visible` accepts decides
/// the row's state; a tombstone there means deleted; none accepted means absent.
///
/// `versions_newest_first` yields `(version, value)` in strictly decreasing
/// version order (the order of a forward scan over one rowid's keys); any
/// other order, or a malformed value met before the decision, is an error.
pub fn resolve<'a>(
    versions_newest_first: impl Iterator<Item = (u32, &'a [u8])>,
    mut visible: impl FnMut(&RowHeader) -> bool,
) -> Result<RowState<'a>, CodecError> {
    let mut previous: Option<u32> = None;
    for (version, value) in versions_newest_first {
        if let Some(previous) = previous {
            if version >= previous {
                return Err(CodecError::VersionOrder {
                    previous,
                    next: version,
                });
            }
        }
        previous = Some(version);
        let (header, tuple) = RowHeader::decode(value)?;
        if visible(&header) {
            return Ok(if header.is_tombstone() {
                RowState::Deleted { version, header }
            } else {
                RowState::Live {
                    version,
                    header,
                    tuple,
                }
            });
        }
    }
    Ok(RowState::Absent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(header: RowHeader, tuple: &[u8]) -> Vec<u8> {
        let mut v = header.encode().to_vec();
        v.extend_from_slice(tuple);
        v
    }

    fn live(xid: u64) -> RowHeader {
        RowHeader {
            flags: 0,
            cid: 0,
            xid,
            moved_to: 0,
        }
    }

    fn tombstone(xid: u64) -> RowHeader {
        RowHeader {
            flags: FLAG_TOMBSTONE,
            cid: 0,
            xid,
            moved_to: 0,
        }
    }

    #[test]
    fn header_round_trips() {
        let h = RowHeader {
            flags: FLAG_TOMBSTONE | FLAG_MOVED | FLAG_FROZEN,
            cid: 0xDEAD_BEEF,
            xid: 0x0123_4567_89AB_CDEF,
            moved_to: 42,
        };
        let v = value(h, b"tuple");
        assert_eq!(v.len(), HEADER_LEN + 5);
        assert_eq!(&v[..8], &[1, 7, 0, 0, 0xEF, 0xBE, 0xAD, 0xDE]);
        let (decoded, tuple) = RowHeader::decode(&v).unwrap();
        assert_eq!(decoded, h);
        assert_eq!(tuple, b"tuple");

        let mut buf = [0xAAu8; 30];
        live(9).encode_into(&mut buf).unwrap();
        assert_eq!(RowHeader::decode(&buf).unwrap(), (live(9), &[0xAA; 6][..]));
        assert_eq!(
            live(9).encode_into(&mut [0u8; 23]),
            Err(CodecError::TooShort { len: 23 })
        );
    }

    #[test]
    fn heap_only_and_root_flags() {
        let member = RowHeader { flags: FLAG_HEAP_ONLY, cid: 1, xid: 7, moved_to: heap_only_link(0, Some(0)) };
        let (m, _) = RowHeader::decode(&member.encode()).unwrap();
        assert_eq!((m.root(), m.root_version()), (Some(0), Some(0)), "rowid 0 can be a root");
        let far = RowHeader { flags: FLAG_HEAP_ONLY, cid: 1, xid: 7, moved_to: heap_only_link(crate::keys::MAX_ROWID, Some(77)) };
        assert_eq!((far.root(), far.root_version()), (Some(crate::keys::MAX_ROWID), Some(77)));
        let unknown = RowHeader { flags: FLAG_HEAP_ONLY, cid: 1, xid: 7, moved_to: heap_only_link(5, Some(u32::MAX)) };
        assert_eq!((unknown.root(), unknown.root_version()), (Some(5), None));
        assert_eq!(heap_only_link(5, None), unknown.moved_to);
        assert!(!m.is_tombstone());
        let redirect = RowHeader { flags: FLAG_TOMBSTONE | FLAG_MOVED | FLAG_ROOT | FLAG_HOT, cid: 1, xid: 7, moved_to: 9 };
        let (r, _) = RowHeader::decode(&redirect.encode()).unwrap();
        assert!(r.is_redirect() && !r.is_dead_end() && r.is_moved() && r.root().is_none());
        let end = RowHeader { flags: FLAG_TOMBSTONE | FLAG_ROOT | FLAG_BOOKKEEPING, cid: 1, xid: 7, moved_to: 0 };
        let (e, _) = RowHeader::decode(&end.encode()).unwrap();
        assert!(e.is_dead_end() && e.is_bookkeeping() && !e.is_redirect());
        assert!(RowHeader::decode(&tombstone(1).encode()).unwrap().0.is_dead_end());
        for bad in [
            RowHeader { flags: FLAG_HEAP_ONLY | FLAG_TOMBSTONE, cid: 0, xid: 1, moved_to: 3 },
            RowHeader { flags: FLAG_HEAP_ONLY | FLAG_TOMBSTONE | FLAG_MOVED, cid: 0, xid: 1, moved_to: 3 },
            RowHeader { flags: FLAG_ROOT, cid: 0, xid: 1, moved_to: 0 },
            RowHeader { flags: FLAG_BOOKKEEPING, cid: 0, xid: 1, moved_to: 0 },
            RowHeader { flags: FLAG_TOMBSTONE | FLAG_HOT, cid: 0, xid: 1, moved_to: 0 },
            RowHeader { flags: FLAG_TOMBSTONE | FLAG_MOVED | FLAG_ROOT, cid: 0, xid: 1, moved_to: 4 },
        ] {
            assert!(RowHeader::decode(&bad.encode()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn malformed_headers_are_rejected() {
        let good = live(1).encode();
        assert_eq!(
            RowHeader::decode(&good[..23]),
            Err(CodecError::TooShort { len: 23 })
        );
        let mut bad = good;
        bad[0] = 2;
        assert_eq!(RowHeader::decode(&bad), Err(CodecError::UnknownFormat(2)));
        let mut bad = good;
        bad[1] = 0x80;
        assert_eq!(RowHeader::decode(&bad), Err(CodecError::UnknownFlags(0x80)));
        let mut bad = good;
        bad[3] = 1;
        assert_eq!(RowHeader::decode(&bad), Err(CodecError::ReservedNotZero));
        let moved_not_deleted = RowHeader {
            flags: FLAG_MOVED,
            cid: 0,
            xid: 1,
            moved_to: 5,
        };
        assert!(matches!(
            RowHeader::decode(&moved_not_deleted.encode()),
            Err(CodecError::InconsistentMove { .. })
        ));
        let stray_target = RowHeader {
            flags: 0,
            cid: 0,
            xid: 1,
            moved_to: 5,
        };
        assert!(matches!(
            RowHeader::decode(&stray_target.encode()),
            Err(CodecError::InconsistentMove { .. })
        ));
    }

    #[test]
    fn newest_visible_version_decides() {
        let v2 = value(live(30), b"new");
        let v1 = value(live(20), b"old");
        let v0 = value(live(10), b"first");
        let chain = || [(2, &v2[..]), (1, &v1[..]), (0, &v0[..])].into_iter();

        let all = resolve(chain(), |_| true).unwrap();
        assert!(matches!(
            all,
            RowState::Live {
                version: 2,
                tuple: b"new",
                ..
            }
        ));

        // An invisible newer version (in progress, aborted, later snapshot) is skipped.
        let before_30 = resolve(chain(), |h| h.xid < 30).unwrap();
        assert!(matches!(
            before_30,
            RowState::Live {
                version: 1,
                tuple: b"old",
                ..
            }
        ));

        assert_eq!(resolve(chain(), |_| false).unwrap(), RowState::Absent);
        assert_eq!(
            resolve(std::iter::empty(), |_| true).unwrap(),
            RowState::Absent
        );
    }

    #[test]
    fn visible_tombstone_means_deleted() {
        let moved = RowHeader {
            flags: FLAG_TOMBSTONE | FLAG_MOVED,
            cid: 1,
            xid: 40,
            moved_to: 99,
        };
        let v2 = value(moved, b"");
        let v1 = value(tombstone(30), b"");
        let v0 = value(live(10), b"row");
        let chain = || [(2, &v2[..]), (1, &v1[..]), (0, &v0[..])].into_iter();

        assert_eq!(
            resolve(chain(), |_| true).unwrap(),
            RowState::Deleted {
                version: 2,
                header: moved
            }
        );
        assert_eq!(
            resolve(chain(), |h| h.xid < 40).unwrap(),
            RowState::Deleted {
                version: 1,
                header: tombstone(30)
            }
        );
        assert!(matches!(
            resolve(chain(), |h| h.xid < 30).unwrap(),
            RowState::Live {
                version: 0,
                tuple: b"row",
                ..
            }
        ));
    }

    #[test]
    fn chain_errors() {
        let v = value(live(1), b"x");
        let out_of_order = [(1, &v[..]), (1, &v[..])].into_iter();
        assert_eq!(
            resolve(out_of_order, |_| false),
            Err(CodecError::VersionOrder {
                previous: 1,
                next: 1
            })
        );
        let corrupt = [(3, &v[..]), (2, &b"short"[..])].into_iter();
        assert_eq!(
            resolve(corrupt, |_| false),
            Err(CodecError::TooShort { len: 5 })
        );
        // Versions after the deciding one are not examined.
        let decided = [(3, &v[..]), (2, &b"short"[..])].into_iter();
        assert!(matches!(
            resolve(decided, |_| true),
            Ok(RowState::Live { version: 3, .. })
        ));
    }
}
