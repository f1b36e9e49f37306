//! The omlet CLI: build, check and run OML rules.

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};
use omlet::build::RuleSource;
use omlet::knowledge::sqlite::SqliteProvider;
use omlet::{Engine, Error, Knowledge};

#[derive(Parser)]
#[command(name = "omlet", version, about = "Compile OML rules to WebAssembly components and run them")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Compile a rule into a self-contained WebAssembly component.
    Build {
        /// The rule file (.oml).
        rule: PathBuf,
        /// Where to write the component.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Report a rule's compile errors without building it.
    Check {
        #[arg(required = true)]
        rules: Vec<PathBuf>,
    },
    /// Evaluate a rule over JSON records, one per line; write one JSON record per line.
    Run {
        /// The rule: an .oml source or a built .wasm component.
        rule: PathBuf,
        /// JSONL input; `-` reads standard input.
        #[arg(short, long, default_value = "-")]
        input: String,
        /// A knowdb.toml describing the knowledge tables (loaded into in-memory SQLite).
        #[arg(long, conflicts_with = "knowledge")]
        knowdb: Option<PathBuf>,
        /// A knowledge config (TOML: provider URL, pool, timeouts, cache, policy).
        #[arg(long)]
        knowledge: Option<PathBuf>,
        /// Print lookup statistics at the end: `text` or `json`.
        #[arg(long, num_args = 0..=1, default_missing_value = "text")]
        stats: Option<String>,
        /// Records per guest call.
        #[arg(long, default_value_t = 256)]
        batch: usize,
    },
    /// Run test cases (conformance-corpus format) and report `N passed, M failed`.
    Test {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Evaluate with the native build of the evaluator instead of the wasm component.
        #[arg(long)]
        native: bool,
        /// Load the cases' tables into this database (postgres://…, mysql://…), in a
        /// database created for the run and dropped after it.
        #[arg(long)]
        knowledge: Option<String>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("OMLET_LOG").unwrap_or_else(|_| "error".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Build { rule, output } => build(&rule, &output),
        Cmd::Check { rules } => check(&rules),
        Cmd::Run { rule, input, knowdb, knowledge, stats, batch } => {
            run(&rule, &input, knowdb.as_deref(), knowledge.as_deref(), stats.as_deref(), batch.max(1)).await
        }
        Cmd::Test { files, native, knowledge } => test(&files, native, knowledge.as_deref()).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints compile errors with miette: file:line:column, the source line
/// and a marker under the span, and the hint.
fn report(sources: &[RuleSource], err: &Error) {
    let Error::Compile { errors, .. } = err else {
        eprintln!("{err}");
        return;
    };
    for fe in errors {
        let text = sources.iter().find(|s| s.file == fe.file).map(|s| s.text.clone()).unwrap_or_default();
        for d in &fe.diagnostics {
            let (start, end) = (d.span.start as usize, d.span.end.max(d.span.start + 1) as usize);
            let mut diag = miette::MietteDiagnostic::new(format!("{}:{}:{}: {}", fe.file, d.line, d.column, d.message))
                .with_label(miette::LabeledSpan::at(start..end.min(text.len().max(start)), "here"));
            if let Some(h) = &d.hint {
                diag = diag.with_help(h.clone());
            }
            let report = miette::Report::new(diag).with_source_code(miette::NamedSource::new(&fe.file, text.clone()));
            eprintln!("{report:?}");
        }
    }
}

fn build(rule: &Path, output: &Path) -> omlet::Result<ExitCode> {
    let t = Instant::now();
    let sources = [RuleSource::read(rule)?];
    let bytes = match omlet::build::build_component(&sources) {
        Ok(b) => b,
        Err(e) => {
            report(&sources, &e);
            return Ok(ExitCode::FAILURE);
        }
    };
    std::fs::write(output, &bytes).map_err(|e| Error::Io { path: output.into(), source: e })?;
    eprintln!("built {} ({} bytes) in {:.0} ms", output.display(), bytes.len(), t.elapsed().as_secs_f64() * 1e3);
    Ok(ExitCode::SUCCESS)
}

async fn test(files: &[PathBuf], native: bool, knowledge: Option<&str>) -> omlet::Result<ExitCode> {
    use omlet::conformance::{Mode, TestDb, run_file_on};
    let engine = Engine::new()?;
    let mode = if native { Mode::Native } else { Mode::Wasm };
    let db = match knowledge {
        Some(url) => Some(TestDb::create(url).await?),
        None => None,
    };
    let (mut passed, mut failed) = (0, 0);
    for f in files {
        for o in run_file_on(f, mode, &engine, db.as_ref()).await? {
            match o.failure {
                None => passed += 1,
                Some(why) => {
                    failed += 1;
                    println!("FAIL {}: {}\n  {}", f.display(), o.name, why.replace('\n', "\n  "));
                }
            }
        }
    }
    if let Some(db) = db {
        db.finish().await?;
    }
    println!("{passed} passed, {failed} failed");
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn check(rules: &[PathBuf]) -> omlet::Result<ExitCode> {
    let mut failed = 0;
    for r in rules {
        let sources = [RuleSource::read(r)?];
        match omlet::build::compile(&sources) {
            Ok(_) => eprintln!("{}: ok", r.display()),
            Err(e) => {
                failed += 1;
                report(&sources, &e);
            }
        }
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

async fn run(
    rule: &Path,
    input: &str,
    knowdb: Option<&Path>,
    config: Option<&Path>,
    stats: Option<&str>,
    batch: usize,
) -> omlet::Result<ExitCode> {
    let knowledge = match (knowdb, config) {
        (Some(k), _) => {
            let db = SqliteProvider::memory().await?;
            omlet::knowledge::knowdb::load(k, &db).await?;
            Some(Arc::new(Knowledge::new(Arc::new(db))))
        }
        (None, Some(c)) => Some(omlet::knowledge::KnowledgeConfig::read(c)?.open().await?),
        (None, None) => None,
    };
    let engine = Engine::new()?;
    let rule = engine.load_path(rule, knowledge.clone()).await?;

    let reader: Box<dyn BufRead> = if input == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        let f = std::fs::File::open(input).map_err(|e| Error::Io { path: input.into(), source: e })?;
        Box::new(std::io::BufReader::new(f))
    };
    let source = if input == "-" { "stdin" } else { input };
    let mut out = BufWriter::new(std::io::stdout().lock());
    let started = Instant::now();
    let (mut records, mut errors) = (0u64, 0u64);
    let mut pending = Vec::with_capacity(batch);
    let mut numbers = Vec::with_capacity(batch);
    let mut lines = reader.lines();
    let mut line_no = 0u64;
    loop {
        let line = lines.next();
        let done = line.is_none();
        if let Some(line) = line {
            line_no += 1;
            let line = line.map_err(|e| Error::Io { path: source.into(), source: e })?;
            if line.trim().is_empty() {
                continue;
            }
            records += 1;
            match omlet::record::from_json_str(&line) {
                Ok(r) => {
                    pending.push(r);
                    numbers.push(line_no);
                }
                Err(m) => {
                    errors += 1;
                    eprintln!("{source}: record {records} (line {line_no}): {m}");
                }
            }
        }
        if pending.len() >= batch || (done && !pending.is_empty()) {
            let results = rule.evaluate_batch(&pending).await?;
            for (r, n) in results.into_iter().zip(&numbers) {
                match r {
                    Ok(rec) => {
                        let _ = writeln!(out, "{}", omlet::record::to_json_string(&rec));
                    }
                    Err(e) => {
                        errors += 1;
                        eprintln!("{source}: line {n}: {e}");
                    }
                }
            }
            pending.clear();
            numbers.clear();
        }
        if done {
            break;
        }
    }
    let _ = out.flush();
    let secs = started.elapsed().as_secs_f64();
    let lookups = knowledge.as_ref().map(|k| k.stats().lookups.load(std::sync::atomic::Ordering::Relaxed)).unwrap_or(0);
    eprintln!(
        "records: {records}, records/s: {:.0}, lookups: {lookups}, errors: {errors}",
        records as f64 / secs.max(1e-9)
    );
    match (stats, &knowledge) {
        (Some("json"), Some(k)) => eprintln!("{}", k.stats().to_json()),
        (Some(_), Some(k)) => {
            let j = k.stats().to_json();
            eprintln!(
                "lookups reaching the host: {}, shared cache hits: {}, misses: {}, database queries: {}, lookup errors: {}",
                j["lookups"], j["cache_hits"], j["cache_misses"], j["queries"], j["errors"]
            );
            for s in j["statements"].as_array().into_iter().flatten() {
                eprintln!("  {}: {} queries, p50 ≤ {} µs, p95 ≤ {} µs", s["sql"], s["queries"], s["p50_us"], s["p95_us"]);
            }
        }
        (Some(_), None) => eprintln!("no knowledge configured: no lookup statistics"),
        (None, _) => {}
    }
    Ok(if errors == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
