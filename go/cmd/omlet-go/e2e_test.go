package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// End-to-end: rules built by the omlet CLI as core modules, run by omlet-go
// and by `omlet run`, must print the same bytes. The test binary runs
// omlet-go's main itself when OMLET_GO_MAIN is set.

func TestMain(m *testing.M) {
	if os.Getenv("OMLET_GO_MAIN") == "1" {
		os.Exit(mainCode(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// repo is the repository root.
func repo(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// omletBin is the omlet CLI: $OMLET_BIN, else target/debug/omlet.
func omletBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("OMLET_BIN")
	if bin == "" {
		bin = filepath.Join(repo(t), "target", "debug", "omlet")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("the omlet CLI is not built (%s): build it with cargo, or set OMLET_BIN", bin)
	}
	return bin
}

// buildCore builds rules as a core module.
func buildCore(t *testing.T, bin, out string, rules ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), out)
	args := append([]string{"build", "--target", "core", "-o", path}, rules...)
	if b, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("omlet build: %v\n%s", err, b)
	}
	return path
}

type ran struct {
	stdout, stderr []byte
	code           int
}

// codeCache is the compiled-code cache both CLIs share during the test.
var codeCache string

func runCmd(t *testing.T, cmd *exec.Cmd) ran {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "OMLET_CODE_CACHE="+codeCache)
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return ran{out.Bytes(), errb.Bytes(), code}
}

// errorLines are stderr's lines but the summary's (its timing differs).
func errorLines(b []byte) string {
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, " records in ") || strings.HasPrefix(l, "lookups reaching the host:") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

func compare(t *testing.T, bin string, args ...string) ran {
	t.Helper()
	want := runCmd(t, exec.Command(bin, append([]string{"run"}, args...)...))
	self := exec.Command(os.Args[0], append([]string{"run"}, args...)...)
	self.Env = append(os.Environ(), "OMLET_GO_MAIN=1")
	got := runCmd(t, self)
	if !bytes.Equal(got.stdout, want.stdout) {
		t.Errorf("%v: stdout differs\nomlet-go:\n%s\nomlet run:\n%s", args, got.stdout, want.stdout)
	}
	if errorLines(got.stderr) != errorLines(want.stderr) {
		t.Errorf("%v: error lines differ\nomlet-go:\n%s\nomlet run:\n%s", args, got.stderr, want.stderr)
	}
	if got.code != want.code {
		t.Errorf("%v: exit %d, omlet run exits %d", args, got.code, want.code)
	}
	return got
}

// badLines are records to read as omlet reads them: odd values, and lines
// that are no records.
var badLines = []string{
	"\xef\xbb\xbf" + `{"EventID":3,"x":1}`,
	`{"EventID":1,"big":123456789012345678901234567890,"neg":-9223372036854775809,"f":1.5e3,"z":-0,"e":1E-7,"h":100000000000000000000000.0}`,
	"", " \t ",
	`{"EventID":1,"s":"a\"b\\c\n\t\u0001\u00e9\ud83d\ude00/","nested":{"b":2,"a":[1,{"y":null,"x":true}],"a":3},"arr":[],"obj":{}}` + "\r",
	`{"EventID":1,"dup":1,"other":2,"dup":3}`,
	`not json`, `[1,2]`, `{"a":1,}`, `{"a":1`, `{"a" 1}`, `{"a":tru}`, `{"a":01}`, `{"a":1.}`, `{"a":"\x"}`,
	"{\"a\":\"\x01\"}", `{"a":1} x`, "{\"a\":\"\xff\xfe abc\"}", "{\"a\":\"\xe2\x82\"}", `{"a":1e999}`, `"str"`, `{1:2}`,
	`{"a":[1,2,]}`, `{"a":"\ud800"}`, `{"a":"\udc00"}`, `{"a":"\u12"}`, `{"a":"\uZZZZ"}`, `{`, `{"a":[`,
	`{"EventID":"x` + strings.Repeat("y", 5000) + `"`, strings.Repeat("[", 200),
	`{"a":` + strings.Repeat("9", 400) + `}`,
	`  {"EventID":2}  `, `{"EventID":-0.0,"t":true,"n":null,"a":[null,true,1.25,"x"],"g":0.1}`,
}

func TestOmletGoPrintsWhatOmletRunPrints(t *testing.T) {
	bin := omletBin(t)
	root := repo(t)
	codeCache = t.TempDir()
	ex := func(p string) string { return filepath.Join(root, "examples", p) }
	sysmon := buildCore(t, bin, "sysmon.wasm", ex("sysmon/sysmon.oml"))
	nginx := buildCore(t, bin, "nginx.wasm", ex("nginx/nginx.oml"))
	set := buildCore(t, bin, "set.wasm", ex("nginx"), ex("sysmon"))
	knowdb := ex("nginx/knowdb/knowdb.toml")

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	events, err := os.ReadFile(ex("sysmon/events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, append([]byte(strings.Join(badLines, "\n")+"\n"), events...), 0o644); err != nil {
		t.Fatal(err)
	}
	// The rule set's records without the APT ones (whose knowdb is another),
	// and records whose rule path is missing or not text.
	records, err := os.ReadFile(ex("ruleset/records.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var mixed []string
	for _, l := range strings.Split(strings.TrimSpace(string(records)), "\n") {
		if !strings.Contains(l, "/apt") {
			mixed = append(mixed, l)
		}
	}
	mixed = append(mixed, `{"no_path":1}`, `{"rule_path":5}`)
	mixedPath := filepath.Join(dir, "mixed.jsonl")
	if err := os.WriteFile(mixedPath, []byte(strings.Join(mixed, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// A pure rule first: every kind of line, errors included.
	got := compare(t, bin, sysmon, "--input", bad)
	if got.code != 1 || !bytes.Contains(got.stderr, []byte(`"kind":"failed"`)) || len(got.stdout) == 0 {
		t.Fatalf("the bad input gave exit %d, %d bytes out:\n%s", got.code, len(got.stdout), got.stderr)
	}
	compare(t, bin, sysmon, "--input", ex("sysmon/events.jsonl"), "--model", "windows/sysmon")
	// Lookups, against the knowdb.
	got = compare(t, bin, nginx, "--input", ex("nginx/access.jsonl"), "--knowdb", knowdb)
	if got.code != 0 || !bytes.Contains(got.stdout, []byte(`"zone":"dmz"`)) {
		t.Fatalf("nginx: exit %d\n%s", got.code, got.stdout)
	}
	compare(t, bin, nginx, "--input", ex("nginx/access.jsonl"), "--knowdb", knowdb, "--rule-path", "/nginx/access_log")
	// A rule set routed by field, with unrouted records.
	got = compare(t, bin, set, "--input", mixedPath, "--rule-path-field", "rule_path", "--knowdb", knowdb)
	if !bytes.Contains(got.stderr, []byte(`"kind":"unrouted"`)) {
		t.Fatalf("no unrouted record:\n%s", got.stderr)
	}
	// Refused before any record: lookups without knowledge, a model the set lacks.
	got = compare(t, bin, nginx, "--input", ex("nginx/access.jsonl"))
	if got.code != 1 || !bytes.Contains(got.stderr, []byte("no knowledge was given")) {
		t.Fatalf("nginx without knowledge: exit %d\n%s", got.code, got.stderr)
	}
	compare(t, bin, set, "--input", mixedPath, "--model", "nope", "--knowdb", knowdb)
}
