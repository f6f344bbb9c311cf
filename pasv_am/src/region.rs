//! What the shared-memory regions of this crate ([`crate::row_cache`],
//! [`crate::shared_row_locks`], [`crate::visible_shares`]) have in common:
//! a header that starts with a [`Stamp`], then equal entries.

use std::sync::atomic::{AtomicU64, Ordering};

/// The first words of a formatted region: its magic and its entry count.
/// The magic is written last (Release), so a process that finds it finds
/// the count and everything formatted before it.
#[repr(C)]
pub struct Stamp {
    magic: AtomicU64,
    count: AtomicU64,
}

impl Stamp {
    /// Marks the region formatted, with `count` entries.
    pub fn mark(&self, magic: u64, count: usize) {
        self.count.store(count as u64, Ordering::Relaxed);
        self.magic.store(magic, Ordering::Release);
    }

    /// The entry count [`Stamp::mark`] recorded with `magic`; `None` if the
    /// region was not marked so.
    pub fn count(&self, magic: u64) -> Option<usize> {
        (self.magic.load(Ordering::Acquire) == magic).then(|| self.count.load(Ordering::Relaxed) as usize)
    }
}

/// The largest power of two of `entry`-byte entries that fits in `bytes`
/// after a `header`-byte header; `None` when not even one does.
pub fn power_of_two_fit(bytes: usize, header: usize, entry: usize) -> Option<usize> {
    let fit = bytes.checked_sub(header)? / entry;
    (fit > 0).then(|| 1usize << fit.ilog2())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_answers_only_to_its_magic() {
        let s: Stamp = unsafe { std::mem::zeroed() };
        assert_eq!(s.count(7), None);
        s.mark(7, 12);
        assert_eq!(s.count(7), Some(12));
        assert_eq!(s.count(8), None);
    }

    #[test]
    fn the_fit_is_the_largest_power_of_two() {
        assert_eq!(power_of_two_fit(64 + 3 * 16, 64, 16), Some(2));
        assert_eq!(power_of_two_fit(64 + 4 * 16, 64, 16), Some(4));
        assert_eq!(power_of_two_fit(64 + 15, 64, 16), None);
        assert_eq!(power_of_two_fit(10, 64, 16), None);
    }
}
