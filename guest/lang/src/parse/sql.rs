//! SQL lookups: `select cols from table where cond`, parsed into a tree that
//! the compiler turns into a parameterised statement.

use super::*;

impl<'s> Parser<'s> {
    pub(super) fn sql(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.bump_str("select");
        let columns = self.select_items(start)?;
        let (table, from) = self.sql_source()?;
        self.ws();
        if !self.eat_word_ci("where") {
            let span = self.here();
            return self.err_hint("SQL lookup needs `where`", span, "write `select col from table where key = read(field)`");
        }
        let cond = self.sql_or()?;
        let (order, limit) = self.order_limit()?;
        self.done(SyntaxKind::Sql, start);
        Ok(Expr::Sql(Box::new(Sql { columns, table, from, cond, order, limit, span: Span::new(start, self.pos) })))
    }

    /// `[order by col [asc|desc] {, col [asc|desc]}] [limit N]` after the
    /// condition: which row is the first when several match.
    fn order_limit(&mut self) -> PResult<(Vec<OrderBy>, Option<u64>)> {
        let mut order = Vec::new();
        self.ws();
        if self.eat_word_ci("order") {
            self.ws();
            if !self.eat_word_ci("by") {
                let span = self.here();
                return self.err("expected `by` after `order`", span);
            }
            loop {
                self.ws();
                let cs = self.pos;
                let col = self.take_while(|c| c.is_ascii_alphanumeric() || c == b'_').to_string();
                if col.is_empty() {
                    let span = Span::new(cs, cs + 1);
                    return self.err_hint("expected a column to order by", span, "write `order by start desc limit 1`");
                }
                self.ws();
                let desc = if self.eat_word_ci("desc") {
                    true
                } else {
                    self.eat_word_ci("asc");
                    false
                };
                order.push((col, desc));
                self.ws();
                if !self.eat(b',') {
                    break;
                }
            }
        }
        self.ws();
        let mut limit = None;
        if self.eat_word_ci("limit") {
            self.ws();
            let ls = self.pos;
            let n = self.take_while(|c| c.is_ascii_digit());
            match n.parse::<u64>() {
                Ok(n) if n >= 1 => limit = Some(n),
                _ => {
                    let span = Span::new(ls, self.pos.max(ls + 1));
                    return self.err_hint(
                        "`limit` takes a whole number of at least 1",
                        span,
                        "write `limit 1`: a lookup reads the first row",
                    );
                }
            }
        }
        Ok((order, limit))
    }

    /// The select list up to and including `from` (delta §13.6): `*`, or
    /// items that are a column, `fn(col)`, `fn(distinct col)`, `fn(*)` or
    /// `fn(distinct col, 'sep')`, each as the SQL text it becomes.
    fn select_items(&mut self, start: usize) -> PResult<Vec<String>> {
        let mut columns = Vec::new();
        let hint = "select `*`, column names, or aggregates such as count(col), max(col), group_concat(distinct col) and string_agg(distinct col, ', ')";
        loop {
            self.ws();
            let cs = self.pos;
            if self.eat(b'*') {
                columns.push("*".to_string());
            } else {
                let c = self.take_while(is_simple).to_string();
                if c.is_empty() {
                    let span = Span::new(cs, self.pos.max(cs + 1));
                    return self.err_hint("strict SQL: expected a column or an aggregate", span, hint);
                }
                if self.peek_after_ws() == b'(' {
                    let item = self.aggregate(&c, cs, hint)?;
                    columns.push(item);
                } else {
                    columns.push(c);
                }
            }
            self.ws();
            if self.eat(b',') {
                continue;
            }
            if self.eat_word_ci("from") {
                break;
            }
            let span = self.here();
            return self.err_hint("strict SQL: expected `,` or `from` after a select item", span, hint);
        }
        if columns.len() > 1 && columns.iter().any(|c| c == "*") {
            let span = Span::new(start, self.pos);
            return self.err("strict SQL: `*` cannot be mixed with column names", span);
        }
        Ok(columns)
    }

    /// `fn([distinct] col [, 'sep'])` or `fn(*)` in a select list, after
    /// its name: the item's SQL text.
    fn aggregate(&mut self, name: &str, start: usize, hint: &str) -> PResult<String> {
        if name.contains('.') {
            let span = Span::new(start, self.pos);
            return self.err_hint(format!("strict SQL: `{name}` is not a function name"), span, hint);
        }
        self.expect(b'(', "`(`")?;
        self.ws();
        let distinct = self.eat_word_ci("distinct");
        self.ws();
        let arg = if self.eat(b'*') { "*".to_string() } else { self.take_while(is_simple).to_string() };
        if arg.is_empty() || (distinct && arg == "*") {
            let span = self.here();
            return self.err_hint("strict SQL: an aggregate takes one column", span, hint);
        }
        let mut item = format!("{name}({}{arg}", if distinct { "distinct " } else { "" });
        self.ws();
        if self.eat(b',') {
            self.ws();
            match self.sql_literal()? {
                Some(Const::Chars(sep)) => {
                    item.push_str(", ");
                    crate::compile::push_sql_text(&mut item, &sep);
                }
                _ => {
                    let span = self.here();
                    return self.err_hint("strict SQL: an aggregate's second argument is a quoted separator", span, hint);
                }
            }
        }
        self.expect(b')', "`)` closing the aggregate")?;
        item.push(')');
        Ok(item)
    }

    /// What follows `from` (delta §13.7): a table (dotted names allowed), or
    /// `( select items from source ) [ [as] alias ]`. The table read (the
    /// innermost), and the source's SQL text when it is a sub-query.
    fn sql_source(&mut self) -> PResult<(String, Option<String>)> {
        self.ws();
        let ts = self.pos;
        if self.peek() == b'(' {
            self.nest()?;
            let r = self.sub_query();
            self.depth -= 1;
            return r;
        }
        let table = self.take_while(is_simple).to_string();
        let c = self.peek();
        if table.is_empty() || !(c.is_ascii_whitespace() || c == 0 || c == b')') {
            let end = self.pos + self.rest().find(|c: char| c.is_whitespace()).unwrap_or(self.rest().len());
            let span = Span::new(ts, end);
            return self.err_hint(
                "strict SQL: invalid table identifier",
                span,
                "a table name uses letters, digits, `_` and `.`; one table or a sub-query, no joins",
            );
        }
        Ok((table, None))
    }

    fn sub_query(&mut self) -> PResult<(String, Option<String>)> {
        self.bump();
        self.ws();
        let ss = self.pos;
        if !self.eat_word_ci("select") {
            let span = self.here();
            return self.err_hint(
                "strict SQL: a sub-query starts with `select`",
                span,
                "write `from (select col from table) alias`",
            );
        }
        let items = self.select_items(ss)?;
        let (table, inner) = self.sql_source()?;
        self.expect(b')', "`)` closing the sub-query: it has no `where` of its own")?;
        let mut text = format!("(select {} from {})", items.join(","), inner.as_deref().unwrap_or(&table));
        // An alias, unless `where` follows at once.
        self.ws();
        if self.eat_word_ci("as") {
            self.ws();
        }
        if !self.at_word_ci("where") {
            let alias = self.take_while(|c| c.is_ascii_alphanumeric() || c == b'_').to_string();
            if !alias.is_empty() {
                text.push(' ');
                text.push_str(&alias);
            } else if !self.at_end() && !self.peek().is_ascii_whitespace() {
                let span = self.here();
                return self.err("strict SQL: expected an alias or `where` after the sub-query", span);
            }
        }
        Ok((table, Some(text)))
    }

    pub(super) fn sql_or(&mut self) -> PResult<SqlCond> {
        self.ws();
        let start = self.pos;
        let mut parts = vec_of(self.sql_and()?);
        loop {
            self.ws();
            if self.eat_word_ci("or") {
                parts.push(self.sql_and()?);
            } else {
                break;
            }
        }
        if parts.len() > 1 {
            self.done(SyntaxKind::SqlOr, start);
        }
        Ok(if parts.len() == 1 { parts.pop().unwrap_or(SqlCond::Or(Vec::new())) } else { SqlCond::Or(parts) })
    }

    pub(super) fn sql_and(&mut self) -> PResult<SqlCond> {
        self.ws();
        let start = self.pos;
        let mut parts = vec_of(self.sql_unary()?);
        loop {
            self.ws();
            if self.eat_word_ci("and") {
                parts.push(self.sql_unary()?);
            } else {
                break;
            }
        }
        if parts.len() > 1 {
            self.done(SyntaxKind::SqlAnd, start);
        }
        Ok(if parts.len() == 1 { parts.pop().unwrap_or(SqlCond::And(Vec::new())) } else { SqlCond::And(parts) })
    }

    pub(super) fn sql_unary(&mut self) -> PResult<SqlCond> {
        self.nest()?;
        let c = self.sql_unary_at();
        self.depth -= 1;
        c
    }

    pub(super) fn sql_unary_at(&mut self) -> PResult<SqlCond> {
        self.ws();
        if self.at_word_ci("not") {
            let start = self.pos;
            self.bump_str("not");
            let inner = self.sql_unary()?;
            self.done(SyntaxKind::SqlNot, start);
            return Ok(SqlCond::Not(Box::new(inner)));
        }
        if self.peek() == b'(' {
            // A group, unless it is the start of a comparison (no such form).
            let start = self.pos;
            self.bump();
            let inner = self.sql_or()?;
            self.expect(b')', "`)` closing the group")?;
            self.done(SyntaxKind::SqlGroup, start);
            return Ok(SqlCond::Group(Box::new(inner)));
        }
        let start = self.pos;
        let left = self.sql_operand()?;
        self.ws();
        // Delta §13.2: `column in (item, …)`, `in(` without a blank too.
        if self.eat_word_ci("in") {
            self.expect(b'(', "`(` opening the `in` list")?;
            let mut items = Vec::new();
            loop {
                items.push(self.sql_operand()?);
                if self.eat(b')') {
                    break;
                }
                self.expect(b',', "`,` or `)` in the `in` list")?;
            }
            self.done(SyntaxKind::SqlIn, start);
            return Ok(SqlCond::In { left, items, span: Span::new(start, self.pos) });
        }
        // Delta §13.8: `column like <rhs>`.
        if self.eat_word_ci("like") {
            self.ws();
            let pattern = self.like_pattern()?;
            self.done(SyntaxKind::SqlCmp, start);
            return Ok(SqlCond::Like { left, pattern, span: Span::new(start, self.pos) });
        }
        let op = ["!=", "<>", "<=", ">=", "=", "<", ">"].into_iter().find(|op| self.rest().starts_with(op));
        let Some(op) = op else {
            let found = self.found();
            let span = self.here();
            return self.err(format!("expected a comparison operator (`=`, `!=`, `<`, …), found {found}"), span);
        };
        self.bump_str(op);
        let op = if op == "<>" { "!=" } else { op };
        let right = self.sql_operand()?;
        self.done(SyntaxKind::SqlCmp, start);
        Ok(SqlCond::Cmp { left, op, right, span: Span::new(start, self.pos) })
    }

    /// The right of `like`: `@x`, `read(x)` or `take(x)`; or a quoted
    /// pattern, split where it holds `@name`, `read(name)` or `take(name)`.
    fn like_pattern(&mut self) -> PResult<LikePattern> {
        let at = self.pos;
        if let Some(lit) = self.sql_literal()? {
            let Const::Chars(text) = lit else {
                let span = Span::new(at, self.pos);
                return self.err_hint(
                    "strict SQL: `like` takes a quoted pattern or a value",
                    span,
                    "write `name like '%@team%'`",
                );
            };
            return Ok(like_pieces(&text));
        }
        if self.peek() == b'@' || ((self.at_word("read") || self.at_word("take")) && self.peek_after(4) == b'(') {
            return Ok(LikePattern::Value(self.sql_operand()?));
        }
        let found = self.found();
        let span = self.here();
        self.err_hint(
            format!("strict SQL: expected a pattern after `like`, found {found}"),
            span,
            "write `name like '%@team%'` or `name like @pattern`",
        )
    }

    pub(super) fn sql_operand(&mut self) -> PResult<SqlOperand> {
        self.nest()?;
        let o = self.sql_operand_at();
        self.depth -= 1;
        o
    }

    /// A quoted text or a number at the cursor (the literals of SQL, which
    /// `lookup_nocase`'s arguments take too), or `None`, reading nothing,
    /// when neither starts here.
    pub(super) fn sql_literal(&mut self) -> PResult<Option<Const>> {
        let start = self.pos;
        let c = self.peek();
        if c == b'\'' || c == b'"' {
            self.bump();
            let s = self.pos;
            while !self.at_end() && self.peek() != c {
                self.bump();
            }
            if self.at_end() {
                let span = Span::new(start, self.pos);
                return self.err("unclosed SQL string", span);
            }
            let text = self.src[s..self.pos].to_string();
            self.bump();
            self.done(SyntaxKind::SqlLiteral, start);
            return Ok(Some(Const::Chars(text)));
        }
        if c.is_ascii_digit() || ((c == b'-' || c == b'+') && self.peek_at(1).is_ascii_digit()) {
            let s = self.pos;
            self.bump();
            self.take_while(|c| c.is_ascii_digit() || c == b'.');
            let text = &self.src[s..self.pos];
            let span = Span::new(s, self.pos);
            if let Some(d) = value::parse_digit(text) {
                self.done(SyntaxKind::SqlLiteral, start);
                return Ok(Some(Const::Digit(d)));
            }
            return match value::parse_float(text) {
                Some(f) => {
                    self.done(SyntaxKind::SqlLiteral, start);
                    Ok(Some(Const::Float(f)))
                }
                None => self.err("invalid number", span),
            };
        }
        Ok(None)
    }

    pub(super) fn sql_operand_at(&mut self) -> PResult<SqlOperand> {
        self.ws();
        let start = self.pos;
        let c = self.peek();
        if let Some(lit) = self.sql_literal()? {
            return Ok(SqlOperand::Literal(lit));
        }
        if c == b'@' {
            return Ok(SqlOperand::Value(self.at_name()?));
        }
        if (self.at_word("read") || self.at_word("take")) && self.peek_after(4) == b'(' {
            return Ok(SqlOperand::Value(Expr::Access(self.accessor(true)?)));
        }
        if self.rest().starts_with("Now::") {
            return Ok(SqlOperand::Value(self.builtin()?));
        }
        let name = self.take_while(is_simple).to_string();
        if name.is_empty() {
            let found = self.found();
            let span = self.here();
            return self.err(format!("expected a column, a value or a function, found {found}"), span);
        }
        if self.peek_after_ws() == b'(' {
            if let Some(c) = self.sql_typed_literal(start, &name)? {
                return Ok(SqlOperand::Literal(c));
            }
            self.ws();
            self.bump();
            let mut args = Vec::new();
            if !self.eat(b')') {
                loop {
                    args.push(self.sql_operand()?);
                    if self.eat(b')') {
                        break;
                    }
                    self.expect(b',', "`,` or `)`")?;
                }
            }
            let helper = Helper::by_name(&name);
            self.done(SyntaxKind::SqlCall, start);
            return Ok(SqlOperand::Call { name, helper, args, span: Span::new(start, self.pos) });
        }
        self.done(SyntaxKind::SqlColumn, start);
        Ok(SqlOperand::Column(name, Span::new(start, self.pos)))
    }

    /// A typed literal (`digit(1)`, `chars (a)`) where a SQL value may stand:
    /// it is bound as a parameter like any literal. `time(…)` whose body is
    /// not a time literal stays a SQL function call (SQLite has `time()`).
    pub(super) fn sql_typed_literal(&mut self, start: usize, name: &str) -> PResult<Option<Const>> {
        if !LITERAL_TYPES.contains(&name) {
            return Ok(None);
        }
        let after_name = self.pos;
        let diags = self.diags.len();
        self.pos = start;
        match self.literal() {
            Ok((c, _)) => Ok(Some(c)),
            Err(()) if name == "time" => {
                self.diags.truncate(diags);
                self.pos = after_name;
                Ok(None)
            }
            Err(()) => Err(()),
        }
    }
}

/// A quoted `like` pattern as text and the fields it names: `@name`,
/// `read(name)` and `take(name)` (delta §13.8).
fn like_pieces(text: &str) -> LikePattern {
    let mut pieces = Vec::new();
    let mut lit = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        let var = if let Some(r) = rest.strip_prefix('@') {
            let n = r.bytes().take_while(|&c| is_simple(c) && c != b'.').count();
            (n > 0).then(|| (false, &r[..n], 1 + n))
        } else {
            ["read(", "take("].iter().find_map(|p| {
                let r = rest.strip_prefix(p)?;
                let n = r.bytes().take_while(|&c| is_field_key(c)).count();
                (n > 0 && r.as_bytes().get(n) == Some(&b')')).then(|| (p.starts_with('t'), &r[..n], p.len() + n + 1))
            })
        };
        match var {
            Some((take, name, len)) => {
                if !lit.is_empty() {
                    pieces.push(LikePiece::Text(core::mem::take(&mut lit)));
                }
                pieces.push(LikePiece::Field { take, name: name.to_string() });
                rest = &rest[len..];
            }
            None => {
                let c = rest.chars().next().unwrap_or(' ');
                lit.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if !lit.is_empty() {
        pieces.push(LikePiece::Text(lit));
    }
    if pieces.iter().all(|p| matches!(p, LikePiece::Text(_))) {
        return LikePattern::Literal(text.to_string());
    }
    LikePattern::Pieces(pieces)
}
