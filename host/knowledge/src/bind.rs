//! Binding a rule's lookups at load: each is routed to its database,
//! checked against what the rule may reach there, rewritten into the
//! database's dialect and prepared, and given its in-memory plan and its
//! batch form when it has them. A lookup that fails any step fails the load,
//! named by its file, line and column.

use super::*;

impl Knowledge {
    #[doc(hidden)]
    /// Binds a rule's statements; fails with [`Error::Statement`] naming the
    /// first that the database rejects.
    pub async fn bind(&self, statements: &[SqlStatement]) -> Result<Vec<BoundStatement>> {
        let sources = self.sources.load_full();
        let mut out = Vec::with_capacity(statements.len());
        for s in statements {
            out.push(self.bind_one(s, &sources).await?);
        }
        Ok(out)
    }

    /// Binds one statement against the databases `sources`.
    async fn bind_one(&self, s: &SqlStatement, sources: &[Source]) -> Result<BoundStatement> {
        if s.sql.len() > guard::MAX_STATEMENT_BYTES {
            let message = format!("{} bytes long; at most {} are read", s.sql.len(), guard::MAX_STATEMENT_BYTES);
            return Err(too_long(s, message));
        }
        // Which database, then what it may read there.
        let routed = self.route(&s.sql);
        let source = &sources[routed.source];
        let provider = &source.provider;
        let policy = guard::Policy {
            tables: source.tables.clone(),
            functions: self.config.functions.clone(),
            database: provider.kind(),
            qualified: source.qualified,
        };
        let checked = guard::check(&routed.sql, &policy).map_err(|r| {
            // A refused function: the caret goes on its name.
            let message = guard_message(r.message, &routed.sql, source, sources);
            refused(s, message, r.function)
        })?;
        if let Some(h) = sql::helper_missing_in(&checked.calls, provider.kind()) {
            let message = format!(
                "`{h}` is applied to a column, which {} cannot compute: keep the keys in columns of the \
                 table (made when the data is, or by a knowdb loaded on SQLite, which has every helper) \
                 and compare them with helpers of values, such as ip_key(read(ip))",
                provider.kind()
            );
            return Err(refused(s, message, None));
        }
        self.index_for(routed.source, &checked).await;
        let terms = checked.terms.clone();
        // The batch form, from what the guard read of the statement.
        let batch_form = batch_select(&checked, &s.params);
        // The columns the lookup names, to say which one a table lacks.
        let named: Vec<String> =
            checked.columns.iter().chain(&checked.keys).chain(&checked.ranges).filter(|c| *c != "*").cloned().collect();
        // The batch form is built from what the SQL reads, never from the
        // component's own account of its table and columns.
        // (`st`: the statement as routed; errors still show `s`, as written.)
        let st = &SqlStatement { sql: routed.sql, table: checked.table, columns: checked.columns, ..s.clone() };
        // Dialect rewrites first, so that a parameter they repeat gets a
        // placeholder per occurrence. They are bounded in size.
        let sql = provider.rewrite_sql(st.sql.clone()).map_err(|e| match e {
            ProviderError::TooLong(m) => too_long(s, m),
            other => refused(s, other.to_string(), None),
        })?;
        let (sql, order) = rewrite_placeholders(&sql, &st.params, provider.placeholders());
        let prepared = match provider.prepare(&sql).await {
            Ok(p) => p,
            Err(e) => {
                let (message, name) = unknown_column(provider.as_ref(), &st.table, &named, e.to_string()).await;
                return Err(refused(s, message, name));
            }
        };
        let database = source.name.clone().filter(|_| sources.len() > 1);
        let stats = self.stats_slot(&sql, database)?;
        let (memory, mut path) = self
            .memory_for(routed.source, &st.table, terms.as_deref(), checked.order.is_some(), &st.params, &prepared.columns)
            .await?;
        if let Some(name) = source.name.as_ref().filter(|_| sources.len() > 1 && memory.is_none()) {
            path = format!("{path} (on the database `{name}`)");
        }
        let mut bound = BoundStatement {
            sql: sql.into(),
            order,
            param_types: prepared.params,
            columns: prepared.columns,
            stats,
            source: routed.source,
            batch: None,
            memory,
            path,
        };
        // A statement ending in `limit 0` answers no row: nothing to batch.
        if self.config.batch_misses
            && let Some(select) = batch_form.filter(|_| keeps_first_row(&bound.sql))
        {
            let key_type = bound.param_types.first().copied().unwrap_or(ParamType::Any);
            let plan = BatchPlan { select, key_type };
            // A plan the database refuses just means no batching for it.
            if provider.prepare_many(&plan).await.is_ok() {
                bound.batch = Some(plan);
            }
        }
        Ok(bound)
    }

    /// The place of the figures of `sql` on `database` among the
    /// per-statement stats, made at its first bind.
    fn stats_slot(&self, sql: &str, database: Option<String>) -> Result<usize> {
        let mut st = self.stats.statements.lock().map_err(|_| Error::Knowledge("stats poisoned".into()))?;
        Ok(match st.iter().position(|x| x.sql == sql && x.database == database) {
            Some(i) => i,
            None => {
                st.push(StatementStats { sql: sql.to_string(), database, ..Default::default() });
                st.len() - 1
            }
        })
    }
}

/// The lookup `s` refused, as the rule wrote it, with the name the refusal
/// is about when there is one (for a caret on it).
fn refused(s: &SqlStatement, message: String, name: Option<String>) -> Error {
    Error::Statement {
        file: s.file.clone(),
        line: s.line,
        column: s.column,
        sql: s.sql.clone(),
        message,
        name: name.map(Box::new),
    }
}

/// A lookup past a size limit, as written or once rewritten.
fn too_long(s: &SqlStatement, message: String) -> Error {
    Error::limit(Limit::StatementBytes, format!("{}:{}:{}: lookup: {message}", s.file, s.line, s.column))
}

/// The guard's refusal of `sql` on `source`, saying which database it was
/// checked on when the knowdb has several, and which names are databases
/// when the lookup's `name.` prefix is none of them.
fn guard_message(message: String, sql: &str, source: &Source, sources: &[Source]) -> String {
    let names: Vec<&str> = sources.iter().filter_map(|s| s.name.as_deref()).collect();
    match (&source.name, guard::first_table(sql)) {
        (Some(name), _) if sources.len() > 1 => format!("on the database `{name}`: {message}"),
        (None, Some(t)) if !names.is_empty() && t.contains('.') => {
            let first = t.split('.').next().unwrap_or_default();
            format!("{message} (`{first}` is no database of the knowdb: {})", names.join(", "))
        }
        _ => message,
    }
}

/// A statement the database would not prepare: its message, with the
/// columns `table` has (a misspelled column is the usual cause) and the
/// nearest to the first of `named` it lacks, which is returned too (for a
/// caret on it). The guard allowed `table`: a plain identifier, safe in SQL.
async fn unknown_column(provider: &dyn Provider, table: &str, named: &[String], message: String) -> (String, Option<String>) {
    let described = match provider.rewrite_sql(format!("select * from {table}")) {
        Ok(all) => provider.prepare(&all).await,
        Err(e) => Err(e),
    };
    let Ok(t) = described.map_err(|_| ()).and_then(|t| if t.columns.is_empty() { Err(()) } else { Ok(t) }) else {
        return (message, None);
    };
    let has = |n: &str| t.columns.iter().any(|c| c.eq_ignore_ascii_case(n));
    let unknown = named.iter().find(|n| !has(n)).cloned();
    let known: Vec<&str> = t.columns.iter().map(String::as_str).collect();
    let near = unknown
        .as_deref()
        .and_then(|u| omlet_lang::parse::nearest(u, &known).map(|n| format!("; did you mean `{n}` for `{u}`?")))
        .unwrap_or_default();
    (format!("{message} (the table `{table}` has the columns {}){near}", t.columns.join(", ")), unknown)
}
