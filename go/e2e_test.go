package omlet_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	omlet "example.invalid/omlet/go"
	"example.invalid/omlet/go/knowledge"
)

// End-to-end through the library: real rules built by the omlet CLI. The
// outputs' Records, rendered by this package, must be the guest's own JSON
// lines and `omlet run`'s output, byte for byte.

func omletBin(t *testing.T) (bin, root string) {
	t.Helper()
	root, _ = filepath.Abs("..")
	bin = os.Getenv("OMLET_BIN")
	if bin == "" {
		bin = filepath.Join(root, "target", "debug", "omlet")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("the omlet CLI is not built (%s): build it with cargo, or set OMLET_BIN", bin)
	}
	return bin, root
}

func TestRecordsRenderAsTheGuestAndOmletRunRenderThem(t *testing.T) {
	bin, root := omletBin(t)
	ctx := context.Background()
	cases := []struct {
		rule, input, knowdb string
	}{
		{"examples/sysmon/sysmon.oml", "examples/sysmon/events.jsonl", ""},
		{"examples/nginx/nginx.oml", "examples/nginx/access.jsonl", "examples/nginx/knowdb/knowdb.toml"},
	}
	for _, c := range cases {
		wasm := filepath.Join(t.TempDir(), "rule.wasm")
		if b, err := exec.Command(bin, "build", "--target", "core", "-o", wasm, filepath.Join(root, c.rule)).CombinedOutput(); err != nil {
			t.Fatalf("omlet build: %v\n%s", err, b)
		}
		args := []string{"run", wasm, "--input", filepath.Join(root, c.input)}
		var opts omlet.Options
		if c.knowdb != "" {
			args = append(args, "--knowdb", filepath.Join(root, c.knowdb))
			k, err := knowledge.LoadKnowdb(ctx, filepath.Join(root, c.knowdb))
			if err != nil {
				t.Fatal(err)
			}
			opts.Knowledge = k
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "OMLET_CODE_CACHE=off")
		want, err := cmd.Output()
		if err != nil {
			t.Fatalf("omlet run: %v", err)
		}
		code, err := os.ReadFile(wasm)
		if err != nil {
			t.Fatal(err)
		}
		rule, err := omlet.Load(ctx, code, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer rule.Close(ctx)
		text, err := os.ReadFile(filepath.Join(root, c.input))
		if err != nil {
			t.Fatal(err)
		}
		var records []omlet.Record
		for _, l := range strings.Split(strings.TrimSpace(string(text)), "\n") {
			r, err := omlet.ParseRecord([]byte(l))
			if err != nil {
				t.Fatal(err)
			}
			records = append(records, r)
		}
		var fromRecords, fromLines, one bytes.Buffer
		for i, res := range rule.EvaluateBatch(ctx, records, omlet.Only) {
			if res.Err != nil {
				t.Fatalf("%s: record %d: %v", c.rule, i, res.Err)
			}
			fromRecords.WriteString(res.Record.JSON() + "\n")
		}
		for i, res := range rule.EvaluateLines(ctx, records, omlet.Only) {
			if res.Err != nil {
				t.Fatalf("%s: record %d: %v", c.rule, i, res.Err)
			}
			fromLines.Write(append(res.Line, '\n'))
		}
		for _, r := range records {
			out, err := rule.Evaluate(ctx, r, omlet.Only)
			if err != nil {
				t.Fatal(err)
			}
			one.WriteString(out.JSON() + "\n")
		}
		for name, got := range map[string][]byte{"records": fromRecords.Bytes(), "lines": fromLines.Bytes(), "one by one": one.Bytes()} {
			if !bytes.Equal(got, want) {
				t.Errorf("%s, %s:\n%s\nomlet run:\n%s", c.rule, name, got, want)
			}
		}
		ex, err := rule.Explain(ctx, records[0], omlet.Only)
		if err != nil || ex.Err != nil || !bytes.Contains(ex.Trace, []byte(`"steps"`)) {
			t.Errorf("%s: explain: %v %v %s", c.rule, err, ex.Err, ex.Trace)
		}
		if ex.Output.JSON()+"\n" != strings.SplitAfter(string(want), "\n")[0] {
			t.Errorf("%s: explain's output %s", c.rule, ex.Output.JSON())
		}
	}
}

// A rule with lookups and no knowledge loads, and its lookups are absent,
// as the Rust host's are (omlet run --no-knowledge).
func TestLookupsWithoutKnowledgeAreAbsentAsInOmlet(t *testing.T) {
	bin, root := omletBin(t)
	wasm := filepath.Join(t.TempDir(), "nginx.wasm")
	if b, err := exec.Command(bin, "build", "--target", "core", "-o", wasm, filepath.Join(root, "examples/nginx/nginx.oml")).CombinedOutput(); err != nil {
		t.Fatalf("omlet build: %v\n%s", err, b)
	}
	input := filepath.Join(root, "examples/nginx/access.jsonl")
	cmd := exec.Command(bin, "run", wasm, "--input", input, "--no-knowledge")
	cmd.Env = append(os.Environ(), "OMLET_CODE_CACHE=off")
	want, err := cmd.Output()
	if err != nil {
		t.Fatalf("omlet run: %v", err)
	}
	ctx := context.Background()
	code, _ := os.ReadFile(wasm)
	rule, err := omlet.Load(ctx, code, omlet.Options{CompilationCacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer rule.Close(ctx)
	text, _ := os.ReadFile(input)
	var got bytes.Buffer
	for _, l := range strings.Split(strings.TrimSpace(string(text)), "\n") {
		r, err := omlet.ParseRecord([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		out, err := rule.Evaluate(ctx, r, omlet.Path("/nginx/access_log"))
		if err != nil {
			t.Fatal(err)
		}
		got.WriteString(out.JSON() + "\n")
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("got\n%s\nomlet run --no-knowledge:\n%s", got.Bytes(), want)
	}
}
