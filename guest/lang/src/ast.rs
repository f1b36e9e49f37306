//! The syntax tree the parser produces: the rule as written, with spans.
//! Names are not resolved yet (static symbols, implicit keys); the checker
//! (`compile`) does that while lowering to the IR.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use crate::diag::Span;
use crate::ir::{Const, Helper, NowFn, PipeFn};

#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    pub name_span: Span,
    pub patterns: Vec<String>,
    /// Where each of `patterns` is written.
    pub pattern_spans: Vec<Span>,
    pub enabled: bool,
    pub statics: Vec<Binding>,
    pub stmts: Vec<Statement>,
}

/// A static binding or a top-level statement.
#[derive(Debug, Clone)]
pub struct Binding {
    pub targets: Vec<Target>,
    pub expr: Expr,
    pub span: Span,
}

pub type Statement = Binding;

#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub ty: Option<(String, Span)>,
    pub span: Span,
}

#[derive(Debug, Clone)]
pub enum Expr {
    Literal(Const, Span),
    Access(Access),
    /// `@name`
    At(String, Span),
    Now(NowFn, Span),
    Pipe {
        source: Box<Expr>,
        fns: Vec<PipeFn>,
        span: Span,
        /// Where each of `fns` is written (its name and arguments), for the
        /// lints, which read what the function's defaults hide.
        fn_spans: Vec<Span>,
    },
    Match(Box<Match>),
    Object(Vec<Member>, Span),
    /// `array { item … }` (delta §1).
    Array(Vec<Expr>, Span),
    /// `calc( … )` (delta §11).
    Calc(Box<CalcExpr>, Span),
    /// `lookup_nocase(dict, key, default)` (delta §12.1).
    LookupNocase {
        dict: String,
        dict_span: Span,
        key: Box<Expr>,
        default: Box<Expr>,
        span: Span,
    },
    Collect(Box<Expr>, Span),
    Fmt {
        format: String,
        args: Vec<Expr>,
        span: Span,
    },
    Sql(Box<Sql>),
    /// A bare name: must be a static symbol.
    Ident(String, Span),
    /// `access_direct(src, dst)` (delta §9.3); a pipe tail wraps it in
    /// [`Expr::Pipe`].
    AccessDirect {
        src: Box<Expr>,
        dst: Box<Expr>,
        span: Span,
    },
    /// `fail('text')` or `fail(expr)`: the message.
    Fail(Box<Expr>, Span),
}

impl Expr {
    pub fn span(&self) -> Span {
        match self {
            Expr::Literal(_, s)
            | Expr::At(_, s)
            | Expr::Now(_, s)
            | Expr::Pipe { span: s, .. }
            | Expr::Object(_, s)
            | Expr::Array(_, s)
            | Expr::Calc(_, s)
            | Expr::LookupNocase { span: s, .. }
            | Expr::Collect(_, s)
            | Expr::Fmt { span: s, .. }
            | Expr::Ident(_, s)
            | Expr::AccessDirect { span: s, .. }
            | Expr::Fail(_, s) => *s,
            Expr::Access(a) => a.span,
            Expr::Match(m) => m.span,
            Expr::Sql(q) => q.span,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Access {
    pub take: bool,
    pub key: Option<String>,
    pub options: Vec<String>,
    pub keys: Vec<String>,
    pub default: Option<Box<Expr>>,
    pub span: Span,
}

#[derive(Debug, Clone)]
pub struct Member {
    pub names: Vec<String>,
    pub ty: Option<(String, Span)>,
    pub expr: Expr,
    pub span: Span,
}

#[derive(Debug, Clone)]
pub struct Match {
    pub sources: Vec<Expr>,
    /// `match (a, b) { … }` rather than `match a { … }`.
    pub tuple: bool,
    pub arms: Vec<Arm>,
    pub default: Option<Expr>,
    pub span: Span,
}

#[derive(Debug, Clone)]
pub struct Arm {
    pub conds: Vec<Vec<CondAtom>>,
    pub result: Expr,
    pub span: Span,
}

/// A constant operand in a condition: a literal or a static symbol.
#[derive(Debug, Clone)]
pub enum Operand {
    Literal(Const),
    Ident(String, Span),
}

#[derive(Debug, Clone)]
pub enum CondAtom {
    Eq(Operand),
    Ne(Operand),
    In(Operand, Operand),
    /// A match function, already checked.
    Fn(crate::ir::Cond),
}

#[derive(Debug, Clone)]
pub struct Sql {
    pub columns: Vec<String>,
    /// `order by` columns.
    pub order: Vec<OrderBy>,
    /// `limit N`.
    pub limit: Option<u64>,
    /// The table read: the innermost one of a sub-query.
    pub table: String,
    /// The source's SQL text when it is a sub-query (delta §13.7).
    pub from: Option<String>,
    pub cond: SqlCond,
    pub span: Span,
}

#[derive(Debug, Clone)]
pub enum SqlCond {
    Or(Vec<SqlCond>),
    And(Vec<SqlCond>),
    Not(Box<SqlCond>),
    Group(Box<SqlCond>),
    Cmp {
        left: SqlOperand,
        op: &'static str,
        right: SqlOperand,
        span: Span,
    },
    /// `column in (item, …)` (delta §13.2).
    In {
        left: SqlOperand,
        items: Vec<SqlOperand>,
        span: Span,
    },
    /// `column like pattern` (delta §13.8).
    Like {
        left: SqlOperand,
        pattern: LikePattern,
        span: Span,
    },
}

/// One column of `order by`, and whether it is `desc`.
pub type OrderBy = (String, bool);

/// The right of `like`.
#[derive(Debug, Clone)]
pub enum LikePattern {
    /// `@x`, `read(x)`, `take(x)`: one parameter.
    Value(SqlOperand),
    /// A quoted pattern naming fields: text and parameters, concatenated.
    Pieces(Vec<LikePiece>),
    /// A quoted pattern naming none: passed as written.
    Literal(String),
}

/// A piece of a quoted `like` pattern.
#[derive(Debug, Clone)]
pub enum LikePiece {
    Text(String),
    Field { take: bool, name: String },
}

#[derive(Debug, Clone)]
pub enum SqlOperand {
    /// A column name, or a bare name that may be a static symbol.
    Column(String, Span),
    /// An accessor, `@name` or built-in: a bound parameter.
    Value(Expr),
    Literal(Const),
    Call {
        name: String,
        helper: Option<Helper>,
        args: Vec<SqlOperand>,
        span: Span,
    },
}

/// A `calc` expression (delta §11).
#[derive(Debug, Clone)]
pub enum CalcExpr {
    Int(i64),
    Float(f64),
    /// `read(…)`, `take(…)` or `@name`.
    Field(Box<Expr>),
    Neg(Box<CalcExpr>),
    Bin(crate::ir::CalcOp, Box<CalcExpr>, Box<CalcExpr>),
    Fn(crate::ir::CalcFn, Box<CalcExpr>),
}
