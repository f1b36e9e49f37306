//! What a rule's SQL may do: checked by the host at bind, whoever built the
//! component.
//!
//! The statements come from the guest (`meta.info`), so a component that was
//! not built by `omlet build` can carry any text. Before a statement is
//! prepared, it is read again here with a small grammar, the one the OML
//! compiler writes:
//!
//! ```text
//! select items from source where cond [order by col [asc|desc] {, …}] [limit n]
//! items   = * | item {, item}
//! item    = col | agg ( [distinct] col [, 'text'] ) | agg ( * )
//! source  = table | ( select items from source ) [[as] alias]
//! cond    = conj {or conj}
//! conj    = unary {and unary}
//! unary   = not unary | ( cond ) | operand op operand
//!         | col in ( operand {, operand} ) | col like pattern
//! pattern = value {|| value}
//! operand = column | :param | 'text' | number | null | name ( operand {, operand} )
//! op      = = | != | <> | < | <= | > | >=
//! ```
//!
//! Anything else (a second statement, `union`, `into outfile`, a comment,
//! a sub-query with a condition of its own) is refused. The aggregates,
//! sub-queries and `like` are OML 1.25's (delta §13.6–§13.8). Beyond the
//! grammar:
//! - a function may be called only if it is one of OML's helpers or the
//!   knowledge config lists it in `functions`; an aggregate (`agg`) only if
//!   it is one of [`AGGREGATES`] or listed in `functions`;
//! - a table must be in the config's `tables` when that list is set (it
//!   defaults to a knowdb's tables), and a schema-qualified name
//!   (`geo.city`) only when the list names it exactly;
//! - a catalog table is refused whatever `tables` says: any part of the
//!   name beginning with `pg_`, `sqlite_`, `pragma_` or
//!   `information_schema`, SQLite's `dbstat`, or a name in MySQL's `mysql`,
//!   `performance_schema` or `sys` schema (see [`is_catalog`]);
//! - on MySQL and MariaDB, whose schemas are databases, a schema-qualified
//!   name (`otherdb.t`) is refused whatever `tables` says: a provider
//!   reads only the database its URL names, by unqualified names;
//! - the words that PostgreSQL and MySQL read as functions without
//!   parentheses (`current_user`, `user`, `session_user`, …) are neither
//!   columns nor tables;
//! - a statement is at most [`MAX_STATEMENT_BYTES`] long, and its
//!   parentheses, `not`s and calls nest at most [`MAX_DEPTH`] deep.
//!
//! Text literals are read the standard way (`''` is a quote, a backslash is
//! a character); MySQL and MariaDB connections run with
//! `NO_BACKSLASH_ESCAPES` so that the database reads them the same way.

use super::HELPER_FUNCTIONS as HELPERS;

mod lex;
use lex::{Tok, tokens};
mod read;
use read::{Reader, is};
pub mod script;

/// The longest statement read, in bytes, as the rule wrote it and as it is
/// written out for a database (MySQL's inline helpers copy their arguments).
pub const MAX_STATEMENT_BYTES: usize = 64 * 1024;

/// How deep parentheses, `not`s and function calls may nest in a condition.
pub const MAX_DEPTH: usize = 64;

/// The aggregates a select list may call without the knowledge config
/// listing them: what SQLite, PostgreSQL and MySQL read as aggregates over a
/// column, and nothing that reaches outside the table. Each database knows
/// only some of them (`group_concat` is SQLite's and MySQL's, `string_agg`
/// SQLite's and PostgreSQL's): one it does not know fails the rule's load.
pub const AGGREGATES: &[&str] = &["count", "min", "max", "sum", "avg", "total", "group_concat", "string_agg"];

/// Name prefixes of catalog tables and schemas (compared case-insensitively):
/// PostgreSQL's `pg_catalog` (`pg_authid`, `pg_settings`, `pg_stat_activity`,
/// …), SQLite's `sqlite_schema` and `pragma_*` table functions, and the
/// standard `information_schema`.
const CATALOG_PREFIXES: &[&str] = &["pg_", "sqlite_", "pragma_", "information_schema"];

/// MySQL's and MariaDB's system schemas, refused as the schema of a name.
const CATALOG_SCHEMAS: &[&str] = &["mysql", "performance_schema", "sys"];

/// Catalog tables whose names have no catalog prefix (compared
/// case-insensitively, as any part of a name): SQLite's `dbstat` virtual
/// table, which reads every page of the database file, whatever `tables`
/// allows.
const CATALOG_NAMES: &[&str] = &["dbstat"];

/// Words that PostgreSQL or MySQL read, without parentheses, as a function
/// of the session (who is connected, to what): never a column or a table.
/// (`user` too, on PostgreSQL only: see [`Policy::database`].)
const SESSION_WORDS: &[&str] = &[
    "current_user",
    "session_user",
    "system_user",
    "current_role",
    "current_catalog",
    "current_schema",
    "current_database",
    "current_path",
];

/// Whether `table` (maybe schema-qualified) names a catalog table: one of
/// its parts begins with a `CATALOG_PREFIXES` prefix, or its schema is one
/// of MySQL's system schemas. Such tables are refused whatever `tables`
/// says.
pub fn is_catalog(table: &str) -> bool {
    let parts: Vec<&str> = table.split('.').collect();
    let starts = |part: &str, prefix: &str| part.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix));
    parts.iter().any(|part| CATALOG_PREFIXES.iter().any(|p| starts(part, p)) || CATALOG_NAMES.iter().any(|n| is(part, n)))
        || parts[..parts.len() - 1].iter().any(|schema| CATALOG_SCHEMAS.iter().any(|s| is(schema, s)))
}

/// Whether `name` is a system schema of MySQL or MariaDB (its
/// `CATALOG_SCHEMAS`, or `information_schema`): a connection whose default
/// database is one would read catalog tables under unqualified names.
pub fn is_system_schema(name: &str) -> bool {
    is(name, "information_schema") || CATALOG_SCHEMAS.iter().any(|s| is(name, s))
}

/// What statements may reach.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// The tables lookups may read; `None`: any unqualified table.
    pub tables: Option<Vec<String>>,
    /// Functions allowed besides [`HELPERS`], by name (case-insensitive).
    pub functions: Vec<String>,
    /// The database the statements run on, as its provider names it
    /// (`sqlite`, `postgres`, `mysql`); empty (the default) for any. Only
    /// PostgreSQL reads a bare `user` as the session's user (on MySQL and
    /// SQLite it is a column name), so `user` is refused on `postgres` and
    /// when the database is not known.
    pub database: &'static str,
    /// Whether a schema-qualified table (`public.ip_geo_city`) may be read
    /// without `tables` naming it: true on the databases a knowdb names
    /// (see [`route`](super::route)). Catalog tables stay refused, and so
    /// does every qualified name on `mysql`, where a schema is a database.
    pub qualified: bool,
}

impl Policy {
    /// Whether `w` is read by the database as a function of the session.
    fn session_word(&self, w: &str) -> bool {
        SESSION_WORDS.iter().any(|r| is(w, r)) || (is(w, "user") && matches!(self.database, "" | "postgres"))
    }
}

/// Why [`check`] refuses a statement: the message, and the function
/// it names when an unknown function is the reason (for a caret on it, or
/// a did-you-mean).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// What is refused.
    pub message: String,
    /// The function or aggregate that is not allowed, as written.
    pub function: Option<String>,
}

/// One comparison of a flat condition: `column op :param`, the column on
/// the left (`:p >= lo` is read as `lo <= :p`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// The column, as written.
    pub column: String,
    /// `=`, `!=`, `<>`, `<`, `<=`, `>` or `>=`.
    pub op: String,
    /// The parameter's name, without the `:`.
    pub param: String,
}

/// What a statement that passed reads: its table and columns (`*` alone
/// for all), taken from the SQL itself rather than from what the component
/// says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The table.
    pub table: String,
    /// The selected columns, or `["*"]`.
    pub columns: Vec<String>,
    /// Columns the condition compares with `=` to a value, at its top level
    /// (a conjunction; empty when the top level has an `or`): what an
    /// index should lead with.
    pub keys: Vec<String>,
    /// Columns compared with `<`, `<=`, `>` or `>=` to a value, likewise.
    pub ranges: Vec<String>,
    /// When the condition is only a conjunction of column-to-parameter
    /// comparisons (`ip = :ip`, `lo <= :x and hi >= :x`), those
    /// comparisons, in order; else `None`. In-memory tables answer only
    /// such statements.
    pub terms: Option<Vec<Term>>,
    /// The statement selects columns of one table, with no aggregate and
    /// no sub-query: its rows are the table's, so that misses may be
    /// batched and an in-memory table may answer it.
    pub plain: bool,
    /// Its `order by` clause (` order by a desc, b`), which decides which
    /// row comes first when several match.
    pub order: Option<String>,
    /// It ends in `limit n`.
    pub limited: bool,
    /// The functions its condition calls (OML's helpers and those the
    /// policy allows), in lower case, each once, in the order first met.
    /// What is left of a helper here is applied to a column: the guest
    /// folds helpers of values into parameters.
    pub calls: Vec<String>,
}

/// The statement's first table (after the first `from` that a name
/// follows, so inside a sub-query when the source is one), as written:
/// what [`route`](super::route) routes by. `None` when the text does not
/// read as tokens of a lookup or has no such `from`.
pub fn first_table(sql: &str) -> Option<String> {
    let toks = tokens(sql).ok()?;
    toks.windows(2).find_map(|w| match w {
        [Tok::Word(from), Tok::Word(t)] if is(from, "from") => Some(t.to_string()),
        _ => None,
    })
}

/// Checks one statement as the guest hands it over (before dialect
/// rewrites): what it reads, or why it is refused (and which function,
/// when that is why).
pub fn check(sql: &str, policy: &Policy) -> Result<Checked, Refusal> {
    let plain = |message: String| Refusal { message, function: None };
    if sql.len() > MAX_STATEMENT_BYTES {
        return Err(plain(format!("the lookup is {} bytes long; at most {MAX_STATEMENT_BYTES} are read", sql.len())));
    }
    let toks = tokens(sql).map_err(plain)?;
    let mut r = Reader {
        toks: &toks,
        at: 0,
        policy,
        depth: 0,
        compares: Vec::new(),
        top_or: false,
        terms: Some(Vec::new()),
        plain: true,
        refused: None,
        calls: Vec::new(),
    };
    let checked = match r.statement() {
        Ok(c) => c,
        Err(e) => {
            return Err(Refusal { message: format!("not a lookup omlet runs ({e})"), function: r.refused.map(str::to_string) });
        }
    };
    let table = &checked.table;
    if is_catalog(table) {
        return Err(plain(format!(
            "the table `{table}` is in the database's catalog, which lookups may not read (even when `tables` lists it)"
        )));
    }
    if policy.database == "mysql"
        && let Some((schema, name)) = table.split_once('.')
    {
        return Err(plain(format!(
            "the table `{table}` names the database `{schema}`: a MySQL or MariaDB lookup reads only the database \
             its URL names, by unqualified names (write `{name}`), even when `tables` lists it"
        )));
    }
    let listed = policy.tables.as_ref().map(|t| t.iter().any(|x| x == table));
    match listed {
        Some(true) => Ok(checked),
        Some(false) => {
            let allowed: Vec<&str> = policy.tables.iter().flatten().map(String::as_str).collect();
            let near = omlet_lang::parse::nearest(table, &allowed).map(|t| format!("; did you mean `{t}`?")).unwrap_or_default();
            Err(plain(format!(
                "the table `{table}` is not among the knowledge tables this rule may read ({}){near}",
                if allowed.is_empty() { "none are allowed".to_string() } else { allowed.join(", ") }
            )))
        }
        None if table.contains('.') && !policy.qualified => Err(plain(format!(
            "the schema-qualified table `{table}` is refused: list it in `tables` of the knowledge config to allow it"
        ))),
        None => Ok(checked),
    }
}

#[cfg(test)]
mod tests;
