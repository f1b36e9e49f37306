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
//!   `information_schema`, or a name in MySQL's `mysql`,
//!   `performance_schema` or `sys` schema (see [`is_catalog`]);
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
    parts.iter().any(|part| CATALOG_PREFIXES.iter().any(|p| starts(part, p)))
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
    /// (see [`route`](super::route)). Catalog tables stay refused.
    pub qualified: bool,
}

impl Policy {
    /// Whether `w` is read by the database as a function of the session.
    fn session_word(&self, w: &str) -> bool {
        SESSION_WORDS.iter().any(|r| is(w, r)) || (is(w, "user") && matches!(self.database, "" | "postgres"))
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok<'s> {
    Word(&'s str),
    /// A parameter, by its name (without the `:`).
    Param(&'s str),
    Text,
    /// A number, as written.
    Number(&'s str),
    /// A comparison: `=`, `!=`, `<>`, `<`, `<=`, `>` or `>=`.
    Op(&'s str),
    Open,
    Close,
    Comma,
    Star,
    /// `||`, in a `like` pattern.
    Concat,
}

fn tokens(sql: &str) -> Result<Vec<Tok<'_>>, String> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'\'' => {
                i += 1;
                loop {
                    match b.get(i) {
                        None => return Err("an unterminated text literal".into()),
                        Some(b'\'') if b.get(i + 1) == Some(&b'\'') => i += 2,
                        Some(b'\'') => {
                            i += 1;
                            break;
                        }
                        Some(_) => i += 1,
                    }
                }
                out.push(Tok::Text);
            }
            b':' => {
                i += 1;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                if i == start + 1 {
                    return Err("a `:` without a parameter name".into());
                }
                out.push(Tok::Param(&sql[start + 1..i]));
            }
            b'0'..=b'9' | b'-' | b'.' => {
                i += 1;
                while i < b.len()
                    && (b[i].is_ascii_digit()
                        || b[i] == b'.'
                        || ((b[i] == b'e' || b[i] == b'E') && i > start)
                        || (matches!(b[i], b'+' | b'-') && matches!(b[i - 1], b'e' | b'E')))
                {
                    i += 1;
                }
                if !sql[start..i].bytes().any(|d| d.is_ascii_digit()) {
                    return Err(format!("`{}` is not a number", &sql[start..i]));
                }
                out.push(Tok::Number(&sql[start..i]));
            }
            b'=' | b'(' | b')' | b',' | b'*' => {
                i += 1;
                out.push(match c {
                    b'(' => Tok::Open,
                    b')' => Tok::Close,
                    b',' => Tok::Comma,
                    b'*' => Tok::Star,
                    _ => Tok::Op("="),
                });
            }
            b'|' if b.get(i + 1) == Some(&b'|') => {
                i += 2;
                out.push(Tok::Concat);
            }
            b'!' | b'<' | b'>' => {
                i += 1;
                if matches!(b.get(i), Some(b'=')) || (c == b'<' && b.get(i) == Some(&b'>')) {
                    i += 1;
                } else if c == b'!' {
                    return Err("`!` alone".into());
                }
                out.push(Tok::Op(&sql[start..i]));
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                    i += 1;
                }
                out.push(Tok::Word(&sql[start..i]));
            }
            _ => {
                let ch = sql[start..].chars().next().unwrap_or('?');
                return Err(format!("the character `{ch}` has no place in a lookup"));
            }
        }
    }
    Ok(out)
}

struct Reader<'t, 's> {
    toks: &'t [Tok<'s>],
    at: usize,
    policy: &'t Policy,
    /// Parentheses, `not`s and calls open around the current token.
    depth: usize,
    /// The top-level comparisons of a column with a value (`col = :p`,
    /// `:p >= col`), as (column, operator with the column on the left).
    compares: Vec<(&'s str, &'s str)>,
    /// An `or` at the top level: no index serves every branch.
    top_or: bool,
    /// The comparisons of a column with a parameter, while the condition is
    /// nothing but a conjunction of them (`None` from the first `or`,
    /// `not`, parenthesis, call, literal or column-to-column comparison):
    /// what an in-memory index may answer.
    terms: Option<Vec<Term>>,
    /// No aggregate and no sub-query so far.
    plain: bool,
    /// The function or aggregate refused, when that is why reading stopped.
    refused: Option<&'s str>,
}

/// Why [`check_named`] refuses a statement: the message, and the function
/// it names when an unknown function is the reason (for a caret on it, or
/// a did-you-mean).
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// What one side of a comparison is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side<'s> {
    /// A column.
    Column(&'s str),
    /// A parameter.
    Param(&'s str),
    /// A value known before the query runs: a literal, `null`, or a call
    /// of values.
    Value,
    /// A call that reads a column (`ip4_int(addr)`).
    Computed,
    /// The literal `1`, a value.
    One,
    /// `cidr4_contains(:p, col)`: a computed side that an in-memory
    /// interval index over the column's networks can answer.
    Cidr4 { param: &'s str, column: &'s str },
}

impl Side<'_> {
    /// A value the query receives rather than reads from the table: a
    /// literal, `null`, a call of values, or a parameter.
    fn value(self) -> bool {
        matches!(self, Side::Value | Side::One | Side::Param(_))
    }
}

/// Words that are never column names: their appearance means SQL the
/// compiler does not write.
const RESERVED: &[&str] = &[
    "select",
    "from",
    "where",
    "union",
    "into",
    "outfile",
    "dumpfile",
    "intersect",
    "except",
    "join",
    "limit",
    "order",
    "group",
    "having",
    "with",
    "insert",
    "update",
    "delete",
    "drop",
    "create",
    "alter",
    "grant",
    "exec",
    "execute",
    "call",
    "copy",
    "load",
];

fn is(word: &str, keyword: &str) -> bool {
    word.eq_ignore_ascii_case(keyword)
}

impl<'s> Reader<'_, 's> {
    fn peek(&self) -> Option<&Tok<'s>> {
        self.toks.get(self.at)
    }

    fn next(&mut self) -> Option<Tok<'s>> {
        let t = self.toks.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn keyword(&mut self, k: &str) -> Result<(), String> {
        match self.next() {
            Some(Tok::Word(w)) if is(w, k) => Ok(()),
            _ => Err(format!("expected `{k}`")),
        }
    }

    fn eat_word(&mut self, k: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Word(w)) if is(w, k)) {
            self.at += 1;
            return true;
        }
        false
    }

    fn column(&self, w: &str) -> Result<(), String> {
        if w.contains('.') || RESERVED.iter().any(|r| is(w, r)) {
            return Err(format!("`{w}` is not a column name"));
        }
        if self.policy.session_word(w) {
            return Err(format!("`{w}` is not a column name: the database reads it as a function of the session"));
        }
        Ok(())
    }

    /// One level deeper (a parenthesis, a `not`, a call), or a refusal
    /// past [`MAX_DEPTH`]: the reader recurses, and its stack is not
    /// the place to find out how deep a hostile statement goes.
    fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("parentheses, `not`s and function calls nested more than {MAX_DEPTH} deep"));
        }
        Ok(())
    }

    fn statement(&mut self) -> Result<Checked, String> {
        self.keyword("select")?;
        let columns = self.items()?;
        self.keyword("from")?;
        let table = self.source()?;
        self.keyword("where")?;
        self.cond()?;
        let order = self.order()?;
        let limited = self.eat_word("limit");
        if limited && !matches!(self.next(), Some(Tok::Number(_))) {
            return Err("`limit` takes a number".into());
        }
        if self.at < self.toks.len() {
            return Err("more text after the condition".into());
        }
        let (mut keys, mut ranges) = (Vec::<String>::new(), Vec::<String>::new());
        if !self.top_or {
            for &(col, op) in &self.compares {
                let into = match op {
                    "=" => &mut keys,
                    "<" | "<=" | ">" | ">=" => &mut ranges,
                    _ => continue,
                };
                if !into.iter().any(|c| c.eq_ignore_ascii_case(col)) {
                    into.push(col.to_string());
                }
            }
        }
        let plain = self.plain;
        let terms = self.terms.take().filter(|_| !self.top_or && plain);
        Ok(Checked { table, columns, keys, ranges, terms, plain, order, limited })
    }

    /// `order by col [asc|desc] {, col [asc|desc]}`, if there: its text,
    /// rebuilt from the tokens (` order by a desc, b`).
    fn order(&mut self) -> Result<Option<String>, String> {
        if !self.eat_word("order") {
            return Ok(None);
        }
        self.keyword("by")?;
        let mut text = String::from(" order by ");
        loop {
            match self.next() {
                Some(Tok::Word(w)) => {
                    self.column(w)?;
                    text.push_str(w);
                }
                _ => return Err("expected a column after `order by`".into()),
            }
            if self.eat_word("desc") {
                text.push_str(" desc");
            } else {
                self.eat_word("asc");
            }
            if self.peek() != Some(&Tok::Comma) {
                return Ok(Some(text));
            }
            self.at += 1;
            text.push_str(", ");
        }
    }

    /// A select list: `*`, or columns and aggregates, each as its text.
    fn items(&mut self) -> Result<Vec<String>, String> {
        if self.peek() == Some(&Tok::Star) {
            self.at += 1;
            return Ok(vec!["*".to_string()]);
        }
        let mut columns = Vec::new();
        loop {
            match self.next() {
                Some(Tok::Word(w)) if self.peek() == Some(&Tok::Open) => columns.push(self.aggregate(w)?),
                Some(Tok::Word(w)) => {
                    self.column(w)?;
                    columns.push(w.to_string());
                }
                _ => return Err("expected a column".into()),
            }
            if self.peek() != Some(&Tok::Comma) {
                return Ok(columns);
            }
            self.at += 1;
        }
    }

    /// `agg([distinct] col [, 'text'])` or `agg(*)`, after its name.
    fn aggregate(&mut self, name: &'s str) -> Result<String, String> {
        if !(AGGREGATES.iter().any(|a| is(name, a)) || self.policy.functions.iter().any(|f| is(name, f))) {
            self.refused = Some(name);
            return Err(format!(
                "the aggregate `{name}` is not allowed: a select list may call {} and the functions the knowledge config lists in `functions`",
                AGGREGATES.join(", ")
            ));
        }
        self.plain = false;
        self.at += 1;
        let distinct = self.eat_word("distinct");
        let arg = match self.next() {
            Some(Tok::Star) if !distinct => "*",
            Some(Tok::Word(w)) => {
                self.column(w)?;
                w
            }
            _ => return Err(format!("`{name}` takes one column")),
        };
        let mut text = format!("{name}({}{arg}", if distinct { "distinct " } else { "" });
        if self.peek() == Some(&Tok::Comma) {
            self.at += 1;
            if self.next() != Some(Tok::Text) {
                return Err(format!("the second argument of `{name}` is a quoted separator"));
            }
            text.push_str(", …");
        }
        if self.next() != Some(Tok::Close) {
            return Err(format!("expected `)` closing `{name}`"));
        }
        text.push(')');
        Ok(text)
    }

    /// A table, or `( select items from source ) [[as] alias]`: the table
    /// read (the innermost).
    fn source(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Tok::Open) => {
                self.plain = false;
                self.enter()?;
                self.keyword("select")?;
                self.items()?;
                self.keyword("from")?;
                let table = self.source()?;
                if self.next() != Some(Tok::Close) {
                    return Err("expected `)` closing the sub-query (it has no condition of its own)".into());
                }
                self.depth -= 1;
                self.eat_word("as");
                if let Some(Tok::Word(w)) = self.peek().cloned()
                    && !is(w, "where")
                {
                    if w.contains('.') || RESERVED.iter().any(|r| is(w, r)) || self.policy.session_word(w) {
                        return Err(format!("`{w}` is not an alias"));
                    }
                    self.at += 1;
                }
                Ok(table)
            }
            Some(Tok::Word(w)) if self.policy.session_word(w) => {
                Err(format!("`{w}` is not a table: the database reads it as a function of the session"))
            }
            Some(Tok::Word(w)) if !RESERVED.iter().any(|r| is(w, r)) => Ok(w.to_string()),
            _ => Err("expected a table".into()),
        }
    }

    fn cond(&mut self) -> Result<(), String> {
        self.conj()?;
        while self.eat_word("or") {
            if self.depth == 0 {
                self.top_or = true;
            }
            self.terms = None;
            self.conj()?;
        }
        Ok(())
    }

    fn conj(&mut self) -> Result<(), String> {
        self.unary()?;
        while self.eat_word("and") {
            self.unary()?;
        }
        Ok(())
    }

    fn unary(&mut self) -> Result<(), String> {
        if self.eat_word("not") {
            self.terms = None;
            self.enter()?;
            self.unary()?;
            self.depth -= 1;
            return Ok(());
        }
        if self.peek() == Some(&Tok::Open) {
            self.terms = None;
            self.at += 1;
            self.enter()?;
            self.cond()?;
            self.depth -= 1;
            return match self.next() {
                Some(Tok::Close) => Ok(()),
                _ => Err("expected `)`".into()),
            };
        }
        let left = self.operand(0)?;
        // `column in (value, …)` (OML 1.25 delta §13.2): an equality for the
        // default index, never an in-memory key (one of several values).
        if matches!(self.peek(), Some(Tok::Word(w)) if is(w, "in")) {
            self.next();
            self.terms = None;
            let Side::Column(c) = left else { return Err("the left of `in` must be a column".into()) };
            if self.next() != Some(Tok::Open) {
                return Err("expected `(` after `in`".into());
            }
            loop {
                if !self.operand(0)?.value() {
                    return Err("an `in` list holds values, not columns".into());
                }
                match self.next() {
                    Some(Tok::Comma) => continue,
                    Some(Tok::Close) => break,
                    _ => return Err("expected `,` or `)` in the `in` list".into()),
                }
            }
            if self.depth == 0 {
                self.compares.push((c, "="));
            }
            return Ok(());
        }
        // `column like pattern` (delta §13.8): values joined by `||`.
        if matches!(self.peek(), Some(Tok::Word(w)) if is(w, "like")) {
            self.next();
            self.terms = None;
            if !matches!(left, Side::Column(_)) {
                return Err("the left of `like` must be a column".into());
            }
            loop {
                match self.next() {
                    Some(Tok::Param(_) | Tok::Text) => {}
                    _ => return Err("a `like` pattern is text and parameters joined by `||`".into()),
                }
                if self.peek() != Some(&Tok::Concat) {
                    return Ok(());
                }
                self.at += 1;
            }
        }
        let op = match self.next() {
            Some(Tok::Op(op)) => op,
            _ => return Err("expected a comparison".into()),
        };
        let right = self.operand(0)?;
        let term = match (left, right) {
            (Side::Column(c), Side::Param(p)) => Some((c, op, p)),
            (Side::Param(p), Side::Column(c)) => Some((c, flipped(op), p)),
            // `cidr4_contains(:p, col) = 1`: the network column holds `:p`.
            (Side::Cidr4 { param, column }, Side::One) | (Side::One, Side::Cidr4 { param, column }) if op == "=" => {
                Some((column, "cidr4", param))
            }
            _ => None,
        };
        match (term, &mut self.terms) {
            (Some((column, op, param)), Some(terms)) if self.depth == 0 => {
                terms.push(Term { column: column.to_string(), op: op.to_string(), param: param.to_string() })
            }
            _ => self.terms = None,
        }
        if self.depth == 0 {
            match (left, right) {
                (Side::Column(c), r) if r.value() => self.compares.push((c, op)),
                (l, Side::Column(c)) if l.value() => self.compares.push((c, flipped(op))),
                _ => {}
            }
        }
        Ok(())
    }

    fn operand(&mut self, depth: usize) -> Result<Side<'s>, String> {
        if depth > 16 {
            return Err("function calls nested too deep".into());
        }
        match self.next() {
            Some(Tok::Param(p)) if depth == 0 => Ok(Side::Param(p)),
            Some(Tok::Number("1")) => Ok(Side::One),
            Some(Tok::Param(_) | Tok::Text | Tok::Number(_)) => Ok(Side::Value),
            Some(Tok::Word(w)) if is(w, "null") => Ok(Side::Value),
            Some(Tok::Word(w)) if self.peek() == Some(&Tok::Open) => {
                let allowed = HELPERS.iter().any(|h| is(w, h)) || self.policy.functions.iter().any(|f| is(w, f));
                if !allowed {
                    self.refused = Some(w);
                    return Err(format!(
                        "the function `{w}` is not allowed: lookups may call OML's helpers ({}) and the functions the knowledge config lists in `functions`",
                        HELPERS.join(", ")
                    ));
                }
                // `cidr4_contains(:p, col)`, exactly, at the top level.
                let cidr4 = match &self.toks[self.at..self.toks.len().min(self.at + 5)] {
                    [Tok::Open, Tok::Param(p), Tok::Comma, Tok::Word(c), Tok::Close]
                        if depth == 0 && is(w, "cidr4_contains") && self.column(c).is_ok() =>
                    {
                        Some(Side::Cidr4 { param: p, column: c })
                    }
                    _ => None,
                };
                self.at += 1;
                self.enter()?;
                let mut side = Side::Value;
                loop {
                    if matches!(self.operand(depth + 1)?, Side::Column(_) | Side::Computed | Side::Cidr4 { .. }) {
                        side = Side::Computed;
                    }
                    match self.next() {
                        Some(Tok::Comma) => continue,
                        Some(Tok::Close) => {
                            self.depth -= 1;
                            return Ok(cidr4.unwrap_or(side));
                        }
                        _ => return Err(format!("expected `,` or `)` in the arguments of `{w}`")),
                    }
                }
            }
            Some(Tok::Word(w)) => self.column(w).map(|()| Side::Column(w)),
            _ => Err("expected a value or a column".into()),
        }
    }
}

/// The comparison `op` with its sides swapped (`:p <= col` is `col >= :p`).
fn flipped(op: &str) -> &str {
    match op {
        "<" => ">",
        "<=" => ">=",
        ">" => "<",
        ">=" => "<=",
        other => other,
    }
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
/// rewrites); the error says what is refused.
pub fn check(sql: &str, policy: &Policy) -> Result<Checked, String> {
    check_named(sql, policy).map_err(|r| r.message)
}

/// [`check`], saying also which function it refuses, when that is why.
pub fn check_named(sql: &str, policy: &Policy) -> Result<Checked, Refusal> {
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
mod tests {
    use super::*;

    fn ok(sql: &str) -> bool {
        check(sql, &Policy::default()).is_ok()
    }

    #[test]
    fn the_compilers_statements_pass() {
        assert!(ok("select zone from ip_zone where ip = :ip"));
        assert!(ok("select * from test where id = 1 and name = :name"));
        assert!(ok("select a,b from t where (lo <= :ip and hi >= :ip) or not x != 'it''s'"));
        assert!(ok("select zone from zone where ip_start_int <= :ip and 1 = ip4_between(:ip, lo, hi)"));
        assert!(ok("select z from t where cidr4_contains(net, :ip) = 1 and v = -1.5e3 and w = null"));
        assert!(ok("select z from t where n = trim_quotes('\\')"), "a backslash is a character");
    }

    #[test]
    fn in_lists_hold_values_and_index_their_column() {
        assert!(ok("select owner from assets where ip in (:sip, :dip, 'x', 3)"));
        assert!(ok("select owner from assets where ip in (ip4_int(:a)) and team = :t"));
        assert!(!ok("select owner from assets where ip in (team)"), "a column in the list compares two columns");
        assert!(!ok("select owner from assets where ip in :a"));
        assert!(!ok("select owner from assets where ip in (:a"));
        assert!(!ok("select owner from assets where :a in (:b)"));
        let c = check("select owner from assets where ip in (:sip, :dip)", &Policy::default()).unwrap();
        assert_eq!(c.keys, vec!["ip".to_string()]);
        assert!(c.terms.is_none(), "an in list is no in-memory key");
    }

    #[test]
    fn a_network_lookup_is_a_term_for_memory() {
        let terms = |sql: &str| check(sql, &Policy::default()).unwrap().terms;
        let cidr4 = Some(vec![Term { column: "cidr".into(), op: "cidr4".into(), param: "ip".into() }]);
        assert_eq!(terms("select zone from nets where cidr4_contains(:ip, cidr) = 1"), cidr4);
        assert_eq!(terms("select zone from nets where 1 = CIDR4_CONTAINS(:ip, cidr)"), cidr4);
        assert_eq!(terms("select zone from nets where cidr4_contains(cidr, :ip) = 1"), None, "the helper reads (ip, cidr)");
        assert_eq!(terms("select zone from nets where cidr4_contains(:ip, cidr) = 2"), None);
        assert_eq!(terms("select zone from nets where cidr4_contains(:ip, cidr) != 1"), None);
        assert_eq!(terms("select zone from nets where ip4_int(cidr4_contains(:ip, cidr)) = 1"), None);
    }

    #[test]
    fn order_by_and_limit_close_a_statement() {
        let c =
            check("select zone from r where lo <= :ip and hi >= :ip order by lo desc, hi limit 1", &Policy::default()).unwrap();
        assert_eq!((c.order.as_deref(), c.limited, c.plain), (Some(" order by lo desc, hi"), true, true));
        assert!(c.terms.is_some(), "an ordered lookup may still be answered from memory when one row matches");
        assert!(ok("select zone from r where ip = :ip limit 1"));
        assert!(ok("select zone from r where ip = :ip order by zone asc"));
        for bad in [
            "select zone from r where ip = :ip order by",
            "select zone from r where ip = :ip order by current_user",
            "select zone from r where ip = :ip order by ip4_int(zone)",
            "select zone from r where ip = :ip limit :n",
            "select zone from r where ip = :ip limit 1 order by zone",
            "select zone from r where ip = :ip order by zone; drop table r",
        ] {
            assert!(!ok(bad), "{bad}");
        }
    }

    #[test]
    fn aggregates_sub_queries_and_like_pass_with_their_limits() {
        assert!(ok("select count(ip),max(owner) from assets where ip in (:sip, :dip)"));
        assert!(ok("select group_concat(distinct kind), count(*) from assets where team = :team"));
        assert!(ok("select string_agg(distinct kind, ', ') from assets where team = :team"));
        assert!(ok("select owner from (select owner,ip from assets) a where ip = :ip"));
        assert!(ok("select owner from (select owner,ip from (select * from assets) as x) where ip = :ip"));
        assert!(ok("select owner from assets where team like '%' || :team || '%' and kind like :k"));
        assert!(ok("select owner from assets where team like 'net%'"));
        for bad in [
            "select pg_read_file(owner) from assets where ip = :ip",
            "select count(distinct *) from assets where ip = :ip",
            "select count(ip, owner) from assets where ip = :ip",
            "select count(ip, :x) from assets where ip = :ip",
            "select owner from (select owner from assets where ip = :ip) a where ip = :ip",
            "select owner from (select owner from pg_authid) a where ip = :ip",
            "select owner from (select owner from assets) union where ip = :ip",
            "select owner from assets where team like owner",
            "select owner from assets where :x like team",
            "select owner from assets where team like :a || owner",
            "select owner from assets where a = :a || :b",
        ] {
            assert!(!ok(bad), "{bad}");
        }
        let c = check("select owner from (select owner,ip from assets) a where ip = :ip", &Policy::default()).unwrap();
        assert_eq!((c.table.as_str(), c.plain, c.terms.is_none()), ("assets", false, true), "the innermost table; no batching");
        let c = check("select count(ip) from assets where ip = :ip", &Policy::default()).unwrap();
        assert_eq!(
            (c.plain, c.keys.clone()),
            (false, vec!["ip".to_string()]),
            "an aggregate is not plain, and its key is indexed"
        );
        let listed = Policy { functions: vec!["array_agg".into()], ..Policy::default() };
        assert!(check("select array_agg(owner) from assets where ip = :ip", &listed).is_ok());
    }

    #[test]
    fn the_top_level_comparisons_say_what_an_index_should_hold() {
        let cols = |sql: &str| {
            let c = check(sql, &Policy::default()).unwrap();
            (c.keys, c.ranges)
        };
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(cols("select zone from ip_zone where ip = :ip"), (v(&["ip"]), v(&[])));
        assert_eq!(cols("select z from t where :a = a and b = 'x' and c != 1"), (v(&["a", "b"]), v(&[])));
        assert_eq!(
            cols("select zone,owner from ip_zone where lo_int <= :client_ip and hi_int >= :client_ip_2"),
            (v(&[]), v(&["lo_int", "hi_int"]))
        );
        assert_eq!(cols("select z from t where :ip >= lo and ip4_int(:x) < hi"), (v(&[]), v(&["lo", "hi"])));
        // A column inside a call, an `or`, a `not` or parentheses: no index.
        assert_eq!(cols("select z from t where cidr4_contains(net, :ip) = 1"), (v(&[]), v(&[])));
        assert_eq!(cols("select z from t where a = :a or b = :b"), (v(&[]), v(&[])));
        assert_eq!(cols("select z from t where not a = :a and (b = :b)"), (v(&[]), v(&[])));
        assert_eq!(cols("select z from t where a = b"), (v(&[]), v(&[])));
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            "select zone from t where ip = :ip; drop table t",
            "select zone from t where ip = :ip union select secret from secrets",
            "select zone from t where ip = concat('\\', ') union select 1 -- ')",
            "select zone from t where ip = :ip -- comment",
            "select zone from t where ip = :ip /* c */",
            "select zone from t where ip = (select secret from s)",
            "select zone from t where ip = :ip into outfile '/tmp/x'",
            "select zone from t where ip = \"x\"",
            "select zone from t where ip = pg_read_file(:path)",
            "select zone from t where 1 = sleep(:s)",
            "select zone from t where load_file('/etc/passwd') = :x",
            "select zone from pg_catalog.pg_authid where ip = :ip",
            "select t.zone from t where ip = :ip",
            "select zone from t where ip = 'open",
            "delete from t where 1 = 1",
        ] {
            assert!(!ok(bad), "{bad}");
        }
    }

    #[test]
    fn the_config_allows_functions_and_limits_tables() {
        let p = Policy {
            tables: Some(vec!["ip_zone".into(), "geo.city".into()]),
            functions: vec!["lower".into()],
            ..Policy::default()
        };
        assert!(check("select zone from ip_zone where lower(name) = :n", &p).is_ok());
        assert!(check("select zone from other where name = :n", &p).unwrap_err().contains("`other`"));
        let e = check("select zone from ip_zon where name = :n", &p).unwrap_err();
        assert!(e.contains("(ip_zone, geo.city); did you mean `ip_zone`?"), "{e}");
        assert!(check("select c from geo.city where id = :id", &p).is_ok(), "a qualified name listed exactly");
        let c = check("select a, b from ip_zone where x = :x", &p).unwrap();
        assert_eq!((c.table.as_str(), c.columns), ("ip_zone", vec!["a".to_string(), "b".to_string()]));
        assert!(check("select zone from ip_zone where upper(name) = :n", &p).unwrap_err().contains("`upper`"));
    }

    /// Issue 30: catalog tables, unqualified or listed in `tables`, are
    /// refused; user tables with similar names are not.
    #[test]
    fn catalog_tables_are_refused_whatever_tables_says() {
        let catalog = [
            "pg_authid",
            "pg_shadow",
            "PG_SETTINGS",
            "pg_proc",
            "pg_roles",
            "pg_user",
            "pg_database",
            "pg_stat_activity",
            "pg_catalog.pg_authid",
            "public.pg_user",
            "information_schema.tables",
            "Information_Schema.columns",
            "sqlite_master",
            "sqlite_schema",
            "SQLITE_TEMP_MASTER",
            "main.sqlite_master",
            "pragma_table_list",
            "pragma_function_list",
            "mysql.user",
            "MySQL.global_priv",
            "performance_schema.threads",
            "sys.session",
        ];
        for table in catalog {
            let sql = format!("select a from {table} where b = :b");
            let e = check(&sql, &Policy::default()).unwrap_err();
            assert!(e.contains("catalog"), "{table}: {e}");
            let listed = Policy { tables: Some(vec![table.to_string()]), ..Policy::default() };
            let e = check(&sql, &listed).unwrap_err();
            assert!(e.contains("catalog") && e.contains("even when `tables` lists it"), "{table}: {e}");
        }
        for table in ["pgx", "my_pg_stats", "sqlitex", "mysql_hosts", "sys_events", "pragma", "users"] {
            assert!(ok(&format!("select a from {table} where b = :b")), "{table}");
        }
        let listed = Policy { tables: Some(vec!["geo.city".into(), "app.sys_log".into()]), ..Policy::default() };
        assert!(check("select a from geo.city where b = :b", &listed).is_ok());
        assert!(check("select a from app.sys_log where b = :b", &listed).is_ok());
    }

    /// Issue 30: words the database reads as the session's user, role,
    /// database or schema are neither columns nor tables.
    #[test]
    fn session_words_are_not_columns() {
        for bad in [
            "select zone from t where name = current_user",
            "select zone from t where CURRENT_USER = :n",
            "select current_user from t where id = :id",
            "select zone from t where user = :u",
            "select zone from t where session_user = 'postgres'",
            "select zone from t where system_user <> :u",
            "select zone from t where current_role = :r",
            "select zone from t where current_catalog = :c",
            "select zone from t where current_schema = :s",
            "select zone from t where current_database = :d",
            "select zone from t where not (id = 1 or user = :u)",
            "select * from current_user where 1 = 1",
            "select * from session_user where 1 = 1",
        ] {
            let e = check(bad, &Policy::default()).unwrap_err();
            assert!(e.contains("function of the session"), "{bad}: {e}");
        }
        assert!(ok("select zone from t where username = :u and user_id = 1 and current_users = 2"));
        // A bare `user` is the session's user on PostgreSQL only; elsewhere a column.
        let on = |database| Policy { database, ..Policy::default() };
        for (database, refused) in [("postgres", true), ("", true), ("sqlite", false), ("mysql", false)] {
            for sql in ["select team from teams where user = :u", "select user from teams where id = :id"] {
                assert_eq!(check(sql, &on(database)).is_err(), refused, "{database}: {sql}");
            }
            assert!(check("select a from t where current_user = :u", &on(database)).is_err(), "{database}");
        }
        assert!(check("select * from user where 1 = 1", &on("postgres")).unwrap_err().contains("function of the session"));
    }

    /// Issue 30: a statement nesting 50,000 parentheses overflowed the
    /// reader's stack (the process aborted); now it is refused.
    #[test]
    fn deep_nesting_is_refused_not_a_crash() {
        let nested =
            |open: &str, n: usize, close: &str| format!("select a from t where {}x = 1{}", open.repeat(n), close.repeat(n));
        // Over the byte bound.
        let e = check(&nested("(", 50_000, ")"), &Policy::default()).unwrap_err();
        assert!(e.contains("at most 65536"), "{e}");
        // Within it, over the depth bound.
        for sql in [nested("(", 30_000, ")"), nested("not ", 15_000, ""), nested("not (", 10_000, ")")] {
            assert!(sql.len() <= MAX_STATEMENT_BYTES);
            let e = check(&sql, &Policy::default()).unwrap_err();
            assert!(e.contains("nested more than 64 deep"), "{e}");
        }
        let p = Policy { functions: vec!["f".into()], ..Policy::default() };
        let calls = format!("select a from t where x = {}1{}", "f(".repeat(10_000), ")".repeat(10_000));
        assert!(check(&calls, &p).unwrap_err().contains("nested too deep"));
        // At the bound, it passes.
        assert!(ok(&nested("(", MAX_DEPTH, ")")));
        assert!(!ok(&nested("(", MAX_DEPTH + 1, ")")));
        assert!(ok(&nested("not ", MAX_DEPTH, "")));
    }
}
