//! `omlet test`: runs test cases in the conformance-corpus format
//! (`tests/conformance/README.md`, also the rule authors' unit-test format)
//! through the wasm component, or through the native evaluator.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use omlet_lang::value::{Field, Kind, Value};
use omlet_lang::{Cell, Host, QueryError};
use serde::Deserialize;
use serde_json::Value as Json;

use omlet::Record;
use omlet::build::RuleSource;
use omlet::knowledge::sqlite::SqliteProvider;
use omlet::knowledge::{BoundStatement, Knowledge, Provider, Tables};
use omlet::record;

mod guard;
mod native;
pub use guard::{MAX_FAILURE_BYTES, MAX_OUTPUT_BYTES, MAX_REPORT_BYTES, MAX_SHOWN_BYTES, is_column_name};

/// A record as the evaluator holds it (the native runs use the language crate directly).
type Fields = Vec<Field<'static>>;
use omlet::{Engine, Error, Result};

#[derive(Debug, Deserialize)]
struct CaseFile {
    #[serde(default)]
    case: Vec<Case>,
}

/// What a case file's `[defaults]` may give every case that does not say
/// otherwise: the keys that the cases of one file usually share.
const DEFAULT_KEYS: &[&str] = &["oml", "oml_file", "input_types", "knowledge", "knowdb", "intranet_nets", "rule_path", "model"];

/// One test case.
#[derive(Debug, Clone, Deserialize)]
pub struct Case {
    /// Names the case in outcomes; an inline rule is reported as `NAME.oml`.
    pub name: String,
    /// The rule text; or `oml_file`, a rule file relative to the case file.
    #[serde(default)]
    pub oml: String,
    /// A rule file, relative to the case file, that [`run_file`] reads into
    /// `oml` (and then replaces with its full path); or a folder of them, a
    /// rule set, read into [`sources`](Self::sources).
    #[serde(default)]
    pub oml_file: Option<String>,
    /// The rule set's files, when `oml_file` names a folder: (file, text).
    #[serde(skip)]
    pub sources: Vec<(String, String)>,
    /// With a rule set: the rule path that routes the input record.
    #[serde(default)]
    pub rule_path: Option<String>,
    /// With a rule set: the model that evaluates the input record.
    #[serde(default)]
    pub model: Option<String>,
    /// The input record as a JSON object, keys in order (default `{}`).
    #[serde(default = "empty_object")]
    pub input: String,
    /// Types for top-level input fields that JSON cannot say: `ip`, `time`
    /// (`YYYY-MM-DD HH:MM:SS`), `digit`, `float`, `bool` (only `true` is
    /// true) or `chars`.
    #[serde(default)]
    pub input_types: std::collections::BTreeMap<String, String>,
    /// Tables for the lookups, as JSON (see [`tables_from_json`]).
    #[serde(default)]
    pub knowledge: Option<String>,
    /// A `knowdb.toml` (relative to the case file) to load instead of inline `knowledge`.
    #[serde(default)]
    pub knowdb: Option<String>,
    /// The whole output record as JSON, keys in order; integers and floats
    /// differ. `"<any:time>"`, `"<any:digit>"` and `"<any:chars>"` match any
    /// value of that kind, at the top level or nested in objects and arrays.
    #[serde(default)]
    pub expected: Option<String>,
    /// OML type names (`chars`, `digit`, `ip`, …) that top-level output
    /// fields must have.
    #[serde(default)]
    pub expected_types: std::collections::BTreeMap<String, String>,
    /// Fields that must be in the output with the ignore type (they are not
    /// rendered, so not in `expected`).
    #[serde(default)]
    pub expected_ignored: Vec<String>,
    /// The rule must not compile. The text says why, for people: any compile
    /// error passes.
    #[serde(default)]
    pub expected_error: Option<String>,
    /// The rule compiles, and evaluating the input must fail with an error
    /// whose text contains this (for example a `fail(…)` message).
    #[serde(default)]
    pub expected_record_error: Option<String>,
    /// The `[intranet_nets]` the case runs with (`enabled`, `mode`, `nets`),
    /// as a knowledge config would give it; default the built-in ranges.
    #[serde(default)]
    pub intranet_nets: Option<omlet::knowledge::IntranetNets>,
    /// The output the spec requires, used when `expected` is absent.
    #[serde(default)]
    pub spec_expected: Option<String>,
    /// With `spec_expected`: `false` marks an EXTENDED feature, so a compile
    /// error passes too; otherwise the output is required.
    #[serde(default)]
    pub spec_required: Option<bool>,
}

fn empty_object() -> String {
    "{}".to_string()
}

/// Where cases are evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Build a component per case and run it on the [`Engine`] (`omlet test`).
    Wasm,
    /// Run the compiled IR with the native evaluator, no wasm
    /// (`omlet test --native`).
    Native,
}

/// The outcome of one case; `failure` explains a failed one.
#[derive(Debug)]
pub struct Outcome {
    /// The case's name.
    pub name: String,
    /// Why it failed; `None` when it passed.
    pub failure: Option<String>,
    /// How its record was evaluated (`omlet test --trace`), as text.
    pub trace: Option<String>,
}

/// Whether `path` is a TOML file with `[[case]]` tables (the test of what
/// `omlet test DIR` reads; a file that cannot be read counts as one, so
/// that reading it reports why).
pub fn is_case_file(path: &Path) -> bool {
    let Ok(text) = read_case_text(path) else { return true };
    match toml::from_str::<toml::Table>(&text) {
        Ok(table) => table.contains_key("case"),
        Err(_) => true,
    }
}

/// Reads the cases of a case file as written (`oml_file` and `knowdb` not
/// resolved; keys it does not know, such as `class` or `source`, ignored).
/// Fails with [`Error::Io`] (also for a FIFO or a device), with a limit
/// error for a file over [`MAX_CONFIG_BYTES`](omlet::knowledge::files::MAX_CONFIG_BYTES),
/// or [`Error::Input`] for bad TOML.
pub fn read_cases(path: &Path) -> Result<Vec<Case>> {
    let text = read_case_text(path)?;
    let bad = |message: String| Error::Input { what: path.display().to_string(), message };
    // A misspelled key (`expect =`) would silently test nothing: name it.
    let mut table: toml::Table = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if let Some(k) = table.keys().find(|k| !matches!(k.as_str(), "case" | "defaults")) {
        return Err(bad(format!("unknown top-level key `{k}`: a case file holds `[defaults]` and `[[case]]` tables")));
    }
    // `[defaults]`: keys every case shares, unless it says otherwise.
    if let Some(defaults) = table.remove("defaults") {
        let Some(defaults) = defaults.as_table().cloned() else {
            return Err(bad("`defaults` is a table: [defaults]".into()));
        };
        if let Some(k) = defaults.keys().find(|k| !DEFAULT_KEYS.contains(&k.as_str())) {
            return Err(bad(format!("[defaults]: `{k}` cannot be a default (these can: {})", DEFAULT_KEYS.join(", "))));
        }
        for case in table.get_mut("case").and_then(|c| c.as_array_mut()).into_iter().flatten() {
            if let Some(case) = case.as_table_mut() {
                for (k, v) in &defaults {
                    // An inline rule in a case replaces a default rule file, and the reverse.
                    let rule_given =
                        matches!(k.as_str(), "oml" | "oml_file") && (case.contains_key("oml") || case.contains_key("oml_file"));
                    if !rule_given && !case.contains_key(k) {
                        case.insert(k.clone(), v.clone());
                    }
                }
            }
        }
    }
    for (i, case) in table.get("case").and_then(|c| c.as_array()).into_iter().flatten().enumerate() {
        let name = case.get("name").and_then(|n| n.as_str()).map(str::to_string).unwrap_or_else(|| format!("#{}", i + 1));
        for key in case.as_table().into_iter().flat_map(|t| t.keys()) {
            if !CASE_KEYS.contains(&key.as_str()) {
                let hint = match omlet_lang::parse::nearest(key, CASE_KEYS) {
                    Some(k) => format!(" (did you mean `{k}`?)"),
                    None => String::new(),
                };
                return Err(bad(format!("case {name}: unknown key `{key}`{hint}; the keys are in docs/rule-authors.md")));
            }
        }
    }
    let f: CaseFile = table.try_into().map_err(|e: toml::de::Error| bad(e.to_string()))?;
    Ok(f.case)
}

/// A case file's text, through the bounded reader (at most 1 MiB, a
/// regular file).
fn read_case_text(path: &Path) -> Result<String> {
    use omlet::knowledge::files;
    Ok(files::read_text(path, files::MAX_CONFIG_BYTES, "case file")?)
}

/// The keys a case may have: what the runner reads, and the corpus's
/// descriptive keys (`class`, `source`, …), which it ignores. Each is
/// documented in docs/testing.md (a test checks that).
pub const CASE_KEYS: &[&str] = &[
    "name",
    "oml",
    "oml_file",
    "input",
    "input_types",
    "knowledge",
    "knowdb",
    "expected",
    "expected_types",
    "expected_ignored",
    "expected_error",
    "expected_record_error",
    "intranet_nets",
    "rule_path",
    "model",
    "spec_expected",
    "spec_required",
    "reference_error",
    "reference_expected",
    "class",
    "source",
    "confidence",
    "notes",
];

/// Runs every case of one file, each with its knowledge in a fresh in-memory
/// SQLite; `oml_file` and `knowdb` are relative to the file. A failing case
/// is an [`Outcome`]; `Err` means the file could not be read or parsed, or a rule
/// file could not be read.
pub async fn run_file(path: &Path, mode: Mode, engine: &Engine) -> Result<Vec<Outcome>> {
    run_file_on(path, mode, engine, None).await
}

/// [`run_file`], with the knowledge tables in `db` if given, else in a fresh
/// in-memory SQLite per case.
pub async fn run_file_on(path: &Path, mode: Mode, engine: &Engine, db: Option<&TestDb>) -> Result<Vec<Outcome>> {
    run_matching(path, mode, engine, db, None, false).await
}

/// [`run_file_on`], only the cases whose name contains `filter` (all when
/// `None`); with `trace`, each outcome carries the trace of its record.
pub async fn run_matching(
    path: &Path,
    mode: Mode,
    engine: &Engine,
    db: Option<&TestDb>,
    filter: Option<&str>,
    trace: bool,
) -> Result<Vec<Outcome>> {
    run_matching_within(path, &[], mode, engine, db, filter, trace).await
}

/// [`run_matching`], where the files the cases name (`oml_file`, `knowdb`)
/// may lie inside the case file's folder or inside one of `roots` (the
/// folders given to `omlet test`); any other, links followed, is refused
/// with [`Error::Input`] naming the key and the path. Every file is read
/// with a bound: a rule file at most
/// [`MAX_RULE_FILE_BYTES`](omlet::build::MAX_RULE_FILE_BYTES). What the
/// outcomes say is clipped: [`MAX_SHOWN_BYTES`] a value,
/// [`MAX_FAILURE_BYTES`] a case, [`MAX_REPORT_BYTES`] the file.
#[allow(clippy::too_many_arguments, reason = "run_matching's arguments and the roots; main.rs passes them all")]
pub async fn run_matching_within(
    path: &Path,
    roots: &[PathBuf],
    mode: Mode,
    engine: &Engine,
    db: Option<&TestDb>,
    filter: Option<&str>,
    trace: bool,
) -> Result<Vec<Outcome>> {
    let mut out = Vec::new();
    let dir = omlet::knowledge::files::folder(path);
    let cases = read_cases(path)?;
    let roots = guard::roots(path, roots)?;
    let mut reported = 0;
    for mut case in cases {
        if filter.is_some_and(|f| !case.name.contains(f)) {
            continue;
        }
        if let Some(k) = &case.knowdb {
            case.knowdb = Some(guard::confine(path, &case.name, "knowdb", Path::new(k), &roots)?.display().to_string());
        }
        if let Some(f) = &case.oml_file {
            let real = guard::confine(path, &case.name, "oml_file", Path::new(f), &roots)?;
            // Named as written (relative to the case file), read where it resolved.
            let p = dir.join(f);
            if real.is_dir() {
                // A rule set: its files, compiled together, each inside the roots too.
                for file in omlet::build::oml_files(std::slice::from_ref(&p))? {
                    let inside = file.strip_prefix(dir).unwrap_or(&file);
                    let real = guard::confine(path, &case.name, "oml_file", inside, &roots)?;
                    case.sources.push((file.display().to_string(), RuleSource::read(&real)?.text));
                }
                if case.sources.is_empty() {
                    return Err(Error::Input { what: p.display().to_string(), message: "no .oml files found".into() });
                }
            } else {
                case.oml = RuleSource::read(&real)?.text;
            }
            case.oml_file = Some(p.display().to_string());
        }
        let (result, trace) = run_case_traced(&case, mode, engine, db, trace).await;
        // What a case prints is bounded, and so is what a file prints.
        let mut failure = result.err().map(|f| guard::clip(&f, MAX_FAILURE_BYTES));
        let mut trace = trace.map(|t| guard::clip(&t, MAX_FAILURE_BYTES * 4));
        let size = failure.as_ref().map_or(0, String::len) + trace.as_ref().map_or(0, String::len);
        if reported + size > MAX_REPORT_BYTES {
            failure = failure.map(|f| {
                format!("(the failure's {} bytes are left out: this file's report passed {MAX_REPORT_BYTES} bytes)", f.len())
            });
            trace = trace.map(|_| "(left out: this file's report passed its bound)".to_string());
        } else {
            reported += size;
        }
        out.push(Outcome { name: case.name, failure, trace });
    }
    Ok(out)
}

/// Runs one case; `Err` says why it failed. The rule must be in `oml`
/// (`oml_file` only names it) and `knowdb` is taken as a path as it is.
pub async fn run_case(case: &Case, mode: Mode, engine: &Engine) -> std::result::Result<(), String> {
    run_case_on(case, mode, engine, None).await
}

/// [`run_case`], with the knowledge tables in `db` if given: each is dropped
/// before it is loaded and again after the case.
pub async fn run_case_on(case: &Case, mode: Mode, engine: &Engine, db: Option<&TestDb>) -> std::result::Result<(), String> {
    run_case_traced(case, mode, engine, db, false).await.0
}

/// [`run_case_on`]; with `trace`, also the trace of the case's record, as
/// text (when the rule compiled and the record was evaluated).
pub async fn run_case_traced(
    case: &Case,
    mode: Mode,
    engine: &Engine,
    db: Option<&TestDb>,
    trace: bool,
) -> (std::result::Result<(), String>, Option<String>) {
    let mut created = Vec::new();
    let mut traced = trace.then(String::new);
    let r = run_case_inner(case, mode, engine, db, &mut created, &mut traced).await;
    if let Some(db) = db {
        for t in created {
            let _ = db.provider.drop_table(&t).await;
        }
    }
    (r, traced.filter(|t| !t.is_empty()))
}

async fn run_case_inner(
    case: &Case,
    mode: Mode,
    engine: &Engine,
    db: Option<&TestDb>,
    created: &mut Vec<String>,
    trace: &mut Option<String>,
) -> std::result::Result<(), String> {
    let file = case.oml_file.clone().unwrap_or_else(|| format!("{}.oml", case.name));
    let src: Vec<RuleSource> = match case.sources.as_slice() {
        [] => vec![RuleSource { file: file.clone(), text: case.oml.clone() }],
        set => set.iter().map(|(file, text)| RuleSource { file: file.clone(), text: text.clone() }).collect(),
    };
    let compiled = omlet::build::compile(&src);
    if let Some(what) = &case.expected_error {
        return match compiled {
            Err(_) => Ok(()),
            Ok(_) => Err(format!("expected a compile error ({what}), but the rule compiled")),
        };
    }
    let (expected, optional) = match (&case.expected, &case.spec_expected, &case.expected_record_error) {
        (Some(e), _, None) => (e.clone(), false),
        (None, Some(e), None) => (e.clone(), case.spec_required == Some(false)),
        (None, None, Some(_)) => (String::new(), false),
        (_, _, Some(_)) => return Err("expected_record_error stands alone: the record has no output".into()),
        (None, None, None) => return Err("the case has no expectation".into()),
    };
    let program = match compiled {
        Ok(p) => p,
        Err(_) if optional => return Ok(()),
        Err(e) => return Err(format!("compile error:\n{e}")),
    };
    let input = input_record(&case.input, &case.input_types)?;
    // Which model: by the case's rule path or model name, else the only one.
    let route = match (&case.rule_path, &case.model) {
        (Some(p), _) => omlet::Route::Path(p),
        (None, Some(m)) => omlet::Route::Model(m),
        (None, None) => omlet::Route::Only,
    };
    let model = program
        .route(match route {
            omlet::Route::Path(p) => omlet_lang::Route::Path(p),
            omlet::Route::Model(m) => omlet_lang::Route::Model(m),
            _ => omlet_lang::Route::Only,
        })
        .map_err(|e| e.to_string());
    let provider: Option<Arc<dyn Provider>> = match (&case.knowledge, &case.knowdb, db) {
        (None, None, _) => None,
        (_, _, Some(db)) => Some(db.provider.clone()),
        (_, _, None) => Some(Arc::new(SqliteProvider::memory().await.map_err(|e| e.to_string())?)),
    };
    if let Some(p) = &provider {
        if let Some(k) = &case.knowledge {
            for t in tables_from_json(k).map_err(|e| e.to_string())? {
                created.push(t.name.clone());
                let _ = p.drop_table(&t.name).await;
                p.load_table(&t.name, &t.columns, &t.types, &t.rows).await.map_err(|e| e.to_string())?;
            }
        } else if let Some(path) = &case.knowdb {
            let spec = omlet::knowledge::knowdb::read(Path::new(path)).map_err(|e| e.to_string())?;
            for t in &spec.tables {
                created.push(t.name.clone());
                let _ = p.drop_table(&t.name).await;
            }
            omlet::knowledge::knowdb::load(Path::new(path), p.as_ref()).await.map_err(|e| e.to_string())?;
        }
    }
    let knowledge = provider.map(|p| Arc::new(Knowledge::new(p)));
    let output: std::result::Result<Fields, String> = match mode {
        Mode::Wasm => {
            let component = omlet::build::component_for(&program).map_err(|e| e.to_string())?;
            let mut options = omlet::LoadOptions::new().knowledge(knowledge);
            if let Some(n) = &case.intranet_nets {
                options = options.intranet_nets(n.clone());
            }
            let rule = engine.load_component(&component, &options).await.map_err(|e| e.to_string())?;
            let record = Record::from(input);
            match trace {
                Some(t) => {
                    let e = rule.explain_on(route, &record).await.map_err(|e| e.to_string())?;
                    *t = e.trace.to_text();
                    e.output.map(Vec::from).map_err(|e| e.to_string())
                }
                None => rule.evaluate_on(route, &record).await.map(Vec::from).map_err(|e| e.to_string()),
            }
        }
        Mode::Native => {
            let bound = match &knowledge {
                Some(k) => k.bind(&program.statements).await.map_err(|e| e.to_string())?,
                None => Vec::new(),
            };
            let handle = tokio::runtime::Handle::current();
            let mut host = NativeHost::new(knowledge, bound, handle);
            if let Some(n) = &case.intranet_nets {
                host.nets = n.strict("the case's intranet_nets").map_err(|e| e.to_string())?;
            }
            let (out, text) = native::evaluate(engine.config(), program, model, input, host, trace.is_some()).await?;
            if let (Some(t), Some(text)) = (trace.as_mut(), text) {
                *t = text;
            }
            out
        }
    };
    let output = output.and_then(bounded);
    match (&case.expected_record_error, output) {
        (None, output) => compare(case, &expected, &output?),
        (Some(want), Err(e)) if e.contains(want.as_str()) => Ok(()),
        (Some(want), Err(e)) => Err(format!("expected a record error containing `{}`, got `{}`", show(want), show(&e))),
        (Some(want), Ok(out)) => Err(format!(
            "expected a record error containing `{}`, but the record gave {}",
            show(want),
            show(&record::fields_json(&out))
        )),
    }
}

/// Answers lookups for the native evaluator (on a blocking thread).
/// Lookup errors are never fatal here, whatever `on_lookup_error` says.
pub struct NativeHost {
    /// Where lookups go; without it every lookup fails (not fatally).
    pub knowledge: Option<Arc<Knowledge>>,
    /// The rule's statements bound to `knowledge`, by statement number.
    pub bound: Vec<BoundStatement>,
    /// The runtime each lookup blocks on; so `query` must not run on one of
    /// its async worker threads.
    pub handle: tokio::runtime::Handle,
    /// The networks `intranet_ip` and `access_direct` call LAN.
    pub nets: Vec<omlet_lang::intranet::Net>,
}

impl NativeHost {
    /// A host over `knowledge` (its `[intranet_nets]` included, or the
    /// built-in ranges without knowledge).
    pub fn new(knowledge: Option<Arc<Knowledge>>, bound: Vec<BoundStatement>, handle: tokio::runtime::Handle) -> NativeHost {
        let nets = match &knowledge {
            Some(k) => k.intranet_nets().to_vec(),
            None => omlet_lang::intranet::BUILTIN.to_vec(),
        };
        NativeHost { knowledge, bound, handle, nets }
    }
}

impl Host for NativeHost {
    fn query(&mut self, statement: u32, params: &[Cell]) -> std::result::Result<Option<Vec<Cell>>, QueryError> {
        let (Some(k), Some(stmt)) = (&self.knowledge, self.bound.get(statement as usize)) else {
            return Err(QueryError { message: "no knowledge".into(), fatal: false });
        };
        self.handle.block_on(k.query(stmt, params)).map_err(|e| QueryError { message: e.message, fatal: false })
    }
    fn columns(&mut self, statement: u32) -> std::result::Result<Vec<String>, QueryError> {
        Ok(self.bound.get(statement as usize).map(|b| b.columns.clone()).unwrap_or_default())
    }
    fn now(&mut self) -> (i64, i32) {
        omlet::clock::now()
    }
    fn intranet_nets(&mut self) -> &[omlet_lang::intranet::Net] {
        &self.nets
    }
}

/// One table of a case's inline `knowledge`.
pub struct TableData {
    /// The table's name.
    pub name: String,
    /// Column names, in order.
    pub columns: Vec<String>,
    /// SQLite column types, one per column; a missing one is `TEXT`.
    pub types: Vec<String>,
    /// The rows, in insertion order.
    pub rows: Vec<Vec<Cell>>,
}

/// Reads a case's `knowledge` JSON:
/// `{"tables": {"t": {"columns": [...], "types": [...], "rows": [[...], ...]}}}`,
/// `types` optional. JSON `true`/`false` become 1/0, arrays and objects
/// their JSON text. Fails with [`Error::Knowledge`] for JSON of another
/// shape, a table name that is not a lower-case identifier, a column name
/// that is not an identifier, or a type the knowdb's `types` would refuse
/// (the types returned are the allow-list's own words: nothing of the
/// case's text reaches SQL).
pub fn tables_from_json(json: &str) -> Result<Vec<TableData>> {
    #[derive(Deserialize)]
    struct Tables {
        tables: serde_json::Map<String, Json>,
    }
    #[derive(Deserialize)]
    struct Table {
        columns: Vec<String>,
        #[serde(default)]
        types: Vec<String>,
        rows: Vec<Vec<Json>>,
    }
    let spec: Tables = serde_json::from_str(json).map_err(|e| omlet::knowledge::Error::Knowledge(format!("knowledge: {e}")))?;
    let mut out = Vec::new();
    for (name, t) in spec.tables {
        let t: Table = serde_json::from_value(t).map_err(|e| omlet::knowledge::Error::Knowledge(format!("table {name}: {e}")))?;
        let types = guard::table(&name, &t.columns, &t.types).map_err(omlet::knowledge::Error::Knowledge)?;
        let rows = t
            .rows
            .iter()
            .map(|r| {
                r.iter()
                    .map(|v| match v {
                        Json::Null => Cell::Null,
                        Json::Bool(b) => Cell::Integer(*b as i64),
                        Json::Number(n) => n.as_i64().map(Cell::Integer).unwrap_or(Cell::Real(n.as_f64().unwrap_or(0.0))),
                        Json::String(s) => Cell::Text(s.clone()),
                        other => Cell::Text(other.to_string()),
                    })
                    .collect()
            })
            .collect();
        out.push(TableData { name, columns: t.columns, types, rows });
    }
    Ok(out)
}

/// Builds a case's inline knowledge in a fresh in-memory SQLite.
pub async fn load_knowledge(json: &str) -> Result<Arc<Knowledge>> {
    let db = SqliteProvider::memory().await?;
    for t in tables_from_json(json)? {
        db.load_table(&t.name, &t.columns, &t.types, &t.rows).await?;
    }
    Ok(Arc::new(Knowledge::new(Arc::new(db))))
}

/// A database for `omlet test --knowledge URL`: a fresh database created
/// for the run (PostgreSQL, MySQL) and dropped by [`TestDb::finish`].
pub struct TestDb {
    /// The database the cases' tables go to.
    pub provider: Arc<dyn Provider>,
    admin: Option<(Arc<dyn Provider>, String)>,
}

impl TestDb {
    /// For a PostgreSQL or MySQL `url`, creates the database
    /// `omlet_test_<pid>_<ms>` (utf8mb4 with binary collation on MySQL) and
    /// connects to it, waiting up to 10 s for a connection; the URL's user
    /// needs the right to create databases. A SQLite URL is used as it is,
    /// and not removed; `sqlite://FILE` must name an existing regular file
    /// (a test run creates no database file), else [`Error::Input`].
    pub async fn create(url: &str) -> Result<TestDb> {
        use omlet::knowledge::config::connect;
        let timeout = std::time::Duration::from_secs(10);
        if url.starts_with("sqlite") {
            guard::existing_sqlite(url)?;
            return Ok(TestDb { provider: connect(url, 1, timeout).await?.into_dyn(), admin: None });
        }
        let name = format!(
            "omlet_test_{}_{}",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
        );
        let admin = connect(url, 1, timeout).await?.into_dyn();
        let charset = if admin.kind() == "mysql" { " character set utf8mb4 collate utf8mb4_bin" } else { "" };
        admin.execute(&format!("create database {name}{charset}")).await?;
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, format!("?{q}")),
            None => (url, String::new()),
        };
        let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
        let db_url = match base[scheme_end..].find('/') {
            Some(i) => format!("{}/{name}{query}", &base[..scheme_end + i]),
            None => format!("{base}/{name}{query}"),
        };
        let provider = connect(&db_url, 2, timeout).await?.into_dyn();
        Ok(TestDb { provider, admin: Some((admin, name)) })
    }

    /// Drops the database created for the run.
    pub async fn finish(self) -> Result<()> {
        if let Some((admin, name)) = self.admin {
            self.provider.close().await;
            let force = if admin.kind() == "postgres" { " with (force)" } else { "" };
            admin.execute(&format!("drop database {name}{force}")).await?;
        }
        Ok(())
    }
}

fn input_record(json: &str, types: &std::collections::BTreeMap<String, String>) -> std::result::Result<Fields, String> {
    let mut rec = Vec::from(record::from_json_str(json).map_err(|e| format!("input: {e}"))?);
    retype(&mut rec, types).map_err(|e| format!("input {e}"))?;
    Ok(rec)
}

/// The types [`retype`] knows.
pub const INPUT_TYPES: [&str; 6] = ["ip", "time", "digit", "float", "bool", "chars"];

/// Types top-level input fields (`ip`, `time`, `digit`, `float`, `bool`,
/// `chars`): [`omlet::Record::retype`], for fields as the evaluator holds them.
pub fn retype(
    fields: &mut Vec<Field<'static>>,
    types: &std::collections::BTreeMap<String, String>,
) -> std::result::Result<(), String> {
    let mut r = Record::from(std::mem::take(fields));
    let done = r.retype(types).map_err(|e| match e {
        Error::Input { what, message } => format!("{what}: {message}"),
        e => e.to_string(),
    });
    *fields = Vec::from(r);
    done
}

fn kind_of(rec: &[Field<'static>], name: &str) -> Option<Kind> {
    rec.iter().find(|f| f.name == name).map(|f| f.value.kind())
}

fn compare(case: &Case, expected: &str, actual: &[Field<'static>]) -> std::result::Result<(), String> {
    let want: Json = serde_json::from_str(expected).map_err(|e| format!("expected is not JSON: {e}"))?;
    let got_text = record::fields_json(actual);
    let got: Json = serde_json::from_str(&got_text).map_err(|e| format!("output is not JSON: {e}"))?;
    let diff = || format!("expected: {}\n  actual: {}", show(expected), show(&got_text));
    let (Json::Object(w), Json::Object(g)) = (&want, &got) else { return Err(diff()) };
    // Field by field: what is missing, extra or different, then the order.
    let mut lines = Vec::new();
    for (k, wv) in w {
        let name = show(k);
        match g.get(k) {
            None => lines.push(format!("missing  {name}: expected {}", show(wv))),
            Some(gv) => {
                let typed = actual.iter().find(|f| f.name == k.as_str()).map(|f| &f.value);
                if !matches(wv, gv, typed) {
                    lines.push(format!("changed  {name}: expected {}, got {}", show(wv), show(gv)));
                }
            }
        }
    }
    for (k, gv) in g {
        if !w.contains_key(k) {
            lines.push(format!("extra    {}: {}", show(k), show(gv)));
        }
    }
    let wk: Vec<&String> = w.keys().collect();
    let gk: Vec<&String> = g.keys().collect();
    if lines.is_empty() && wk != gk {
        let names = |v: &[&String]| show(&v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "));
        lines.push(format!("order    the fields are right, in another order: expected {}; got {}", names(&wk), names(&gk)));
    }
    if !lines.is_empty() {
        return Err(format!("{}\n{}", guard::clip(&lines.join("\n"), MAX_FAILURE_BYTES), diff()));
    }
    // Every mismatch of type, not only the first.
    let mut wrong = Vec::new();
    for (k, ty) in &case.expected_types {
        let got = kind_of(actual, k).map(Kind::name);
        if got != Some(ty.as_str()) {
            wrong.push(format!("field {k}: expected type {ty}, got {}", got.unwrap_or("nothing")));
        }
    }
    for k in &case.expected_ignored {
        if kind_of(actual, k) != Some(Kind::Ignore) {
            wrong.push(format!("field {k} should be present as an ignore field"));
        }
    }
    if !wrong.is_empty() {
        return Err(format!("{}\n{}", wrong.join("\n"), diff()));
    }
    Ok(())
}

/// `value` as a failure shows it: at most [`MAX_SHOWN_BYTES`], then `… (N bytes more)`.
fn show(value: &(impl std::fmt::Display + ?Sized)) -> String {
    guard::clip(&value.to_string(), MAX_SHOWN_BYTES)
}

/// Fails an output record whose rendering passes [`MAX_OUTPUT_BYTES`].
fn bounded(output: Fields) -> std::result::Result<Fields, String> {
    let len = record::fields_json(&output).len();
    if len > MAX_OUTPUT_BYTES {
        return Err(format!(
            "output bytes: the output record takes {len} bytes, more than {MAX_OUTPUT_BYTES} \
             (omlet_cli::conformance::MAX_OUTPUT_BYTES)"
        ));
    }
    Ok(output)
}

/// Whether output `got` (rendered; `typed` is the value it was rendered
/// from, where known) matches `want`. The clock sentinels `"<any:time>"`,
/// `"<any:digit>"` and `"<any:chars>"` match any value of their kind at any
/// depth; everything else is [`json_eq`].
fn matches(want: &Json, got: &Json, typed: Option<&Value<'static>>) -> bool {
    let sentinel = match want.as_str() {
        Some("<any:time>") => Some(Kind::Time),
        Some("<any:digit>") => Some(Kind::Digit),
        Some("<any:chars>") => Some(Kind::Chars),
        _ => None,
    };
    if let Some(kind) = sentinel {
        return match typed {
            Some(v) => v.kind() == kind,
            // Without the typed value, go by the rendered form.
            None => match kind {
                Kind::Digit => got.is_i64() || got.is_u64(),
                _ => got.is_string(),
            },
        };
    }
    match (want, got) {
        (Json::Object(w), Json::Object(g)) => {
            let members = match typed {
                Some(Value::Obj(m)) => Some(m.as_slice()),
                _ => None,
            };
            w.len() == g.len()
                && w.iter().all(|(k, wv)| {
                    let t = members.and_then(|m| m.iter().find(|f| f.name == k.as_str())).map(|f| &f.value);
                    g.get(k).is_some_and(|gv| matches(wv, gv, t))
                })
        }
        (Json::Array(w), Json::Array(g)) => {
            // Ignore elements are not rendered: index the rendered ones.
            let elems: Option<Vec<&Value<'static>>> = match typed {
                Some(Value::Array(e)) => Some(e.iter().map(|f| &f.value).filter(|v| !matches!(v, Value::Ignore)).collect()),
                _ => None,
            };
            let elems = elems.filter(|e| e.len() == g.len());
            w.len() == g.len() && w.iter().zip(g).enumerate().all(|(i, (wv, gv))| matches(wv, gv, elems.as_ref().map(|e| e[i])))
        }
        _ => json_eq(want, got),
    }
}

/// Structural equality; numbers keep the integer/float distinction.
fn json_eq(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => {
            x.is_f64() == y.is_f64() && x.as_f64() == y.as_f64() && (x.is_f64() || x.as_i64() == y.as_i64())
        }
        (Json::Array(x), Json::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b)),
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &'static str, value: Value<'static>) -> Field<'static> {
        Field::new(name, value)
    }

    #[test]
    fn a_failed_case_says_which_fields_differ() {
        let case: Case = toml::from_str("name = 'c'\noml = ''\ninput = '{}'").unwrap();
        let out = vec![field("a", Value::Digit(1)), field("b", Value::Chars("x".into())), field("z", Value::Bool(true))];
        let e = compare(&case, r#"{"a":1,"b":"y","c":2}"#, &out).unwrap_err();
        assert!(e.starts_with("changed  b: expected \"y\", got \"x\"\nmissing  c: expected 2\nextra    z: true\n"), "{e}");
        let e = compare(&case, r#"{"b":"x","a":1,"z":true}"#, &out).unwrap_err();
        assert!(e.starts_with("order    the fields are right, in another order: expected b, a, z; got a, b, z"), "{e}");
    }

    #[test]
    fn clock_sentinels_match_by_kind_at_any_depth() {
        let case: Case = toml::from_str("name = 'c'\noml = ''\ninput = '{}'").unwrap();
        let t = Value::Time(0);
        let inner = Value::Obj(Box::new(vec![field("t", t.clone()), field("n", Value::Digit(7))]));
        let out =
            vec![field("o", inner), field("a", Value::Array(Box::new(vec![field("", t), field("", Value::Chars("x".into()))])))];
        let want = r#"{"o":{"t":"<any:time>","n":"<any:digit>"},"a":["<any:time>","<any:chars>"]}"#;
        assert_eq!(compare(&case, want, &out), Ok(()));
        // A time sentinel does not take text that merely renders as a string.
        let wrong = r#"{"o":{"t":"<any:time>","n":7},"a":["<any:chars>","<any:chars>"]}"#;
        assert!(compare(&case, wrong, &out).is_err());
        let wrong = r#"{"o":{"t":"<any:chars>","n":7},"a":["<any:time>","x"]}"#;
        assert!(compare(&case, wrong, &out).is_err());
    }
}
