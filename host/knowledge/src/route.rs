//! Routing a lookup to one of several databases (OML 1.25 delta §13.9).
//!
//! Why: a Warp Parse knowdb may load local tables and name external
//! databases beside them (`[[provider.sqldb]]`, each with a `name`), and its
//! rules say which database a lookup reads by the first dotted segment of
//! the table (`from geo.public.ip_geo_city`). Before this, omlet reached one
//! database per knowledge and refused such a knowdb.
//!
//! What it replaces: nothing on the lookup path. A statement is routed once,
//! at bind; its [`BoundStatement`](super::BoundStatement) keeps the index of
//! its [`Source`], and every later call (query, batch, index, memory read)
//! goes to that source. A knowledge with one database has one source and
//! routes everything to it.
//!
//! The rule, from the statement's first table (the guard's grammar has one):
//! 1. a table the knowdb loaded locally goes to the knowledge's own
//!    database (source 0);
//! 2. a table whose first dotted segment names a source goes there, with
//!    every `name.` at the start of an identifier outside quotes removed;
//! 3. anything else goes to the default source: the one named `default`
//!    (an unnamed `[provider.sqldb]`), or the only one there is, or else the
//!    knowledge's own database.
//!
//! Cost: one scan of the statement's tokens per bind; nothing per lookup.

use std::sync::Arc;

use super::Provider;

/// A database that lookups may be routed to.
#[derive(Clone)]
pub struct Source {
    /// Its name, as rules prefix it (`geo`); `None` for the knowledge's own
    /// database when no knowdb names it.
    pub name: Option<String>,
    /// The connected database.
    pub provider: Arc<dyn Provider>,
    /// The tables lookups may read on it (`None`: any outside the catalog).
    pub tables: Option<Vec<String>>,
    /// Whether lookups may name schema-qualified tables on it
    /// (`public.ip_geo_city`): true for the databases a knowdb names, whose
    /// rules address tables that way.
    pub qualified: bool,
}

impl Source {
    /// The knowledge's own database, nameless, under the config's
    /// allow-list.
    pub fn own(provider: Arc<dyn Provider>, tables: Option<Vec<String>>) -> Source {
        Source { name: None, provider, tables, qualified: false }
    }
}

/// Where a statement goes, and its text as that database reads it.
#[derive(Debug, PartialEq, Eq)]
pub struct Routed {
    /// The index of its source.
    pub source: usize,
    /// The statement with the source's `name.` prefixes removed (unchanged
    /// when the source was not chosen by name).
    pub sql: String,
}

/// Routes `sql` (as the rule wrote it) among `sources` by the rules of the
/// module's documentation. `local` holds the tables loaded into source 0.
pub fn route(sql: &str, sources: &[Source], default: usize, local: &[String]) -> Routed {
    let keep = |source| Routed { source, sql: sql.to_string() };
    let Some(table) = super::guard::first_table(sql) else { return keep(default) };
    if local.iter().any(|t| t.eq_ignore_ascii_case(&table)) {
        return keep(0);
    }
    if let Some((first, _)) = table.split_once('.')
        && let Some(i) = sources.iter().position(|s| s.name.as_deref() == Some(first))
    {
        return Routed { source: i, sql: strip_prefix(sql, first) };
    }
    keep(default)
}

/// The default source among `sources`: the one named `default`, else the
/// only named one, else source 0.
pub fn default_of(sources: &[Source]) -> usize {
    let named: Vec<usize> = (0..sources.len()).filter(|&i| sources[i].name.is_some()).collect();
    match sources.iter().position(|s| s.name.as_deref() == Some("default")) {
        Some(i) => i,
        None if named.len() == 1 => named[0],
        None => 0,
    }
}

/// `sql` with every `prefix.` that begins an identifier outside quotes
/// removed: `geo.public.t.c` becomes `public.t.c`, `'geo.x'` and `ageo.x`
/// stay.
pub fn strip_prefix(sql: &str, prefix: &str) -> String {
    let result = super::sql::rewrite_outside_quotes(sql, |sql, i, _| -> Result<_, std::convert::Infallible> {
        let b = sql.as_bytes();
        let starts = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b'.');
        let end = i + prefix.len();
        Ok((starts && sql.get(i..end) == Some(prefix) && b.get(end) == Some(&b'.')).then_some(end + 1))
    });
    match result {
        Ok(s) => s,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::SqliteProvider;

    async fn sources(names: &[Option<&str>]) -> Vec<Source> {
        let mut out = Vec::new();
        for n in names {
            let p: Arc<dyn Provider> = Arc::new(SqliteProvider::memory().await.unwrap());
            out.push(Source { name: n.map(str::to_string), provider: p, tables: None, qualified: n.is_some() });
        }
        out
    }

    #[tokio::test]
    async fn the_first_table_decides() {
        let s = sources(&[None, Some("geo"), Some("asset")]).await;
        let local = ["zone".to_string()];
        let r = |sql: &str| route(sql, &s, default_of(&s), &local);
        assert_eq!(r("select z from zone where ip = :ip"), Routed { source: 0, sql: "select z from zone where ip = :ip".into() });
        assert_eq!(
            r("select country from geo.public.ip_geo_city where ip = :ip and n = 'geo.x' and geo.public.ip_geo_city.a = 1"),
            Routed {
                source: 1,
                sql: "select country from public.ip_geo_city where ip = :ip and n = 'geo.x' and public.ip_geo_city.a = 1".into()
            }
        );
        assert_eq!(r("select owner from asset.inventory where ip = :ip").source, 2);
        // A sub-query's table is the first; an unknown segment is no source.
        assert_eq!(
            r("select count(*) from (select a from asset.inv) where a = :a").sql,
            "select count(*) from (select a from inv) where a = :a"
        );
        assert_eq!(
            r("select a from other.t where a = :a"),
            Routed { source: 0, sql: "select a from other.t where a = :a".into() }
        );
        assert_eq!(r("select a from nowhere where a = :a").source, 0, "no default database: the own one");
    }

    #[tokio::test]
    async fn the_default_is_named_default_or_the_only_one() {
        assert_eq!(default_of(&sources(&[None, Some("geo")]).await), 1);
        assert_eq!(default_of(&sources(&[None, Some("geo"), Some("default")]).await), 2);
        assert_eq!(default_of(&sources(&[None, Some("geo"), Some("asset")]).await), 0);
        assert_eq!(default_of(&sources(&[None]).await), 0);
    }

    #[test]
    fn prefixes_go_only_where_an_identifier_starts() {
        assert_eq!(
            strip_prefix("select geo.a from geo.t where xgeo.b = \"geo.c\"", "geo"),
            "select a from t where xgeo.b = \"geo.c\""
        );
        assert_eq!(strip_prefix("select geography from geo where g = 1", "geo"), "select geography from geo where g = 1");
    }
}
