//! Test fixtures shared by the protocol's tests: a batch with awkward key
//! and value lengths, a table, and the check that values sit 8-aligned in a
//! message. Compiled only for tests.

use super::{BatchBuilder, CfRef, EntryBatch};
use crate::keys::row_key;

/// Every value's offset from the start of the message is a multiple of 8.
pub fn assert_values_aligned(msg: &[u8], batch: &EntryBatch<'_>) {
    for (_, value) in batch.iter() {
        let offset = value.as_ptr() as usize - msg.as_ptr() as usize;
        assert!(offset < msg.len() || value.is_empty());
        assert_eq!(offset % 8, 0, "value at offset {offset}");
    }
}

pub fn sample_batch() -> BatchBuilder {
    let mut b = BatchBuilder::new();
    b.push(&row_key(1, 0), b"").unwrap();
    b.push(&row_key(2, 0), b"v").unwrap();
    b.push(b"odd-key", b"seven b").unwrap();
    b.push(b"", b"eight by").unwrap();
    b.push(&[0xAB; 17], &[0xCD; 33]).unwrap();
    b
}

pub fn cf() -> CfRef {
    CfRef { db: 5, rel: 16384 }
}
