//! The omlet CLI: build, check and run OML rules.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};
use omlet::build::RuleSource;
use omlet::knowledge::Error as KnowledgeError;
use omlet::knowledge::sqlite::SqliteProvider;
use omlet::stream::Format;
use omlet::{Engine, Error, Knowledge};

/// The CLI's allocator (host/cli/Cargo.toml says why).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "kafka")]
mod kafka;
mod run;

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
        /// Where to write the artifact; `-` writes it to standard output.
        #[arg(short, long)]
        output: PathBuf,
        /// What to build: a WebAssembly component (`wit/omlet.wit`), or a
        /// core module with the ABI of docs/abi.md, for hosts without the
        /// component model (the Go host on wazero, Chicory).
        #[arg(long, value_enum, default_value_t = Target::Component)]
        target: Target,
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
    /// Show what a built artifact holds: models, patterns, SQL statements, IR version, source hash.
    Inspect {
        /// A component or core module built by `omlet build`, or rule files
        /// and directories (built in memory first).
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
    Run(run::RunArgs),
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
        Cmd::Build { rules, output, target } => build(&rules, &output, target),
        Cmd::Check { rules, knowdb, knowledge, json, sample, deny_warnings } => {
            check(&rules, &knowdb, knowledge.as_deref(), json, sample.as_deref(), deny_warnings).await
        }
        Cmd::Inspect { component, json, knowdb } => inspect(&component, json, &knowdb).await,
        Cmd::Run(args) => args.command().await,
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
        Err(e @ Error::Knowledge(KnowledgeError::Statement { .. })) => {
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
    if let Error::Knowledge(KnowledgeError::Statement { file, line, column, sql, message, name }) = err {
        // The same snippet as a compile error, from the rule file when it
        // can be read (a built component may come without its sources).
        let text = sources
            .iter()
            .find(|s| &s.file == file)
            .map(|s| s.text.clone())
            .or_else(|| RuleSource::read(Path::new(file)).ok().map(|s| s.text));
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
fn fmt_error(file: &str, e: &omlet_lang::fmt::FormatError) -> String {
    use omlet_lang::fmt::FormatError;
    match e {
        FormatError::DoesNotCompile { line: 1.., .. } => format!("{file}:{e}"),
        e => format!("{file}: {e}"),
    }
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

/// What a refused lookup (`knowledge::Error::Statement`) says after its
/// position.
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

/// `omlet build --target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Target {
    /// A WebAssembly component (the default).
    Component,
    /// A core module with omlet's core ABI (docs/abi.md).
    Core,
}

fn build(rules: &[PathBuf], output: &Path, target: Target) -> omlet::Result<ExitCode> {
    let t = Instant::now();
    let sources = RuleSource::collect(rules)?;
    let target = match target {
        Target::Component => omlet::build::Target::Component,
        Target::Core => omlet::build::Target::Core,
    };
    let bytes = match omlet::build::build_artifact_with(&sources, &omlet::build::BuildLimits::default(), target) {
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
        let max = omlet::EngineConfig::default().max_component_bytes as u64;
        omlet::knowledge::files::read_bytes(component, max, "component")?
    };
    if !bytes.starts_with(b"\0asm") {
        return Err(Error::Input {
            what: component.display().to_string(),
            message: "not a WebAssembly component: inspect takes a component built by `omlet build`, or .oml files".into(),
        });
    }
    let rule = engine(2)?.load_component(&bytes, &omlet::LoadOptions::new()).await?;
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
        let kind = if omlet::build::is_core_module(&bytes) { "core" } else { "component" };
        let out = serde_json::json!({
            "kind": kind, "ir_version": info.ir_version, "source_hash": info.source_hash,
            "uses_clock": info.uses_clock, "models": models,
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    let kind = if omlet::build::is_core_module(&bytes) { "core module (ABI 1)" } else { "component" };
    println!("{}: {kind}, IR version {}, source hash {}", component.display(), info.ir_version, info.source_hash);
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
    use omlet_cli::conformance::{Mode, TestDb, run_matching_within};
    // Directories are searched as `build` and `fmt` search them for rules;
    // a TOML file found there that holds no cases (a knowdb.toml beside
    // the cases) is passed over, where one named on its own is read.
    let roots: Vec<PathBuf> = files.iter().filter(|p| p.is_dir()).cloned().collect();
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
    // Cases run one at a time; an idle instance of another rule makes room.
    let engine = engine(8)?;
    let mode = if native { Mode::Native } else { Mode::Wasm };
    let db = match knowledge {
        Some(url) => Some(TestDb::create(url).await?),
        None => None,
    };
    let (mut passed, mut failed, mut cases) = (0, 0, Vec::new());
    let mut suites = Vec::new();
    for f in &files {
        // The files a case names lie beside it or inside a folder given here.
        let outcomes = run_matching_within(f, &roots, mode, &engine, db.as_ref(), filter, trace).await?;
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
        let text = RuleSource::read(&f)?.text;
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
        return Ok(vec![RuleSource::read_stream(std::io::stdin(), "<stdin>", omlet::build::MAX_RULE_FILE_BYTES)?]);
    }
    RuleSource::collect(paths)
}

/// The most of a sample file `omlet check --sample` reads (64 MiB).
const MAX_SAMPLE_BYTES: u64 = 64 << 20;

/// What the first 10,000 records of a sample file (JSONL, or CSV for
/// `*.csv`) hold, within its first [`MAX_SAMPLE_BYTES`], for `omlet check
/// --sample`: their field names, and the fields that hold an IPv6 address.
fn sample_fields(path: &Path) -> omlet::Result<omlet_lang::lint::Sample> {
    let f = std::fs::File::open(path).map_err(|e| Error::Io { path: path.into(), source: e })?;
    let reader: Box<dyn BufRead + Send> = Box::new(std::io::BufReader::new(std::io::Read::take(f, MAX_SAMPLE_BYTES)));
    let mut sample = omlet_lang::lint::Sample::default();
    for item in omlet::stream::read(reader, Format::of_path(&path.display().to_string())).into_iter().take(10_000) {
        if let Ok(r) = item?.record {
            for (name, value) in r.iter() {
                let v6 = match &value {
                    omlet::Value::Ip(ip) => ip.is_ipv6(),
                    omlet::Value::Chars(text) => text.trim().parse::<std::net::Ipv6Addr>().is_ok(),
                    _ => false,
                };
                if v6 && !sample.ipv6.contains(name) {
                    sample.ipv6.insert(name.to_string());
                }
                if !sample.fields.contains(name) {
                    sample.fields.insert(name.to_string());
                }
            }
        }
    }
    Ok(sample)
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
    // Silent loss the syntax tree shows: a read after a take, an
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
                    match engine(2)?.load_sources(&sources, &options).await {
                        Ok(_) => {
                            // Warnings do not fail the check.
                            // Beside the lints' warnings, never instead of them.
                            if let Some(db) = &knowdb_db {
                                let (scan_notes, scan_warnings) = scan_warnings(&p, &knowledge, db).await?;
                                notes.extend(scan_notes);
                                warnings.extend(scan_warnings);
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
        Err(e @ (Error::Compile { .. } | Error::Knowledge(KnowledgeError::Statement { .. }))) => {
            report(&sources, &e);
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(e),
    }
}

/// What version of OML a file's rule needs, when it uses
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
        Error::Knowledge(KnowledgeError::Statement { file, line, column, sql, message, .. }) => vec![serde_json::json!({
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
        let Err(guard::Refusal { function: Some(name), .. }) = guard::check(&s.sql, &guard::Policy::default()) else {
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

/// The engine every command uses: the library's defaults, with room for
/// `instances` live guest instances and what the environment asks for (the
/// library reads no variable itself):
/// - the code cache in `$OMLET_CODE_CACHE` (`off` or empty for none), else in
///   `$XDG_CACHE_HOME/omlet/code`, else in `$HOME/.cache/omlet/code`, else
///   where the library puts it by default;
/// - `OMLET_PERFMAP=1`: a perf map of the guest's code, for `perf`.
///
/// The library's default room (256 instances) cost a start about 1 ms: the
/// pooling allocator maps and guards a stack for every instance, and unmaps
/// them all at exit. A command sizes it to what it runs at once; past the
/// room, a call waits for an instance to come back, so a small room slows a
/// command down but never fails it.
fn engine(instances: u32) -> omlet::Result<Engine> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let mut config = omlet::EngineConfig::default();
    config.max_instances = instances.clamp(1, config.max_instances);
    if let Some(v) = std::env::var_os("OMLET_CODE_CACHE") {
        // `off`, or empty: no cache.
        config.code_cache = (!v.is_empty() && v != "off").then(|| PathBuf::from(v));
    } else if let Some(x) = var("XDG_CACHE_HOME") {
        config.code_cache = Some(PathBuf::from(x).join("omlet/code"));
    } else if let Some(h) = var("HOME") {
        config.code_cache = Some(PathBuf::from(h).join(".cache/omlet/code"));
    }
    config.perf_map = var("OMLET_PERFMAP").is_some_and(|v| v == "1");
    Engine::with_config(&config)
}
