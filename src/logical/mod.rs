//! Logical decoding of pasv tables: their changes reach PostgreSQL's WAL as
//! pasv messages, and this module makes output plugins (`pgoutput`, so
//! publications and subscriptions; `test_decoding`; any other) see them as
//! the row changes heap's records give.
//!
//! * [`notes`] — the write side: what a DML batch logs beyond its rows (old
//!   rows' replica identity, speculative insertions, the tablespace).
//! * [`decode`] — the read side: a wrapper of the logical message decoder
//!   that queues the row changes of each pasv message.

pub mod decode;
pub mod notes;
