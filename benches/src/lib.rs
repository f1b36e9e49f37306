//! Shared set-up for the benches: data sizes, generated records and
//! knowledge, and the rules of the matrix.
//!
//! Sizes come from the environment, with the defaults of the reference
//! measurements: `OMLET_BENCH_ROWS` (10000), `OMLET_BENCH_HOT` (128),
//! `OMLET_BENCH_OPS` (20000). `OMLET_BENCH_QUICK=1` shortens every bench.
//! The measurements criterion does not iterate take `OMLET_BENCH_TOOL_SECS`
//! (seconds per database-tool run: 5, quick 1) and `OMLET_BENCH_RUN_RECORDS`
//! (records through `omlet run`'s code: 1 000 000, quick 100 000); their
//! figures, and the per-call latency percentiles, go to the [`side`] file.

use std::sync::Arc;

use omlet::knowledge::Tables;
use omlet::knowledge::sqlite::SqliteProvider;
use omlet::{Knowledge, Record};
use omlet_lang::Cell;

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Criterion's timing for the benches: (warm-up, measurement, samples),
/// shorter in quick mode.
pub fn criterion_timing() -> (std::time::Duration, std::time::Duration, usize) {
    use std::time::Duration;
    if quick() {
        (Duration::from_millis(300), Duration::from_secs(1), 10)
    } else {
        (Duration::from_secs(1), Duration::from_secs(3), 20)
    }
}

pub fn quick() -> bool {
    std::env::var("OMLET_BENCH_QUICK").is_ok_and(|v| v != "0" && !v.is_empty())
}

pub struct Sizes {
    pub rows: usize,
    pub hot: usize,
    pub ops: usize,
}

impl Sizes {
    pub fn from_env() -> Sizes {
        Sizes {
            rows: env_usize("OMLET_BENCH_ROWS", 10_000),
            hot: env_usize("OMLET_BENCH_HOT", 128),
            ops: env_usize("OMLET_BENCH_OPS", 20_000),
        }
    }
}

pub const PURE_RULE: &str = "name : bench/pure\n---\nV = read(id) ;\n";
pub const LOOKUP_RULE: &str = "name : bench/lookup\n---\nV = select value from perf where id = read(id) ;\n";

/// `{"id": k}` records, keys drawn from the hot set with a fixed LCG.
pub fn id_records(sizes: &Sizes) -> Vec<Record> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..sizes.ops)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let id = (x >> 33) as usize % sizes.hot.max(1) + 1;
            omlet::record::from_json_str(&format!("{{\"id\":{id}}}")).unwrap()
        })
        .collect()
}

/// The `perf(id, value)` table with `rows` rows, in in-memory SQLite.
pub async fn perf_knowledge(rows: usize) -> Arc<Knowledge> {
    let db = SqliteProvider::memory().await.unwrap();
    let data: Vec<Vec<Cell>> = (1..=rows as i64).map(|i| vec![Cell::Integer(i), Cell::Text(format!("value-{i}"))]).collect();
    db.load_table("perf", &["id".into(), "value".into()], &["INTEGER PRIMARY KEY".into(), "TEXT".into()], &data).await.unwrap();
    Arc::new(Knowledge::new(Arc::new(db)))
}

/// The nginx example: its rule, knowledge and records (cycled to `ops`).
pub async fn nginx(sizes: &Sizes) -> (String, Arc<Knowledge>, Vec<Record>) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/nginx");
    let rule = std::fs::read_to_string(format!("{root}/nginx.oml")).unwrap();
    let db = SqliteProvider::memory().await.unwrap();
    omlet::knowledge::knowdb::load(format!("{root}/knowdb/knowdb.toml").as_ref(), &db).await.unwrap();
    let lines = std::fs::read_to_string(format!("{root}/access.jsonl")).unwrap();
    let base: Vec<Record> = lines.lines().map(|l| omlet::record::from_json_str(l).unwrap()).collect();
    let records = base.iter().cycle().take(sizes.ops).cloned().collect();
    (rule, Arc::new(Knowledge::new(Arc::new(db))), records)
}

/// `n` nginx access records in JSONL, written to `path`: the four lines of
/// examples/nginx/access.jsonl in turn, each with its client address
/// (`client_ip`, else `remote_addr`) replaced by one of 4096 addresses spread
/// over the example's zones and outside them (a fixed LCG picks them), so
/// that the IP-range lookup sees many keys, as a real log would.
pub fn nginx_jsonl(path: &std::path::Path, n: usize) -> std::io::Result<()> {
    use std::io::Write;
    let parts = nginx_parts()?;
    let address = |k: u64| -> String {
        let (a, b) = ((k / 5) % 256, (k / 1280) % 256);
        match k % 5 {
            0 => format!("10.0.0.{a}"),                  // dmz
            1 => format!("10.0.1.{a}"),                  // office
            2 => format!("192.168.{b}.{a}"),             // lab
            3 => format!("172.{}.{b}.{a}", 16 + a % 16), // core
            _ => format!("203.0.113.{a}"),               // no zone
        }
    };
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for i in 0..n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let (before, after) = &parts[i % parts.len()];
        writeln!(out, "{before}{}{after}", address((x >> 33) % 4096))?;
    }
    out.flush()
}

/// The lines of examples/nginx/access.jsonl, each split around its client
/// address's value (`client_ip`, else `remote_addr`): (before, after).
fn nginx_parts() -> std::io::Result<Vec<(String, String)>> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/nginx");
    let lines = std::fs::read_to_string(format!("{root}/access.jsonl"))?;
    Ok(lines
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let key = if l.contains("\"client_ip\":\"") { "\"client_ip\":\"" } else { "\"remote_addr\":\"" };
            let start = l.find(key).expect("an nginx line with an address") + key.len();
            let end = start + l[start..].find('"').expect("a closed string");
            (l[..start].to_string(), l[end..].to_string())
        })
        .collect())
}

/// The address a distinct-key workload gives record `i`: one of `keys`
/// addresses in 10.0.0.0/8, each key `k` mapped to `10.0.0.0 + (k *
/// 2654435761) mod 2^24` (an odd multiplier, so distinct keys below 2^24
/// give distinct addresses, spread over the block). With `keys` at least the
/// record count, each record has its own address (key = record number);
/// below it, a fixed LCG draws the key.
pub fn distinct_address(i: u64, keys: u64, lcg: &mut u64) -> u32 {
    let k = if keys >= 1 << 24 || keys == 0 {
        i
    } else {
        *lcg = lcg.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (*lcg >> 33) % keys
    };
    (10 << 24) | (k.wrapping_mul(2654435761) & 0xFF_FFFF) as u32
}

/// `n` nginx records as [`nginx_jsonl`] writes them, but with client
/// addresses from [`distinct_address`]: every record its own address when
/// `keys >= n`, else `keys` addresses drawn over and over.
pub fn nginx_jsonl_keys(path: &std::path::Path, n: usize, keys: u64) -> std::io::Result<()> {
    use std::io::Write;
    let parts = nginx_parts()?;
    let keys = if keys >= n as u64 { 1 << 24 } else { keys };
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut lcg: u64 = 0x2545_F491_4F6C_DD1D;
    for i in 0..n {
        let (before, after) = &parts[i % parts.len()];
        let a = std::net::Ipv4Addr::from(distinct_address(i as u64, keys, &mut lcg));
        writeln!(out, "{before}{a}{after}")?;
    }
    out.flush()
}

/// A knowdb of two tables of `rows` rows over 10.0.0.0/8, in `dir`:
/// `ip_zone` (`lo_int,hi_int,zone,owner`, as the nginx example's table),
/// ranges of equal width from 10.0.0.0 up, none overlapping, together
/// holding every address that [`distinct_address`] gives; and `hosts`
/// (`ip,category`), the addresses of [`distinct_address`] for keys below
/// `rows`. Returns the `knowdb.toml`'s path.
pub fn large_knowdb(dir: &std::path::Path, rows: usize) -> std::io::Result<std::path::PathBuf> {
    use std::io::Write;
    let width = (1u64 << 24).div_ceil(rows.max(1) as u64);
    let mut z = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(dir.join("ip_zone.csv"))?);
    writeln!(z, "lo_int,hi_int,zone,owner")?;
    for i in 0..rows as u64 {
        let lo = (10u64 << 24) + i * width;
        writeln!(z, "{lo},{},z{},team-{}", lo + width - 1, i % 97, i % 13)?;
    }
    z.flush()?;
    let mut h = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(dir.join("hosts.csv"))?);
    writeln!(h, "ip,category")?;
    let mut lcg = 0;
    for k in 0..rows as u64 {
        writeln!(h, "{},c{}", std::net::Ipv4Addr::from(distinct_address(k, 1 << 24, &mut lcg)), k % 11)?;
    }
    h.flush()?;
    let toml = dir.join("knowdb.toml");
    std::fs::write(
        &toml,
        "[[tables]]\nname = \"ip_zone\"\ncsv = \"ip_zone.csv\"\n\n[[tables]]\nname = \"hosts\"\ncsv = \"hosts.csv\"\n",
    )?;
    Ok(toml)
}

/// The process's resident set and its peak so far, in KiB (VmRSS, VmHWM of
/// /proc/self/status).
pub fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Should a measurement that criterion does not run (the database tools,
/// `omlet run`, memory) run in this invocation? Only under `cargo bench`
/// (criterion's `--bench`; not `cargo test --benches`, not `--list`), and
/// only if `id` contains one of the filters given on the command line, if any
/// (a substring match, where criterion takes a regex).
pub fn side_wanted(id: &str) -> bool {
    const WITH_VALUE: &[&str] = &[
        "--save-baseline",
        "-s",
        "--baseline",
        "-b",
        "--baseline-lenient",
        "--load-baseline",
        "--sample-size",
        "--warm-up-time",
        "--measurement-time",
        "--nresamples",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--profile-time",
        "--plotting-backend",
        "--output-format",
        "--color",
        "-c",
        "--format",
    ];
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--list" || a == "--test") {
        return false;
    }
    let mut filters = Vec::new();
    let mut skip = false;
    for a in &args {
        if skip {
            skip = false;
        } else if a.starts_with('-') {
            skip = WITH_VALUE.contains(&a.as_str());
        } else {
            filters.push(a.as_str());
        }
    }
    filters.is_empty() || filters.iter().any(|f| id.contains(f))
}

/// A database server for the SQL paths of the benches: from the environment
/// (`OMLET_BENCH_PG_URL`, `OMLET_BENCH_MYSQL_URL`), or a throwaway server
/// started here (kept alive by the returned guard).
#[allow(dead_code, reason = "the servers are held only to keep them running until the benches end")]
pub enum Server {
    /// A PostgreSQL server started for the bench.
    Pg(omlet_testdb::Postgres),
    /// A MariaDB server started for the bench.
    Maria(omlet_testdb::MariaDb),
    /// One named by the environment.
    External,
}

/// The URL of a `kind` (`postgres` or `mysql`) server and its guard, or
/// `None` (said on stderr) when there is none.
pub fn database(kind: &str) -> Option<(String, Server)> {
    let var = if kind == "postgres" { "OMLET_BENCH_PG_URL" } else { "OMLET_BENCH_MYSQL_URL" };
    if let Ok(url) = std::env::var(var) {
        return Some((url, Server::External));
    }
    let started = std::panic::catch_unwind(|| {
        if kind == "postgres" {
            let pg = omlet_testdb::Postgres::start();
            (pg.url(), Server::Pg(pg))
        } else {
            let m = omlet_testdb::MariaDb::start();
            (m.url(), Server::Maria(m))
        }
    });
    match started {
        Ok(s) => Some(s),
        Err(_) => {
            eprintln!("skipping {kind}: no server (set {var} or install the Debian packages)");
            None
        }
    }
}

pub mod core_call;
pub mod floor;
pub mod peers;

/// What criterion does not keep, written next to its results for
/// `benches/report.py`: per-call latency percentiles of the cells, the
/// databases' own load tools, `omlet run`, memory.
///
/// The file (`target/criterion/omlet-side.json`) is one JSON object with one
/// entry per line, keyed `latency/<bench id>`, `tool/<group>/<tool>/<c>`,
/// `run/<name>`, `memory/<name>`; each run rewrites the entries it measured
/// and keeps the others (last run wins per key).
pub mod side {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::sync::Mutex;

    /// Sub-buckets per power of two, as a power of two: 64, so a bucket is
    /// at most 1/64 (1.6 %) of its values wide.
    const SUB: u32 = 6;
    const BUCKETS: usize = ((64 - SUB as usize) << SUB) + (1 << SUB);

    /// A log histogram of nanoseconds (HDR style).
    pub struct Hist {
        counts: Vec<u64>,
        n: u64,
    }

    fn bucket(v: u64) -> usize {
        if v < (1 << SUB) {
            return v as usize;
        }
        let e = 63 - v.leading_zeros(); // ≥ SUB
        let sub = (v >> (e - SUB)) & ((1 << SUB) - 1);
        (((e - SUB + 1) as usize) << SUB) | sub as usize
    }

    /// The middle of bucket `i`.
    fn value(i: usize) -> f64 {
        if i < (1 << SUB) {
            return i as f64;
        }
        let (k, sub) = ((i >> SUB) as u32, (i & ((1 << SUB) - 1)) as u64);
        let lo = ((1u64 << SUB) + sub) << (k - 1);
        lo as f64 + ((1u64 << (k - 1)) as f64 - 1.0) / 2.0
    }

    impl Hist {
        fn new() -> Hist {
            Hist { counts: vec![0; BUCKETS], n: 0 }
        }

        fn add(&mut self, ns: &[u32]) {
            for &v in ns {
                self.counts[bucket(v as u64)] += 1;
            }
            self.n += ns.len() as u64;
        }

        /// The `q` quantile (0 < q ≤ 1), in nanoseconds.
        pub fn quantile(&self, q: f64) -> f64 {
            let want = ((q * self.n as f64).ceil() as u64).max(1);
            let mut seen = 0;
            for (i, c) in self.counts.iter().enumerate() {
                seen += c;
                if seen >= want {
                    return value(i);
                }
            }
            0.0
        }
    }

    static LATENCY: Mutex<BTreeMap<String, Hist>> = Mutex::new(BTreeMap::new());
    static ENTRIES: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

    /// Adds per-call latencies (ns) to bench `id` (a criterion full id).
    pub fn record(id: &str, ns: &[u32]) {
        let mut m = LATENCY.lock().unwrap();
        m.entry(id.to_string()).or_insert_with(Hist::new).add(ns);
    }

    /// A JSON string.
    pub fn string(s: &str) -> String {
        let mut o = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => o.push_str("\\\""),
                '\\' => o.push_str("\\\\"),
                c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
                c => o.push(c),
            }
        }
        o.push('"');
        o
    }

    /// A JSON number (`null` when not finite).
    pub fn number(v: f64) -> String {
        if v.is_finite() { format!("{v}") } else { "null".into() }
    }

    /// A JSON object from (name, JSON value) pairs.
    pub fn object(fields: &[(&str, String)]) -> String {
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("{}: {v}", string(k))).collect();
        format!("{{{}}}", body.join(", "))
    }

    /// Sets entry `key` to the JSON value `json` (written at the next flush).
    pub fn put(key: &str, json: String) {
        ENTRIES.lock().unwrap().insert(key.to_string(), json);
    }

    /// Where the file goes: criterion's own directory (`$CRITERION_HOME`,
    /// `$CARGO_TARGET_DIR/criterion`, else the workspace's target/criterion).
    pub fn path() -> PathBuf {
        let dir = if let Some(h) = std::env::var_os("CRITERION_HOME") {
            PathBuf::from(h)
        } else if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
            PathBuf::from(t).join("criterion")
        } else {
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/criterion"))
        };
        dir.join("omlet-side.json")
    }

    /// Merges what this run measured into the file.
    pub fn flush() {
        let path = path();
        let mut all: BTreeMap<String, String> = BTreeMap::new();
        // The file is written below with one `"key": value` per line.
        for line in std::fs::read_to_string(&path).unwrap_or_default().lines() {
            let line = line.trim().trim_end_matches(',');
            if let Some(rest) = line.strip_prefix('"')
                && let Some((key, value)) = rest.split_once("\": ")
            {
                all.insert(key.to_string(), value.to_string());
            }
        }
        for (id, h) in LATENCY.lock().unwrap().iter() {
            let us = |q: f64| number((h.quantile(q) / 1e3 * 1000.0).round() / 1000.0);
            let v = object(&[("calls", h.n.to_string()), ("p50_us", us(0.50)), ("p95_us", us(0.95)), ("p99_us", us(0.99))]);
            all.insert(format!("latency/{id}"), v);
        }
        for (k, v) in ENTRIES.lock().unwrap().iter() {
            all.insert(k.clone(), v.clone());
        }
        let body: Vec<String> = all.iter().map(|(k, v)| format!("{}: {v}", string(k))).collect();
        let _ = std::fs::create_dir_all(path.parent().unwrap());
        if let Err(e) = std::fs::write(&path, format!("{{\n{}\n}}\n", body.join(",\n"))) {
            eprintln!("could not write {}: {e}", path.display());
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn buckets_are_contiguous_and_tight() {
            let mut last = 0;
            for v in [0u64, 1, 63, 64, 65, 127, 128, 129, 1000, 1 << 20, u32::MAX as u64, u64::MAX] {
                let b = bucket(v);
                assert!(b >= last && b < BUCKETS);
                last = b;
                let mid = value(b);
                assert!((mid - v as f64).abs() <= (v as f64) / 64.0 + 0.5, "{v} → {mid}");
            }
            let mut h = Hist::new();
            h.add(&(1..=1000).collect::<Vec<u32>>());
            assert!((h.quantile(0.5) - 500.0).abs() < 8.0);
            assert!((h.quantile(0.95) - 950.0).abs() < 15.0);
        }
    }
}

/// The parts of a database URL the command-line tools take.
#[derive(Debug, Clone)]
pub struct DbUrl {
    pub user: String,
    pub password: Option<String>,
    pub host: String,
    pub port: u16,
    pub db: String,
}

/// `scheme://user[:password]@host[:port]/db[?…]`.
pub fn parse_db_url(url: &str) -> Option<DbUrl> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = if scheme.starts_with("postgres") { 5432 } else { 3306 };
    let (auth, rest) = rest.rsplit_once('@').unwrap_or(("", rest));
    let (user, password) = match auth.split_once(':') {
        Some((u, p)) => (u.to_string(), Some(p.to_string())),
        None => (auth.to_string(), None),
    };
    let (hostport, db) = rest.split_once('/').unwrap_or((rest, ""));
    let db = db.split('?').next().unwrap_or("").to_string();
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), p.parse().ok()?),
        None => (hostport.to_string(), default_port),
    };
    Some(DbUrl { user, password, host, port, db })
}

fn first_existing(paths: &[&str]) -> String {
    paths.iter().find(|p| std::path::Path::new(p).exists()).unwrap_or(&paths[paths.len() - 1]).to_string()
}

fn output(cmd: &mut std::process::Command, what: &str) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{what} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A tool's measurement: queries per second, and the command that gave it.
pub struct ToolRun {
    pub qps: f64,
    pub command: String,
}

/// `pgbench -M prepared -n -f script -c C -j min(2, C) -T secs` on the
/// primary-key query over the hot set. `tps` (one query per transaction,
/// without the initial connection time) is queries/s.
pub fn pgbench(url: &DbUrl, clients: usize, secs: u64, hot: usize, dir: &std::path::Path) -> Result<ToolRun, String> {
    let script = dir.join("pgbench-perf.sql");
    std::fs::write(&script, format!("\\set id random(1, {hot})\nselect value from perf where id = :id;\n"))
        .map_err(|e| e.to_string())?;
    let exe = first_existing(&["/usr/lib/postgresql/15/bin/pgbench", "pgbench"]);
    let args: Vec<String> = [
        "-h",
        &url.host,
        "-p",
        &url.port.to_string(),
        "-U",
        &url.user,
        "-M",
        "prepared",
        "-n",
        "-f",
        &script.display().to_string(),
        "-c",
        &clients.to_string(),
        "-j",
        &clients.min(2).to_string(),
        "-T",
        &secs.to_string(),
        &url.db,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(&args);
    if let Some(p) = &url.password {
        cmd.env("PGPASSWORD", p);
    }
    let out = output(&mut cmd, "pgbench")?;
    let tps = out
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| format!("no `tps = ` line in pgbench's output:\n{out}"))?;
    Ok(ToolRun { qps: tps, command: format!("pgbench {}", args.join(" ")) })
}

/// `mariadb-slap` with a query file of the primary-key select over the hot
/// set (every key once, in a shuffled order; each client cycles through the
/// file), `queries` in all over `clients` connections. Text protocol: the
/// tool has no prepared-statement mode. Queries/s = queries run ÷ the
/// tool's "seconds to run all queries" (which includes connecting).
pub fn mariadb_slap(url: &DbUrl, clients: usize, queries: usize, hot: usize, dir: &std::path::Path) -> Result<ToolRun, String> {
    let file = dir.join("slap-perf.sql");
    let mut ids: Vec<usize> = (1..=hot.max(1)).collect();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..ids.len()).rev() {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ids.swap(i, (x >> 33) as usize % (i + 1));
    }
    let text: String = ids.iter().map(|i| format!("select value from perf where id = {i};\n")).collect();
    std::fs::write(&file, text).map_err(|e| e.to_string())?;
    let exe = first_existing(&["/usr/bin/mariadb-slap", "mariadb-slap"]);
    let args: Vec<String> = vec![
        "--no-defaults".into(),
        format!("--user={}", url.user),
        format!("--host={}", url.host),
        format!("--port={}", url.port),
        "--protocol=tcp".into(),
        format!("--create-schema={}", url.db),
        "--no-drop".into(),
        format!("--query={}", file.display()),
        "--delimiter=;".into(),
        format!("--concurrency={clients}"),
        format!("--number-of-queries={queries}"),
        "--iterations=1".into(),
    ];
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(&args);
    if let Some(p) = &url.password {
        cmd.env("MYSQL_PWD", p);
    }
    let out = output(&mut cmd, "mariadb-slap")?;
    let field = |name: &str| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    let secs = field("Average number of seconds to run all queries:")
        .ok_or_else(|| format!("no timing in mariadb-slap's output:\n{out}"))?;
    let per_client = field("Average number of queries per client:").unwrap_or(queries as f64 / clients as f64);
    Ok(ToolRun { qps: per_client * clients as f64 / secs.max(1e-9), command: format!("mariadb-slap {}", args.join(" ")) })
}
