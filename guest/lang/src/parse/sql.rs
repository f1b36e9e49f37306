//! SQL lookups: `select cols from table where cond`, parsed into a tree that
//! the compiler turns into a parameterised statement.

use super::*;

impl<'s> Parser<'s> {
    pub(super) fn sql(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.bump_str("select");
        let mut columns = Vec::new();
        loop {
            self.ws();
            let cs = self.pos;
            if self.peek() == b'*' {
                self.bump();
                columns.push("*".to_string());
            } else {
                let c = self.take_while(is_simple);
                if c.is_empty() || self.peek() == b'(' {
                    let span = Span::new(cs, self.pos.max(cs + 1));
                    return self.err_hint(
                        "strict SQL: columns must be plain identifiers",
                        span,
                        "select `*` or column names; expressions, aliases and functions are not allowed",
                    );
                }
                columns.push(c.to_string());
            }
            self.ws();
            if self.eat(b',') {
                continue;
            }
            if self.eat_word_ci("from") {
                break;
            }
            let span = self.here();
            return self.err_hint("strict SQL: columns must be plain identifiers", span, "expected `,` or `from` after a column");
        }
        if columns.len() > 1 && columns.iter().any(|c| c == "*") {
            let span = Span::new(start, self.pos);
            return self.err("strict SQL: `*` cannot be mixed with column names", span);
        }
        self.ws();
        let ts = self.pos;
        let table = self.take_while(is_simple).to_string();
        let c = self.peek();
        if table.is_empty() || !(c.is_ascii_whitespace() || c == 0) {
            let end = self.pos + self.rest().find(|c: char| c.is_whitespace()).unwrap_or(self.rest().len());
            let span = Span::new(ts, end);
            return self.err_hint(
                "strict SQL: invalid table identifier",
                span,
                "a table name uses letters, digits, `_` and `.`; one table, no joins or aliases",
            );
        }
        self.ws();
        if !self.eat_word_ci("where") {
            let span = self.here();
            return self.err_hint("SQL lookup needs `where`", span, "write `select col from table where key = read(field)`");
        }
        let cond = self.sql_or()?;
        self.done(SyntaxKind::Sql, start);
        Ok(Expr::Sql(Box::new(Sql { columns, table, cond, span: Span::new(start, self.pos) })))
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
