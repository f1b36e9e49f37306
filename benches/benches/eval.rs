//! The evaluation matrix: native vs wasm, single vs batched, pure vs lookup,
//! async vs blocking, and concurrency (one record or 256 per call); with
//! baselines (an empty guest call, the bare sqlx round trip at each
//! concurrency, the databases' own load tools). Besides criterion's cells:
//! per-call latency percentiles and memory per instance, in the side file
//! (`omlet_benches::side`), where `benches/run.rs` adds `omlet run`'s
//! throughput. `benches/report.py` turns it all into BENCHMARKS.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use omlet::build::RuleSource;
use omlet::knowledge::{BatchPlan, BoundStatement, BoxFuture, Placeholders, Prepared, Provider, ProviderError, Tables};
use omlet::{Engine, Knowledge, Record, Rule};
use omlet_benches::*;
use omlet_cli::conformance::NativeHost;
use omlet_lang::eval::{Cell, Host, Offline};
use omlet_lang::ir::Program;
use tokio::runtime::Runtime;

fn compile(text: &str) -> Program {
    omlet::build::compile(&[RuleSource { file: "bench.oml".into(), text: text.into() }]).unwrap()
}

/// A rule as a long-running host holds it: loaded from its sources, with its
/// core path for one-record calls compiled (which a rule gets after its
/// first 1,024 one-record calls), so that no cell measures the switch.
fn load(rt: &Runtime, engine: &Engine, text: &str, k: Option<Arc<Knowledge>>) -> Arc<Rule> {
    let rule = rt.block_on(engine.load_source("bench.oml", text, &omlet::LoadOptions::new().knowledge(k))).unwrap();
    rule.wait_core_path();
    Arc::new(rule)
}

fn config() -> Criterion {
    let (warm_up, measure, samples) = criterion_timing();
    Criterion::default().configure_from_args().warm_up_time(warm_up).measurement_time(measure).sample_size(samples)
}

/// Records evaluated one per call, in one async loop.
fn wasm_single(rt: &Runtime, rule: &Rule, records: &[Record], iters: u64) -> Duration {
    rt.block_on(async {
        let t = Instant::now();
        for i in 0..iters as usize {
            std::hint::black_box(rule.evaluate(&records[i % records.len()]).await.unwrap());
        }
        t.elapsed()
    })
}

/// [`native`], each output then written out as its JSON line, as a host
/// that forwards records does.
fn native_json(program: &Program, host: &mut dyn Host, records: &[Record], iters: u64) -> Duration {
    let t = Instant::now();
    for i in 0..iters as usize {
        let rec = records[i % records.len()].clone();
        let out = omlet_lang::evaluate(program, 0, rec.into(), host).unwrap();
        std::hint::black_box(omlet::record::fields_json(&out));
    }
    t.elapsed()
}

/// [`wasm_single`], each output then written out as [`native_json`] writes it.
fn wasm_single_json(rt: &Runtime, rule: &Rule, records: &[Record], iters: u64) -> Duration {
    rt.block_on(async {
        let t = Instant::now();
        for i in 0..iters as usize {
            let out = rule.evaluate(&records[i % records.len()]).await.unwrap();
            std::hint::black_box(out.to_json());
        }
        t.elapsed()
    })
}

/// `iters` batches of `n` records; each call's latency goes to bench `id`.
fn wasm_batch(rt: &Runtime, rule: &Rule, records: &[Record], n: usize, iters: u64, id: &str) -> Duration {
    let chunks: Vec<&[Record]> = records.chunks(n).filter(|c| c.len() == n).collect();
    let mut lat: Vec<u32> = Vec::with_capacity(iters as usize);
    let d = rt.block_on(async {
        let t = Instant::now();
        let mut prev = t;
        for i in 0..iters as usize {
            std::hint::black_box(rule.evaluate_batch(chunks[i % chunks.len()]).await.unwrap());
            let now = Instant::now();
            lat.push(nanos(now - prev));
            prev = now;
        }
        t.elapsed()
    });
    side::record(id, &lat);
    d
}

fn nanos(d: Duration) -> u32 {
    d.as_nanos().min(u32::MAX as u128) as u32
}

fn native(program: &Program, host: &mut dyn Host, records: &[Record], iters: u64) -> Duration {
    let t = Instant::now();
    for i in 0..iters as usize {
        let rec = records[i % records.len()].clone();
        std::hint::black_box(omlet_lang::evaluate(program, 0, rec.into(), host).unwrap());
    }
    t.elapsed()
}

/// The native evaluator with lookups through `Knowledge` (its shared cache,
/// then the provider), on a plain thread (the native host blocks on each lookup).
fn native_lookups(
    rt: &Runtime,
    prog: &Program,
    k: &Arc<Knowledge>,
    bound: &[BoundStatement],
    records: &[Record],
    n: u64,
) -> Duration {
    let (prog, k, bound, records) = (prog.clone(), k.clone(), bound.to_vec(), records.to_vec());
    let handle = rt.handle().clone();
    std::thread::spawn(move || {
        let mut host = NativeHost::new(Some(k), bound, handle);
        native(&prog, &mut host, &records, n)
    })
    .join()
    .unwrap()
}

/// `$c` tasks on the runtime make `$iters` calls in all (`$body`, with `$k`
/// the call's number), timed from the first spawn to the last completion.
/// Each call's latency is kept: one clock read per call (the end of one call
/// is the start of the next in its task) into a vector allocated before the
/// clock starts, folded into bench `$id`'s histogram after it stops (an
/// empty `$id` keeps nothing). `$cap`s are cloned into each task.
macro_rules! fan_out {
    ($rt:expr, $c:expr, $iters:expr, $id:expr, ($($cap:ident),*), |$k:ident| $body:expr) => {{
        let c: usize = $c;
        let per = ($iters as usize).div_ceil(c);
        let lats: Vec<Vec<u32>> = (0..c).map(|_| Vec::with_capacity(per)).collect();
        let (d, lats) = $rt.block_on(async {
            let t = Instant::now();
            let tasks: Vec<_> = lats
                .into_iter()
                .enumerate()
                .map(|(w, mut lat)| {
                    $(let $cap = $cap.clone();)*
                    tokio::spawn(async move {
                        let mut prev = Instant::now();
                        for i in 0..per {
                            let $k = w * per + i;
                            std::hint::black_box($body);
                            let now = Instant::now();
                            lat.push(nanos(now - prev));
                            prev = now;
                        }
                        lat
                    })
                })
                .collect();
            let mut all = Vec::with_capacity(c);
            for t in tasks {
                all.push(t.await.unwrap());
            }
            (t.elapsed(), all)
        });
        let id: &str = $id;
        if !id.is_empty() {
            for l in &lats {
                side::record(id, l);
            }
        }
        d
    }};
}

/// `c` tasks share the rule and evaluate `iters` records in all, one per call.
fn concurrent(rt: &Runtime, rule: &Arc<Rule>, records: &Arc<Vec<Record>>, c: usize, iters: u64, id: &str) -> Duration {
    fan_out!(rt, c, iters, id, (rule, records), |k| rule.evaluate(&records[k % records.len()]).await.unwrap())
}

/// `c` tasks share the rule and make `iters` calls in all, each a batch.
fn concurrent_batched(
    rt: &Runtime,
    rule: &Arc<Rule>,
    batches: &Arc<Vec<Vec<Record>>>,
    c: usize,
    iters: u64,
    id: &str,
) -> Duration {
    fan_out!(rt, c, iters, id, (rule, batches), |k| rule.evaluate_batch(&batches[k % batches.len()]).await.unwrap())
}

/// A provider that counts the lookups in flight (each one is an instance
/// suspended in a guest call), to know how many instances a run held.
struct InFlight {
    inner: Arc<dyn Provider>,
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl Provider for InFlight {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn placeholders(&self) -> Placeholders {
        self.inner.placeholders()
    }
    fn rewrite_sql(&self, sql: String) -> Result<String, ProviderError> {
        self.inner.rewrite_sql(sql)
    }
    fn lookup_connections(&self) -> usize {
        self.inner.lookup_connections()
    }
    fn prepare<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, Result<Prepared, ProviderError>> {
        self.inner.prepare(sql)
    }
    fn query_first<'a>(
        &'a self,
        stmt: &'a BoundStatement,
        params: Vec<Cell>,
    ) -> BoxFuture<'a, Result<Option<Vec<Cell>>, ProviderError>> {
        Box::pin(async move {
            let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(n, Ordering::SeqCst);
            let r = self.inner.query_first(stmt, params).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            r
        })
    }
    fn query_many<'a>(&'a self, plan: &'a BatchPlan, keys: Vec<Cell>) -> BoxFuture<'a, Result<Vec<Vec<Cell>>, ProviderError>> {
        self.inner.query_many(plan, keys)
    }
    fn prepare_many<'a>(&'a self, plan: &'a BatchPlan) -> BoxFuture<'a, Result<(), ProviderError>> {
        self.inner.prepare_many(plan)
    }
    fn close<'a>(&'a self) -> BoxFuture<'a, ()> {
        self.inner.close()
    }
}

// The benches load no tables through it.
impl Tables for InFlight {}

/// Memory per instance: a fresh lookup rule whose every lookup goes to the
/// database (bypass, no miss batching), so that each of 64 concurrent
/// evaluations holds its own instance while it waits; VmRSS before (the
/// rule loaded, its first instance warm) and after 64 were pooled.
fn instance_memory(rt: &Runtime, engine: &Engine, sizes: &Sizes, records: &Arc<Vec<Record>>) {
    use omlet::knowledge::sqlite::SqliteProvider;
    use omlet::knowledge::{CacheMode, KnowledgeConfig};
    let db = rt.block_on(SqliteProvider::memory()).unwrap();
    let data: Vec<Vec<Cell>> =
        (1..=sizes.rows as i64).map(|i| vec![Cell::Integer(i), Cell::Text(format!("value-{i}"))]).collect();
    rt.block_on(db.load_table("perf", &["id".into(), "value".into()], &["INTEGER PRIMARY KEY".into(), "TEXT".into()], &data))
        .unwrap();
    let counting = Arc::new(InFlight { inner: Arc::new(db), now: AtomicUsize::new(0), peak: AtomicUsize::new(0) });
    let mut config = KnowledgeConfig::for_url("sqlite::memory:");
    config.cache.mode = CacheMode::Bypass;
    config.batch_misses = false;
    let k = Arc::new(Knowledge::with_config(counting.clone(), config));
    let rule = load(rt, engine, LOOKUP_RULE, Some(k));
    rt.block_on(rule.evaluate(&records[0])).unwrap();
    counting.peak.store(0, Ordering::SeqCst);
    let (before, _) = rss_kib();
    concurrent(rt, &rule, records, 64, 64 * 32, "");
    let (after, hwm) = rss_kib();
    let peak = counting.peak.load(Ordering::SeqCst);
    let added = peak.saturating_sub(1).max(1);
    let per = (after as f64 - before as f64) / added as f64;
    eprintln!("memory: {peak} instances at c=64; VmRSS {before} → {after} KiB; {per:.0} KiB per added instance");
    side::put(
        "memory/instances_c64",
        side::object(&[
            ("rule", side::string("lookup, bypass (every lookup waits on the database)")),
            ("instances_in_flight", peak.to_string()),
            ("instances_added", added.to_string()),
            ("rss_before_kib", before.to_string()),
            ("rss_after_kib", after.to_string()),
            ("hwm_kib", hwm.to_string()),
            ("per_instance_kib", side::number(per.round())),
        ]),
    );
}

fn benches(c: &mut Criterion) {
    let sizes = Sizes::from_env();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let engine = Engine::new().unwrap();
    let records = Arc::new(id_records(&sizes));
    let perf = rt.block_on(perf_knowledge(sizes.rows));

    // --- pure rule: what evaluation costs, native and in wasm ---------------
    let pure_prog = compile(PURE_RULE);
    let pure = load(&rt, &engine, PURE_RULE, None);
    let mut g = c.benchmark_group("pure");
    g.throughput(Throughput::Elements(1));
    g.bench_function("native", |b| b.iter_custom(|n| native(&pure_prog, &mut Offline::at((0, 0)), &records, n)));
    g.bench_function("wasm_single", |b| b.iter_custom(|n| wasm_single(&rt, &pure, &records, n)));
    // Each output also written out as JSON: the record a one-record call
    // returns keeps the guest's output frame and reads its fields only when
    // asked, so these two cells show a whole forward, not just the call.
    g.bench_function("native_json", |b| b.iter_custom(|n| native_json(&pure_prog, &mut Offline::at((0, 0)), &records, n)));
    g.bench_function("wasm_single_json", |b| b.iter_custom(|n| wasm_single_json(&rt, &pure, &records, n)));
    // The same calls without the core path: every one a component call.
    let component_engine = Engine::with_config(&omlet::EngineConfig { core_path: false, ..Default::default() }).unwrap();
    let pure_component = load(&rt, &component_engine, PURE_RULE, None);
    g.bench_function("wasm_single_component", |b| b.iter_custom(|n| wasm_single(&rt, &pure_component, &records, n)));
    for n in [1usize, 16, 256] {
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("wasm_batch", n), &n, |b, &n| {
            b.iter_custom(|i| wasm_batch(&rt, &pure, &records, n, i, &format!("pure/wasm_batch/{n}")))
        });
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("blocking_single", |b| {
        b.iter_custom(|n| {
            // A plain thread with no runtime, as a sync host program would call it.
            let (rule, records) = (pure.clone(), records.clone());
            std::thread::spawn(move || {
                let t = Instant::now();
                for i in 0..n as usize {
                    std::hint::black_box(rule.evaluate_blocking(&records[i % records.len()]).unwrap());
                }
                t.elapsed()
            })
            .join()
            .unwrap()
        })
    });
    g.finish();

    // --- lookup rule with a hot set: the guest cache, and the uncached paths -
    let lookup_prog = compile(LOOKUP_RULE);
    let lookup = load(&rt, &engine, LOOKUP_RULE, Some(perf.clone()));
    let bound = rt.block_on(perf.bind(&lookup_prog.statements)).unwrap();
    let mut g = c.benchmark_group("lookup");
    g.throughput(Throughput::Elements(1));
    g.bench_function("native_shared_cache", |b| b.iter_custom(|n| native_lookups(&rt, &lookup_prog, &perf, &bound, &records, n)));
    g.bench_function("wasm_single_guest_cache", |b| b.iter_custom(|n| wasm_single(&rt, &lookup, &records, n)));
    g.throughput(Throughput::Elements(256));
    g.bench_function("wasm_batch_256_guest_cache", |b| {
        b.iter_custom(|i| wasm_batch(&rt, &lookup, &records, 256, i, "lookup/wasm_batch_256_guest_cache"))
    });
    g.finish();

    // --- baselines -------------------------------------------------------------
    let mut g = c.benchmark_group("baseline");
    g.throughput(Throughput::Elements(1));
    g.bench_function("empty_guest_call", |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let t = Instant::now();
                // One empty record: an empty batch makes no guest call at all.
                let empty = Record::new();
                for _ in 0..n {
                    std::hint::black_box(pure.evaluate(&empty).await.unwrap());
                }
                t.elapsed()
            })
        })
    });
    // The floor under those: wasmtime's own call, on omlet's engine, to a
    // component that does nothing (`omlet_benches::floor`), fiber-less and on
    // a fiber; `echo` passes one pure-bench record's frame in and back out.
    let frame = {
        let mut w = omlet_lang::frame::Writer::with_capacity(1, 1);
        w.record(&Vec::from(records[0].clone()));
        w.finish()
    };
    let mut floor_sync = rt.block_on(floor::Floor::new(&engine, false)).unwrap();
    let mut floor_async = rt.block_on(floor::Floor::new(&engine, true)).unwrap();
    // The pure rule's one-record call through the core ABI (docs/abi.md):
    // the frame above in, the output frame copied out, no host record code.
    let core_module = omlet::build::build_artifact_with(
        &[RuleSource { file: "pure.oml".into(), text: PURE_RULE.into() }],
        &Default::default(),
        omlet::build::Target::Core,
    )
    .unwrap();
    let mut core = core_call::CoreCall::new(&engine, &core_module).unwrap();
    let mut core_out = Vec::new();
    assert_eq!(core.evaluate(&frame, &mut core_out).unwrap(), 0, "the core call evaluates the record");
    g.bench_function("core_abi_pure_call", |b| b.iter(|| std::hint::black_box(core.evaluate(&frame, &mut core_out).unwrap())));
    g.bench_function("wasmtime_empty_call", |b| b.iter(|| floor_sync.empty().unwrap()));
    g.bench_function("wasmtime_echo_call", |b| b.iter(|| std::hint::black_box(floor_sync.echo(&frame).unwrap())));
    g.bench_function("wasmtime_empty_call_async", |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..n {
                    floor_async.empty_async().await.unwrap();
                }
                t.elapsed()
            })
        })
    });
    g.bench_function("wasmtime_echo_call_async", |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..n {
                    std::hint::black_box(floor_async.echo_async(&frame).await.unwrap());
                }
                t.elapsed()
            })
        })
    });
    g.bench_function("shared_cache_hit", |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let t = Instant::now();
                for i in 0..n as i64 {
                    let id = i % sizes.hot as i64 + 1;
                    std::hint::black_box(perf.query(&bound[0], &[Cell::Integer(id)]).await.unwrap());
                }
                t.elapsed()
            })
        })
    });
    g.finish();

    // --- the real rule -----------------------------------------------------------
    let (nginx_text, nginx_k, nginx_records) = rt.block_on(nginx(&sizes));
    let nginx_prog = compile(&nginx_text);
    let nginx_rule = load(&rt, &engine, &nginx_text, Some(nginx_k.clone()));
    let nginx_bound = rt.block_on(nginx_k.bind(&nginx_prog.statements)).unwrap();
    let mut g = c.benchmark_group("real");
    g.throughput(Throughput::Elements(1));
    g.bench_function("native_shared_cache", |b| {
        b.iter_custom(|n| native_lookups(&rt, &nginx_prog, &nginx_k, &nginx_bound, &nginx_records, n))
    });
    g.bench_function("wasm_single", |b| b.iter_custom(|n| wasm_single(&rt, &nginx_rule, &nginx_records, n)));
    g.throughput(Throughput::Elements(256));
    g.bench_function("wasm_batch_256", |b| {
        b.iter_custom(|i| wasm_batch(&rt, &nginx_rule, &nginx_records, 256, i, "real/wasm_batch_256"))
    });
    g.finish();

    // --- peers: VRL and hand-written Rust on the same records ------------------------
    // Each event is cloned per call, as the native cells clone each record.
    let zones = Arc::new(peers::Zones::example());
    let mut g = c.benchmark_group("peer");
    g.throughput(Throughput::Elements(1));
    for (name, source, inputs) in [("pure", peers::VRL_PURE, &*records), ("nginx", peers::VRL_NGINX, &nginx_records)] {
        let events: Vec<vrl::value::Value> = inputs.iter().map(peers::to_vrl).collect();
        let mut program = peers::Vrl::compile(source, zones.clone()).unwrap();
        g.bench_function(format!("vrl_{name}"), |b| {
            b.iter_custom(|n| {
                let t = Instant::now();
                for i in 0..n as usize {
                    std::hint::black_box(program.run(events[i % events.len()].clone()).unwrap());
                }
                t.elapsed()
            })
        });
    }
    g.bench_function("by_hand_pure", |b| {
        b.iter_custom(|n| {
            let t = Instant::now();
            for i in 0..n as usize {
                std::hint::black_box(peers::pure_by_hand(&records[i % records.len()]));
            }
            t.elapsed()
        })
    });
    g.bench_function("by_hand_nginx", |b| {
        b.iter_custom(|n| {
            let t = Instant::now();
            for i in 0..n as usize {
                std::hint::black_box(peers::nginx_by_hand(&nginx_records[i % nginx_records.len()], &zones));
            }
            t.elapsed()
        })
    });
    g.finish();

    // --- concurrency: in-flight single-record evaluations ---------------------------
    // VmRSS is read around each c=64 cell (the process's resident set at c=64).
    let rss_around = |id: &str, before: (u64, u64)| {
        let after = rss_kib();
        side::put(
            &format!("memory/{id}"),
            side::object(&[
                ("rss_before_kib", before.0.to_string()),
                ("rss_after_kib", after.0.to_string()),
                ("hwm_kib", after.1.to_string()),
            ]),
        );
    };
    // Each cell beside the same calls with coalescing off (`…_alone/c`, an
    // engine of its own), run right after it: this VM's two cores go through
    // slow and fast stretches, so the two are compared within minutes.
    let alone_engine = Engine::with_config(&omlet::EngineConfig { coalesce: false, ..Default::default() }).unwrap();
    let pure_alone = load(&rt, &alone_engine, PURE_RULE, None);
    let lookup_alone = load(&rt, &alone_engine, LOOKUP_RULE, Some(perf.clone()));
    for (name, rule, alone) in [("concurrency_pure", &pure, &pure_alone), ("concurrency_lookup", &lookup, &lookup_alone)] {
        for conc in [1usize, 4, 16, 64] {
            let mut g = c.benchmark_group(name);
            g.throughput(Throughput::Elements(1));
            let id = format!("{name}/{conc}");
            let before = rss_kib();
            g.bench_with_input(BenchmarkId::from_parameter(conc), &conc, |b, &conc| {
                b.iter_custom(|n| concurrent(&rt, rule, &records, conc, n, &id))
            });
            if conc == 64 {
                rss_around(&id, before);
            }
            g.finish();
            let alone_name = format!("{name}_alone");
            let mut g = c.benchmark_group(&alone_name);
            g.throughput(Throughput::Elements(1));
            let id = format!("{alone_name}/{conc}");
            g.bench_with_input(BenchmarkId::from_parameter(conc), &conc, |b, &conc| {
                b.iter_custom(|n| concurrent(&rt, alone, &records, conc, n, &id))
            });
            g.finish();
        }
    }

    // --- concurrency, batched: c tasks each evaluating 256 records per call ----------
    let batches: Arc<Vec<Vec<Record>>> = Arc::new(records.chunks(256).filter(|c| c.len() == 256).map(|c| c.to_vec()).collect());
    for (name, rule) in [("concurrency_pure_batched", &pure), ("concurrency_lookup_batched", &lookup)] {
        let mut g = c.benchmark_group(name);
        g.throughput(Throughput::Elements(256));
        for conc in [1usize, 4, 16, 64] {
            let id = format!("{name}/{conc}");
            let before = rss_kib();
            g.bench_with_input(BenchmarkId::from_parameter(conc), &conc, |b, &conc| {
                b.iter_custom(|n| concurrent_batched(&rt, rule, &batches, conc, n, &id))
            });
            if conc == 64 {
                rss_around(&id, before);
            }
        }
        g.finish();
    }

    side::put(
        "meta/benches",
        side::object(&[
            ("quick", quick().to_string()),
            ("rows", sizes.rows.to_string()),
            ("hot", sizes.hot.to_string()),
            ("ops", sizes.ops.to_string()),
            ("guest", side::string(&std::env::var("OMLET_GUEST").unwrap_or_else(|_| "embedded".into()))),
        ]),
    );
    if side_wanted("memory/instances_c64") {
        instance_memory(&rt, &engine, &sizes, &records);
    }
    side::flush();
}

/// The lookup rule against one provider: the bare round trip, the bypass
/// path (every lookup to the database) at several concurrencies, and cold
/// lookups at c=64 with the shared cache batching misses.
fn providers(c: &mut Criterion) {
    use omlet::knowledge::{CacheMode, KnowledgeConfig};
    let sizes = Sizes::from_env();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let engine = Engine::new().unwrap();
    let records = Arc::new(id_records(&sizes));
    let dir = std::env::temp_dir().join(format!("omlet-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sqlite_url = format!("sqlite://{}", dir.join("perf.db").display());
    let mut dbs: Vec<(&str, String, Server)> = vec![("sqlite", sqlite_url, Server::External)];
    for kind in ["postgres", "mariadb"] {
        if let Some((url, guard)) = database(if kind == "postgres" { "postgres" } else { "mysql" }) {
            dbs.push((kind, url, guard));
        }
    }
    for (name, url, _guard) in &dbs {
        let config = |mode: CacheMode| {
            let mut k = KnowledgeConfig::for_url(url);
            k.cache.mode = mode;
            k.pool_size = 16;
            k
        };
        let admin = rt.block_on(config(CacheMode::Bypass).open()).unwrap();
        let data: Vec<Vec<Cell>> =
            (1..=sizes.rows as i64).map(|i| vec![Cell::Integer(i), Cell::Text(format!("value-{i}"))]).collect();
        let _ = rt.block_on(admin.provider().drop_table("perf"));
        rt.block_on(admin.provider().load_table(
            "perf",
            &["id".into(), "value".into()],
            &["INTEGER PRIMARY KEY".into(), "TEXT".into()],
            &data,
        ))
        .unwrap();
        let bypass = rt.block_on(config(CacheMode::Bypass).open()).unwrap();
        // The per-row baseline: bypass with miss batching off, one query per lookup.
        let per_row = {
            let mut k = config(CacheMode::Bypass);
            k.batch_misses = false;
            rt.block_on(k.open()).unwrap()
        };
        let shared = rt.block_on(config(CacheMode::Shared).open()).unwrap();
        let bypass_rule = load(&rt, &engine, LOOKUP_RULE, Some(bypass.clone()));
        let per_row_rule = load(&rt, &engine, LOOKUP_RULE, Some(per_row.clone()));
        let shared_rule = load(&rt, &engine, LOOKUP_RULE, Some(shared.clone()));
        let bound = rt.block_on(bypass.bind(&compile(LOOKUP_RULE).statements)).unwrap();

        let mut g = c.benchmark_group(format!("provider_{name}"));
        g.throughput(Throughput::Elements(1));
        g.bench_function("bare_roundtrip", |b| {
            b.iter_custom(|n| {
                // On a runtime worker, as the evaluations run.
                let (k, bound) = (bypass.clone(), bound.clone());
                let hot = sizes.hot as i64;
                rt.block_on(rt.spawn(async move {
                    let t = Instant::now();
                    for i in 0..n as i64 {
                        let id = i % hot + 1;
                        std::hint::black_box(k.provider().query_first(&bound[0], vec![Cell::Integer(id)]).await.unwrap());
                    }
                    t.elapsed()
                }))
                .unwrap()
            })
        });
        for conc in [1usize, 4, 16, 64] {
            let id = format!("provider_{name}/bare/{conc}");
            g.bench_with_input(BenchmarkId::new("bare", conc), &conc, |b, &conc| {
                b.iter_custom(|n| {
                    // The provider's sqlx query alone, `conc` in flight on the runtime.
                    let (k, bound) = (bypass.clone(), Arc::new(bound.clone()));
                    let hot = sizes.hot;
                    fan_out!(rt, conc, n, &id, (k, bound), |i| {
                        let id = (i % hot + 1) as i64;
                        k.provider().query_first(&bound[0], vec![Cell::Integer(id)]).await.unwrap()
                    })
                })
            });
        }
        for conc in [1usize, 4, 16, 64] {
            let id = format!("provider_{name}/bypass/{conc}");
            g.bench_with_input(BenchmarkId::new("bypass", conc), &conc, |b, &conc| {
                b.iter_custom(|n| concurrent(&rt, &bypass_rule, &records, conc, n, &id))
            });
        }
        for conc in [1usize, 4, 16, 64] {
            let id = format!("provider_{name}/bypass_per_row/{conc}");
            g.bench_with_input(BenchmarkId::new("bypass_per_row", conc), &conc, |b, &conc| {
                b.iter_custom(|n| concurrent(&rt, &per_row_rule, &records, conc, n, &id))
            });
        }
        // Every key asked once (ids past the table's rows find no row): all misses.
        let cold: Arc<Vec<Record>> =
            Arc::new((1..=400_000).map(|i| omlet::record::from_json_str(&format!("{{\"id\":{i}}}")).unwrap()).collect());
        g.bench_function("cold_c64_batched", |b| {
            b.iter_custom(|n| {
                shared.reload();
                concurrent(&rt, &shared_rule, &cold, 64, n, &format!("provider_{name}/cold_c64_batched"))
            })
        });
        g.finish();
        // The database's own load tool on the same query, in the same run.
        db_tool(name, url, &sizes, &dir);
        side::flush();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// pgbench (PostgreSQL) or mariadb-slap (MariaDB) at c = 1, 4, 16, 64 on the
/// lookup's query, `select value from perf where id = K`, K over the hot set;
/// `OMLET_BENCH_TOOL_SECS` (5; 1 in quick mode) seconds each.
fn db_tool(name: &str, url: &str, sizes: &Sizes, dir: &std::path::Path) {
    let tool = match name {
        "postgres" => "pgbench",
        "mariadb" => "mariadb-slap",
        _ => return,
    };
    let Some(u) = parse_db_url(url) else {
        eprintln!("{tool}: cannot read the URL {url}");
        return;
    };
    let secs = env_usize("OMLET_BENCH_TOOL_SECS", if quick() { 1 } else { 5 }).max(1);
    for conc in [1usize, 4, 16, 64] {
        let id = format!("provider_{name}/{tool}/{conc}");
        if !side_wanted(&id) {
            continue;
        }
        // mariadb-slap runs a number of queries, not a time: about 40 K/s here.
        let r = if tool == "pgbench" {
            pgbench(&u, conc, secs as u64, sizes.hot, dir)
        } else {
            mariadb_slap(&u, conc, secs * 40_000, sizes.hot, dir)
        };
        match r {
            Ok(r) => {
                eprintln!("{id}: {:.0} queries/s", r.qps);
                side::put(
                    &format!("tool/{id}"),
                    side::object(&[
                        ("qps", side::number(r.qps.round())),
                        ("clients", conc.to_string()),
                        ("command", side::string(&r.command)),
                    ]),
                );
            }
            Err(e) => eprintln!("{id}: {e}"),
        }
    }
}

criterion_group! { name = eval; config = config(); targets = benches, providers }
criterion_main!(eval);
