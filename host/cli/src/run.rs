//! `omlet run`: its options, and a run over a file or standard input (the
//! Kafka worker is `kafka/`). Records are read on a thread of their own,
//! evaluated in batches with several calls in flight, and written in input
//! order, each as its output line or its error line; then the summary.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use clap::ValueEnum;
use omlet::stream::{Counting, EmptyCell, Format, Outcome, RouteBy};
use omlet::{Error, Knowledge, Rule};

use crate::{engine, looks_like_csv_header, open_knowledge, parse_input_type};

/// `omlet run`'s command line.
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// The rule: an .oml file, a directory of them, or a built .wasm component.
    rule: PathBuf,
    /// Input file; `-` reads standard input. With the `kafka` feature, also
    /// `kafka://BROKERS/TOPIC?group=G`: run as a worker of consumer group G.
    #[arg(short, long, visible_alias = "from", default_value = "-")]
    input: String,
    /// Input format; by default `csv` for *.csv files, else `jsonl`.
    #[arg(long, value_enum)]
    format: Option<InputFormat>,
    /// What an empty CSV cell becomes: `absent` (no field, so a default
    /// body applies) or `text` (the empty string).
    #[arg(long, value_enum, default_value_t = CsvEmpty::Absent)]
    csv_empty: CsvEmpty,
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
    /// Kafka input: fail the run (exit status 1) when the consumer group
    /// still refuses the last offset commit after 10 s of rebalancing,
    /// instead of saying so and leaving the partitions' next owner to repeat
    /// the records done since the commit before.
    #[arg(long)]
    strict_last_commit: bool,
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
    #[arg(long, value_enum, default_value_t = Unrouted::Error)]
    unrouted: Unrouted,
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
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "text", require_equals = true)]
    stats: Option<Shape>,
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
    #[arg(long, value_enum, default_value_t = Shape::Text)]
    explain_format: Shape,
}

/// `--format`.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum InputFormat {
    /// One JSON object per line.
    Jsonl,
    /// CSV with a header line.
    Csv,
}

/// `--csv-empty`: what an empty CSV cell becomes.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum CsvEmpty {
    /// No field, so that a default body applies.
    Absent,
    /// The empty string.
    Text,
}

/// `--unrouted`: what becomes of a record no model claims.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Unrouted {
    /// An error line.
    Error,
    /// Written out unchanged.
    Pass,
}

/// `--stats` and `--explain-format`: for people, or JSON.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Shape {
    /// Text for people.
    Text,
    /// JSON.
    Json,
}

impl RunArgs {
    /// The command: the options read, then the run.
    pub(crate) async fn command(self) -> omlet::Result<ExitCode> {
        let (rule, knowdb, knowledge) = (self.rule.clone(), self.knowdb.clone(), self.knowledge.clone());
        let options = match self.options() {
            Ok(o) => o,
            Err(usage) => {
                eprintln!("error: {usage}");
                return Ok(ExitCode::from(2));
            }
        };
        run(&rule, &knowdb, knowledge.as_deref(), options).await
    }

    /// The options as the run takes them, or a usage error.
    fn options(self) -> std::result::Result<RunOptions, String> {
        let which = match (self.explain, self.explain_where) {
            (Some(n), _) => Some(Ok(n)),
            (None, Some(w)) => match w.split_once('=') {
                Some((f, v)) => Some(Err((f.trim().to_string(), v.to_string()))),
                None => return Err("--explain-where takes field=value, as in --explain-where dst_ip=10.0.0.7".into()),
            },
            (None, None) => None,
        };
        let json = self.explain_format == Shape::Json;
        let explain = which.map(|which| Explain { which, limit: self.explain_limit.max(1), json });
        let route = match (self.rule_path, self.rule_path_field, self.model) {
            (Some(p), _, _) => RouteBy::Path(p),
            (_, Some(f), _) => RouteBy::Field(f),
            (_, _, Some(m)) => RouteBy::Model(m),
            _ => RouteBy::Only,
        };
        let format = match self.format {
            Some(InputFormat::Csv) => Format::Csv,
            Some(InputFormat::Jsonl) => Format::Jsonl,
            None => Format::of_path(&self.input),
        };
        Ok(RunOptions {
            format_given: self.format.is_some(),
            input: self.input,
            format,
            csv_empty: match self.csv_empty {
                CsvEmpty::Text => EmptyCell::Text,
                CsvEmpty::Absent => EmptyCell::Absent,
            },
            input_types: self.input_types.into_iter().collect(),
            output: self.output,
            errors: self.errors,
            route_header: self.route_header,
            max_in_flight: self.max_in_flight,
            commit_interval_ms: self.commit_interval_ms,
            strict_last_commit: self.strict_last_commit,
            metrics: self.metrics,
            route,
            pass_unrouted: self.unrouted == Unrouted::Pass,
            stats: self.stats,
            stats_file: self.stats_file,
            batch: self.batch.max(1),
            concurrency: self.concurrency.map_or_else(omlet::stream::default_concurrency, usize::from),
            quiet: self.quiet,
            no_knowledge: self.no_knowledge,
            explain,
            watch: self.watch,
        })
    }
}

pub(crate) struct RunOptions {
    pub(crate) input: String,
    pub(crate) format: Format,
    /// `--format` was given (not guessed from the file name).
    pub(crate) format_given: bool,
    pub(crate) csv_empty: EmptyCell,
    pub(crate) input_types: std::collections::BTreeMap<String, String>,
    pub(crate) output: Option<PathBuf>,
    pub(crate) errors: Option<PathBuf>,
    #[cfg_attr(not(feature = "kafka"), expect(dead_code, reason = "read by the Kafka worker only"))]
    pub(crate) route_header: Option<String>,
    #[cfg_attr(not(feature = "kafka"), expect(dead_code, reason = "read by the Kafka worker only"))]
    pub(crate) max_in_flight: usize,
    #[cfg_attr(not(feature = "kafka"), expect(dead_code, reason = "read by the Kafka worker only"))]
    pub(crate) commit_interval_ms: u64,
    #[cfg_attr(not(feature = "kafka"), expect(dead_code, reason = "read by the Kafka worker only"))]
    pub(crate) strict_last_commit: bool,
    #[cfg_attr(not(feature = "kafka"), expect(dead_code, reason = "read by the Kafka worker only"))]
    pub(crate) metrics: Option<String>,
    pub(crate) route: RouteBy,
    pub(crate) pass_unrouted: bool,
    pub(crate) stats: Option<Shape>,
    pub(crate) stats_file: Option<PathBuf>,
    pub(crate) batch: usize,
    pub(crate) concurrency: usize,
    pub(crate) quiet: bool,
    pub(crate) no_knowledge: bool,
    pub(crate) explain: Option<Explain>,
    /// `--watch`: load the rule again when its files change.
    pub(crate) watch: bool,
}

impl RunOptions {
    /// How the library's run goes.
    fn stream_options(&self) -> omlet::stream::RunOptions {
        omlet::stream::RunOptions { route: self.route.clone(), batch: self.batch, concurrency: self.concurrency }
    }
}

/// Which records `omlet run --explain` explains, and how it prints them.
#[derive(Clone)]
pub(crate) struct Explain {
    /// Record N, or those whose field (`.0`) has the value `.1`.
    pub(crate) which: std::result::Result<u64, (String, String)>,
    pub(crate) limit: u64,
    pub(crate) json: bool,
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
struct Stopped(std::sync::OnceLock<&'static str>, omlet::stream::Stop);

/// On SIGTERM or SIGINT, asks `stop` to stop reading, so that the run
/// finishes the records it read, flushes and prints its summary; a second
/// signal ends the process at once (exit status 130).
fn stop_on_signals(stop: omlet::stream::Stop) -> omlet::Result<Arc<Stopped>> {
    use tokio::signal::unix::{SignalKind, signal};
    let handler = |kind| signal(kind).map_err(|e| Error::Config(format!("cannot handle signals: {e}")));
    let (mut term, mut int) = (handler(SignalKind::terminate())?, handler(SignalKind::interrupt())?);
    let stopped = Arc::new(Stopped(std::sync::OnceLock::new(), stop.clone()));
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

/// How often `--watch` looks at the rule's files.
pub(crate) const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

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

/// `omlet run`: the rule loaded (and refused early when it cannot do its
/// job), then the records explained, or run from Kafka, or from the input.
async fn run(rule: &Path, knowdb: &[PathBuf], config: Option<&Path>, o: RunOptions) -> omlet::Result<ExitCode> {
    let knowledge = open_knowledge(knowdb, config).await?;
    // A call in flight takes an instance; a few more for the rule's own
    // (kept idle from its load) and for a rule reloaded by `--watch`.
    let engine = engine(u32::try_from(o.concurrency).unwrap_or(u32::MAX).saturating_mul(2).saturating_add(4))?;
    let options = omlet::LoadOptions::new().knowledge(knowledge.clone());
    let rule_path = rule.to_path_buf();
    let rule = engine.load_path(rule, &options).await?;
    // `--watch`: what loading the rule again takes.
    refuse_early(&rule, knowledge.is_some(), &o.route, o.no_knowledge)?;
    let (has_knowledge, route, no_knowledge) = (knowledge.is_some(), o.route.clone(), o.no_knowledge);
    let vet: Vet = Arc::new(move |rule: &Rule| refuse_early(rule, has_knowledge, &route, no_knowledge));
    let watch = o.watch.then(|| (engine.clone(), rule_path, options.clone(), vet));
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
        return crate::kafka::run(rule, watch, knowledge, o).await;
        #[cfg(not(feature = "kafka"))]
        return Err(Error::Config("this omlet was built without the `kafka` feature".into()));
    }
    run_input(rule, watch, knowledge, o).await
}

/// The checks a rule set passes before it runs, at the start and on each
/// `--watch` reload.
pub(crate) type Vet = Arc<dyn Fn(&Rule) -> omlet::Result<()> + Send + Sync>;

/// What a run would lose every record to is refused before any is read: a
/// model the set lacks, or lookups without knowledge.
fn refuse_early(rule: &Rule, has_knowledge: bool, route: &RouteBy, no_knowledge: bool) -> omlet::Result<()> {
    let info = rule.info();
    if let RouteBy::Model(m) = route
        && !info.models.iter().any(|x| &x.name == m)
    {
        let names: Vec<&str> = info.models.iter().map(|x| x.name.as_str()).collect();
        return Err(Error::Config(format!("--model {m}: the rule set has no such model (its models: {})", names.join(", "))));
    }
    if !has_knowledge && !no_knowledge && !info.statements.is_empty() {
        // Without knowledge every lookup is absent: the enrichment would be
        // lost without a word. Say what to pass instead.
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
    Ok(())
}

/// The input, read on a thread of its own (`stream::Pipe`), so that a
/// stalled producer does not hold back the records read so far, and SIGTERM
/// or SIGINT end it where it stands; with its size when it is a file, the
/// count of bytes read, and the signal that stopped it.
struct Source {
    reader: Box<dyn BufRead + Send>,
    total: Option<u64>,
    read_bytes: Arc<AtomicU64>,
    stopped: Arc<Stopped>,
}

fn open_input(o: &RunOptions) -> omlet::Result<Source> {
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
    // A regular file never stalls: read where the records are read. Any
    // other source (standard input, a FIFO, a device) may, and goes through
    // a pipe thread that hands over a partial chunk when it waits.
    let source: Box<dyn Read + Send> = if total.is_some() {
        Box::new(omlet::stream::Stoppable::new(source, stop))
    } else {
        Box::new(omlet::stream::Pipe::spawn(source, stop, omlet::stream::DEFAULT_IDLE)?)
    };
    let mut reader: Box<dyn BufRead + Send> = Box::new(std::io::BufReader::with_capacity(1 << 16, source));
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
    Ok(Source { reader, total, read_bytes, stopped })
}

/// A progress bar on a terminal, for a file of known size.
fn progress_bar(total: Option<u64>, quiet: bool) -> indicatif::ProgressBar {
    match total {
        Some(len) if !quiet && std::io::stderr().is_terminal() => {
            let bar = indicatif::ProgressBar::new(len);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg} ({eta} left)")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        }
        _ => indicatif::ProgressBar::hidden(),
    }
}

/// What became of the records of a run.
#[derive(Default)]
struct Tally {
    records: u64,
    written: u64,
    failed: u64,
    unrouted: u64,
}

/// A run over a file or standard input.
async fn run_input(
    rule: Rule,
    watch: Option<(omlet::Engine, PathBuf, omlet::LoadOptions, Vet)>,
    knowledge: Option<Arc<Knowledge>>,
    o: RunOptions,
) -> omlet::Result<ExitCode> {
    let Source { reader, total, read_bytes, stopped } = open_input(&o)?;
    let progress = progress_bar(total, o.quiet);
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
    let mut tally = Tally::default();
    // Outputs come as their JSON lines, rendered where they were decoded
    // (`stream::run_json`): no `Record` is built for a line only written out.
    let sink = |d: omlet::stream::Done<String>| -> omlet::Result<()> {
        tally.records += 1;
        let number = d.input.number;
        let (kind, message) = match d.outcome {
            Outcome::Ok(line) => {
                tally.written += 1;
                out.line(number, line.as_bytes())?;
                (None, String::new())
            }
            Outcome::Unrouted(_) if o.pass_unrouted => {
                tally.unrouted += 1;
                match &d.input.record {
                    Ok(rec) => out.line(number, rec.to_json().as_bytes())?,
                    Err(_) => out.line(number, d.input.raw.as_bytes())?,
                }
                (None, String::new())
            }
            Outcome::Unrouted(m) => {
                tally.unrouted += 1;
                (Some("unrouted"), omlet::stream::error_message(&m))
            }
            Outcome::Failed(m) => {
                tally.failed += 1;
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
        if tally.records % 4096 == 0 {
            progress.set_position(read_bytes.load(Ordering::Relaxed));
            progress.set_message(format!("{} records", tally.records));
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
        Some((engine, path, options, vet)) => Some(live.watch(
            engine,
            path,
            options,
            WATCH_EVERY,
            move |r| vet(r),
            |r| match r {
                Ok(()) => eprintln!("omlet run: the rule set changed; loaded again and swapped in"),
                Err(e) => eprintln!("omlet run: the rule set changed but does not load, so the old one keeps running: {e}"),
            },
        )?),
        None => None,
    };
    let result = omlet::stream::run_json(live, inputs, &o.stream_options(), sink).await;
    progress.finish_and_clear();
    // Every line must have been written before the summary says so: a
    // failed flush fails the run, naming the records whose lines may be
    // missing. The run's own error, when it has one, comes first.
    let flushed = out.finish().and(err_out.finish());
    result?;
    flushed?;
    let stopped_by = stopped.0.get().map(|&signal| (signal, stopped.1.cut_bytes()));
    summarize(&tally, started.elapsed().as_secs_f64(), knowledge.as_deref(), stopped_by, &o)?;
    let lost = tally.failed + if o.pass_unrouted { 0 } else { tally.unrouted };
    Ok(if lost == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The run's summary: to `--stats-file` as JSON, and on standard error as
/// text (or as JSON with `--stats=json`).
fn summarize(
    t: &Tally,
    secs: f64,
    knowledge: Option<&Knowledge>,
    stopped_by: Option<(&str, u64)>,
    o: &RunOptions,
) -> omlet::Result<()> {
    let k = knowledge.map(|k| k.stats().snapshot());
    let hit_rate = k.as_ref().and_then(|s| s.hit_rate());
    let rate = t.records as f64 / secs.max(1e-9);
    let mut summary = serde_json::json!({
        "records": t.records,
        "written": t.written,
        "errors": t.failed,
        "unrouted": t.unrouted,
        "seconds": secs,
        "records_per_second": rate,
        "lookups": k.as_ref().map(|s| s.lookups),
        "shared_cache_hit_rate": hit_rate,
        "knowledge": k,
    });
    if let Some((signal, cut)) = stopped_by {
        summary["stopped_by"] = serde_json::json!(signal);
        summary["cut_line_bytes"] = serde_json::json!(cut);
    }
    if let Some(path) = &o.stats_file {
        std::fs::write(path, format!("{summary}\n")).map_err(|e| Error::Io { path: path.clone(), source: e })?;
    }
    let mut stderr = std::io::stderr();
    if o.stats == Some(Shape::Json) {
        let _ = writeln!(stderr, "{summary}");
        return Ok(());
    }
    if let Some((signal, cut)) = stopped_by {
        let _ = writeln!(stderr, "stopped by {signal}: the input was read up to a line end, every record read has its line");
        if cut > 0 {
            let _ = writeln!(
                stderr,
                "the input stalled in the middle of a line when the signal came: its {cut} bytes read were not taken as a record"
            );
        }
    }
    let _ = writeln!(
        stderr,
        "{} records in {secs:.2} s ({rate:.0} records/s): {} written, {} errors, {} unrouted",
        t.records, t.written, t.failed, t.unrouted
    );
    if let Some(s) = &k {
        let rate = hit_rate.map(|r| format!("{:.1}%", r * 100.0)).unwrap_or_else(|| "n/a".into());
        let _ = writeln!(
            stderr,
            "lookups reaching the host: {} (guest-cache hits not counted), in memory: {}, shared-cache hit rate: {rate}, database queries: {}, lookup errors: {}",
            s.lookups, s.memory_lookups, s.queries, s.errors
        );
        if o.stats.is_some() {
            for st in &s.statements {
                let _ = writeln!(
                    stderr,
                    "  {}: {} queries, p50 ≤ {} µs, p95 ≤ {} µs",
                    serde_json::json!(st.sql),
                    st.queries,
                    serde_json::json!(st.p50_us),
                    serde_json::json!(st.p95_us)
                );
            }
        }
    }
    Ok(())
}
