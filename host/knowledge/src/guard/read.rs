//! The guard's reader: a recursive descent over the tokens that accepts
//! only the SELECT forms a lookup may use, noting the tables, columns and
//! functions it meets.

use super::lex::Tok;
use super::{AGGREGATES, Checked, HELPERS, MAX_DEPTH, Policy, Term};

pub(super) struct Reader<'t, 's> {
    pub(super) toks: &'t [Tok<'s>],
    pub(super) at: usize,
    pub(super) policy: &'t Policy,
    /// Parentheses, `not`s and calls open around the current token.
    pub(super) depth: usize,
    /// The top-level comparisons of a column with a value (`col = :p`,
    /// `:p >= col`), as (column, operator with the column on the left).
    pub(super) compares: Vec<(&'s str, &'s str)>,
    /// An `or` at the top level: no index serves every branch.
    pub(super) top_or: bool,
    /// The comparisons of a column with a parameter, while the condition is
    /// nothing but a conjunction of them (`None` from the first `or`,
    /// `not`, parenthesis, call, literal or column-to-column comparison):
    /// what an in-memory index may answer.
    pub(super) terms: Option<Vec<Term>>,
    /// No aggregate and no sub-query so far.
    pub(super) plain: bool,
    /// The function or aggregate refused, when that is why reading stopped.
    pub(super) refused: Option<&'s str>,
    /// The functions the condition calls, in lower case, each once.
    pub(super) calls: Vec<String>,
}

/// What one side of a comparison is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side<'s> {
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
    pub(super) fn value(self) -> bool {
        matches!(self, Side::Value | Side::One | Side::Param(_))
    }
}

/// Words that are never column names: their appearance means SQL the
/// compiler does not write.
pub(super) const RESERVED: &[&str] = &[
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

pub(super) fn is(word: &str, keyword: &str) -> bool {
    word.eq_ignore_ascii_case(keyword)
}

impl<'s> Reader<'_, 's> {
    pub(super) fn peek(&self) -> Option<&Tok<'s>> {
        self.toks.get(self.at)
    }

    pub(super) fn next(&mut self) -> Option<Tok<'s>> {
        let t = self.toks.get(self.at).cloned();
        self.at += 1;
        t
    }

    pub(super) fn keyword(&mut self, k: &str) -> Result<(), String> {
        match self.next() {
            Some(Tok::Word(w)) if is(w, k) => Ok(()),
            _ => Err(format!("expected `{k}`")),
        }
    }

    pub(super) fn eat_word(&mut self, k: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Word(w)) if is(w, k)) {
            self.at += 1;
            return true;
        }
        false
    }

    pub(super) fn column(&self, w: &str) -> Result<(), String> {
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
    pub(super) fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("parentheses, `not`s and function calls nested more than {MAX_DEPTH} deep"));
        }
        Ok(())
    }

    pub(super) fn statement(&mut self) -> Result<Checked, String> {
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
        let calls = std::mem::take(&mut self.calls);
        Ok(Checked { table, columns, keys, ranges, terms, plain, order, limited, calls })
    }

    /// `order by col [asc|desc] {, col [asc|desc]}`, if there: its text,
    /// rebuilt from the tokens (` order by a desc, b`).
    pub(super) fn order(&mut self) -> Result<Option<String>, String> {
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
    pub(super) fn items(&mut self) -> Result<Vec<String>, String> {
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
    pub(super) fn aggregate(&mut self, name: &'s str) -> Result<String, String> {
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
    pub(super) fn source(&mut self) -> Result<String, String> {
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

    pub(super) fn cond(&mut self) -> Result<(), String> {
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

    pub(super) fn conj(&mut self) -> Result<(), String> {
        self.unary()?;
        while self.eat_word("and") {
            self.unary()?;
        }
        Ok(())
    }

    pub(super) fn unary(&mut self) -> Result<(), String> {
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

    pub(super) fn operand(&mut self, depth: usize) -> Result<Side<'s>, String> {
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
                let name = w.to_ascii_lowercase();
                if !self.calls.contains(&name) {
                    self.calls.push(name);
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
pub(super) fn flipped(op: &str) -> &str {
    match op {
        "<" => ">",
        "<=" => ">=",
        ">" => "<",
        ">=" => "<=",
        other => other,
    }
}
