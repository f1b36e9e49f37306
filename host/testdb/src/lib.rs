//! Throwaway database servers for omlet's tests and benches: PostgreSQL 15
//! and MariaDB (Debian's packages), each in a temporary directory, on a free
//! loopback port, stopped and removed on drop. Nothing is left running.

use std::net::TcpListener;
use std::path::PathBuf;
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

