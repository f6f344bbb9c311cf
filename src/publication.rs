//! Logical replication refuses pasv tables (issue 10, item 7).
//!
//! A pasv table's changes reach PostgreSQL's WAL as pasv messages, not as
//! row changes, so `pgoutput` would publish nothing for it, silently. Until
//! pasv tables can be published, a publication that names one fails with
//! an ERROR naming the table; one that covers pasv tables only through
//! `FOR ALL TABLES` or `FOR TABLES IN SCHEMA` is created with a WARNING that
//! names them (refusing it would refuse every such publication in a
//! database that has a pasv table).
//!
//! Runs from the `ProcessUtility` hook (`utility_hook.rs`), after
//! PostgreSQL has executed `CREATE PUBLICATION` or `ALTER PUBLICATION`: the
//! publication's relations are read back from the catalog, so every way of
//! naming a table (a list, a partitioned parent, a schema) is covered. An ERROR here rolls the
//! statement back.

use crate::tam;
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

/// How many table names a message lists before "and N more".
const NAMES_SHOWN: usize = 5;

/// ERROR if the publication names a pasv table; WARNING if it covers some
/// through ALL TABLES or a schema.
#[pgrx::pg_guard]
pub(crate) unsafe extern "C-unwind" fn check_publication(name: *const std::ffi::c_char) {
    let publication = pg_sys::GetPublicationByName(name, true);
    if publication.is_null() {
        return;
    }
    let oid = (*publication).oid;
    let leaf = pg_sys::PublicationPartOpt::PUBLICATION_PART_LEAF;
    let pub_name = std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned();
    if (*publication).alltables {
        let covered = pasv_tables(pg_sys::GetAllTablesPublicationRelations(false));
        warn_uncovered(&pub_name, "FOR ALL TABLES", &covered);
        return;
    }
    let named = pasv_tables(pg_sys::GetPublicationRelations(oid, leaf));
    if let Some(first) = named.first() {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!(
                "pasv table {first} cannot be published (publication \"{pub_name}\"{})",
                more_suffix(named.len())
            ),
            "Logical replication does not see pasv tables yet: their changes reach the WAL as pasv messages, not as \
             row changes. Publish heap tables only, and move pasv rows with pg_dump or COPY.",
        );
    }
    let in_schemas = pasv_tables(pg_sys::GetAllSchemaPublicationRelations(oid, leaf));
    warn_uncovered(&pub_name, "FOR TABLES IN SCHEMA", &in_schemas);
}

unsafe fn warn_uncovered(pub_name: &str, how: &str, tables: &[String]) {
    if tables.is_empty() {
        return;
    }
    let shown = tables.iter().take(NAMES_SHOWN).cloned().collect::<Vec<_>>().join(", ");
    let rest = tables.len().saturating_sub(NAMES_SHOWN);
    let more = if rest > 0 { format!(" and {rest} more") } else { String::new() };
    crate::error::warn(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!("publication \"{pub_name}\" ({how}) publishes nothing of pasv tables {shown}{more}"),
        "Logical replication does not see pasv tables yet: their changes reach the WAL as pasv messages, not as \
         row changes. Move pasv rows with pg_dump or COPY.",
    );
}

fn more_suffix(count: usize) -> String {
    if count > 1 {
        format!(", and {} more pasv tables", count - 1)
    } else {
        String::new()
    }
}

/// The quoted names of the pasv tables among `relids` (an OID list).
unsafe fn pasv_tables(relids: *mut pg_sys::List) -> Vec<String> {
    let mut names = Vec::new();
    if relids.is_null() {
        return names;
    }
    for i in 0..(*relids).length {
        let relid = pg_sys::Oid::from((*(*relids).elements.add(i as usize)).oid_value);
        let rel = pg_sys::RelationIdGetRelation(relid);
        if rel.is_null() {
            continue;
        }
        if tam::is_pasv(rel) {
            names.push(tam::rel_name(rel));
        }
        pg_sys::RelationClose(rel);
    }
    names
}
