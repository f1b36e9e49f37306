package conformance

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	omlet "example.invalid/omlet/go"
)

func TestCompareSaysWhichFieldsDiffer(t *testing.T) {
	c := &Case{}
	out := omlet.NewRecord(omlet.F("a", omlet.Digit(1)), omlet.F("b", omlet.Chars("x")), omlet.F("z", omlet.Bool(true)))
	err := Compare(c, `{"a":1,"b":"y","c":2}`, out)
	if err == nil || !strings.HasPrefix(err.Error(), "changed  b: expected \"y\", got \"x\"\nmissing  c: expected 2\nextra    z: true\n") {
		t.Errorf("%v", err)
	}
	err = Compare(c, `{"b":"x","a":1,"z":true}`, out)
	if err == nil || !strings.HasPrefix(err.Error(), "order    the fields are right, in another order: expected b, a, z; got a, b, z") {
		t.Errorf("%v", err)
	}
	if err := Compare(c, `{"a":1,"b":"x","z":true}`, out); err != nil {
		t.Error(err)
	}
	// Integers and floats differ; integers compare digit for digit.
	if Compare(c, `{"a":1.0,"b":"x","z":true}`, out) == nil {
		t.Error("1.0 matched 1")
	}
	big := omlet.NewRecord(omlet.F("n", omlet.BigInt("123456789012345678901")))
	if Compare(c, `{"n":123456789012345678902}`, big) == nil || Compare(c, `{"n":123456789012345678901}`, big) != nil {
		t.Error("bigint comparison")
	}
}

func TestCompareChecksTypesAndIgnoredFields(t *testing.T) {
	ip := omlet.IP(netip.MustParseAddr("10.0.0.1"))
	out := omlet.NewRecord(omlet.F("ip", ip), omlet.F("s", omlet.Chars("10.0.0.1")), omlet.F("h", omlet.Ignore()))
	c := &Case{ExpectedTypes: map[string]string{"ip": "ip", "s": "chars"}, ExpectedIgnored: []string{"h"}}
	if err := Compare(c, `{"ip":"10.0.0.1","s":"10.0.0.1"}`, out); err != nil {
		t.Error(err)
	}
	c = &Case{ExpectedTypes: map[string]string{"ip": "chars", "s": "ip", "x": "digit"}, ExpectedIgnored: []string{"s"}}
	err := Compare(c, `{"ip":"10.0.0.1","s":"10.0.0.1"}`, out)
	for _, want := range []string{"field ip: expected type chars, got ip", "field s: expected type ip, got chars",
		"field x: expected type digit, got nothing", "field s should be present as an ignore field"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: want %q", err, want)
		}
	}
}

func TestClockSentinelsMatchByKindAtAnyDepth(t *testing.T) {
	c := &Case{}
	tm := omlet.Time(0)
	out := omlet.NewRecord(
		omlet.F("o", omlet.Obj(omlet.F("n", omlet.Digit(7)), omlet.F("t", tm))),
		omlet.F("a", omlet.Array(tm, omlet.Chars("x"))))
	if err := Compare(c, `{"o":{"t":"<any:time>","n":"<any:digit>"},"a":["<any:time>","<any:chars>"]}`, out); err != nil {
		t.Error(err)
	}
	// A time sentinel does not take text that merely renders as a string.
	for _, wrong := range []string{
		`{"o":{"t":"<any:time>","n":7},"a":["<any:chars>","<any:chars>"]}`,
		`{"o":{"t":"<any:chars>","n":7},"a":["<any:time>","x"]}`,
		`{"o":{"t":"<any:time>","n":"<any:chars>"},"a":["<any:time>","x"]}`,
	} {
		if Compare(c, wrong, out) == nil {
			t.Errorf("%s matched", wrong)
		}
	}
}

func TestInputTypes(t *testing.T) {
	rec, err := InputRecord(&Case{Input: `{"ip":" 10.0.0.1 ","t":"2024-01-02 03:04:05.25+08:00","b":"yes","n":"+12","six":"::1"}`,
		InputTypes: map[string]string{"ip": "ip", "t": "time", "b": "bool", "n": "digit", "six": "ip", "absent": "ip"}})
	if err != nil {
		t.Fatal(err)
	}
	want := omlet.NewRecord(omlet.F("ip", omlet.IP(netip.MustParseAddr("10.0.0.1"))),
		omlet.F("t", omlet.Time(1704164645250000000)), omlet.F("b", omlet.Bool(false)), omlet.F("n", omlet.Digit(12)),
		omlet.F("six", omlet.IP(netip.MustParseAddr("::1"))))
	if rec.JSON() != want.JSON() || rec.Fields[0].Value.Kind != omlet.KindIPv4 || rec.Fields[1].Value.Kind != omlet.KindTime {
		t.Errorf("%s %+v", rec.JSON(), rec.Fields)
	}
	for _, bad := range []string{`{"t":"2024-02-30 00:00:00"}`, `{"t":"2024-01-02"}`, `{"t":"x"}`} {
		if _, err := InputRecord(&Case{Input: bad, InputTypes: map[string]string{"t": "time"}}); err == nil {
			t.Errorf("%s: typed", bad)
		}
	}
	if _, err := InputRecord(&Case{Input: `{"ip":"10.0.0.256"}`, InputTypes: map[string]string{"ip": "ip"}}); err == nil {
		t.Error("10.0.0.256 typed as ip")
	}
}

// The runner itself fails cases that do not come out as they should,
// alone and in rule sets, and amendments whose corpus output still passes.
func TestRunnerFailsWhatItShould(t *testing.T) {
	bin := os.Getenv("OMLET_BIN")
	if bin == "" {
		bin, _ = filepath.Abs("../../../target/debug/omlet")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("the omlet CLI is not built (%s): build it with cargo, or set OMLET_BIN", bin)
	}
	dir := t.TempDir()
	rule := "name : t\n---\nA = read(a) ;\n"
	cases := `
[[case]]
name = "right"
oml = '''` + rule + `'''
input = '{"a":"x"}'
expected = '{"A":"x"}'
expected_types = { A = "chars" }

[[case]]
name = "wrong_in_a_set"
oml = '''` + rule + `'''
input = '{"a":"x"}'
expected = '{"A":"y"}'

[[case]]
name = "wrong_type"
oml = '''` + rule + `'''
input = '{"a":"x"}'
expected = '{"A":"x"}'
expected_types = { A = "digit" }

[[case]]
name = "compiles_but_should_not"
oml = '''` + rule + `'''
expected_error = "it should not compile"

[[case]]
name = "does_not_compile"
oml = '''name : t
---
A = read(( ;
'''
expected_error = "a syntax error"

[[case]]
name = "extended_rejected"
oml = '''name : t
---
A = read(( ;
'''
spec_expected = '{}'
spec_required = false

[[case]]
name = "required_rejected"
oml = '''name : t
---
A = read(( ;
'''
spec_expected = '{}'
spec_required = true

[[case]]
name = "record_error"
oml = '''name : t
---
A = read(a) { _ : fail('no a') } ;
'''
expected_record_error = "no a"

[[case]]
name = "record_error_missing"
oml = '''` + rule + `'''
input = '{"a":"x"}'
expected_record_error = "no a"

[[case]]
name = "amended_but_still_passing"
oml = '''` + rule + `'''
input = '{"a":"x"}'
expected = '{"A":"x"}'
`
	path := filepath.Join(dir, "c.toml")
	amend := filepath.Join(dir, "amendments.toml")
	os.WriteFile(path, []byte(cases), 0o644)
	os.WriteFile(amend, []byte("[[amend]]\nfile = \"c.toml\"\ncase = \"amended_but_still_passing\"\nexpected = '{\"A\":\"x\"}'\n"), 0o644)
	cs, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := Amend(cs, amend); err != nil {
		t.Fatal(err)
	}
	r := &Runner{Bin: bin, SetSize: 10}
	outs, err := r.Run(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Status{"right": Passed, "wrong_in_a_set": Failed, "wrong_type": Failed, "compiles_but_should_not": Failed,
		"does_not_compile": Passed, "extended_rejected": Passed, "required_rejected": Failed, "record_error": Passed,
		"record_error_missing": Failed, "amended_but_still_passing": Failed}
	for _, o := range outs {
		if o.Status != want[o.Case.Name] {
			t.Errorf("%s: status %d, want %d (%s)", o.Case.Name, o.Status, want[o.Case.Name], o.Why)
		}
		if o.Case.Name == "wrong_in_a_set" && !strings.Contains(o.Why, "in a rule set with other cases") {
			t.Errorf("%s: not run again alone: %s", o.Case.Name, o.Why)
		}
		if o.Case.Name == "right" && !o.Evaluated {
			t.Errorf("right: not evaluated")
		}
	}
	if err := Amend(cs, filepath.Join(dir, "missing.toml")); err == nil {
		t.Error("a missing amendments file")
	}
}
