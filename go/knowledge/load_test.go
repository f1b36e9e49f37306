package knowledge

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	omlet "example.invalid/omlet/go"
	"modernc.org/sqlite"
)

func TestCoercionFollowsTheRustHost(t *testing.T) {
	for _, tc := range []struct {
		in   omlet.Cell
		ty   paramType
		want omlet.Cell
	}{
		{text(" 1001 "), paramInt64, integer(1001)},
		{text("+7"), paramInt64, integer(7)},
		{text("1e3"), paramInt64, integer(1000)},
		{text("1.5"), paramInt64, null},
		{text("abc"), paramInt64, null},
		{integer(70000), paramInt16, null},
		{omlet.Cell{Kind: omlet.CellReal, Real: 3}, paramInt32, integer(3)},
		{integer(5), paramText, text("5")},
		{omlet.Cell{Kind: omlet.CellReal, Real: 1.5}, paramText, text("1.5")},
		{omlet.Cell{Kind: omlet.CellReal, Real: 2}, paramText, text("2")},
		{text("2.5"), paramFloat, omlet.Cell{Kind: omlet.CellReal, Real: 2.5}},
		{text("x"), paramAny, text("x")},
	} {
		got := coerce(tc.in, tc.ty)
		if got.Kind != tc.want.Kind || got.Int != tc.want.Int || got.Text != tc.want.Text || got.Real != tc.want.Real {
			t.Errorf("%+v as %d: %+v, want %+v", tc.in, tc.ty, got, tc.want)
		}
	}
}

func write(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKnowdbsAreCheckedAsTheRustLoaderChecksThem(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write(t, dir, "t.csv", "\ufeffa, b ,c\n1,x,2.5\n,y,\n3,\"q\"\"z\",1e2\n")
	for toml, want := range map[string]string{
		"[[tables]]\nname = \"T\"\ncsv = \"t.csv\"\n":                                         "must be a lower-case identifier",
		"[[tables]]\nname = \"t\"\ncsv = \"t.csv\"\nsurprise = 1\n":                           "unknown key",
		"[[tables]]\nname = \"t\"\ncsv = \"t.csv\"\ntypes = [\"DATE\", \"TEXT\", \"TEXT\"]\n": "column type `DATE`",
		"[[tables]]\nname = \"t\"\ncsv = \"t.csv\"\ntypes = [\"TEXT\"]\n":                     "has 3 columns but 1 types",
		"[[tables]]\nname = \"t\"\ncsv = \"t.csv\"\nexpected_rows = 2\n":                      "has 3 rows, expected 2",
		"[[tables]]\nname = \"t\"\ncsv = \"../outside.csv\"\n":                                "outside the knowdb's folder",
		"[[tables]]\nname = \"t\"\n":                                                          "needs `csv` or `create`",
		"version = 2\n":                                                                       "Warp Parse",
		"[[tables]]\nname = \"t\"\ncreate = \"c.sql\"\n":                                      "c.sql:1: the statement `attach 'x.db' as x` is refused",
	} {
		write(t, filepath.Dir(dir), "outside.csv", "a\n1\n")
		write(t, dir, "c.sql", "attach 'x.db' as x")
		path := write(t, dir, "knowdb.toml", toml)
		_, err := LoadKnowdb(ctx, path)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v", toml, err)
		}
	}
	write(t, dir, "knowdb.toml", strings.Repeat("#", MaxConfigBytes+1))
	if _, err := LoadKnowdb(ctx, filepath.Join(dir, "knowdb.toml")); err == nil || !strings.Contains(err.Error(), "limit reached (file bytes)") {
		t.Error(err)
	}
	// Inferred types, NULLs for empty numbers, the BOM and the blanks of
	// the header gone.
	path := write(t, dir, "knowdb.toml", "[[tables]]\nname = \"t\"\ncsv = \"t.csv\"\nexpected_rows = 3\nindex = [\"a\", \"a, b\"]\n")
	p, err := LoadKnowdb(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	b, err := p.Bind(ctx, []omlet.Statement{{SQL: "select b, c from t where a = :a", Params: []string{"a"}}})
	if err != nil {
		t.Fatal(err)
	}
	a, qe := b.Query(ctx, 0, []omlet.Cell{integer(3)})
	if qe != nil || !a.Found || a.Row[0].Text != `q"z` || a.Row[1].Kind != omlet.CellReal || a.Row[1].Real != 100 {
		t.Fatalf("%+v %v", a, qe)
	}
	var types, indexes string
	p.db.QueryRow("select group_concat(type) from pragma_table_info('t')").Scan(&types)
	p.db.QueryRow("select group_concat(name) from pragma_index_list('t')").Scan(&indexes)
	if types != "INTEGER,TEXT,REAL" || !strings.Contains(indexes, "omlet_t_a_b") {
		t.Fatal(types, indexes)
	}
}

func TestAKnowledgeConfigOpensItsDatabaseAndKnowdb(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	knowdb, _ := filepath.Abs("../../examples/nginx/knowdb/knowdb.toml")
	t.Setenv("OMLET_TEST_DB", filepath.Join(dir, "k.db"))
	path := write(t, dir, "knowledge.toml", fmt.Sprintf("url = \"sqlite://${OMLET_TEST_DB}\"\nknowdb = %q\non_lookup_error = \"fail\"\n"+
		"[cache]\nmode = \"bypass\"\n[memory]\nknowdb = true\n[intranet_nets]\nmode = \"replace\"\nnets = [\"100.64.0.0/10\"]\n", knowdb))
	p, err := OpenConfig(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	b, err := p.Bind(ctx, []omlet.Statement{nginxStatement})
	if err != nil {
		t.Fatal(err)
	}
	n := integer(167772167)
	a, qe := b.Query(ctx, 0, []omlet.Cell{n, n})
	if qe != nil || !a.Found || a.Cacheable {
		t.Fatalf("%+v %v", a, qe)
	}
	if nets := b.IntranetNets(); len(nets) != 1 || nets[0].Prefix != 106 {
		t.Fatalf("%+v", nets)
	}
	for text, want := range map[string]string{
		"url = \"sqlite://${HOME}/x.db\"\n":             "`${HOME}` is not filled in",
		"url = \"sqlite://${OMLET_SURELY_UNSET_7F}\"\n": "OMLET_SURELY_UNSET_7F is not set",
		"urll = \"x\"\n":              "unknown field `urll`",
		"[reload]\nchannel = \"k\"\n": "[reload] is not supported",
		"[cache]\nttl_ms = 0\n":       "would cache nothing",
		"url = \"postgres://u@127.0.0.1:1/x\"\ntables = [\"SECRETS\"]\n": "upper-case",
		"url = \"oracle://scott:tiger@db/x\"\n":                          "oracle://scott:***@db/x",
	} {
		_, err := OpenConfig(ctx, write(t, dir, "bad.toml", text))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "tiger") {
			t.Errorf("%q: %v", text, err)
		}
	}
	_, err = Open(ctx, "postgres://u:hunter2@127.0.0.1:1/x", Options{ConnectTimeout: time.Second})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("%v", err)
	}
}

// fromDBConnector opens connections of an embedder's own driver.
type fromDBConnector struct {
	d   *sqlite.Driver
	dsn string
}

func (c fromDBConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c fromDBConnector) Driver() driver.Driver                        { return c.d }

func TestAnEmbeddersOwnPoolAnswersLookups(t *testing.T) {
	ctx := context.Background()
	d := &sqlite.Driver{}
	if err := RegisterHelpers(d); err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(fromDBConnector{d, filepath.Join(t.TempDir(), "own.db")})
	defer db.Close()
	if _, err := db.Exec("create table nets (cidr text, name text); insert into nets values ('10.0.0.0/8', 'ten')"); err != nil {
		t.Fatal(err)
	}
	p, err := FromDB(db, SQLite, Options{Tables: []string{"nets"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Bind(ctx, []omlet.Statement{{SQL: "select name from nets where cidr4_contains(:ip, cidr) = 1", Params: []string{"ip"}}})
	if err != nil {
		t.Fatal(err)
	}
	a, qe := b.Query(ctx, 0, []omlet.Cell{text("10.9.9.9")})
	if qe != nil || !a.Found || a.Row[0].Text != "ten" {
		t.Fatalf("%+v %v", a, qe)
	}
	p.Close()
	if err := db.Ping(); err != nil {
		t.Fatal("Close closed the embedder's pool")
	}
}
