//! Table storage lifecycle: a CF is created with the table's relfilenumber
//! (CREATE TABLE, TRUNCATE, rewrites) and dropped when the transaction that
//! made it obsolete commits (DROP TABLE, TRUNCATE, DROP DATABASE) or when the
//! transaction that created it aborts. The drops are pending actions run by
//! `crate::xact` at transaction end.
//!
//! Each pasv table also gets an empty main-fork file, like heap's
//! `RelationCreateStorage`, so PostgreSQL code that looks at the relation's
//! storage (ANALYZE's block count, pg_relation_size) finds a valid, empty
//! relation rather than a missing file.

use super::{cf_of, is_pasv, rel_name};
use crate::xact::{self, Action};
use crate::engine_client;
use pasv_am::protocol::CfRef;
use pgrx::pg_sys;

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn relation_set_new_filelocator(
    rel: pg_sys::Relation,
    newrlocator: *const pg_sys::RelFileLocator,
    persistence: std::ffi::c_char,
    freeze_xid: *mut pg_sys::TransactionId,
    minmulti: *mut pg_sys::MultiXactId,
) {
    *freeze_xid = pg_sys::RecentXmin;
    *minmulti = pg_sys::GetOldestMultiXactId();

    let srel = pg_sys::RelationCreateStorage(*newrlocator, persistence, true);
    pg_sys::smgrclose(srel);

    let new_cf = CfRef { db: (*newrlocator).dbOid.to_u32(), rel: (*newrlocator).relNumber.to_u32() };
    let old_cf = cf_of(rel);
    // Schedule before creating, so an ERROR in between cannot leak the CF.
    xact::schedule(Action::DropCf(new_cf), xact::When::Abort);
    if old_cf != new_cf {
        // TRUNCATE / rewrite of an existing table: the old rows go at commit.
        xact::schedule(Action::DropCf(old_cf), xact::When::Commit);
    }
    // Unlogged and temporary tables: no messages, no flags, emptied after a
    // crash (the engine does it when it opens). A temporary table's CF goes
    // with the session, which drops the table (or with whoever cleans its
    // temporary schema after a crash).
    let logged = persistence as u8 == pg_sys::RELPERSISTENCE_PERMANENT;
    if let Err(e) = engine_client::create_cf(new_cf, logged) {
        e.raise(&format!("creating storage for {}", rel_name(rel)));
    }
    xact::mark_written();
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn relation_nontransactional_truncate(rel: pg_sys::Relation) {
    if let Err(e) = engine_client::truncate_cf(cf_of(rel), super::logs_changes(rel)) {
        e.raise(&format!("truncating {}", rel_name(rel)));
    }
    // Emptied: no row is all-visible any more (as heap's relallvisible).
    if let Some(shares) = crate::shmem::visible_shares() {
        shares.set(cf_of(rel), 0);
    }
}

/// `ALTER TABLE ... SET TABLESPACE`: the table gets a new relfilenumber in
/// the new tablespace. The rows themselves stay in pasv's RocksDB under
/// `$PGDATA/pasv` (pasv has one store per cluster); the engine copies every
/// row version into the new CF with the same rowids, so the table's indexes
/// stay valid, and makes the copy durable before the statement goes on. The
/// old CF goes at commit, the new one at abort. The main fork moves like
/// heap's: created in the new tablespace, as long as the old one (the rowid
/// space, see `forklen`), the old file dropped at commit.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn relation_copy_data(rel: pg_sys::Relation, newrlocator: *const pg_sys::RelFileLocator) {
    let persistence = (*(*rel).rd_rel).relpersistence;
    let dst = pg_sys::RelationCreateStorage(*newrlocator, persistence, true);
    let new_cf = CfRef { db: (*newrlocator).dbOid.to_u32(), rel: (*newrlocator).relNumber.to_u32() };
    let old_cf = cf_of(rel);
    xact::schedule(Action::DropCf(new_cf), xact::When::Abort);
    xact::schedule(Action::DropCf(old_cf), xact::When::Commit);
    let doing = format!("moving {} to another tablespace", rel_name(rel));
    if let Err(e) = engine_client::create_cf(new_cf, super::logs_changes(rel)) {
        e.raise(&doing);
    }
    if let Err(e) = engine_client::copy_cf(old_cf, new_cf.rel) {
        e.raise(&doing);
    }
    let blocks = pg_sys::smgrnblocks(pg_sys::RelationGetSmgr(rel), pg_sys::ForkNumber::MAIN_FORKNUM);
    super::forklen::extend_sparse(dst, blocks);
    pg_sys::RelationDropStorage(rel);
    pg_sys::smgrclose(dst);
    xact::mark_written();
}

/// CLUSTER and VACUUM FULL: the new relation gets every version a snapshot
/// may still need; CLUSTER renumbers the rows in the index's order (a
/// table scan returns rows in rowid order), VACUUM FULL keeps their rowids.
#[pgrx::pg_guard]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C-unwind" fn relation_copy_for_cluster(
    old: pg_sys::Relation,
    new: pg_sys::Relation,
    old_index: pg_sys::Relation,
    use_sort: bool,
    oldest_xmin: pg_sys::TransactionId,
    xid_cutoff: *mut pg_sys::TransactionId,
    _multi_cutoff: *mut pg_sys::MultiXactId,
    num_tuples: *mut f64,
    tups_vacuumed: *mut f64,
    tups_recently_dead: *mut f64,
) {
    let doing = format!("rewriting {}", rel_name(old));
    // CLUSTER: new rowids in index order, so scans return rows in that order;
    // by a sort when PostgreSQL found that cheaper, as heap's.
    let order = (!old_index.is_null()).then(|| {
        if use_sort {
            super::vacuum::sort_order(old, old_index, &doing)
        } else {
            super::vacuum::index_order(old, old_index, &doing)
        }
    });
    let report = super::vacuum::copy_rows(old, new, oldest_xmin, *xid_cutoff, order.as_ref(), &doing);
    *num_tuples = report.live_rows;
    *tups_vacuumed = report.removed_versions;
    *tups_recently_dead = report.kept_dead_versions;
}

// ---------------------------------------------------------------------------
// DROP TABLE / DROP DATABASE (no table-AM callback exists for them)
// ---------------------------------------------------------------------------

static mut PREV_OBJECT_ACCESS: pg_sys::object_access_hook_type = None;

/// # Safety
/// Called once from `_PG_init`.
pub unsafe fn install_object_access_hook() {
    PREV_OBJECT_ACCESS = pg_sys::object_access_hook;
    pg_sys::object_access_hook = Some(object_access);
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn object_access(
    access: pg_sys::ObjectAccessType::Type,
    class_id: pg_sys::Oid,
    object_id: pg_sys::Oid,
    sub_id: i32,
    arg: *mut std::ffi::c_void,
) {
    if let Some(prev) = PREV_OBJECT_ACCESS {
        prev(access, class_id, object_id, sub_id, arg);
    }
    if access != pg_sys::ObjectAccessType::OAT_DROP || sub_id != 0 {
        return;
    }
    if class_id == pg_sys::RelationRelationId {
        let rel = pg_sys::RelationIdGetRelation(object_id);
        if rel.is_null() {
            return;
        }
        if is_pasv(rel) {
            xact::schedule(Action::DropCf(cf_of(rel)), xact::When::Commit);
            xact::mark_written();
        }
        pg_sys::RelationClose(rel);
    } else if class_id == pg_sys::DatabaseRelationId {
        let db = object_id.to_u32();
        // Its replay worker is connected to it and would make DROP DATABASE
        // fail ("being accessed by other users"): it leaves now and comes back
        // if the drop fails.
        crate::replay::worker::stop_worker(db);
        xact::schedule(Action::DropDatabase(db), xact::When::Commit);
        xact::schedule(Action::ResumeDatabase(db), xact::When::Abort);
    }
}
