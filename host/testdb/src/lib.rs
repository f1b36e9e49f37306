//! Throwaway database servers for omlet's tests and benches: PostgreSQL 15
//! and MariaDB (Debian's packages), each in a temporary directory, on a free
//! loopback port, stopped and removed on drop. Nothing is left running.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false)
}

fn run(cmd: &mut Command, what: &str) {
    if let Err(e) = try_run(cmd, what) {
        panic!("{e}");
    }
}

fn try_run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{what}: {e} (is it installed? scripts/test.sh installs it)"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!("{what} failed:\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL server with trust auth, fsync off.
pub struct Postgres {
    dir: PathBuf,
    pub port: u16,
    running: bool,
}

impl Postgres {
    pub fn start() -> Postgres {
        let dir = tempfile::Builder::new().prefix("omlet-pg-").tempdir().unwrap().keep();
        let as_pg = is_root();
        if as_pg {
            run(Command::new("chown").arg("postgres").arg(&dir), "chown");
        }
        let mut pg = Postgres { dir, port: free_port(), running: false };
        pg.cmd("initdb", &["-D", &pg.data(), "-A", "trust", "-U", "postgres", "--no-sync"]);
        // The port was free when chosen; another server may take it before
        // this one binds it. Try again on fresh ports before giving up.
        let mut last = String::new();
        for _ in 0..3 {
            match pg.try_resume() {
                Ok(()) => return pg,
                Err(e) => last = e,
            }
            pg.port = free_port();
        }
        panic!("PostgreSQL did not start after three tries:\n{last}");
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn cmd(&self, bin: &str, args: &[&str]) {
        if let Err(e) = self.try_cmd(bin, args) {
            panic!("{e}");
        }
    }

    fn try_cmd(&self, bin: &str, args: &[&str]) -> Result<(), String> {
        let exe = format!("{PG_BIN}/{bin}");
        let mut c = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", &exe]);
            c
        } else {
            Command::new(&exe)
        };
        c.args(args).stdin(Stdio::null());
        try_run(&mut c, bin)
    }

    /// Starts (again) on the same port and data.
    pub fn resume(&mut self) {
        if let Err(e) = self.try_resume() {
            panic!("{e}");
        }
    }

    fn try_resume(&mut self) -> Result<(), String> {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 -c shared_preload_libraries=pg_stat_statements",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("log").display().to_string();
        self.try_cmd("pg_ctl", &["-D", &self.data(), "-l", &log, "-o", &opts, "-w", "start"])
            .map_err(|e| format!("{e}\n{}", std::fs::read_to_string(&log).unwrap_or_default()))?;
        self.running = true;
        Ok(())
    }

    /// Stops immediately (connections are cut).
    pub fn stop(&mut self) {
        if self.running {
            self.cmd("pg_ctl", &["-D", &self.data(), "-m", "immediate", "-w", "stop"]);
            self.running = false;
        }
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs SQL with psql (stops at the first error).
    pub fn psql(&self, sql: &str) {
        run(self.psql_command().arg("-c").arg(sql), "psql");
    }

    /// psql, connected to this server as `postgres`, stopping at the first error.
    fn psql_command(&self) -> Command {
        let mut c = Command::new("psql");
        c.args(["-v", "ON_ERROR_STOP=1", "-q", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-p"])
            .arg(self.port.to_string());
        c
    }

    /// A psql session kept open, for SQL whose effect must last between
    /// steps of a test (a transaction holding a lock, say).
    pub fn session(&self) -> PsqlSession {
        let mut child = self.psql_command().arg("-X").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("psql starts");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(std::io::BufReader::new);
        PsqlSession { child, stdin, stdout }
    }
}

/// An open psql session ([`Postgres::session`]). Dropping it ends psql,
/// which rolls back a transaction left open.
pub struct PsqlSession {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: Option<std::io::BufReader<std::process::ChildStdout>>,
}

impl PsqlSession {
    /// Runs SQL and returns once psql has carried it out.
    pub fn run(&mut self, sql: &str) {
        use std::io::{BufRead, Write};
        let (Some(stdin), Some(stdout)) = (self.stdin.as_mut(), self.stdout.as_mut()) else { panic!("psql ended") };
        writeln!(stdin, "{sql}\n\\echo omlet-testdb-done").expect("psql takes SQL");
        stdin.flush().expect("psql takes SQL");
        let mut line = String::new();
        loop {
            line.clear();
            let n = stdout.read_line(&mut line).expect("psql answers");
            assert!(n > 0, "psql ended while running: {sql}");
            if line.trim_end() == "omlet-testdb-done" {
                return;
            }
        }
    }
}

impl Drop for PsqlSession {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A MariaDB server with a password-less root on loopback.
pub struct MariaDb {
    dir: PathBuf,
    pub port: u16,
    child: Option<Child>,
}

impl MariaDb {
    /// Installs and starts a server. Each server has its own temporary
    /// directory (`--tmpdir`), so servers started in parallel do not trip on
    /// each other's temporary tables; a failed install or start is tried
    /// again (up to three times) in a fresh directory on a fresh port.
    pub fn start() -> MariaDb {
        let mut last = String::new();
        for _ in 0..3 {
            match MariaDb::try_start() {
                Ok(m) => return m,
                Err(e) => last = e,
            }
        }
        panic!("MariaDB did not start after three tries:\n{last}");
    }

    fn try_start() -> Result<MariaDb, String> {
        let dir = tempfile::Builder::new().prefix("omlet-mariadb-").tempdir().unwrap().keep();
        let mut m = MariaDb { dir, port: free_port(), child: None };
        std::fs::create_dir_all(m.tmp()).map_err(|e| e.to_string())?;
        try_run(
            Command::new("mariadb-install-db")
                .arg("--no-defaults")
                .arg(format!("--datadir={}", m.dir.join("data").display()))
                .arg(format!("--tmpdir={}", m.tmp()))
                .arg("--user=root")
                .arg("--auth-root-authentication-method=normal")
                .arg("--skip-test-db")
                .stdin(Stdio::null()),
            "mariadb-install-db",
        )?;
        m.try_resume()?;
        let sock = m.sock();
        try_run(
            Command::new("mariadb").args(["--no-defaults", "-uroot", &format!("--socket={sock}"), "-e", "create database demo"]),
            "create database",
        )?;
        Ok(m)
    }

    fn tmp(&self) -> String {
        self.dir.join("tmp").display().to_string()
    }

    fn sock(&self) -> String {
        self.dir.join("sock").display().to_string()
    }

    /// Starts (again) on the same port and data.
    pub fn resume(&mut self) {
        if let Err(e) = self.try_resume() {
            panic!("{e}");
        }
    }

    fn try_resume(&mut self) -> Result<(), String> {
        let log_path = self.dir.join("log");
        let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--tmpdir={}", self.tmp()))
            .arg("--user=root")
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.sock()))
            .arg("--innodb-flush-log-at-trx-commit=0")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("mariadbd: {e} (is mariadb-server installed? scripts/test.sh installs it)"))?;
        self.child = Some(child);
        let sock = self.sock();
        let started = Instant::now();
        loop {
            let up = Command::new("mariadb-admin")
                .args(["--no-defaults", "-uroot", &format!("--socket={sock}"), "ping"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if up {
                return Ok(());
            }
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()).is_some();
            if exited || started.elapsed() > Duration::from_secs(60) {
                self.stop();
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(format!("mariadbd did not become ready on port {}:\n{log}", self.port));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("mariadb-admin")
                .args(["--no-defaults", "-uroot", &format!("--socket={}", self.sock()), "shutdown"])
                .status();
            let start = Instant::now();
            while c.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/demo", self.port)
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a [`FaultProxy`] does to the traffic passing through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Bytes pass as they come.
    Pass,
    /// Every chunk waits this many milliseconds before it is passed on.
    Latency(u64),
    /// Bytes are held: nothing passes in either direction, and nothing is closed.
    Stall,
    /// Every open connection is cut, and new ones are cut at once.
    Reset,
}

/// A TCP proxy on loopback between a client and a database server, whose
/// [`Fault`] can be changed while connections are open: latency, stalls and
/// resets on demand, for tests of timeouts and failure policies.
pub struct FaultProxy {
    pub port: u16,
    fault: std::sync::Arc<std::sync::Mutex<Fault>>,
    /// Bumped by every `Reset`: connections opened before it close.
    epoch: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl FaultProxy {
    /// Starts a proxy to `127.0.0.1:target`, passing traffic.
    pub fn start(target: u16) -> FaultProxy {
        use std::sync::atomic::{AtomicBool, AtomicU64};
        use std::sync::{Arc, Mutex};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let fault = Arc::new(Mutex::new(Fault::Pass));
        let epoch = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (f, e, s) = (fault.clone(), epoch.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        if *f.lock().unwrap() == Fault::Reset {
                            drop(client);
                            continue;
                        }
                        let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", target)) else { continue };
                        let born = e.load(std::sync::atomic::Ordering::SeqCst);
                        for (from, to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
                            let (f, e, s) = (f.clone(), e.clone(), s.clone());
                            std::thread::spawn(move || pipe(from, to, born, &f, &e, &s));
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        FaultProxy { port, fault, epoch, stop }
    }

    /// Changes what the proxy does from now on.
    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
        if fault == Fault::Reset {
            self.epoch.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// `url` with its port replaced by the proxy's.
    pub fn url(&self, url: &str, server_port: u16) -> String {
        url.replace(&format!(":{server_port}/"), &format!(":{}/", self.port))
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Copies `from` to `to` under the proxy's current fault, until either side
/// closes, a reset cuts the connection, or the proxy stops.
fn pipe(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    born: u64,
    fault: &std::sync::Mutex<Fault>,
    epoch: &std::sync::atomic::AtomicU64,
    stop: &std::sync::atomic::AtomicBool,
) {
    use std::io::{Read, Write};
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = vec![0u8; 16 << 10];
    let cut = || epoch.load(std::sync::atomic::Ordering::SeqCst) != born || stop.load(std::sync::atomic::Ordering::Relaxed);
    loop {
        if cut() {
            break;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        // Hold the chunk while stalled; wait out the latency; give up on a reset.
        loop {
            let f = *fault.lock().unwrap();
            match f {
                Fault::Stall if !cut() => std::thread::sleep(Duration::from_millis(10)),
                Fault::Latency(ms) => {
                    std::thread::sleep(Duration::from_millis(ms));
                    break;
                }
                _ => break,
            }
        }
        if cut() || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(std::net::Shutdown::Both);
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// A single Kafka broker (KRaft: broker and controller in one process) from
/// Maven Central's jars on the machine's JDK, in a temporary directory on
/// free loopback ports; stopped and removed on drop. The jars come from
/// `scripts/kafka-jars.sh`, which fetches them once into a cache.
pub struct Kafka {
    dir: PathBuf,
    libs: String,
    pub port: u16,
    child: Option<Child>,
}

/// `scripts/kafka-jars.sh` of the checkout under test: found from the
/// package that cargo runs the test for (`CARGO_MANIFEST_DIR` at run time),
/// else from where this crate was built. Not the build path alone: a target
/// folder shared with a clone elsewhere keeps that clone's path in this crate
/// (cargo does not rebuild it for a move), and the clone may be gone.
fn kafka_jars_script() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka-jars.sh");
    let Some(package) = std::env::var_os("CARGO_MANIFEST_DIR") else { return built };
    Path::new(&package).ancestors().map(|dir| dir.join("scripts/kafka-jars.sh")).find(|script| script.is_file()).unwrap_or(built)
}

impl Kafka {
    pub fn start() -> Kafka {
        Kafka::start_with("")
    }

    /// [`start`](Self::start), with more lines of `server.properties`.
    pub fn start_with(extra: &str) -> Kafka {
        let script = kafka_jars_script();
        let out = Command::new(&script).stderr(Stdio::inherit()).output().expect("scripts/kafka-jars.sh runs");
        assert!(out.status.success(), "scripts/kafka-jars.sh failed");
        let libs = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").trim().to_string();
        let dir = tempfile::Builder::new().prefix("omlet-kafka-").tempdir().unwrap().keep();
        let mut last = String::new();
        for _ in 0..3 {
            let (port, controller) = (free_port(), free_port());
            let mut k = Kafka { dir: dir.clone(), libs: libs.clone(), port, child: None };
            match k.try_start(controller, extra) {
                Ok(()) => return k,
                Err(e) => last = e,
            }
        }
        panic!("Kafka did not start after three tries:\n{last}");
    }

    fn java(&self) -> Command {
        let mut c = Command::new("java");
        c.arg("-Xmx512m").arg("-cp").arg(format!("{}/*", self.libs));
        c
    }

    fn try_start(&mut self, controller: u16, extra: &str) -> Result<(), String> {
        let data = self.dir.join(format!("data-{}", self.port));
        let props = self.dir.join("server.properties");
        std::fs::write(
            &props,
            format!(
                "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{controller}\n\
                 listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
                 advertised.listeners=PLAINTEXT://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n\
                 listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\nlog.dirs={data}\n\
                 offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n\
                 transaction.state.log.min.isr=1\ngroup.initial.rebalance.delay.ms=0\n\
                 auto.create.topics.enable=false\noffsets.topic.num.partitions=6\n{extra}\n",
                port = self.port,
                data = data.display()
            ),
        )
        .map_err(|e| e.to_string())?;
        let id = self
            .java()
            .arg("kafka.tools.StorageTool")
            .arg("random-uuid")
            .output()
            .map_err(|e| format!("java: {e} (is a JDK installed? scripts/test.sh installs one)"))?;
        let id = String::from_utf8_lossy(&id.stdout).trim().to_string();
        try_run(
            self.java().args(["kafka.tools.StorageTool", "format", "-t", &id, "-c"]).arg(&props),
            "kafka StorageTool format",
        )?;
        let log = std::fs::File::create(self.dir.join("broker.log")).map_err(|e| e.to_string())?;
        let child = self
            .java()
            .env("KAFKA_LOG4J_OPTS", "")
            .arg(format!("-Dkafka.logs.dir={}", self.dir.display()))
            .arg("kafka.Kafka")
            .arg(&props)
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("java kafka.Kafka: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(90);
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                self.child = None;
                return Err(format!(
                    "the broker exited ({status}):\n{}",
                    std::fs::read_to_string(self.dir.join("broker.log")).unwrap_or_default()
                ));
            }
            // Ready once it answers an admin request.
            if self.topics().is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Err("the broker did not answer within 90 s".into())
    }

    /// `127.0.0.1:PORT`.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn topics(&self) -> Result<(), String> {
        try_run(
            self.java().args(["org.apache.kafka.tools.TopicCommand", "--bootstrap-server", &self.brokers(), "--list"]),
            "kafka TopicCommand --list",
        )
    }

    /// Creates a topic with `partitions` partitions.
    pub fn create_topic(&self, topic: &str, partitions: u32) {
        run(
            self.java().args([
                "org.apache.kafka.tools.TopicCommand",
                "--bootstrap-server",
                &self.brokers(),
                "--create",
                "--topic",
                topic,
                "--partitions",
                &partitions.to_string(),
            ]),
            "kafka TopicCommand --create",
        );
    }

    /// A command of the broker's own tools (ProducerPerformance, …) with its classpath.
    pub fn tool(&self, class: &str) -> Command {
        let mut c = self.java();
        c.arg(class);
        c
    }
}

impl Drop for Kafka {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGTERM first, so that it shuts down; then make sure.
            let _ = Command::new("kill").arg(c.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
