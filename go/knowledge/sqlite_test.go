package knowledge

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	omlet "example.invalid/omlet/go"
)

func text(s string) omlet.Cell   { return omlet.Cell{Kind: omlet.CellText, Text: s} }
func integer(i int64) omlet.Cell { return omlet.Cell{Kind: omlet.CellInteger, Int: i} }

// nginxStatement is the lookup of examples/nginx/nginx.oml as the compiler
// writes it (host/tests/all/e2e.rs checks that text).
var nginxStatement = omlet.Statement{
	SQL:     "select zone,owner from ip_zone where lo_int <= :client_ip and hi_int >= :client_ip_2",
	Params:  []string{"client_ip", "client_ip_2"},
	Table:   "ip_zone",
	Columns: []string{"zone", "owner"},
	File:    "nginx.oml", Line: 32, Column: 1,
}

func nginxKnowdb(t *testing.T) *Provider {
	t.Helper()
	p, err := LoadKnowdb(context.Background(), "../../examples/nginx/knowdb/knowdb.toml")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestTheNginxKnowdbAnswersTheNginxLookup(t *testing.T) {
	ctx := context.Background()
	p := nginxKnowdb(t)
	b, err := p.Bind(ctx, []omlet.Statement{nginxStatement})
	if err != nil {
		t.Fatal(err)
	}
	cols, qe := b.Columns(ctx, 0)
	if qe != nil || strings.Join(cols, ",") != "zone,owner" {
		t.Fatalf("columns %v %v", cols, qe)
	}
	for ip, want := range map[string]string{
		"10.0.0.7": "dmz,web-team", "10.0.1.20": "office,it-desk", "192.168.9.4": "lab,research",
		"172.31.255.255": "core,netops", "203.0.113.9": "",
	} {
		// The guest folds ip4_int(read(client_ip)) into the parameter.
		n := Helper("ip4_int", []omlet.Cell{text(ip)})
		a, qe := b.Query(ctx, 0, []omlet.Cell{n, n})
		if qe != nil {
			t.Fatal(qe)
		}
		got := ""
		if a.Found {
			got = a.Row[0].Text + "," + a.Row[1].Text
		}
		if got != want || !a.Cacheable {
			t.Errorf("%s: got %q (cacheable %v), want %q", ip, got, a.Cacheable, want)
		}
	}
	// Text parameters compare as SQLite's affinity says: '167772167'
	// against an INTEGER column matches.
	a, qe := b.Query(ctx, 0, []omlet.Cell{text("167772167"), text("167772167")})
	if qe != nil || !a.Found || a.Row[0].Text != "dmz" {
		t.Fatalf("text parameter: %+v %v", a, qe)
	}
	if _, qe := b.Query(ctx, 7, nil); qe == nil || qe.Code != omlet.UnknownStatement {
		t.Fatalf("statement 7: %v", qe)
	}
}

func TestKnowdbColumnTypesAreThoseOfTheRustLoader(t *testing.T) {
	p := nginxKnowdb(t)
	rows, err := p.db.Query("select name, type from pragma_table_info('ip_zone') order by cid")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var n, ty string
		rows.Scan(&n, &ty)
		got = append(got, n+" "+ty)
	}
	want := "cidr TEXT,lo_int INTEGER,hi_int INTEGER,zone TEXT,owner TEXT"
	if strings.Join(got, ",") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}

func TestBindRefusesWhatTheGuardRefusesNamingTheStatement(t *testing.T) {
	ctx := context.Background()
	p := nginxKnowdb(t)
	for sql, want := range map[string]string{
		"select zone from other where ip = :ip":                  "not among the knowledge tables this rule may read (ip_zone)",
		"select zone from ip_zone where ip = :ip; drop table":    "has no place in a lookup",
		"select zone from ip_zone where load_extension(:ip) = 1": "the function `load_extension` is not allowed",
		"select name from sqlite_master where name = :ip":        "catalog",
		"select zone from ip_zone where zonee = :ip":             "did you mean `zone` for `zonee`?",
	} {
		_, err := p.Bind(ctx, []omlet.Statement{{SQL: sql, Params: []string{"ip"}, File: "r.oml", Line: 3, Column: 5}})
		var se *StatementError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "r.oml:3:5: lookup `") {
			t.Errorf("%s: %v", sql, err)
		}
	}
}

func TestTheConformanceTablesLoadAndAnswer(t *testing.T) {
	ctx := context.Background()
	tables, err := TablesFromJSON([]byte(`{"tables":{"zone":{"columns":["zone","ip_start_int","ip_end_int","f","b"],"types":["TEXT","INTEGER","INTEGER","REAL"],"rows":[["A",167772160,184549375,1.5,true]]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := FromTables(ctx, tables)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	b, err := p.Bind(ctx, []omlet.Statement{{
		SQL:    "select * from zone where ip_start_int <= ip4_int(:ip) and ip_end_int >= ip4_int(:ip2)",
		Params: []string{"ip", "ip2"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	a, qe := b.Query(ctx, 0, []omlet.Cell{text("10.1.2.3"), text(" 10.1.2.3 ")})
	if qe != nil || !a.Found {
		t.Fatalf("%+v %v", a, qe)
	}
	want := []omlet.Cell{text("A"), integer(167772160), integer(184549375), {Kind: omlet.CellReal, Real: 1.5}, text("1")}
	for i, c := range want {
		if a.Row[i].Kind != c.Kind || a.Row[i].Text != c.Text || a.Row[i].Int != c.Int || a.Row[i].Real != c.Real {
			t.Errorf("cell %d: %+v, want %+v", i, a.Row[i], c)
		}
	}
	cols, _ := b.Columns(ctx, 0)
	if strings.Join(cols, ",") != "zone,ip_start_int,ip_end_int,f,b" {
		t.Fatalf("columns %v", cols)
	}
}

func TestALoadedSQLiteRefusesWritesAndOtherFiles(t *testing.T) {
	ctx := context.Background()
	p := nginxKnowdb(t)
	outside := filepath.Join(t.TempDir(), "outside.db")
	for _, sql := range []string{
		"attach '" + outside + "' as x",
		"vacuum into '" + outside + "'",
		"insert into ip_zone (zone) values ('x')",
		"drop table ip_zone",
		"pragma writable_schema = 1",
		"select load_extension('/nonexistent/evil')",
	} {
		_, err := p.db.ExecContext(ctx, sql)
		if err == nil || !(strings.Contains(err.Error(), "not authorized") || strings.Contains(err.Error(), "authorization denied") || strings.Contains(err.Error(), "too many attached")) {
			t.Errorf("%s: %v", sql, err)
		}
	}
	if _, err := os.Stat(outside); err == nil {
		t.Fatal("a file was written outside")
	}
	if n, err := (loader{db: p.db, d: SQLite}).count(ctx, "ip_zone"); err != nil || n != 4 {
		t.Fatalf("count %d %v", n, err)
	}
}
