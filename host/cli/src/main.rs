//! The omlet CLI: build, check and run OML rules.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use clap::{Parser, Subcommand};
use omlet::build::RuleSource;
use omlet::knowledge::sqlite::SqliteProvider;
use omlet::stream::{Counting, EmptyCell, Format, Outcome, RouteBy};
use omlet::{Engine, Error, Knowledge};

/// The CLI's allocator (host/cli/Cargo.toml says why).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "kafka")]
mod kafka;

#[derive(Parser)]
#[command(
    name = "omlet",
    version,
    about = "Compile OML rules to WebAssembly components and run them",
    after_help = "Exit status: 0 when all went well; 1 when a record failed or was unrouted (run), a case \
failed (test), a file needs formatting (fmt --check), a rule does not compile, or the command could not \
do its job (a missing file, a refused configuration); 2 for a usage error.\n\
Logging: OMLET_LOG=warn (or info, debug, or a tracing filter such as omlet=debug) prints the \
library's log on standard error; errors only by default."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant, reason = "parsed once per process")]
enum Cmd {
    /// Compile rules into one self-contained WebAssembly component (a rule set).
    Build {
        /// Rule files (.oml) and directories (searched recursively for .oml files).
        #[arg(required = true)]
        rules: Vec<PathBuf>,
        /// Where to write the component; `-` writes it to standard output.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Report compile errors of rules (checked together, as one rule set) without building.
    Check {
        /// Rule files (.oml) and directories; `-` reads one rule from standard input.
        #[arg(required = true)]
        rules: Vec<PathBuf>,
        /// Also check every lookup's table and columns against this knowdb.toml
        /// (repeat it for several).
        #[arg(long, conflicts_with = "knowledge")]
        knowdb: Vec<PathBuf>,
        /// Also check every lookup against the database of this knowledge config.
        #[arg(long)]
        knowledge: Option<PathBuf>,
        /// Print the result as one JSON object on standard output (for editors
        /// and CI): `ok`, `models`, and `diagnostics` with file, line, column,
        /// byte span, message and hint.
        #[arg(long)]
        json: bool,
        /// Sample input records (JSONL, or CSV for *.csv; the first 10,000 are
        /// read): warn about each field a rule reads that no sample record has
        /// and no earlier statement writes (a misspelled name), with the
        /// nearest name.
        #[arg(long)]
        sample: Option<PathBuf>,
        /// Fail (exit 1) when there are warnings, not only errors.
        #[arg(long)]
        deny_warnings: bool,
    },
    /// Show what a built component holds: models, patterns, SQL statements, IR version, source hash.
    Inspect {
        /// A component built by `omlet build`, or rule files and directories
        /// (built in memory first).
        component: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also bind each lookup on this knowdb.toml (repeat it for several)
        /// and show its path: an in-memory index, or SQL and why.
        #[arg(long)]
        knowdb: Vec<PathBuf>,
    },
    /// Evaluate records (JSONL or CSV) through a rule or rule set; one output line per record.
    Run {
        /// The rule: an .oml file, a directory of them, or a built .wasm component.
        rule: PathBuf,
        /// Input file; `-` reads standard input. With the `kafka` feature, also
        /// `kafka://BROKERS/TOPIC?group=G`: run as a worker of consumer group G.
        #[arg(short, long, visible_alias = "from", default_value = "-")]
        input: String,
        /// Input format; by default `csv` for *.csv files, else `jsonl`.
        #[arg(long, value_parser = ["jsonl", "csv"])]
        format: Option<String>,
        /// What an empty CSV cell becomes: `absent` (no field, so a default
        /// body applies) or `text` (the empty string).
        #[arg(long, default_value = "absent", value_parser = ["absent", "text"])]
        csv_empty: String,
        /// Types for input fields that JSON and CSV cannot say, as in a test
        /// case's `input_types`: `ts=time,src=ip` (ip, time, digit, float,
        /// bool, chars). A value that does not parse makes its record an error.
        #[arg(long, value_delimiter = ',', value_parser = parse_input_type)]
        input_types: Vec<(String, String)>,
        /// Output file for the JSONL records (default, or `-`: standard output);
        /// `kafka://BROKERS/TOPIC` when the input is Kafka.
        #[arg(short, long, visible_alias = "to")]
        output: Option<PathBuf>,
        /// File for error lines, one JSON object per failed record with its record
        /// number (default: standard error); or a `kafka://BROKERS/TOPIC`.
        #[arg(long)]
        errors: Option<PathBuf>,
        /// Kafka input: the message header whose value is the record's rule path
        /// (a record without it is routed as the other options say).
        #[arg(long)]
        route_header: Option<String>,
        /// Kafka input: records read and not yet committed, at most.
        #[arg(long, default_value_t = 10_000)]
        max_in_flight: usize,
        /// Kafka input: how often done offsets are committed, in milliseconds
        /// (sooner when half of --max-in-flight waits for a commit).
        #[arg(long, default_value_t = 100)]
        commit_interval_ms: u64,
        /// Kafka input: serve the worker's counters in Prometheus' text format on
        /// this address (`127.0.0.1:9464`), at any path.
        #[arg(long)]
        metrics: Option<String>,
        /// Route every record by this rule path.
        #[arg(long, conflicts_with_all = ["rule_path_field", "model"])]
        rule_path: Option<String>,
        /// Route each record by the rule path in this field.
        #[arg(long, conflicts_with = "model")]
        rule_path_field: Option<String>,
        /// Evaluate every record with this model.
        #[arg(long)]
        model: Option<String>,
        /// What to do with a record no model claims: `error` (an error line) or
        /// `pass` (written out unchanged).
        #[arg(long, default_value = "error", value_parser = ["error", "pass"])]
        unrouted: String,
        /// A knowdb.toml describing knowledge tables, loaded into in-memory SQLite
        /// (repeat it to load several).
        #[arg(long, conflicts_with = "knowledge")]
        knowdb: Vec<PathBuf>,
        /// A knowledge config (TOML: provider URL, pool, timeouts, cache, policy).
        #[arg(long)]
        knowledge: Option<PathBuf>,
        /// Run a rule set that has SQL lookups without any knowledge: every
        /// lookup's fields are then absent. Without this flag such a run is refused.
        #[arg(long, conflicts_with_all = ["knowdb", "knowledge"])]
        no_knowledge: bool,
        /// Print the summary as `text` (default) or `json`, with per-statement
        /// lookup statistics. The value needs `=`: `--stats=json`.
        #[arg(long, num_args = 0..=1, default_missing_value = "text", require_equals = true, value_parser = ["text", "json"])]
        stats: Option<String>,
        /// Also write the summary, as the JSON of `--stats=json`, to this file
        /// (files and standard input), apart from error lines on standard error.
        #[arg(long)]
        stats_file: Option<PathBuf>,
        /// Records per guest call.
        #[arg(long, default_value_t = 256)]
        batch: usize,
        /// Guest calls in flight at once (each on its own instance), 1 to 256
        /// (the engine's instance limit). Default: the cores, plus one, so that
        /// every core has a call while the outputs of another are written.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
        concurrency: Option<u16>,
        /// No progress bar, even on a terminal.
        #[arg(short, long)]
        quiet: bool,
        /// Instead of the run's output, explain record N (1-based): for each
        /// statement of its model, what was read and from where, each
        /// conversion, pipe step, match arm and lookup (with the layer that
        /// answered it), and what was written or why nothing was; then its
        /// output line.
        #[arg(long, conflicts_with = "explain_where")]
        explain: Option<u64>,
        /// Instead of the run's output, explain each record whose field has
        /// this value (`--explain-where dst_ip=10.0.0.7`; at most
        /// --explain-limit of them).
        #[arg(long)]
        explain_where: Option<String>,
        /// Load the rule again when its files change (looked at every half
        /// second; loaded once a change has rested), and swap it in between
        /// batches; a rule set that fails to load keeps the old one running,
        /// and says why on standard error. With Kafka input, the metric
        /// `omlet_rule_reloads_total{result}` counts them.
        #[arg(long)]
        watch: bool,
        /// Most records explained by --explain-where.
        #[arg(long, default_value_t = 10)]
        explain_limit: u64,
        /// The explanations as `text` (default) or as JSON lines (`json`: one
        /// object per record, with `record`, `line`, `output` or `error`, and
        /// `trace`).
        #[arg(long, default_value = "text", value_parser = ["text", "json"])]
        explain_format: String,
    },
    /// Rewrite rule files in the canonical layout (comments kept).
    Fmt {
        /// Rule files, or directories searched recursively for *.oml; `-`
        /// formats standard input to standard output.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Change nothing: list the files that would change and fail if there are any.
        #[arg(long)]
        check: bool,
    },
    /// Print a completion script for a shell (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Run test cases (conformance-corpus format) and report `N passed, M failed`.
    Test {
        /// Case files (.toml), or directories searched recursively for them.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Run only the cases whose name contains this text.
        #[arg(long)]
        filter: Option<String>,
        /// Print one JSON object on standard output instead of text (for CI):
        /// `passed`, `failed`, and every case with its file, name and failure.
        #[arg(long)]
        json: bool,
        /// Also write a JUnit XML report to this file (one test suite per case
        /// file), for CI systems that read JUnit.
        #[arg(long)]
        junit: Option<PathBuf>,
        /// Evaluate with the native build of the evaluator instead of the wasm component.
        #[arg(long)]
        native: bool,
        /// Load the cases' tables into this database (postgres://…, mysql://…), in a
        /// database created for the run and dropped after it.
        #[arg(long)]
        knowledge: Option<String>,
        /// Print each case's trace: for each statement, what was read,
        /// converted, matched, looked up and written, or why nothing was (in
        /// `--json`, as each case's `trace`).
        #[arg(long)]
        trace: bool,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("OMLET_LOG").unwrap_or_else(|_| "error".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    // `OMLET_UTC_OFFSET=seconds`: `Now::*` and static blocks in that zone.
    if let Some(offset) = std::env::var("OMLET_UTC_OFFSET").ok().and_then(|v| v.parse().ok()) {
        omlet::clock::set_utc_offset(Some(offset));
    }
    let result = match cli.cmd {
        Cmd::Build { rules, output } => build(&rules, &output),
        Cmd::Check { rules, knowdb, knowledge, json, sample, deny_warnings } => {
            check(&rules, &knowdb, knowledge.as_deref(), json, sample.as_deref(), deny_warnings).await
        }
        Cmd::Inspect { component, json, knowdb } => inspect(&component, json, &knowdb).await,
        Cmd::Run {
            rule,
            input,
            format,
            csv_empty,
            input_types,
            output,
            errors,
            route_header,
            max_in_flight,
            commit_interval_ms,
            metrics,
            rule_path,
            rule_path_field,
            model,
            unrouted,
            knowdb,
            knowledge,
            no_knowledge,
            stats,
            stats_file,
            batch,
            concurrency,
            quiet,
            explain,
            explain_where,
            explain_limit,
            explain_format,
            watch,
        } => {
            let which = match (explain, explain_where) {
                (Some(n), _) => Some(Ok(n)),
                (None, Some(w)) => match w.split_once('=') {
                    Some((f, v)) => Some(Err((f.trim().to_string(), v.to_string()))),
                    None => {
                        eprintln!("error: --explain-where takes field=value, as in --explain-where dst_ip=10.0.0.7");
                        return ExitCode::from(2);
                    }
                },
                (None, None) => None,
            };
            let explain = which.map(|which| Explain { which, limit: explain_limit.max(1), json: explain_format == "json" });
            let route = match (rule_path, rule_path_field, model) {
                (Some(p), _, _) => RouteBy::Path(p),
                (_, Some(f), _) => RouteBy::Field(f),
                (_, _, Some(m)) => RouteBy::Model(m),
                _ => RouteBy::Only,
            };
            let format_given = format.is_some();
            let format = match format.as_deref() {
                Some("csv") => Format::Csv,
                Some(_) => Format::Jsonl,
                None => Format::of_path(&input),
            };
            let opts = RunOptions {
                format_given,
                input,
                format,
                csv_empty: if csv_empty == "text" { EmptyCell::Text } else { EmptyCell::Absent },
                input_types: input_types.into_iter().collect(),
                output,
                errors,
                route_header,
                max_in_flight,
                commit_interval_ms,
                metrics,
                route,
                pass_unrouted: unrouted == "pass",
                stats,
                stats_file,
                batch: batch.max(1),
                concurrency: concurrency.map_or_else(default_concurrency, usize::from),
                quiet,
                no_knowledge,
                explain,
                watch,
            };
            run(&rule, &knowdb, knowledge.as_deref(), opts).await
        }
        Cmd::Test { files, filter, json, junit, native, knowledge, trace } => {
            test(&files, filter.as_deref(), json, junit.as_deref(), native, knowledge.as_deref(), trace).await
        }
        Cmd::Fmt { files, check } => fmt(&files, check),
        Cmd::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "omlet", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(e @ Error::Statement { .. }) => {
            report(&[], &e);
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// One error to show with its source: where, what, and how to fix it.
struct Shown<'a> {
    file: &'a str,
    line: u32,
    column: u32,
    span: std::ops::Range<usize>,
    message: &'a str,
    hint: Option<&'a str>,
}

/// Prints compile errors (and lookups the knowledge base refused) with
/// miette: file:line:column, the source line and a marker under the span,
/// and the hint.
fn report(sources: &[RuleSource], err: &Error) {
    if let Error::Statement { file, line, column, sql, message, name } = err {
        // The same snippet as a compile error, from the rule file when it
        // can be read (a built component may come without its sources).
        let text =
            sources.iter().find(|s| &s.file == file).map(|s| s.text.clone()).or_else(|| std::fs::read_to_string(file).ok());
        match text.and_then(|t| offset_of(&t, *line, *column).map(|at| (t, at))) {
            Some((text, at)) => {
                // The caret on the name the error is about, when it is in
                // the statement's text; else on the statement.
                let (at, end) = match name.as_deref().and_then(|n| name_in(&text[at..], n).map(|i| (at + i, at + i + n.len()))) {
                    Some(span) => span,
                    None => (at, at + text[at..].find(char::is_whitespace).unwrap_or(0)),
                };
                let (line, column) = line_col_of(&text, at);
                let message = statement_message(sql, message);
                show(&text, &Shown { file, line, column, span: at..end, message: &message, hint: None });
            }
            None => eprintln!("{err}"),
        }
        return;
    }
    let Error::Compile { diagnostics, .. } = err else {
        eprintln!("{err}");
        return;
    };
    for d in diagnostics.iter().take(MAX_REPORTED) {
        let text = sources.iter().find(|s| s.file == d.file).map(|s| s.text.as_str()).unwrap_or_default();
        let shown = Shown {
            file: &d.file,
            line: d.line,
            column: d.column,
            span: d.span.clone(),
            message: &d.message,
            hint: d.hint.as_deref(),
        };
        show(text, &shown);
    }
    if diagnostics.len() > MAX_REPORTED {
        eprintln!("… and {} more errors (the first {MAX_REPORTED} are shown)", diagnostics.len() - MAX_REPORTED);
    }
}

fn show(text: &str, d: &Shown<'_>) {
    let (start, end) = (d.span.start, d.span.end.max(d.span.start + 1));
    let line = text.get(..start.min(text.len())).and_then(|b| b.rfind('\n')).map(|i| i + 1).unwrap_or(0);
    let line_len = text[line..].find('\n').unwrap_or(text.len() - line);
    if line_len > MAX_SNIPPET_LINE {
        // A very long line: the library's rendering, an excerpt around the
        // column rather than the line (miette would print all of it).
        let diag = omlet_lang::Diagnostic {
            message: d.message.to_string(),
            span: omlet_lang::diag::Span::new(start, end.min(line + line_len)),
            hint: d.hint.map(str::to_string),
            line: d.line,
            column: d.column,
        };
        eprint!("{}", diag.render(d.file, text));
        return;
    }
    let mut diag = miette::MietteDiagnostic::new(format!("{}:{}:{}: {}", d.file, d.line, d.column, d.message))
        .with_label(miette::LabeledSpan::at(start..end.min(text.len().max(start)), "here"));
    if let Some(h) = d.hint {
        diag = diag.with_help(h.to_string());
    }
    let report = miette::Report::new(diag).with_source_code(miette::NamedSource::new(d.file, text.to_string()));
    eprintln!("{report:?}");
}

/// A formatter error for `file`: `file:line:column: message` for compile
/// errors (which start with `line:column`), `file: message` otherwise.
fn fmt_error(file: &str, e: &str) -> String {
    let sep = if e.starts_with(|c: char| c.is_ascii_digit()) { ":" } else { ": " };
    format!("{file}{sep}{e}")
}

/// What formatting would change in `file`, as a unified diff (two lines of
/// context), the way `diff -u` and `rustfmt --check` show it.
fn unified_diff(file: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new).unified_diff().context_radius(2).header(file, file).to_string()
}

/// A line that is no JSON object but a comma-separated list of names.
fn looks_like_csv_header(line: &str) -> bool {
    let line = line.trim();
    !line.starts_with('{')
        && line.contains(',')
        && line.split(',').all(|c| {
            let c = c.trim().trim_matches('"');
            !c.is_empty() && c.chars().all(|ch| ch.is_alphanumeric() || "_-./ ".contains(ch))
        })
}

/// `NAME=TYPE` of `--input-types`.
fn parse_input_type(s: &str) -> Result<(String, String), String> {
    let (name, ty) = s.split_once('=').ok_or_else(|| format!("`{s}`: write NAME=TYPE, such as ts=time"))?;
    if !omlet_cli::conformance::INPUT_TYPES.contains(&ty) {
        return Err(format!("`{ty}`: the types are ip, time, digit, float, bool and chars"));
    }
    Ok((name.trim().to_string(), ty.to_string()))
}

/// What [`Error::Statement`] says after its position.
fn statement_message(sql: &str, message: &str) -> String {
    format!("lookup `{sql}` fails on the knowledge base: {message}")
}

/// The byte offset of 1-based `line` and `column` (in characters) in `text`.
fn offset_of(text: &str, line: u32, column: u32) -> Option<usize> {
    let start = if line <= 1 { 0 } else { text.match_indices('\n').nth(line as usize - 2)?.0 + 1 };
    let rest = &text[start..];
    let col = rest.char_indices().nth(column.saturating_sub(1) as usize).map(|(i, _)| i)?;
    Some(start + col)
}

/// At most this many compile errors are printed per run.
const MAX_REPORTED: usize = 50;
/// Source lines longer than this are shown as an excerpt around the error.
const MAX_SNIPPET_LINE: usize = 400;

fn build(rules: &[PathBuf], output: &Path) -> omlet::Result<ExitCode> {
    let t = Instant::now();
    let sources = RuleSource::collect(rules)?;
    let bytes = match omlet::build::build_component(&sources) {
        Ok(b) => b,
        Err(e) => {
            report(&sources, &e);
            return Ok(ExitCode::FAILURE);
        }
    };
    if output == Path::new("-") {
        std::io::stdout().write_all(&bytes).map_err(|e| Error::Io { path: output.into(), source: e })?;
    } else {
        std::fs::write(output, &bytes).map_err(|e| Error::Io { path: output.into(), source: e })?;
    }
    eprintln!(
        "built {} ({} models, {} bytes) in {:.0} ms",
        output.display(),
        sources.len(),
        bytes.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
    Ok(ExitCode::SUCCESS)
}

async fn inspect(component: &Path, json: bool, knowdb: &[PathBuf]) -> omlet::Result<ExitCode> {
    let bytes = if component.is_dir() || component.extension().is_some_and(|e| e == "oml") {
        // Rules, not a component: build them in memory, as `omlet build` would.
        let sources = RuleSource::collect(&[component.to_path_buf()])?;
        match omlet::build::build_component(&sources) {
            Ok(b) => b,
            Err(e) => {
                report(&sources, &e);
                return Ok(ExitCode::FAILURE);
            }
        }
    } else {
        std::fs::read(component).map_err(|e| Error::Io { path: component.into(), source: e })?
    };
    if !bytes.starts_with(b"\0asm") {
        return Err(Error::Input {
            what: component.display().to_string(),
            message: "not a WebAssembly component: inspect takes a component built by `omlet build`, or .oml files".into(),
        });
    }
    let rule = engine()?.load_component(&bytes, &omlet::LoadOptions::new()).await?;
    let info = rule.info();
    // With knowdbs: each statement's path, as the knowledge binds it.
    let paths: Vec<String> = if knowdb.is_empty() {
        Vec::new()
    } else {
        let (knowledge, _db) = open_knowdbs(knowdb).await?;
        let statements: Vec<_> = info.statements.iter().map(|s| s.to_lang()).collect();
        knowledge.bind(&statements).await?.into_iter().map(|b| b.path).collect()
    };
    let statement = |i: &u32| {
        let s = &info.statements[*i as usize];
        serde_json::json!({
            "sql": s.sql, "params": s.params, "table": s.table, "line": s.line, "column": s.column,
            "path": paths.get(*i as usize),
        })
    };
    if json {
        let models: Vec<_> = info
            .models
            .iter()
            .map(|m| {
                serde_json::json!({
                    "name": m.name, "file": m.file, "enabled": m.enabled, "patterns": m.patterns,
                    "statements": m.statements.iter().map(statement).collect::<Vec<_>>(),
                    "lookups": m.lookups.iter().map(|(i, line, sql)| serde_json::json!({
                        "statement": i, "line": line, "sql": sql, "path": paths.get(*i as usize),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let out = serde_json::json!({
            "ir_version": info.ir_version, "source_hash": info.source_hash,
            "uses_clock": info.uses_clock, "models": models,
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}: IR version {}, source hash {}", component.display(), info.ir_version, info.source_hash);
    println!("{} model(s){}", info.models.len(), if info.uses_clock { "; reads the clock" } else { "" });
    for m in &info.models {
        let state = if m.enabled { "" } else { " (disabled: reached by name only)" };
        println!("\nmodel {} from {}{state}", m.name, m.file);
        if m.patterns.is_empty() {
            println!("  claims no rule paths");
        }
        for p in &m.patterns {
            println!("  rule {p}");
        }
        for (i, line, sql) in &m.lookups {
            println!("  sql  line {line}  {sql}");
            if let Some(p) = paths.get(*i as usize) {
                println!("       path: {p}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn test(
    files: &[PathBuf],
    filter: Option<&str>,
    json: bool,
    junit: Option<&Path>,
    native: bool,
    knowledge: Option<&str>,
    trace: bool,
) -> omlet::Result<ExitCode> {
    use omlet_cli::conformance::{Mode, TestDb, run_matching};
    // Directories are searched as `build` and `fmt` search them for rules;
    // a TOML file found there that holds no cases (a knowdb.toml beside
    // the cases) is passed over, where one named on its own is read.
    let mut found = Vec::new();
    for p in files {
        if !p.is_dir() {
            found.push(p.clone());
            continue;
        }
        for f in omlet::build::files_with_extension(std::slice::from_ref(p), "toml")? {
            if omlet_cli::conformance::is_case_file(&f) {
                found.push(f);
            } else {
                eprintln!("omlet test: passing over {} (no [[case]] tables)", f.display());
            }
        }
    }
    let files = found;
    let engine = engine()?;
    let mode = if native { Mode::Native } else { Mode::Wasm };
    let db = match knowledge {
        Some(url) => Some(TestDb::create(url).await?),
        None => None,
    };
    let (mut passed, mut failed, mut cases) = (0, 0, Vec::new());
    let mut suites = Vec::new();
    for f in &files {
        let outcomes = run_matching(f, mode, &engine, db.as_ref(), filter, trace).await?;
        suites.push(junit_suite(&f.display().to_string(), &outcomes));
        for o in outcomes {
            if json {
                cases.push(serde_json::json!({
                    "file": f.display().to_string(), "name": o.name, "ok": o.failure.is_none(), "failure": o.failure,
                    "trace": o.trace,
                }));
            } else if let Some(t) = &o.trace {
                println!(
                    "{} {}: {}\n  {}",
                    if o.failure.is_none() { "ok" } else { "--" },
                    f.display(),
                    o.name,
                    t.trim_end().replace('\n', "\n  ")
                );
            }
            match o.failure {
                None => passed += 1,
                Some(why) => {
                    failed += 1;
                    if !json {
                        println!("FAIL {}: {}\n  {}", f.display(), o.name, why.replace('\n', "\n  "));
                    }
                }
            }
        }
    }
    if let Some(db) = db {
        db.finish().await?;
    }
    if let Some(path) = junit {
        let xml = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n{}</testsuites>\n", suites.concat());
        std::fs::write(path, xml).map_err(|e| Error::Io { path: path.into(), source: e })?;
    }
    if json {
        println!("{}", serde_json::json!({ "passed": passed, "failed": failed, "cases": cases }));
    } else {
        println!("{passed} passed, {failed} failed");
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// One case file's outcomes as a JUnit `<testsuite>`.
fn junit_suite(file: &str, outcomes: &[omlet_cli::conformance::Outcome]) -> String {
    let failures = outcomes.iter().filter(|o| o.failure.is_some()).count();
    let mut xml = format!("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\">\n", xml_escape(file), outcomes.len());
    for o in outcomes {
        let head = format!("    <testcase classname=\"{}\" name=\"{}\"", xml_escape(file), xml_escape(&o.name));
        match &o.failure {
            None => xml.push_str(&format!("{head}/>\n")),
            Some(why) => {
                let first = why.lines().next().unwrap_or_default();
                xml.push_str(&format!(
                    "{head}>\n      <failure message=\"{}\">{}</failure>\n    </testcase>\n",
                    xml_escape(first),
                    xml_escape(why)
                ));
            }
        }
    }
    xml.push_str("  </testsuite>\n");
    xml
}

/// Text for XML attributes and content.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 cannot hold at all.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// `omlet fmt`: rewrites the files that are not in the canonical layout and
/// names them; with `--check` only names them (with their first difference).
/// A file that does not compile is reported and left alone.
fn fmt(paths: &[PathBuf], check: bool) -> omlet::Result<ExitCode> {
    if paths.len() == 1 && paths[0] == Path::new("-") {
        // Standard input to standard output, like rustfmt and gofmt in a pipe.
        let text = sources(paths)?.remove(0).text;
        return match omlet_lang::fmt::format_source(&text) {
            Ok(formatted) if check => {
                if formatted != text {
                    print!("{}", unified_diff("<stdin>", &text, &formatted));
                }
                Ok(if formatted == text { ExitCode::SUCCESS } else { ExitCode::FAILURE })
            }
            Ok(formatted) => {
                print!("{formatted}");
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("{}", fmt_error("<stdin>", &e));
                Ok(ExitCode::FAILURE)
            }
        };
    }
    let (mut differ, mut failed) = (0, 0);
    for f in omlet::build::oml_files(paths)? {
        let text = std::fs::read_to_string(&f).map_err(|e| Error::Io { path: f.clone(), source: e })?;
        let formatted = match omlet_lang::fmt::format_source(&text) {
            Ok(t) => t,
            Err(e) => {
                failed += 1;
                eprintln!("{}", fmt_error(&f.display().to_string(), &e));
                continue;
            }
        };
        if formatted == text {
            continue;
        }
        differ += 1;
        if check {
            println!("would reformat {}", f.display());
            print!("{}", unified_diff(&f.display().to_string(), &text, &formatted));
        } else {
            std::fs::write(&f, formatted).map_err(|e| Error::Io { path: f.clone(), source: e })?;
            println!("{}", f.display());
        }
    }
    Ok(if failed > 0 || (check && differ > 0) { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// The rule sources `paths` name; `-` alone is one rule on standard input.
fn sources(paths: &[PathBuf]) -> omlet::Result<Vec<RuleSource>> {
    if paths.len() == 1 && paths[0] == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(|e| Error::Io { path: "-".into(), source: e })?;
        return Ok(vec![RuleSource { file: "<stdin>".into(), text }]);
    }
    RuleSource::collect(paths)
}

/// The field names of the first 10,000 records of a sample file (JSONL, or
/// CSV for `*.csv`), for `omlet check --sample`.
fn sample_fields(path: &Path) -> omlet::Result<std::collections::BTreeSet<String>> {
    let f = std::fs::File::open(path).map_err(|e| Error::Io { path: path.into(), source: e })?;
    let reader: Box<dyn BufRead + Send> = Box::new(std::io::BufReader::new(f));
    let mut names = std::collections::BTreeSet::new();
    for item in omlet::stream::read(reader, Format::of_path(&path.display().to_string())).take(10_000) {
        if let Ok(r) = item?.record {
            names.extend(r.names().map(str::to_string));
        }
    }
    Ok(names)
}

async fn check(
    rules: &[PathBuf],
    knowdb: &[PathBuf],
    config: Option<&Path>,
    json: bool,
    sample: Option<&Path>,
    deny_warnings: bool,
) -> omlet::Result<ExitCode> {
    let sources = sources(rules)?;
    let (mut notes, mut warnings) = (Vec::new(), Vec::new());
    // Silent loss the syntax tree shows (issue 33): a read after a take, an
    // arm never taken, a field no sample record has.
    let sample = match sample {
        Some(p) => Some(sample_fields(p)?),
        None => None,
    };
    for s in &sources {
        for l in omlet_lang::lint::lints(&s.text, sample.as_ref()) {
            warnings.push(format!("{}:{}:{}: warning: {}", s.file, l.line, l.column, l.message));
        }
    }
    let result = match omlet::build::compile(&sources) {
        Ok(p) => {
            // The knowdbs' tables are loaded once: the load binds on them,
            // and the scan warnings read their query plans.
            let (knowledge, knowdb_db) = match knowdb {
                [] => (open_knowledge(&[], config).await?, None),
                dbs => {
                    let (k, db) = open_knowdbs(dbs).await?;
                    (Some(k), Some(db))
                }
            };
            match knowledge {
                // Loading binds every lookup on the database: a wrong table or
                // column is reported here, not at the first `run`.
                Some(knowledge) => {
                    let options = omlet::LoadOptions::new().knowledge(knowledge.clone());
                    match engine()?.load_sources(&sources, &options).await {
                        Ok(_) => {
                            // Warnings do not fail the check.
                            if let Some(db) = &knowdb_db {
                                (notes, warnings) = scan_warnings(&p, &knowledge, db).await?;
                            }
                            Ok(p)
                        }
                        Err(e) => Err(e),
                    }
                }
                None => Ok(p),
            }
        }
        Err(e) => Err(e),
    };
    // Without a knowledge base, a lookup's functions are still checked
    // against OML's fixed list (a database function must be listed in
    // `functions`, which only a knowledge config says): a warning, with
    // the nearest helper.
    if let (Ok(p), [], None) = (&result, knowdb, config) {
        warnings.extend(function_warnings(p));
    }
    if json {
        let (models, diagnostics) = match &result {
            Ok(p) => (p.models.iter().map(|m| serde_json::json!({ "name": m.name, "file": m.file })).collect(), Vec::new()),
            Err(e) => (Vec::new(), json_diagnostics(e)),
        };
        let language = match &result {
            Ok(p) => serde_json::json!({
                "needs": omlet_lang::features::needs(&p.features),
                "features": p.features.iter().map(|f| serde_json::json!({
                    "name": f.name, "since": f.since, "file": f.file, "line": f.line, "column": f.column,
                })).collect::<Vec<_>>(),
            }),
            Err(_) => serde_json::Value::Null,
        };
        let ok = result.is_ok() && (!deny_warnings || warnings.is_empty());
        println!(
            "{}",
            serde_json::json!({ "ok": ok, "models": models, "diagnostics": diagnostics, "warnings": warnings, "notes": notes, "language": language })
        );
        return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    match result {
        Ok(p) => {
            for w in notes.iter().chain(&warnings) {
                eprintln!("{w}");
            }
            for m in &p.models {
                eprintln!("{}: ok ({})", m.file, m.name);
                if let Some(line) = language_line(&m.file, &p.features) {
                    eprintln!("{line}");
                }
            }
            if deny_warnings && !warnings.is_empty() {
                eprintln!("{} warnings, and --deny-warnings", warnings.len());
                return Ok(ExitCode::FAILURE);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ (Error::Compile { .. } | Error::Statement { .. })) => {
            report(&sources, &e);
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(e),
    }
}

/// What version of OML a file's rule needs (issue 32, item 8), when it uses
/// forms newer than v1.17.4: `f.oml: needs OML 1.25.4 or later (array { } at
/// 3:5, …); omlet only: lower at 5:1`.
fn language_line(file: &str, features: &[omlet_lang::features::Feature]) -> Option<String> {
    use omlet_lang::features::{OMLET_ONLY, needs};
    let mine: Vec<_> = features.iter().filter(|f| f.file == file).cloned().collect();
    if mine.is_empty() {
        return None;
    }
    let list = |only: bool| {
        mine.iter()
            .filter(|f| (f.since == OMLET_ONLY) == only)
            .map(|f| {
                if only {
                    format!("{} at {}:{}", f.name, f.line, f.column)
                } else {
                    format!("{} {} at {}:{}", f.name, f.since, f.line, f.column)
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    if let Some(v) = needs(&mine) {
        parts.push(format!("needs OML {v} or later ({})", list(false)));
    }
    if mine.iter().any(|f| f.since == OMLET_ONLY) {
        parts.push(format!("beyond the reference, omlet only: {}", list(true)));
    }
    Some(format!("{file}: {}", parts.join("; ")))
}

/// The diagnostics of a failed check, as JSON objects.
fn json_diagnostics(e: &Error) -> Vec<serde_json::Value> {
    match e {
        Error::Compile { diagnostics, .. } => diagnostics
            .iter()
            .map(|d| {
                serde_json::json!({
                    "file": d.file, "line": d.line, "column": d.column,
                    "span": [d.span.start, d.span.end], "message": d.message, "hint": d.hint,
                })
            })
            .collect(),
        Error::Statement { file, line, column, sql, message, .. } => vec![serde_json::json!({
            "file": file, "line": line, "column": column, "span": null,
            "message": statement_message(sql, message), "hint": null,
        })],
        other => vec![serde_json::json!({
            "file": null, "line": null, "column": null, "span": null, "message": other.to_string(), "hint": null,
        })],
    }
}

/// Where `name` first stands as a whole word in `text` (up to the end of
/// its statement, the first `;`).
fn name_in(text: &str, name: &str) -> Option<usize> {
    let stmt = &text[..text.find(';').unwrap_or(text.len())];
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    stmt.match_indices(name)
        .map(|(i, _)| i)
        .find(|&i| !stmt[..i].chars().next_back().is_some_and(word) && !stmt[i + name.len()..].chars().next().is_some_and(word))
}

/// The 1-based line and column (in characters) of byte `at` of `text`.
fn line_col_of(text: &str, at: usize) -> (u32, u32) {
    let before = &text[..at];
    let line = before.matches('\n').count() as u32 + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) as u32 + 1;
    (line, column)
}

struct RunOptions {
    input: String,
    format: Format,
    /// `--format` was given (not guessed from the file name).
    format_given: bool,
    csv_empty: EmptyCell,
    input_types: std::collections::BTreeMap<String, String>,
    output: Option<PathBuf>,
    errors: Option<PathBuf>,
    #[cfg_attr(not(feature = "kafka"), expect(dead_code, reason = "read by the Kafka worker only"))]
    route_header: Option<String>,
    #[cfg_attr(not(feature = "kafka"), expect(dead_code, reason = "read by the Kafka worker only"))]
    max_in_flight: usize,
    #[cfg_attr(not(feature = "kafka"), expect(dead_code, reason = "read by the Kafka worker only"))]
    commit_interval_ms: u64,
    #[cfg_attr(not(feature = "kafka"), expect(dead_code, reason = "read by the Kafka worker only"))]
    metrics: Option<String>,
    route: RouteBy,
    pass_unrouted: bool,
    stats: Option<String>,
    stats_file: Option<PathBuf>,
    batch: usize,
    concurrency: usize,
    quiet: bool,
    no_knowledge: bool,
    explain: Option<Explain>,
    /// `--watch`: load the rule again when its files change.
    watch: bool,
}

/// Which records `omlet run --explain` explains, and how it prints them.
#[derive(Clone)]
struct Explain {
    /// Record N, or those whose field (`.0`) has the value `.1`.
    which: std::result::Result<u64, (String, String)>,
    limit: u64,
    json: bool,
}

fn create(path: &Path) -> omlet::Result<Box<dyn Write + Send>> {
    let f = std::fs::File::create(path).map_err(|e| Error::Io { path: path.into(), source: e })?;
    Ok(Box::new(f))
}

/// Lines to the output or the errors file, each write and flush checked.
/// It buffers lines itself, rather than through a `BufWriter`, so that when
/// a write fails (a full disk, a closed pipe) it can say which records'
/// lines may be missing: those buffered since the last write that went
/// through, and every record after them.
struct LineOut {
    inner: Box<dyn Write + Send>,
    /// What the lines go to, to name it in an error.
    name: String,
    buf: Vec<u8>,
    /// The first record whose line is in `buf`, and how many lines it holds.
    held_from: Option<u64>,
    held: u64,
}

/// Bytes of lines [`LineOut`] gathers before it writes them.
const LINE_OUT_BUFFER: usize = 64 << 10;

impl LineOut {
    fn new(inner: Box<dyn Write + Send>, name: String) -> LineOut {
        LineOut { inner, name, buf: Vec::with_capacity(LINE_OUT_BUFFER), held_from: None, held: 0 }
    }

    /// Adds record `record`'s line (`line` and a line end).
    fn line(&mut self, record: u64, line: &[u8]) -> omlet::Result<()> {
        if !self.buf.is_empty() && self.buf.len() + line.len() + 1 > LINE_OUT_BUFFER {
            self.write_held(false)?;
        }
        self.buf.extend_from_slice(line);
        self.buf.push(b'\n');
        self.held_from.get_or_insert(record);
        self.held += 1;
        Ok(())
    }

    /// Writes the lines held, and flushes the writer, while the run goes on.
    fn flush(&mut self) -> omlet::Result<()> {
        self.write_held(false)?;
        self.inner.flush().map_err(|e| self.failed(e, false))
    }

    /// Writes the lines held, and flushes the writer, at the end of the run.
    fn finish(&mut self) -> omlet::Result<()> {
        self.write_held(true)?;
        self.inner.flush().map_err(|e| self.failed(e, true))
    }

    fn write_held(&mut self, last: bool) -> omlet::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.inner.write_all(&self.buf) {
            return Err(self.failed(e, last));
        }
        self.buf.clear();
        (self.held_from, self.held) = (None, 0);
        Ok(())
    }

    /// The error of a failed write: what the system said, and which lines
    /// may be missing (`last`: at the end of the run, or else mid-run, which
    /// stops the run).
    fn failed(&self, e: std::io::Error, last: bool) -> Error {
        let mut missing = match self.held_from {
            Some(first) => format!("the lines of {} records, from record {first} on, may be missing", self.held),
            None => "lines written before may be missing".to_string(),
        };
        if !last {
            missing.push_str("; the run stops here, and the records after them get no line");
        }
        Error::Io { path: self.name.clone().into(), source: std::io::Error::new(e.kind(), format!("{e}: {missing}")) }
    }
}

/// Which signal stopped a run, once one has.
#[derive(Default)]
struct Stopped(std::sync::OnceLock<&'static str>);

/// On SIGTERM or SIGINT, asks `stop` to stop reading, so that the run
/// finishes the records it read, flushes and prints its summary; a second
/// signal ends the process at once (exit status 130).
fn stop_on_signals(stop: omlet::stream::Stop) -> omlet::Result<Arc<Stopped>> {
    use tokio::signal::unix::{SignalKind, signal};
    let handler = |kind| signal(kind).map_err(|e| Error::Config(format!("cannot handle signals: {e}")));
    let (mut term, mut int) = (handler(SignalKind::terminate())?, handler(SignalKind::interrupt())?);
    let stopped = Arc::new(Stopped::default());
    let seen = stopped.clone();
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        let _ = seen.0.set(name);
        stop.stop();
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        let _ = writeln!(std::io::stderr(), "omlet: a second signal: exiting without finishing the records read");
        std::process::exit(130);
    });
    Ok(stopped)
}

/// The knowledge of `--knowdb` files (in-memory SQLite, their tables only)
/// or of a `--knowledge` config; `None` when neither is given.
async fn open_knowledge(knowdb: &[PathBuf], config: Option<&Path>) -> omlet::Result<Option<Arc<Knowledge>>> {
    Ok(match (knowdb, config) {
        ([], Some(c)) => Some(omlet::knowledge::KnowledgeConfig::read(c)?.open().await?),
        ([], None) => None,
        (dbs, _) => Some(open_knowdbs(dbs).await?.0),
    })
}

/// The knowledge of `--knowdb` files: an in-memory SQLite database holding
/// their tables, which lookups may read, and no others.
async fn open_knowdbs(knowdb: &[PathBuf]) -> omlet::Result<(Arc<Knowledge>, Arc<SqliteProvider>)> {
    let db = Arc::new(SqliteProvider::memory().await?);
    // One knowdb opens as a knowledge config naming it would: a Warp Parse
    // knowdb's [cache], [intranet_nets] and databases apply.
    if let [one] = knowdb {
        let config = omlet::knowledge::KnowledgeConfig { knowdb: Some(one.clone()), ..Default::default() };
        return Ok((config.open_with(db.clone()).await?, db));
    }
    let mut tables = Vec::new();
    for k in knowdb {
        tables.extend(omlet::knowledge::knowdb::load(k, db.as_ref()).await?);
    }
    let config = omlet::knowledge::KnowledgeConfig { tables: Some(tables.clone()), knowdb_tables: tables, ..Default::default() };
    Ok((Arc::new(Knowledge::with_config(db.clone(), config)), db))
}

/// Rows past which `omlet check --knowdb` warns about a lookup that scans
/// its table.
const SCAN_WARN_ROWS: i64 = 10_000;

/// A warning for each lookup that calls a function that is neither one of
/// OML's helpers nor an aggregate of the select list: it loads only if the
/// knowledge config lists it in `functions`, and it is usually a misspelled
/// helper (`cidr4_contain`).
fn function_warnings(program: &omlet_lang::ir::Program) -> Vec<String> {
    use omlet::knowledge::guard;
    let mut known: Vec<&str> = omlet::knowledge::HELPER_FUNCTIONS.to_vec();
    known.extend(guard::AGGREGATES);
    let mut out = Vec::new();
    for s in &program.statements {
        let Err(guard::Refusal { function: Some(name), .. }) = guard::check_named(&s.sql, &guard::Policy::default()) else {
            continue;
        };
        let name = name.as_str();
        let near = omlet_lang::parse::nearest(&name.to_ascii_lowercase(), &known)
            .map(|n| format!(": did you mean `{n}`?"))
            .unwrap_or_else(|| String::from(", and it loads only if the knowledge config lists it in `functions`"));
        out.push(format!(
            "{}:{}:{}: warning: lookup calls `{name}`, which is not one of OML's helpers{near}",
            s.file, s.line, s.column
        ));
    }
    out
}

/// The notes and warnings of `omlet check --knowdb`: each lookup's path (an
/// in-memory index, or SQL and why), and each lookup that SQLite would
/// answer by scanning a table of more than [`SCAN_WARN_ROWS`] rows (every
/// miss of the caches pays a pass over the table), with its place.
async fn scan_warnings(
    program: &omlet_lang::ir::Program,
    knowledge: &Knowledge,
    db: &SqliteProvider,
) -> omlet::Result<(Vec<String>, Vec<String>)> {
    use omlet::knowledge::Tables;
    // Bound again for their SQL as the database runs it (cheap: prepared
    // statements, the indexes made already).
    let bound = knowledge.bind(&program.statements).await?;
    let (mut notes, mut warnings) = (Vec::new(), Vec::new());
    for (s, b) in program.statements.iter().zip(&bound) {
        // Where its lookups are answered: an in-memory index, or SQL (and
        // why not memory, for a knowdb table).
        notes.push(format!("{}:{}:{}: note: lookup path: {}", s.file, s.line, s.column, b.path));
        // Only the knowdb's own tables have plans to read here.
        if b.memory.is_some() || b.source != 0 {
            continue;
        }
        let Some(table) = db.scanned(&b.sql, b.order.len()).await? else { continue };
        let rows = db.count(&table).await?;
        if rows > SCAN_WARN_ROWS {
            warnings.push(format!(
                "{}:{}:{}: warning: this lookup reads every row of `{table}` ({rows} rows) on each miss of the caches: \
                 compare its columns with `=` or a range to values, or name an index in the knowdb (`index = [...]`)",
                s.file, s.line, s.column
            ));
        }
    }
    Ok((notes, warnings))
}

/// How often `--watch` looks at the rule's files.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// `omlet run --explain`: the chosen records, each evaluated with a trace of
/// how, printed in place of the run's output.
async fn explain_records(rule: &omlet::Rule, o: &RunOptions, x: &Explain) -> omlet::Result<ExitCode> {
    let reader: Box<dyn BufRead + Send> = if o.input == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        let f = std::fs::File::open(&o.input).map_err(|e| Error::Io { path: o.input.clone().into(), source: e })?;
        Box::new(std::io::BufReader::new(f))
    };
    let limits = omlet::stream::ReadLimits { csv_empty_cell: o.csv_empty, ..Default::default() };
    let mut stdout = std::io::stdout().lock();
    let mut explained = 0u64;
    for item in omlet::stream::read_with(reader, o.format, &limits) {
        let input = item?;
        let chosen = match &x.which {
            Ok(n) => input.number == *n,
            Err((field, value)) => input.record.as_ref().is_ok_and(|r| {
                r.get(field).is_some_and(|v| match v {
                    omlet::Value::Chars(s) | omlet::Value::BigInt(s) => s == *value,
                    omlet::Value::Digit(d) => d.to_string() == *value,
                    omlet::Value::Float(f) => f.to_string() == *value,
                    omlet::Value::Bool(b) => b.to_string() == *value,
                    omlet::Value::Ip(ip) => ip.to_string() == *value,
                    _ => false,
                })
            }),
        };
        if !chosen {
            if matches!(x.which, Ok(n) if input.number > n) {
                break;
            }
            continue;
        }
        explained += 1;
        let record = match input.record {
            Ok(mut r) if !o.input_types.is_empty() => r
                .retype(&o.input_types)
                .map(|()| r)
                .map_err(|e| Error::Input { what: format!("line {}", input.line), message: e.to_string() }),
            other => other,
        };
        let result = match record {
            Ok(r) => rule.explain_on(o.route.route(), &r).await,
            Err(e) => Err(e),
        };
        let (output, trace) = match result {
            Ok(e) => (e.output.map(|r| r.to_json()), Some(e.trace)),
            Err(e) => (Err(e), None),
        };
        if x.json {
            let line = serde_json::json!({
                "record": input.number,
                "line": input.line,
                "output": output.as_ref().ok().and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok()),
                "error": output.as_ref().err().map(|e| e.to_string()),
                "trace": trace.map(|t| serde_json::from_str::<serde_json::Value>(&t.to_json()).unwrap_or_default()),
            });
            let _ = writeln!(stdout, "{line}");
        } else {
            let _ = writeln!(stdout, "record {} (line {}):", input.number, input.line);
            if let Some(t) = trace {
                let _ = write!(stdout, "{}", t.to_text());
            }
            match output {
                Ok(json) => {
                    let _ = writeln!(stdout, "output: {json}\n");
                }
                Err(e) => {
                    let _ = writeln!(stdout, "error: {e}\n");
                }
            }
        }
        if explained >= x.limit || x.which.is_ok() {
            break;
        }
    }
    if explained == 0 {
        let what = match &x.which {
            Ok(n) => format!("record {n}: the input has fewer records"),
            Err((f, v)) => format!("no record has {f} = {v}"),
        };
        eprintln!("omlet run --explain: {what}");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The engine every command uses: the library's defaults, with what the
/// environment asks for (the library reads no variable itself):
/// - the code cache in `$OMLET_CODE_CACHE` (`off` for none), else in
///   `$XDG_CACHE_HOME/omlet/code`, else in `$HOME/.cache/omlet/code`, else
///   where the library puts it by default;
/// - `OMLET_PERFMAP=1`: a perf map of the guest's code, for `perf`.
fn engine() -> omlet::Result<Engine> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let mut config = omlet::EngineConfig::default();
    if let Some(v) = var("OMLET_CODE_CACHE") {
        config.code_cache = (v != "off").then(|| PathBuf::from(v));
    } else if let Some(x) = var("XDG_CACHE_HOME") {
        config.code_cache = Some(PathBuf::from(x).join("omlet/code"));
    } else if let Some(h) = var("HOME") {
        config.code_cache = Some(PathBuf::from(h).join(".cache/omlet/code"));
    }
    config.perf_map = var("OMLET_PERFMAP").is_some_and(|v| v == "1");
    Engine::with_config(&config)
}

/// `--concurrency` when not given: one call per core, and one more. The
/// caller's task writes each call's outputs in order; with one call per core,
/// a core would wait while it does (on 2 cores, 2 calls gave 176-186 K
/// records/s and 3 calls 211-215 K, docs/decisions.md). An unknown core
/// count counts as one core.
fn default_concurrency() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_add(1).min(256)
}

async fn run(rule: &Path, knowdb: &[PathBuf], config: Option<&Path>, o: RunOptions) -> omlet::Result<ExitCode> {
    let knowledge = open_knowledge(knowdb, config).await?;
    let engine = engine()?;
    let options = omlet::LoadOptions::new().knowledge(knowledge.clone());
    let rule_path = rule.to_path_buf();
    let rule = engine.load_path(rule, &options).await?;
    // `--watch`: what loading the rule again takes.
    let watch = o.watch.then(|| (engine.clone(), rule_path, options.clone()));
    if let RouteBy::Model(m) = &o.route
        && !rule.info().models.iter().any(|x| &x.name == m)
    {
        // Before any record is read: otherwise every record is an error.
        let names: Vec<&str> = rule.info().models.iter().map(|x| x.name.as_str()).collect();
        return Err(Error::Config(format!("--model {m}: the rule set has no such model (its models: {})", names.join(", "))));
    }
    if knowledge.is_none() && !o.no_knowledge && !rule.info().statements.is_empty() {
        // Without knowledge every lookup is absent: the enrichment would be
        // lost without a word. Say what to pass instead.
        let info = rule.info();
        let first = &info.statements[0];
        let more = match info.statements.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        return Err(Error::Config(format!(
            "{}:{}:{}: this rule set looks up the table `{}`{more}, but no knowledge was given: pass \
             --knowdb knowdb.toml or --knowledge config.toml, or --no-knowledge to run with every lookup absent",
            first.file, first.line, first.column, first.table
        )));
    }
    if let Some(x) = o.explain.clone() {
        return explain_records(&rule, &o, &x).await;
    }
    // Changes in the database reach the caches, when the config's [reload] says how.
    let _watcher = match &knowledge {
        Some(k) => omlet::knowledge::reload::watch(k).await?,
        None => None,
    };
    if o.input.starts_with("kafka://") {
        #[cfg(feature = "kafka")]
        return kafka::run(rule, watch, knowledge, o).await;
        #[cfg(not(feature = "kafka"))]
        return Err(Error::Config("this omlet was built without the `kafka` feature".into()));
    }

    // Input, with a byte count for the progress bar when it is a file.
    // The input is read on a thread of its own (`stream::Pipe`): a stalled
    // producer does not hold back the records read so far, and SIGTERM or
    // SIGINT end the input where it stands.
    let (source, total): (Box<dyn Read + Send>, Option<u64>) = if o.input == "-" {
        (Box::new(std::io::stdin()), None)
    } else {
        let f = std::fs::File::open(&o.input).map_err(|e| Error::Io { path: o.input.clone().into(), source: e })?;
        let len = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
        (Box::new(f), len)
    };
    let stop = omlet::stream::Stop::new();
    let stopped = stop_on_signals(stop.clone())?;
    let (source, read_bytes) = Counting::new(source);
    let pipe = omlet::stream::Pipe::spawn(source, stop, omlet::stream::DEFAULT_IDLE)?;
    let mut reader: Box<dyn BufRead + Send> = Box::new(std::io::BufReader::with_capacity(1 << 16, pipe));
    if o.format == Format::Jsonl && !o.format_given {
        // CSV read as JSONL would give an error line per record: one hint instead.
        let head = reader.fill_buf().map_err(|e| Error::Io { path: o.input.clone().into(), source: e })?;
        let first = String::from_utf8_lossy(head);
        let first = first.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        if looks_like_csv_header(first) {
            return Err(Error::Input {
                what: if o.input == "-" { "stdin".into() } else { o.input.clone() },
                message: format!(
                    "the first line is not a JSON object but looks like a CSV header (`{}`): pass --format csv",
                    first.chars().take(80).collect::<String>()
                ),
            });
        }
    }
    let progress = match total {
        Some(len) if !o.quiet && std::io::stderr().is_terminal() => {
            let bar = indicatif::ProgressBar::new(len);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg} ({eta} left)")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        }
        _ => indicatif::ProgressBar::hidden(),
    };

    let mut out = match &o.output {
        Some(p) if p != Path::new("-") => LineOut::new(create(p)?, p.display().to_string()),
        _ => LineOut::new(Box::new(std::io::stdout()), "standard output".into()),
    };
    let mut err_out = match &o.errors {
        Some(p) => LineOut::new(create(p)?, p.display().to_string()),
        None => LineOut::new(Box::new(std::io::stderr()), "standard error".into()),
    };
    let source = if o.input == "-" { "stdin".to_string() } else { o.input.clone() };
    let started = Instant::now();
    let (mut records, mut written, mut failed, mut unrouted) = (0u64, 0u64, 0u64, 0u64);
    // Outputs come as their JSON lines, rendered where they were decoded
    // (`stream::run_json`): no `Record` is built for a line only written out.
    let sink = |d: omlet::stream::Done<String>| -> omlet::Result<()> {
        records += 1;
        let number = d.input.number;
        let (kind, message) = match d.outcome {
            Outcome::Ok(line) => {
                written += 1;
                out.line(number, line.as_bytes())?;
                (None, String::new())
            }
            Outcome::Unrouted(_) if o.pass_unrouted => {
                unrouted += 1;
                match &d.input.record {
                    Ok(rec) => out.line(number, rec.to_json().as_bytes())?,
                    Err(_) => out.line(number, d.input.raw.as_bytes())?,
                }
                (None, String::new())
            }
            Outcome::Unrouted(m) => {
                unrouted += 1;
                (Some("unrouted"), omlet::stream::error_message(&m))
            }
            Outcome::Failed(m) => {
                failed += 1;
                (Some("failed"), omlet::stream::error_message(&m))
            }
        };
        if let Some(kind) = kind {
            // An error line names its record; it does not repeat a huge one.
            let input = omlet::stream::input_excerpt(&d.input.raw);
            let line = serde_json::json!({
                "source": source, "record": d.input.number, "line": d.input.line,
                "kind": kind, "error": message, "input": input,
            });
            err_out.line(number, line.to_string().as_bytes())?;
        }
        if d.idle {
            // Nothing else is ready: a trickle of records (a pipe from
            // `tail -F`) gets its lines now, not when the buffer fills.
            out.flush()?;
            err_out.flush()?;
        }
        if records % 4096 == 0 {
            progress.set_position(read_bytes.load(Ordering::Relaxed));
            progress.set_message(format!("{records} records"));
        }
        Ok(())
    };
    let limits = omlet::stream::ReadLimits { csv_empty_cell: o.csv_empty, ..Default::default() };
    let types = o.input_types.clone();
    let inputs = omlet::stream::read_with(reader, o.format, &limits).map(move |item| {
        item.map(|mut input| {
            if !types.is_empty()
                && let Ok(rec) = &mut input.record
                && let Err(e) = rec.retype(&types)
            {
                input.record = Err(Error::Input { what: format!("line {}", input.line), message: e.to_string() });
            }
            input
        })
    });
    let live = omlet::stream::LiveRule::new(rule);
    let _watching = match watch {
        Some((engine, path, options)) => Some(live.watch(engine, path, options, WATCH_EVERY, |r| match r {
            Ok(()) => eprintln!("omlet run: the rule set changed; loaded again and swapped in"),
            Err(e) => eprintln!("omlet run: the rule set changed but does not load, so the old one keeps running: {e}"),
        })?),
        None => None,
    };
    let result = omlet::stream::run_json(live, inputs, o.route.clone(), o.batch, o.concurrency, sink).await;
    progress.finish_and_clear();
    // Every line must have been written before the summary says so: a
    // failed flush fails the run, naming the records whose lines may be
    // missing. The run's own error, when it has one, comes first.
    let flushed = out.finish().and(err_out.finish());
    result?;
    flushed?;
    let stopped_by = stopped.0.get().copied();

    let secs = started.elapsed().as_secs_f64();
    let k = knowledge.as_ref().map(|k| k.stats().to_json());
    let hit_rate = k.as_ref().and_then(|j| {
        let (h, m) = (j["cache_hits"].as_f64()?, j["cache_misses"].as_f64()?);
        (h + m > 0.0).then(|| h / (h + m))
    });
    let summary = serde_json::json!({
        "records": records,
        "written": written,
        "errors": failed,
        "unrouted": unrouted,
        "seconds": secs,
        "records_per_second": records as f64 / secs.max(1e-9),
        "lookups": k.as_ref().map(|j| j["lookups"].clone()),
        "shared_cache_hit_rate": hit_rate,
        "knowledge": k,
    });
    let mut summary = summary;
    if let Some(signal) = stopped_by {
        summary["stopped_by"] = serde_json::json!(signal);
    }
    if let Some(path) = &o.stats_file {
        std::fs::write(path, format!("{summary}\n")).map_err(|e| Error::Io { path: path.clone(), source: e })?;
    }
    let mut stderr = std::io::stderr();
    if o.stats.as_deref() == Some("json") {
        let _ = writeln!(stderr, "{summary}");
    } else {
        if let Some(signal) = stopped_by {
            let _ = writeln!(stderr, "stopped by {signal}: the input was read up to there, every record read has its line");
        }
        let _ = writeln!(
            stderr,
            "{records} records in {secs:.2} s ({:.0} records/s): {written} written, {failed} errors, {unrouted} unrouted",
            records as f64 / secs.max(1e-9)
        );
        if let Some(j) = &k {
            let rate = hit_rate.map(|r| format!("{:.1}%", r * 100.0)).unwrap_or_else(|| "n/a".into());
            let _ = writeln!(
                stderr,
                "lookups reaching the host: {} (guest-cache hits not counted), in memory: {}, shared-cache hit rate: {rate}, database queries: {}, lookup errors: {}",
                j["lookups"], j["memory_lookups"], j["queries"], j["errors"]
            );
            if o.stats.is_some() {
                for s in j["statements"].as_array().into_iter().flatten() {
                    let _ = writeln!(
                        stderr,
                        "  {}: {} queries, p50 ≤ {} µs, p95 ≤ {} µs",
                        s["sql"], s["queries"], s["p50_us"], s["p95_us"]
                    );
                }
            }
        }
    }
    let lost = failed + if o.pass_unrouted { 0 } else { unrouted };
    Ok(if lost == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
