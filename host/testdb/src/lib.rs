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
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e} (is it installed? scripts/test.sh installs it)"));
    assert!(out.status.success(), "{what} failed:\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < Duration::from_secs(60), "{what} did not become ready");
        std::thread::sleep(Duration::from_millis(100));
    }
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
        pg.resume();
        pg
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn cmd(&self, bin: &str, args: &[&str]) {
        let exe = format!("{PG_BIN}/{bin}");
        let mut c = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", &exe]);
            c
        } else {
            Command::new(&exe)
        };
        c.args(args).stdin(Stdio::null());
        run(&mut c, bin);
    }

    /// Starts (again) on the same port and data.
    pub fn resume(&mut self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 -c shared_preload_libraries=pg_stat_statements",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("log").display().to_string();
        self.cmd("pg_ctl", &["-D", &self.data(), "-l", &log, "-o", &opts, "-w", "start"]);
        self.running = true;
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
    pub fn start() -> MariaDb {
        let dir = tempfile::Builder::new().prefix("omlet-mariadb-").tempdir().unwrap().keep();
        let data = dir.join("data");
        run(
            Command::new("mariadb-install-db")
                .arg("--no-defaults")
                .arg(format!("--datadir={}", data.display()))
                .arg("--user=root")
                .arg("--auth-root-authentication-method=normal")
                .arg("--skip-test-db")
                .stdin(Stdio::null()),
            "mariadb-install-db",
        );
        let mut m = MariaDb { dir, port: free_port(), child: None };
        m.resume();
        let sock = m.sock();
        run(
            Command::new("mariadb").args(["--no-defaults", "-uroot", &format!("--socket={sock}"), "-e", "create database demo"]),
            "create database",
        );
        m
    }

    fn sock(&self) -> String {
        self.dir.join("sock").display().to_string()
    }

    pub fn resume(&mut self) {
        let log = std::fs::File::create(self.dir.join("log")).unwrap();
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg("--user=root")
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.sock()))
            .arg("--innodb-flush-log-at-trx-commit=0")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("mariadbd (is mariadb-server installed? scripts/test.sh installs it)");
        self.child = Some(child);
        let sock = self.sock();
        wait_until("mariadbd", || {
            Command::new("mariadb-admin")
                .args(["--no-defaults", "-uroot", &format!("--socket={sock}"), "ping"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
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

