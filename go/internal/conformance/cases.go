// Package conformance runs test cases in omlet's conformance-corpus format
// (tests/conformance/README.md, tests/cases/README.md) through the Go host:
// each rule built by the omlet CLI as a core module, loaded with Load,
// its input evaluated and its output compared as the Rust reference runner
// (host/cli/src/conformance.rs) compares it.
//
// It is for tests only (the root package's conformance test, and package
// knowledge's run of the lookup cases on PostgreSQL and MariaDB), so it
// imports no knowledge provider: the caller gives one per case.
package conformance

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// Case is one test case, as host/cli/src/conformance.rs's Case reads it.
type Case struct {
	// File is the case file's base name (basics.toml); Path its path.
	File string `toml:"-"`
	Path string `toml:"-"`

	Name                string            `toml:"name"`
	OML                 string            `toml:"oml"`
	OMLFile             *string           `toml:"oml_file"`
	RulePath            *string           `toml:"rule_path"`
	Model               *string           `toml:"model"`
	Input               string            `toml:"input"`
	InputTypes          map[string]string `toml:"input_types"`
	Knowledge           *string           `toml:"knowledge"`
	Knowdb              *string           `toml:"knowdb"`
	Expected            *string           `toml:"expected"`
	ExpectedTypes       map[string]string `toml:"expected_types"`
	ExpectedIgnored     []string          `toml:"expected_ignored"`
	ExpectedError       *string           `toml:"expected_error"`
	ExpectedRecordError *string           `toml:"expected_record_error"`
	IntranetNets        *Nets             `toml:"intranet_nets"`
	SpecExpected        *string           `toml:"spec_expected"`
	SpecRequired        *bool             `toml:"spec_required"`

	// Amended: tests/amendments.toml replaced the corpus's expectation;
	// Original is the case as the corpus gives it, which must now fail.
	Amended  bool  `toml:"-"`
	Original *Case `toml:"-"`
}

// Nets is a case's `intranet_nets` (the `[intranet_nets]` table of a
// knowledge config); the caller turns it into networks.
type Nets struct {
	Enabled *bool    `toml:"enabled"`
	Enable  *bool    `toml:"enable"`
	Mode    string   `toml:"mode"`
	Nets    []string `toml:"nets"`
}

// caseKeys are the keys a case may have (conformance.rs CASE_KEYS): what
// the runner reads and the corpus's descriptive keys, which it ignores.
var caseKeys = map[string]bool{
	"name": true, "oml": true, "oml_file": true, "input": true, "input_types": true, "knowledge": true,
	"knowdb": true, "expected": true, "expected_types": true, "expected_ignored": true, "expected_error": true,
	"expected_record_error": true, "intranet_nets": true, "rule_path": true, "model": true,
	"spec_expected": true, "spec_required": true, "reference_error": true, "reference_expected": true,
	"class": true, "source": true, "confidence": true, "notes": true,
}

// defaultKeys are the keys `[defaults]` may give (conformance.rs DEFAULT_KEYS).
var defaultKeys = map[string]bool{
	"oml": true, "oml_file": true, "input_types": true, "knowledge": true, "knowdb": true,
	"intranet_nets": true, "rule_path": true, "model": true,
}

// ReadFile reads the cases of one case file: `[defaults]` applied, every
// key checked (a misspelled key would silently test nothing).
func ReadFile(path string) ([]*Case, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var top map[string]any
	if _, err := toml.Decode(string(text), &top); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for k := range top {
		if k != "case" && k != "defaults" {
			return nil, fmt.Errorf("%s: unknown top-level key `%s`", path, k)
		}
	}
	defaults, _ := top["defaults"].(map[string]any)
	for k := range defaults {
		if !defaultKeys[k] {
			return nil, fmt.Errorf("%s: [defaults]: `%s` cannot be a default", path, k)
		}
	}
	raw, _ := top["case"].([]map[string]any)
	var out []*Case
	for i, m := range raw {
		for k, v := range defaults {
			// An inline rule replaces a default rule file, and the reverse.
			ruleGiven := (k == "oml" || k == "oml_file") && (m["oml"] != nil || m["oml_file"] != nil)
			if _, has := m[k]; !has && !ruleGiven {
				m[k] = v
			}
		}
		for k := range m {
			if !caseKeys[k] {
				return nil, fmt.Errorf("%s: case #%d: unknown key `%s`", path, i+1, k)
			}
		}
		// Through TOML again, into the typed case.
		var buf bytes.Buffer
		if err := toml.NewEncoder(&buf).Encode(m); err != nil {
			return nil, fmt.Errorf("%s: case #%d: %w", path, i+1, err)
		}
		c := &Case{Input: "{}"}
		if _, err := toml.Decode(buf.String(), c); err != nil {
			return nil, fmt.Errorf("%s: case #%d: %w", path, i+1, err)
		}
		c.File, c.Path = filepath.Base(path), path
		out = append(out, c)
	}
	return out, nil
}

// ReadDir reads every .toml case file of dir, files in name order.
func ReadDir(dir string) ([]*Case, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.toml"))
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no case files in %s", dir)
	}
	sort.Strings(names)
	var out []*Case
	for _, n := range names {
		cs, err := ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

// amendment is one [[amend]] of tests/amendments.toml.
type amendment struct {
	File          string            `toml:"file"`
	Case          string            `toml:"case"`
	Section       string            `toml:"section"`
	Expected      string            `toml:"expected"`
	ExpectedTypes map[string]string `toml:"expected_types"`
	Why           string            `toml:"why"`
}

// Amend applies tests/amendments.toml to corpus cases, as the Rust test
// run_corpus does: an amended case's expected output (and expected_types)
// replaces the corpus's, a compile error included, and the corpus's own
// case is kept as Original, which must now fail. It returns an error for
// an amendment that names no case of the corpus.
func Amend(cases []*Case, path string) error {
	var f struct{ Amend []amendment }
	md, err := toml.DecodeFile(path, &f)
	if err != nil {
		return err
	}
	if u := md.Undecoded(); len(u) > 0 {
		return fmt.Errorf("%s: unknown keys %v", path, u)
	}
	var missing []string
	for _, a := range f.Amend {
		found := false
		for i, c := range cases {
			if c.File != a.File || c.Name != a.Case {
				continue
			}
			found = true
			amended := *c
			expected := a.Expected
			amended.Expected, amended.ExpectedTypes, amended.ExpectedError = &expected, a.ExpectedTypes, nil
			amended.Amended, amended.Original = true, c
			cases[i] = &amended
		}
		if !found {
			missing = append(missing, a.File+": "+a.Case)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s names cases the corpus does not have: %s", path, strings.Join(missing, ", "))
	}
	return nil
}
