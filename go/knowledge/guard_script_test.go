package knowledge

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The cases of guard/script.rs's tests.
func TestWhatBuildsTablesPasses(t *testing.T) {
	for _, sql := range []string{
		"create table t (a text, attach text, pragma int); insert into t values ('attach x', 1, 2);",
		"-- ATTACH 'x' AS y;\ncreate index t_a on t(a); /* vacuum into 'x' */ pragma foreign_keys = on;",
		"PRAGMA main.table_info(t); create virtual table f using fts5(body); select load_extension from t;",
		"create trigger tr after insert on t begin update t set a = 'detach'; end;",
		"insert into t select * from t where a = 'load_extension(1)';",
		// Quoted identifiers, MySQL's `#` comments and empty statements.
		"create table \"attach\" (`vacuum` text, [pragma] int); # attach 'x' as y\n;; insert into \"attach\" values ('a'';attach');",
		"",
	} {
		if r := checkScript(sql); r != nil {
			t.Errorf("%q: %v", sql, r)
		}
	}
}

func TestWhatReachesOutsideIsRefusedByStatement(t *testing.T) {
	for _, c := range []struct {
		sql, statement string
		line           int
		why            string
	}{
		{"create table t (a);\n  ATTACH   '/tmp/x.db' AS x;", "ATTACH '/tmp/x.db' AS x", 2, "outside the knowdb's own database"},
		{"detach x", "detach x", 1, "DETACH opens"},
		{"vacuum into '/tmp/copy.db';", "vacuum into '/tmp/copy.db'", 1, "VACUUM INTO"},
		{"pragma writable_schema = 1", "pragma writable_schema = 1", 1, "PRAGMA writable_schema is not among"},
		{"PRAGMA temp_store_directory = '/tmp'", "PRAGMA temp_store_directory = '/tmp'", 1, "not among"},
		{"pragma x.table_info(t)", "pragma x.table_info(t)", 1, "the schema `x`"},
		{"select load_extension('/tmp/evil.so')", "select load_extension('/tmp/evil.so')", 1, "`load_extension`"},
		{"insert into t values (LOAD_EXTENSION ('e'))", "insert into t values (LOAD_EXTENSION ('e'))", 1, "`LOAD_EXTENSION`"},
		{"create virtual table v using zipfile('/etc')", "create virtual table v using zipfile('/etc')", 1, "module `zipfile`"},
		// Beyond the Rust cases: the line after comments and a quoted `;`,
		// a pragma without a name, and a long statement cut at 200 characters.
		{"/* a\n;b */ create table t (a);\n-- x;\ninsert into t values (';\n');\n\n  pragma\n;", "pragma", 7, "a PRAGMA without a name"},
		{"select 1 " + strings.Repeat("é", 300) + " load_extension(1)", "select 1 " + strings.Repeat("é", 191) + "…", 1, "`load_extension`"},
	} {
		r := checkScript(c.sql)
		if r == nil {
			t.Errorf("%q passed", c.sql)
			continue
		}
		if r.statement != c.statement || r.line != c.line || !strings.Contains(r.why, c.why) {
			t.Errorf("%q: %q line %d: %s", c.sql, r.statement, r.line, r.why)
		}
	}
}

// A knowdb's SQL file that reaches outside its database fails the load
// naming the file, the line, the statement and why, and none of it runs
// (as host/tests/all/trust3_reach.rs); one that builds its own tables
// loads.
func TestAKnowdbsSQLReachesItsOwnDatabaseOnly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside.db")
	write(t, dir, "knowdb.toml", "[[tables]]\nname = \"hosts\"\ncreate = \"hosts.sql\"\n")
	for _, c := range []struct{ sql, want string }{
		{"create table hosts (name text);\nATTACH '" + outside + "' AS x;\ncreate table x.stolen (a);", "hosts.sql:2: the statement `ATTACH '"},
		{"create table hosts (name text); vacuum into '" + outside + "';", "VACUUM INTO"},
		{"create table hosts (name text); pragma writable_schema = on;", "PRAGMA writable_schema is not among"},
		{"create table hosts (name text); select load_extension('/tmp/evil');", "`load_extension`"},
	} {
		write(t, dir, "hosts.sql", c.sql)
		p, err := openSQLiteMemory(ctx, Options{}.withDefaults())
		if err != nil {
			t.Fatal(err)
		}
		_, err = loadKnowdb(ctx, filepath.Join(dir, "knowdb.toml"), loader{db: p.db, d: p.dialect}, nil)
		if err == nil || !strings.Contains(err.Error(), "hosts.sql:") || !strings.Contains(err.Error(), "is refused") ||
			!strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v", c.sql, err)
		}
		// Nothing ran: not even the create table before the refused statement.
		var n int
		if err := p.db.QueryRowContext(ctx, "select count(*) from sqlite_master").Scan(&n); err != nil || n != 0 {
			t.Errorf("%q: %d objects (%v): the refused file ran", c.sql, n, err)
		}
		p.Close()
		if _, err := os.Stat(outside); err == nil {
			t.Errorf("%q wrote %s", c.sql, outside)
		}
	}
	// The insert file is checked as the create file is.
	write(t, dir, "knowdb.toml", "[[tables]]\nname = \"hosts\"\ncreate = \"hosts.sql\"\ninsert = \"insert.sql\"\n")
	write(t, dir, "hosts.sql", "create table hosts (name text);")
	write(t, dir, "insert.sql", "insert into hosts values ('a');\nattach '"+outside+"' as x")
	if _, err := LoadKnowdb(ctx, filepath.Join(dir, "knowdb.toml")); err == nil ||
		!strings.Contains(err.Error(), "insert.sql:2: the statement `attach '") || !strings.Contains(err.Error(), "outside the knowdb's own database") {
		t.Errorf("insert.sql: %v", err)
	}
	// A knowdb that builds its own tables loads.
	write(t, dir, "knowdb.toml", "[[tables]]\nname = \"hosts\"\ncreate = \"hosts.sql\"\n")
	write(t, dir, "hosts.sql", "create table hosts (name text); insert into hosts values ('a'); pragma table_info(hosts);")
	p, err := LoadKnowdb(ctx, filepath.Join(dir, "knowdb.toml"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if n, err := (loader{db: p.db, d: SQLite}).count(ctx, "hosts"); err != nil || n != 1 {
		t.Fatal(n, err)
	}
}
