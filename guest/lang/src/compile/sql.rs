//! Lookups compiled: a rule's `select … from … where …` checked and
//! written out as the SQL text and parameters the host runs.

use super::*;

impl Checker<'_> {
    pub(super) fn sql(&mut self, q: ast::Sql) -> CResult<Lookup> {
        let mut b = SqlBuilder::default();
        self.sql_cond(q.cond, &mut b)?;
        let from = q.from.as_deref().unwrap_or(&q.table);
        let mut sql = format!("select {} from {} where {}", q.columns.join(","), from, b.sql);
        for (i, (col, desc)) in q.order.iter().enumerate() {
            sql.push_str(if i == 0 { " order by " } else { ", " });
            sql.push_str(col);
            if *desc {
                sql.push_str(" desc");
            }
        }
        if let Some(n) = q.limit {
            sql.push_str(&format!(" limit {n}"));
        }
        let (line, column) = crate::diag::line_col(self.text, q.span.start as usize);
        let stmt =
            SqlStatement { sql, params: b.names, table: q.table, columns: q.columns, file: self.file.to_string(), line, column };
        let key = (stmt.sql.clone(), stmt.params.clone());
        let id = match self.statement_ids.get(&key) {
            Some(&i) => i,
            None => {
                self.program.statements.push(stmt);
                let i = self.program.statements.len() - 1;
                self.statement_ids.insert(key, i);
                i
            }
        };
        Ok(Lookup { statement: id as u32, params: b.params, repeats: Vec::new() })
    }

    pub(super) fn sql_cond(&mut self, c: SqlCond, b: &mut SqlBuilder) -> CResult<()> {
        match c {
            SqlCond::Or(parts) | SqlCond::And(parts) if parts.is_empty() => Ok(()),
            SqlCond::Or(parts) => self.sql_join(parts, " or ", b),
            SqlCond::And(parts) => self.sql_join(parts, " and ", b),
            SqlCond::Not(inner) => {
                b.sql.push_str("not ");
                self.sql_cond(*inner, b)
            }
            SqlCond::Group(inner) => {
                b.sql.push('(');
                self.sql_cond(*inner, b)?;
                b.sql.push(')');
                Ok(())
            }
            SqlCond::Cmp { left, op, right, span } => self.sql_cmp(left, op, right, span, b),
            SqlCond::In { left, items, span } => self.sql_in(left, items, span, b),
            SqlCond::Like { left, pattern, span } => self.sql_like(left, pattern, span, b),
        }
    }

    /// `column like pattern` (delta §13.8): a value is a parameter named
    /// after the field it reads; a quoted pattern naming fields is its text
    /// and parameters joined with `||`; any other pattern is passed as
    /// written.
    pub(super) fn sql_like(
        &mut self,
        left: SqlOperand,
        pattern: ast::LikePattern,
        span: Span,
        b: &mut SqlBuilder,
    ) -> CResult<()> {
        let SqlOperand::Column(col, _) = &left else {
            return self.err_hint("the left of `like` must be a column", span, "write `column like '%@name%'`");
        };
        b.sql.push_str(col);
        b.sql.push_str(" like ");
        match pattern {
            ast::LikePattern::Literal(text) => push_sql_text(&mut b.sql, &text),
            ast::LikePattern::Value(v) => {
                let hint = param_hint(&v).unwrap_or_else(|| col.clone());
                self.sql_operand(v, &hint, b, span)?;
            }
            ast::LikePattern::Pieces(pieces) => {
                for (i, piece) in pieces.into_iter().enumerate() {
                    if i > 0 {
                        b.sql.push_str(" || ");
                    }
                    match piece {
                        ast::LikePiece::Text(t) => push_sql_text(&mut b.sql, &t),
                        ast::LikePiece::Field { take, name } => {
                            let access = ast::Access {
                                take,
                                key: Some(name.clone()),
                                options: Vec::new(),
                                keys: Vec::new(),
                                default: None,
                                span,
                            };
                            let v = Param::Access(self.var_access(ast::Expr::Access(access), &name)?);
                            let pname = b.bind(&name, v);
                            b.sql.push(':');
                            b.sql.push_str(&pname);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// `column in (item, …)` (delta §13.2): each item that reads the record
    /// is a parameter named after what it reads (`@sip` gives `:sip`); a
    /// literal or static symbol is bound under the column's name.
    pub(super) fn sql_in(&mut self, left: SqlOperand, items: Vec<SqlOperand>, span: Span, b: &mut SqlBuilder) -> CResult<()> {
        let SqlOperand::Column(col, _) = &left else {
            return self.err_hint("the left of `in` must be a column", span, "write `column in (@a, read(b), 'c')`");
        };
        let col = col.clone();
        self.sql_operand(left, &col, b, span)?;
        b.sql.push_str(" in (");
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                b.sql.push_str(", ");
            }
            let item = self.sql_value(item)?;
            let hint = param_hint(&item).unwrap_or_else(|| col.clone());
            self.sql_operand(item, &hint, b, span)?;
        }
        b.sql.push(')');
        Ok(())
    }

    /// The value side of a comparison: a bare name is a static symbol, or a
    /// temporary field (`__x`, delta §13.3) read from the record; any other
    /// bare name is an error (it would otherwise compare two columns).
    pub(super) fn sql_value(&mut self, value: SqlOperand) -> CResult<SqlOperand> {
        Ok(match value {
            SqlOperand::Column(name, at) if self.statics.contains_key(&name) => SqlOperand::Literal(self.static_ref(&name, at)?),
            SqlOperand::Column(name, at) if name.starts_with("__") => SqlOperand::Value(ast::Expr::Access(ast::Access {
                take: false,
                key: Some(name),
                options: Vec::new(),
                keys: Vec::new(),
                default: None,
                span: at,
            })),
            SqlOperand::Column(name, at) => {
                return self.err_hint(
                    format!("`{name}` on the right of a SQL comparison is neither a value nor a static symbol"),
                    at,
                    &format!("to compare with the field `{name}`, write `read({name})`"),
                );
            }
            v => v,
        })
    }

    pub(super) fn sql_join(&mut self, parts: Vec<SqlCond>, sep: &str, b: &mut SqlBuilder) -> CResult<()> {
        for (i, p) in parts.into_iter().enumerate() {
            if i > 0 {
                b.sql.push_str(sep);
            }
            self.sql_cond(p, b)?;
        }
        Ok(())
    }

    pub(super) fn sql_cmp(
        &mut self,
        left: SqlOperand,
        op: &'static str,
        right: SqlOperand,
        span: Span,
        b: &mut SqlBuilder,
    ) -> CResult<()> {
        // `1 = ip4_between(read(x), lo_col, hi_col)`, either side (EXTENDED).
        let between = |o: &SqlOperand| {
            matches!(o, SqlOperand::Call { helper: Some(Helper::Ip4Between), args, .. }
            if args.len() == 3 && matches!(args[1], SqlOperand::Column(..)) && matches!(args[2], SqlOperand::Column(..)))
        };
        let one = |o: &SqlOperand| matches!(o, SqlOperand::Literal(Const::Digit(1)));
        if op == "=" && ((between(&left) && one(&right)) || (one(&left) && between(&right))) {
            let call = if between(&left) { left } else { right };
            if let SqlOperand::Call { mut args, .. } = call {
                let hi = args.pop();
                let lo = args.pop();
                let ip = args.pop();
                if let (Some(ip), Some(SqlOperand::Column(lo, _)), Some(SqlOperand::Column(hi, _))) = (ip, lo, hi) {
                    let hint = param_hint(&ip).unwrap_or_else(|| lo.clone());
                    let v = self.sql_param_value(ip, span)?;
                    let v = Param::Helper(Helper::Ip4Int, alloc::vec![v]);
                    let name = b.bind(&hint, v);
                    b.sql.push_str(&format!("({lo} <= :{name} and {hi} >= :{name})"));
                    return Ok(());
                }
            }
            return self.err("malformed ip4_between comparison", span);
        }
        // Two bare names: the one that is a static symbol is the value.
        let (left, op, right) = match (&left, &right) {
            (SqlOperand::Column(l, _), SqlOperand::Column(r, _))
                if self.statics.contains_key(l) && !self.statics.contains_key(r) =>
            {
                (right, flip(op), left)
            }
            _ => (left, op, right),
        };
        let (col, op, value) = match (left, right) {
            (SqlOperand::Column(c, s), v) => (SqlOperand::Column(c, s), op, v),
            (v, SqlOperand::Column(c, s)) => (SqlOperand::Column(c, s), flip(op), v),
            (l, r) => (l, op, r),
        };
        // Spec §8.11: the value side is an accessor, a built-in, a literal, a
        // SQL function, a static symbol or (delta §13.3) a `__temp` name.
        let value = self.sql_value(value)?;
        let hint = match &col {
            SqlOperand::Column(c, _) => c.clone(),
            other => param_hint(other).unwrap_or_else(|| "p".to_string()),
        };
        self.sql_operand(col, &hint, b, span)?;
        b.sql.push(' ');
        b.sql.push_str(op);
        b.sql.push(' ');
        self.sql_operand(value, &hint, b, span)
    }

    /// Renders one side of a comparison; values become parameters.
    pub(super) fn sql_operand(&mut self, o: SqlOperand, hint: &str, b: &mut SqlBuilder, span: Span) -> CResult<()> {
        match o {
            SqlOperand::Column(c, _) => b.sql.push_str(&c),
            SqlOperand::Value(_) | SqlOperand::Literal(_) => {
                let v = self.sql_param_value(o, span)?;
                let name = b.bind(hint, v);
                b.sql.push(':');
                b.sql.push_str(&name);
            }
            SqlOperand::Call { name, helper, args, span } => {
                let has_column = args.iter().any(mentions_column);
                if let (Some(h), false) = (helper, has_column) {
                    // Folded: the guest computes the helper and binds its result.
                    let hint = args.iter().find_map(param_hint).unwrap_or_else(|| hint.to_string());
                    let mut vals = Vec::new();
                    for a in args {
                        vals.push(self.sql_param_value(a, span)?);
                    }
                    let pname = b.bind(&hint, Param::Helper(h, vals));
                    b.sql.push(':');
                    b.sql.push_str(&pname);
                } else {
                    b.sql.push_str(&name);
                    b.sql.push('(');
                    for (i, a) in args.into_iter().enumerate() {
                        if i > 0 {
                            b.sql.push_str(", ");
                        }
                        match a {
                            SqlOperand::Literal(c) => push_sql_literal(&mut b.sql, &c),
                            other => {
                                let h = param_hint(&other).unwrap_or_else(|| hint.to_string());
                                self.sql_operand(other, &h, b, span)?;
                            }
                        }
                    }
                    b.sql.push(')');
                }
            }
        }
        Ok(())
    }

    pub(super) fn sql_param_value(&mut self, o: SqlOperand, span: Span) -> CResult<Param> {
        match o {
            SqlOperand::Literal(c) => Ok(Param::Const(c)),
            SqlOperand::Value(ast::Expr::Now(f, _)) => {
                self.uses_clock = true;
                Ok(Param::Now(f))
            }
            SqlOperand::Value(e) => {
                let key = match &e {
                    ast::Expr::Access(a) => a.key.clone().unwrap_or_default(),
                    _ => String::new(),
                };
                let e = match e {
                    ast::Expr::Access(mut a) => {
                        if let Some(d) = a.default.take() {
                            let d = self.expr(*d, &key, false)?;
                            let mut acc = self.var_access(ast::Expr::Access(a), &key)?;
                            acc.default = Some(Box::new(d));
                            return Ok(Param::Access(acc));
                        }
                        ast::Expr::Access(a)
                    }
                    other => other,
                };
                Ok(Param::Access(self.var_access(e, &key)?))
            }
            SqlOperand::Call { helper: Some(h), args, span, .. } if !args.iter().any(mentions_column) => {
                let mut vals = Vec::new();
                for a in args {
                    vals.push(self.sql_param_value(a, span)?);
                }
                Ok(Param::Helper(h, vals))
            }
            SqlOperand::Call { name, .. } => self.err(format!("`{name}(…)` cannot be computed as a parameter here"), span),
            SqlOperand::Column(c, at) => self.err(format!("column `{c}` where a value was expected"), at),
        }
    }
}

#[derive(Default)]
pub(super) struct SqlBuilder {
    sql: String,
    names: Vec<String>,
    params: Vec<Param>,
    /// `names`, for lookup.
    taken: alloc::collections::BTreeSet<String>,
    /// Per base name, the suffix to try first: every smaller one is taken.
    next: BTreeMap<String, usize>,
}

impl SqlBuilder {
    /// Adds a parameter with a unique name derived from `hint`: the base
    /// name, else the first free of `base_2`, `base_3`, … (each base
    /// remembers where its search stopped, so many parameters with one hint
    /// cost n·log n, not n³).
    fn bind(&mut self, hint: &str, value: Param) -> String {
        let base: String = hint.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
        let base = if base.is_empty() { "p".to_string() } else { base };
        let mut name = base.clone();
        if self.taken.contains(&name) {
            let n = self.next.entry(base.clone()).or_insert(2);
            loop {
                name = format!("{base}_{n}");
                *n += 1;
                if !self.taken.contains(&name) {
                    break;
                }
            }
        }
        self.taken.insert(name.clone());
        self.names.push(name.clone());
        self.params.push(value);
        name
    }
}

pub(super) fn mentions_column(o: &SqlOperand) -> bool {
    match o {
        SqlOperand::Column(..) => true,
        SqlOperand::Call { args, .. } => args.iter().any(mentions_column),
        _ => false,
    }
}

pub(super) fn param_hint(o: &SqlOperand) -> Option<String> {
    match o {
        SqlOperand::Value(ast::Expr::Access(a)) => a.key.clone(),
        SqlOperand::Value(ast::Expr::At(n, _)) => Some(n.clone()),
        SqlOperand::Call { args, .. } => args.iter().find_map(param_hint),
        _ => None,
    }
}

pub(super) fn flip(op: &'static str) -> &'static str {
    match op {
        "<" => ">",
        ">" => "<",
        "<=" => ">=",
        ">=" => "<=",
        other => other,
    }
}

/// `s` as a SQL text literal: quoted, its quotes doubled.
pub(crate) fn push_sql_text(out: &mut String, s: &str) {
    out.push('\'');
    out.push_str(&s.replace('\'', "''"));
    out.push('\'');
}

pub(super) fn push_sql_literal(out: &mut String, c: &Const) {
    match c {
        Const::Chars(s) => push_sql_text(out, s),
        Const::Digit(d) => out.push_str(&format!("{d}")),
        Const::Float(f) => out.push_str(&format!("{f}")),
        _ => out.push_str("NULL"),
    }
}
