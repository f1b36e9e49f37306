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
        #[arg(long)]
        knowdb: Option<PathBuf>,
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
        Cmd::Run { rule, input, knowdb, batch } => run(&rule, &input, knowdb.as_deref(), batch.max(1)).await,
        Cmd::Test { files, native } => test(&files, native).await,
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

async fn test(files: &[PathBuf], native: bool) -> omlet::Result<ExitCode> {
    use omlet::conformance::{Mode, run_file};
    let engine = Engine::new()?;
    let mode = if native { Mode::Native } else { Mode::Wasm };
    let (mut passed, mut failed) = (0, 0);
    for f in files {
        for o in run_file(f, mode, &engine).await? {
            match o.failure {
                None => passed += 1,
                Some(why) => {
                    failed += 1;
                    println!("FAIL {}: {}\n  {}", f.display(), o.name, why.replace('\n', "\n  "));
                }
            }
        }
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

async fn run(rule: &Path, input: &str, knowdb: Option<&Path>, batch: usize) -> omlet::Result<ExitCode> {
    let knowledge = match knowdb {
        Some(k) => {
            let db = SqliteProvider::memory().await?;
            omlet::knowledge::knowdb::load(k, &db).await?;
            Some(Arc::new(Knowledge::new(Arc::new(db))))
        }
        None => None,
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
    Ok(if errors == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
