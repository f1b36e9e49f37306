package omlet_test

import (
	"context"
	"path/filepath"
	"testing"

	omlet "example.invalid/omlet/go"
	"example.invalid/omlet/go/internal/conformance"
	"example.invalid/omlet/go/knowledge"
)

// The conformance corpus (tests/conformance, with tests/amendments.toml
// applied) and omlet's own cases (tests/cases) through this host: each rule
// built by the omlet CLI as a core module, loaded here with its case's
// tables in an in-memory SQLite, its record evaluated and compared as the
// Rust runner (host/cli/src/conformance.rs) compares it. Package
// knowledge's TestPostgres and TestMariaDB run the lookup cases on those
// servers.

// sqliteKnowledge is a case's tables in a fresh in-memory SQLite.
func sqliteKnowledge(ctx context.Context, c *conformance.Case) (omlet.Knowledge, func(), error) {
	tables, err := knowledge.TablesFromJSON([]byte(*c.Knowledge))
	if err != nil {
		return nil, nil, err
	}
	p, err := knowledge.FromTables(ctx, tables)
	if err != nil {
		return nil, nil, err
	}
	return p, func() { p.Close() }, nil
}

// caseNets are a case's intranet_nets as a knowledge config reads them.
func caseNets(n *conformance.Nets) ([]omlet.Network, error) {
	return knowledge.IntranetNets{Enabled: n.Enabled, Enable: n.Enable, Mode: n.Mode, Nets: n.Nets}.Effective("the case's intranet_nets")
}

func TestConformance(t *testing.T) {
	bin, root := omletBin(t)
	ctx := context.Background()
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
	// As many cases as the Rust suite runs (host/cli/tests/all/conformance.rs).
	if len(corpus) != 138 || len(own) != 135 {
		t.Errorf("%d corpus cases and %d own cases read; the Rust suite runs 138 and 135", len(corpus), len(own))
	}
	r := &conformance.Runner{Bin: bin, Knowledge: sqliteKnowledge, Nets: caseNets, SetSize: 80}
	outs, err := r.Run(ctx, append(corpus, own...))
	if err != nil {
		t.Fatal(err)
	}
	conformance.Report(t, "sqlite", outs)
}
