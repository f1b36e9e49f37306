package knowledge

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Throwaway PostgreSQL and MariaDB servers on loopback, in a temporary
// folder, stopped when the test ends (as host/testdb does for the Rust
// tests). A test skips, saying why, when the server binaries are absent.

const pgBin = "/usr/lib/postgresql/15/bin"

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// startPostgres starts PostgreSQL 15 with trust auth and gives its URL.
func startPostgres(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgBin, "pg_ctl")); err != nil {
		t.Skipf("PostgreSQL 15 is not installed (%s/pg_ctl absent): apt-get install postgresql", pgBin)
	}
	dir, err := os.MkdirTemp("", "omlet-go-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pg := func(bin string, args ...string) {
		exe := filepath.Join(pgBin, bin)
		if os.Geteuid() == 0 {
			run(t, "runuser", append([]string{"-u", "postgres", "--", exe}, args...)...)
		} else {
			run(t, exe, args...)
		}
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skip("running as root without a postgres user to run PostgreSQL as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	pg("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
	port := freePort(t)
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", port, dir)
	pg("pg_ctl", "-D", data, "-l", filepath.Join(dir, "log"), "-o", opts, "-w", "start")
	t.Cleanup(func() { pg("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop") })
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port)
}

// startMariaDB starts MariaDB with a database `demo` and gives its URL.
func startMariaDB(t *testing.T) string {
	t.Helper()
	for _, bin := range []string{"mariadbd", "mariadb-install-db", "mariadb", "mariadb-admin"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("MariaDB is not installed (%s absent): apt-get install mariadb-server mariadb-client", bin)
		}
	}
	dir, err := os.MkdirTemp("", "omlet-go-mariadb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	tmp, sock := filepath.Join(dir, "tmp"), filepath.Join(dir, "sock")
	os.Mkdir(tmp, 0o700)
	u, _ := user.Current()
	run(t, "mariadb-install-db", "--no-defaults", "--datadir="+filepath.Join(dir, "data"), "--tmpdir="+tmp,
		"--user="+u.Username, "--auth-root-authentication-method=normal", "--skip-test-db")
	port := freePort(t)
	log, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("mariadbd", "--no-defaults", "--datadir="+filepath.Join(dir, "data"), "--tmpdir="+tmp,
		"--user="+u.Username, "--port="+strconv.Itoa(port), "--bind-address=127.0.0.1", "--socket="+sock,
		"--innodb-flush-log-at-trx-commit=0")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		exec.Command("mariadb-admin", "--no-defaults", "-uroot", "--socket="+sock, "shutdown").Run()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		log.Close()
	})
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if exec.Command("mariadb-admin", "--no-defaults", "-uroot", "--socket="+sock, "ping").Run() == nil {
			break
		}
		select {
		case <-done:
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("mariadbd exited:\n%s", b)
		default:
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("mariadbd did not become ready")
		}
	}
	run(t, "mariadb", "--no-defaults", "-uroot", "--socket="+sock, "-e", "create database demo")
	return fmt.Sprintf("mysql://root@127.0.0.1:%d/demo", port)
}

// admin is a connection of the test's own, which may write.
func admin(t *testing.T, url string) *sql.DB {
	t.Helper()
	var db *sql.DB
	var err error
	if strings.HasPrefix(url, "postgres") {
		db, err = openPostgres(context.Background(), url, Options{}.withDefaults(), false)
	} else {
		db, err = openMySQL(context.Background(), url, Options{}.withDefaults(), false)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// withKnowdbConfig writes a knowledge config naming url and the nginx
// knowdb, and opens it.
func withKnowdbConfig(t *testing.T, url string, extra string) *Provider {
	t.Helper()
	knowdb, err := filepath.Abs("../../examples/nginx/knowdb/knowdb.toml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "knowledge.toml")
	text := fmt.Sprintf("url = %q\nknowdb = %q\nquery_timeout_ms = 500\n%s", url, knowdb, extra)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := OpenConfig(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
