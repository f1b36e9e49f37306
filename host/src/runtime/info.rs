//! What a rule says about itself ([`RuleInfo`]), and an explained record.

use omlet_lang::trace::{Event as TraceEvent, Trace};

use crate::Result;
use crate::record::Record;

use super::bindings;

/// What a rule says about itself (from the guest's `meta.info`).
#[derive(Debug, Clone)]
pub struct RuleInfo {
    /// The IR format version the guest reads.
    pub ir_version: u32,
    /// Hex SHA-256 of the rule sources (file names and texts) the set was built from.
    pub source_hash: String,
    /// The models, in build order (files sorted by path).
    pub models: Vec<ModelInfo>,
    /// Every SQL statement of the set: the allow-list of what `knowledge.query` may run.
    pub statements: Vec<StatementInfo>,
    /// Whether some model reads the clock (`Now::*`).
    pub uses_clock: bool,
}

/// One lookup statement of a rule set: what it reads, and where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatementInfo {
    /// The SQL text with named parameters (`:name`), as the rule wrote it.
    pub sql: String,
    /// Parameter names, in binding order.
    pub params: Vec<String>,
    /// The table the statement reads.
    pub table: String,
    /// The selected columns; `*` for all.
    pub columns: Vec<String>,
    /// The rule file holding the lookup.
    pub file: String,
    /// Where the lookup stands in `file` (1-based).
    pub line: u32,
    /// The column of the lookup in `file` (1-based).
    pub column: u32,
}

impl StatementInfo {
    /// The statement as the knowledge binds it ([`Knowledge::bind`](crate::Knowledge::bind)).
    pub fn to_lang(&self) -> omlet_lang::ir::SqlStatement {
        omlet_lang::ir::SqlStatement {
            sql: self.sql.clone(),
            params: self.params.clone(),
            table: self.table.clone(),
            columns: self.columns.clone(),
            file: self.file.clone(),
            line: self.line,
            column: self.column,
        }
    }
}

/// One model of a rule set.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// The `name :` of the model; [`Route::Model`](crate::Route::Model) selects by it.
    pub name: String,
    /// Its `rule :` patterns: the rule paths it claims (when enabled).
    pub patterns: Vec<String>,
    /// `enable : false` models are reached by name only, never by path.
    pub enabled: bool,
    /// The rule file it was compiled from.
    pub file: String,
    /// The statements it may run: indices into [`RuleInfo::statements`].
    pub statements: Vec<u32>,
    /// Its lookups, in order, as its rule writes them: (statement, line in
    /// [`file`](Self::file), the SQL with this lookup's literals in place).
    pub lookups: Vec<(u32, u32, String)>,
}

impl From<bindings::exports::omlet::rule::meta::RuleInfo> for RuleInfo {
    fn from(i: bindings::exports::omlet::rule::meta::RuleInfo) -> Self {
        // A statement belongs to the model that may run it.
        let file_of = |index: usize| {
            let owner = i.models.iter().find(|m| m.statements.contains(&(index as u32)));
            owner.map(|m| m.file.clone()).unwrap_or_default()
        };
        let statements = i
            .statements
            .into_iter()
            .enumerate()
            .map(|(index, s)| StatementInfo {
                sql: s.sql,
                params: s.params,
                table: s.table,
                columns: s.columns,
                file: file_of(index),
                line: s.line,
                column: s.column,
            })
            .collect();
        RuleInfo {
            ir_version: i.ir_version,
            source_hash: i.source_hash,
            uses_clock: i.uses_clock,
            models: i
                .models
                .into_iter()
                .map(|m| ModelInfo {
                    name: m.name,
                    patterns: m.patterns,
                    enabled: m.enabled,
                    file: m.file,
                    statements: m.statements,
                    lookups: m.lookups.into_iter().map(|l| (l.statement, l.line, l.sql)).collect(),
                })
                .collect(),
            statements,
        }
    }
}

/// A record evaluated with a trace of how ([`Rule::explain`](crate::Rule::explain)).
#[derive(Debug)]
pub struct Explained {
    /// What [`Rule::evaluate`](crate::Rule::evaluate) would have given.
    pub output: Result<Record>,
    /// How: per statement of the record's model, what was read and from
    /// where, each conversion, pipe step and match arm, each lookup with
    /// the layer that answered it, and what was written or why nothing was.
    /// `trace.to_json()` gives its JSON form, `trace.to_text()` a text for
    /// people.
    pub trace: Trace,
}

/// Puts the host's account of each lookup (the layer, the time) into the
/// guest's trace, where the guest says only `host`: both list the lookups
/// that reached the host in the order they were made.
pub(super) fn merge_layers(trace: &mut Trace, layers: Vec<(u32, &'static str, u64)>) {
    let mut host = layers.into_iter();
    for e in trace.steps.iter_mut().flat_map(|s| s.events.iter_mut()) {
        if let TraceEvent::Lookup { statement, layer, micros, .. } = e
            && layer == "host"
            && let Some((s, l, us)) = host.next()
            && s == *statement
        {
            *layer = l.into();
            *micros = Some(us);
        }
    }
}
