package knowledge

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	omlet "example.invalid/omlet/go"
)

func TestPostgres(t *testing.T) {
	url := startPostgres(t)
	exerciseServer(t, url, Postgres,
		"create function slow(s double precision) returns int language sql as 'select 1 from pg_sleep(s)'")
}

func TestMariaDB(t *testing.T) {
	url := startMariaDB(t)
	exerciseServer(t, url, MySQL, "")
}

// helperSamples are text values every dialect's helpers read alike
// (digits-only text is left out: MySQL reads it as a number).
var helperSamples = []string{
	"10.0.0.1", " 10.1.2.3 ", "1.2.3", "256.1.1.1", "10.0.0.0/8", "10.1.2.3/24", " 10.1.2.3/32 ",
	"10.0.0.0/33", "0.0.0.0/0", "x", "", "'quoted'", "\"dq\"", "'", "'mixed\"", "::ffff:10.0.0.1", "fd00::1",
}

var intSamples = []int64{0, 167772161, 4294967295, 4294967296, -1}

// exerciseServer runs the same checks on a PostgreSQL or MariaDB server:
// a knowdb loaded through a knowledge config answers the nginx lookup as
// SQLite does; the helpers applied to columns give the guest's answers;
// a slow lookup times out (fatally under on_lookup_error = "fail");
// lookup connections do not write; the catalog stays out of reach.
func exerciseServer(t *testing.T, url string, d Dialect, slowFunction string) {
	ctx := context.Background()
	started := time.Now()
	p := withKnowdbConfig(t, url, "on_lookup_error = \"fail\"\n")
	if p.Dialect().Kind != d.Kind {
		t.Fatalf("dialect %s", p.Dialect().Kind)
	}
	b, err := p.Bind(ctx, []omlet.Statement{nginxStatement})
	if err != nil {
		t.Fatal(err)
	}
	for ip, want := range map[string]string{"10.0.0.7": "dmz", "172.31.255.255": "core", "203.0.113.9": ""} {
		n := Helper("ip4_int", []omlet.Cell{text(ip)})
		for _, param := range []omlet.Cell{n, text(fmt.Sprint(n.Int))} {
			a, qe := b.Query(ctx, 0, []omlet.Cell{param, param})
			if qe != nil {
				t.Fatal(qe)
			}
			got := ""
			if a.Found {
				got = a.Row[0].Text
			}
			if got != want {
				t.Errorf("%s (%+v): %q, want %q", ip, param, got, want)
			}
		}
	}
	// A table outside the knowdb's is refused (tables default to them).
	if _, err := p.Bind(ctx, []omlet.Statement{{SQL: "select a from other where a = :a", Params: []string{"a"}}}); err == nil ||
		!strings.Contains(err.Error(), "not among the knowledge tables") {
		t.Errorf("other table: %v", err)
	}
	// Lookup connections do not write.
	if _, err := p.DB().ExecContext(ctx, "insert into ip_zone (zone) values ('x')"); err == nil {
		t.Error("a lookup connection wrote")
	}

	// The helpers, applied to columns, answer as the guest's.
	adm := admin(t, url)
	mustExec := func(q string) {
		if _, err := adm.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	mustExec("create table h (id bigint primary key, v text, n bigint)")
	for i, s := range helperSamples {
		mustExec(fmt.Sprintf("insert into h values (%d, '%s', %d)", i, strings.ReplaceAll(s, "'", "''"), intSamples[i%len(intSamples)]))
	}
	if slowFunction != "" {
		mustExec(slowFunction)
	}
	h, err := Open(ctx, url, Options{QueryTimeout: 300 * time.Millisecond, Functions: []string{"slow", "sleep"}, OnLookupError: Fail,
		Cache: CacheOptions{Mode: CacheBypass}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// Each helper of a column, for each sample: the row is found when the
	// database's answer equals the guest's, and for the guest's NULL the
	// database's must be NULL too (neither equal to a value nor not).
	v := func(i int) omlet.Cell { return text(helperSamples[i]) }
	n := func(i int) omlet.Cell { return integer(intSamples[i%len(intSamples)]) }
	type check struct {
		expr   string
		params []string
		args   []omlet.Cell
		want   func(i int) omlet.Cell
		text   bool
	}
	one := func(name string, arg func(int) omlet.Cell) func(int) omlet.Cell {
		return func(i int) omlet.Cell { return Helper(name, []omlet.Cell{arg(i)}) }
	}
	checks := []check{
		{expr: "ip4_int(v)", want: one("ip4_int", v)},
		{expr: "cidr4_min(v)", want: one("cidr4_min", v)},
		{expr: "cidr4_max(v)", want: one("cidr4_max", v)},
		{expr: "trim_quotes(v)", want: one("trim_quotes", v), text: true},
		{expr: "ip4_text(n)", want: one("ip4_text", n), text: true},
		{expr: "cidr4_contains(:ip, v)", params: []string{"ip"}, args: []omlet.Cell{text("10.1.2.200")},
			want: func(i int) omlet.Cell { return Helper("cidr4_contains", []omlet.Cell{text("10.1.2.200"), v(i)}) }},
		{expr: "ip4_between(v, :lo, :hi)", params: []string{"lo", "hi"}, args: []omlet.Cell{text("10.0.0.0"), text("10.0.0.255")},
			want: func(i int) omlet.Cell {
				return Helper("ip4_between", []omlet.Cell{v(i), text("10.0.0.0"), text("10.0.0.255")})
			}},
	}
	if d.Kind == "mysql" {
		checks = append(checks, check{expr: "ip_key(v)", want: one("ip_key", v), text: true})
	}
	compared := 0
	for _, c := range checks {
		equal := "select id from h where id = :id and " + c.expr + " = :want"
		some := fmt.Sprintf("select id from h where id = :id and (%[1]s = :want or %[1]s <> :want)", c.expr)
		var stmts []omlet.Statement
		for _, q := range []string{equal, some} {
			stmts = append(stmts, omlet.Statement{SQL: q, Params: append(append([]string{"id"}, c.params...), "want"), File: "h.oml", Line: 1, Column: 1})
		}
		hb, err := h.Bind(ctx, stmts)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		for i := range helperSamples {
			want := c.want(i)
			stmt, param := uint32(0), want
			if want.Kind == omlet.CellNull {
				stmt, param = 1, integer(0)
				if c.text {
					param = text("")
				}
			}
			args := append(append([]omlet.Cell{integer(int64(i))}, c.args...), param)
			a, qe := hb.Query(ctx, stmt, args)
			if qe != nil {
				t.Fatalf("%s [%d]: %v", c.expr, i, qe)
			}
			if a.Found != (want.Kind != omlet.CellNull) {
				t.Errorf("%s with v=%q n=%d: %s does not give the guest's %+v", c.expr, helperSamples[i], intSamples[i%len(intSamples)], d.Kind, want)
			}
			compared++
		}
	}
	if compared < 100 {
		t.Fatalf("only %d comparisons", compared)
	}
	// A lookup that takes longer than the timeout fails as a timeout,
	// fatally under on_lookup_error = "fail".
	slow := "select id from h where slow(:s) = 1"
	if d.Kind == "mysql" {
		slow = "select id from h where sleep(:s) = 0"
	}
	sb, err := h.Bind(ctx, []omlet.Statement{{SQL: slow, Params: []string{"s"}, File: "s.oml", Line: 2, Column: 3}})
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	_, qe := sb.Query(ctx, 0, []omlet.Cell{{Kind: omlet.CellReal, Real: 5}})
	if qe == nil || qe.Code != omlet.Timeout || !qe.Fatal || !strings.Contains(qe.Message, "s.oml:2:3") {
		t.Fatalf("slow lookup: %+v", qe)
	}
	if time.Since(begin) > 3*time.Second {
		t.Fatalf("the timeout took %v", time.Since(begin))
	}
	// The catalog, whatever the config.
	for _, q := range []string{"select a from information_schema.tables where a = :a", "select a from pg_catalog.pg_authid where a = :a",
		"select a from mysql.user where a = :a", "select current_user from h where id = :a"} {
		if _, err := h.Bind(ctx, []omlet.Statement{{SQL: q, Params: []string{"a"}}}); err == nil {
			t.Errorf("%s: bound", q)
		}
	}
	// A knowdb's SQL file is checked here as on SQLite: a refused file
	// fails the load naming it, and none of it runs.
	kb := t.TempDir()
	write(t, kb, "knowdb.toml", "[[tables]]\nname = \"refused_t\"\ncreate = \"c.sql\"\n")
	write(t, kb, "c.sql", "create table refused_t (a text);\n-- the next one reaches outside\nselect load_extension('/tmp/evil.so');")
	if _, err := loadKnowdb(ctx, filepath.Join(kb, "knowdb.toml"), loader{db: adm, d: d}, nil); err == nil ||
		!strings.Contains(err.Error(), "c.sql:3: the statement `select load_extension('/tmp/evil.so')` is refused") {
		t.Errorf("refused knowdb SQL: %v", err)
	}
	var refusedRows int
	if err := adm.QueryRowContext(ctx, "select count(*) from refused_t").Scan(&refusedRows); err == nil {
		t.Error("a refused knowdb SQL file ran: refused_t exists")
	}
	t.Logf("%s checks took %v", d.Kind, time.Since(started))
}
