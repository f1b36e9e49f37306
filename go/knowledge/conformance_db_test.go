package knowledge

import (
	"context"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"

	omlet "example.invalid/omlet/go"
	"example.invalid/omlet/go/internal/conformance"
)

// The lookup cases of the conformance corpus (amended) and of omlet's own
// cases, on PostgreSQL and MariaDB, as the Rust suite runs the corpus's on
// them (host/cli/tests/all/databases.rs): a fresh database for the run
// (utf8mb4 compared byte for byte on MariaDB), each case's tables created
// there with the dialect's column types and dropped before and after it,
// the cases one at a time, lookups through a provider opened on the URL.

func TestConformanceOnServers(t *testing.T) {
	root, _ := filepath.Abs("../..")
	bin := os.Getenv("OMLET_BIN")
	if bin == "" {
		bin = filepath.Join(root, "target", "debug", "omlet")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("the omlet CLI is not built (%s): build it with cargo, or set OMLET_BIN", bin)
	}
	corpus, err := conformance.ReadDir(filepath.Join(root, "tests", "conformance"))
	if err != nil {
		t.Fatal(err)
	}
	if err := conformance.Amend(corpus, filepath.Join(root, "tests", "amendments.toml")); err != nil {
		t.Fatal(err)
	}
	own, err := conformance.ReadDir(filepath.Join(root, "tests", "cases"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []*conformance.Case
	for _, c := range append(corpus, own...) {
		if c.Knowledge != nil {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		t.Fatal("no case with knowledge tables")
	}
	// One compilation cache for both servers: the modules are the same.
	cache := t.TempDir()
	for _, server := range []struct {
		name  string
		start func(*testing.T) string
		d     Dialect
	}{{"postgres", startPostgres, Postgres}, {"mariadb", startMariaDB, MySQL}} {
		t.Run(server.name, func(t *testing.T) {
			u := server.start(t)
			outs := runOnServer(t, u, server.d, bin, cache, cases)
			conformance.Report(t, server.name, outs)
		})
	}
}

// sqliteOnly are omlet's own cases (tests/cases, which the Rust suite runs
// on SQLite only) whose SQL another database does not take, by dialect;
// host/tests/all/databases.rs runs the same forms on the servers in their
// dialect (string_agg, a sub-query with an alias).
var sqliteOnly = map[string]map[string]string{
	"postgres": {
		"sql_aggregates_in_the_select_list": "group_concat is SQLite's and MySQL's aggregate (PostgreSQL has string_agg)",
		"sql_sub_query_source":              "PostgreSQL requires an alias on a sub-query in FROM",
	},
	"mysql": {
		"sql_sub_query_source": "MariaDB requires an alias on a derived table",
	},
}

// runOnServer creates the database omlet_conformance on the server of
// admin URL u and runs cases there.
func runOnServer(t *testing.T, u string, d Dialect, bin, cache string, cases []*conformance.Case) []*conformance.Outcome {
	ctx := context.Background()
	create := "create database omlet_conformance"
	if d.Kind == "mysql" {
		create += " character set utf8mb4 collate utf8mb4_bin"
	}
	if _, err := admin(t, u).ExecContext(ctx, create); err != nil {
		t.Fatal(err)
	}
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	parsed.Path = "/omlet_conformance"
	dbURL := parsed.String()
	l := loader{db: admin(t, dbURL), d: d}
	knowledgeOf := func(ctx context.Context, c *conformance.Case) (omlet.Knowledge, func(), error) {
		tables, err := TablesFromJSON([]byte(*c.Knowledge))
		if err != nil {
			return nil, nil, err
		}
		var names []string
		drop := func() {
			for _, n := range names {
				l.exec(ctx, "drop table if exists "+d.quoteIdent(n))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(tables)) {
			tb := tables[name]
			types, err := checkTable(name, tb.Columns, tb.Types)
			if err != nil {
				drop()
				return nil, nil, err
			}
			names = append(names, name)
			l.exec(ctx, "drop table if exists "+d.quoteIdent(name))
			if err := l.loadTable(ctx, name, tb.Columns, types, tb.Rows); err != nil {
				drop()
				return nil, nil, err
			}
		}
		p, err := Open(ctx, dbURL, Options{})
		if err != nil {
			drop()
			return nil, nil, err
		}
		return p, func() { p.Close(); drop() }, nil
	}
	r := &conformance.Runner{Bin: bin, Knowledge: knowledgeOf, Serial: true, SetSize: 80, CacheDir: cache,
		Skip: func(c *conformance.Case) string { return sqliteOnly[d.Kind][c.Name] },
		Nets: func(n *conformance.Nets) ([]omlet.Network, error) {
			return IntranetNets{Enabled: n.Enabled, Enable: n.Enable, Mode: n.Mode, Nets: n.Nets}.Effective("the case's intranet_nets")
		}}
	outs, err := r.Run(ctx, cases)
	if err != nil {
		t.Fatal(err)
	}
	return outs
}
