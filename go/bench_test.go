package omlet_test

// Benchmarks of the Go host, on the rules and records of the Rust benches
// (benches/src/lib.rs, benches/benches/eval.rs), so that their figures
// compare: `benches/go_bench.py` runs them and keeps the medians for
// `benches/report.py --only portable`.
//
//	go test -run '^$' -bench . -benchtime=1s -count=3
//
// Sizes come from the environment as on the Rust side: OMLET_BENCH_OPS
// (20000 records) and OMLET_BENCH_HOT (128 ids). The rules are built once
// per process with the omlet CLI (target/debug/omlet, or $OMLET_BIN); the
// benchmarks are skipped when it is not built.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	omlet "example.invalid/omlet/go"
	"example.invalid/omlet/go/knowledge"
)

// benchPureRule is omlet_benches::PURE_RULE.
const benchPureRule = "name : bench/pure\n---\nV = read(id) ;\n"

// benchBatch is the batch size of the `wasm_batch/256` cells.
const benchBatch = 256

func benchEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchArtifacts is what every benchmark shares, made once per process.
type benchArtifacts struct {
	root   string
	pure   []byte // the pure rule's core module
	nginx  []byte // examples/nginx/nginx.oml's core module
	ops    int
	hot    int
	skip   string // why the benchmarks cannot run
	failed error
}

var (
	benchOnce sync.Once
	benchArt  benchArtifacts
)

func benchSetup(b *testing.B) *benchArtifacts {
	b.Helper()
	benchOnce.Do(func() {
		a := &benchArt
		a.ops = benchEnvInt("OMLET_BENCH_OPS", 20000)
		a.hot = benchEnvInt("OMLET_BENCH_HOT", 128)
		a.root, _ = filepath.Abs("..")
		bin := os.Getenv("OMLET_BIN")
		if bin == "" {
			bin = filepath.Join(a.root, "target", "debug", "omlet")
		}
		if _, err := os.Stat(bin); err != nil {
			a.skip = fmt.Sprintf("the omlet CLI is not built (%s): build it with `cargo build -p omlet-cli`, or set OMLET_BIN", bin)
			return
		}
		dir, err := os.MkdirTemp("", "omlet-go-bench-")
		if err != nil {
			a.failed = err
			return
		}
		defer os.RemoveAll(dir)
		build := func(rules string) []byte {
			if a.failed != nil {
				return nil
			}
			out := filepath.Join(dir, "rule.wasm")
			if msg, err := exec.Command(bin, "build", "--target", "core", "-o", out, rules).CombinedOutput(); err != nil {
				a.failed = fmt.Errorf("omlet build --target core %s: %v\n%s", rules, err, msg)
				return nil
			}
			wasm, err := os.ReadFile(out)
			if err != nil {
				a.failed = err
			}
			return wasm
		}
		pure := filepath.Join(dir, "bench.oml")
		if err := os.WriteFile(pure, []byte(benchPureRule), 0o644); err != nil {
			a.failed = err
			return
		}
		a.pure = build(pure)
		a.nginx = build(filepath.Join(a.root, "examples", "nginx", "nginx.oml"))
	})
	if benchArt.skip != "" {
		b.Skip(benchArt.skip)
	}
	if benchArt.failed != nil {
		b.Fatal(benchArt.failed)
	}
	return &benchArt
}

// benchIDRecords are omlet_benches::id_records: `{"id":k}`, k drawn from
// the hot set by the same LCG.
func benchIDRecords(b *testing.B, ops, hot int) []omlet.Record {
	b.Helper()
	x := uint64(0x9E3779B97F4A7C15)
	out := make([]omlet.Record, ops)
	for i := range out {
		x = x*6364136223846793005 + 1442695040888963407
		id := (x>>33)%uint64(max(hot, 1)) + 1
		r, err := omlet.ParseRecord([]byte(fmt.Sprintf(`{"id":%d}`, id)))
		if err != nil {
			b.Fatal(err)
		}
		out[i] = r
	}
	return out
}

// benchNginx is omlet_benches::nginx: the example's knowledge, and its
// records cycled to ops.
func benchNginx(b *testing.B, a *benchArtifacts) (*knowledge.Provider, []omlet.Record) {
	b.Helper()
	ex := filepath.Join(a.root, "examples", "nginx")
	k, err := knowledge.LoadKnowdb(context.Background(), filepath.Join(ex, "knowdb", "knowdb.toml"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = k.Close() })
	text, err := os.ReadFile(filepath.Join(ex, "access.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	var base []omlet.Record
	for _, l := range strings.Split(string(text), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		r, err := omlet.ParseRecord([]byte(l))
		if err != nil {
			b.Fatal(err)
		}
		base = append(base, r)
	}
	out := make([]omlet.Record, a.ops)
	for i := range out {
		out[i] = base[i%len(base)]
	}
	return k, out
}

func benchLoad(b *testing.B, wasm []byte, opts omlet.Options) *omlet.Rule {
	b.Helper()
	ctx := context.Background()
	rule, err := omlet.Load(ctx, wasm, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rule.Close(ctx) })
	return rule
}

// benchRate reports records/s: perOp records per iteration.
func benchRate(b *testing.B, perOp int) {
	if ns := b.Elapsed().Nanoseconds(); ns > 0 && b.N > 0 {
		b.ReportMetric(float64(perOp)*float64(b.N)*1e9/float64(ns), "records/s")
	}
}

// benchChunks are the full chunks of n records, as eval.rs's wasm_batch
// takes them (`chunks(n).filter(|c| c.len() == n)`).
func benchChunks(b *testing.B, records []omlet.Record, n int) [][]omlet.Record {
	var out [][]omlet.Record
	for i := 0; i+n <= len(records); i += n {
		out = append(out, records[i:i+n])
	}
	if len(out) == 0 {
		b.Fatalf("fewer than %d records (OMLET_BENCH_OPS)", n)
	}
	return out
}

// One record per call, one goroutine (eval.rs's wasm_single).
func benchSingle(b *testing.B, rule *omlet.Rule, records []omlet.Record) {
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := rule.Evaluate(ctx, records[i%len(records)], omlet.Only); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	benchRate(b, 1)
}

// Batches of n records, one goroutine (eval.rs's wasm_batch).
func benchBatched(b *testing.B, rule *omlet.Rule, records []omlet.Record, n int) {
	ctx := context.Background()
	chunks := benchChunks(b, records, n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, res := range rule.EvaluateBatch(ctx, chunks[i%len(chunks)], omlet.Only) {
			if res.Err != nil {
				b.Fatal(res.Err)
			}
		}
	}
	b.StopTimer()
	benchRate(b, n)
}

// c goroutines share the rule and take iterations from one counter: each
// iteration one record (n = 1, Evaluate) or one batch of n.
func benchConcurrent(b *testing.B, rule *omlet.Rule, records []omlet.Record, n, c int) {
	ctx := context.Background()
	chunks := benchChunks(b, records, n)
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	for g := 0; g < c; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N || failed.Load() != nil {
					return
				}
				if n == 1 {
					if _, err := rule.Evaluate(ctx, records[i%len(records)], omlet.Only); err != nil {
						failed.Store(&err)
					}
					continue
				}
				for _, res := range rule.EvaluateBatch(ctx, chunks[i%len(chunks)], omlet.Only) {
					if res.Err != nil {
						err := error(res.Err)
						failed.Store(&err)
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	benchRate(b, n)
}

// BenchmarkPure: `V = read(id) ;` over the id records, as eval.rs's
// pure/wasm_single and pure/wasm_batch/256; the _c4 cells are 4 goroutines
// on one rule (GOMAXPROCS threads), each making its own calls.
func BenchmarkPure(b *testing.B) {
	a := benchSetup(b)
	records := benchIDRecords(b, a.ops, a.hot)
	rule := benchLoad(b, a.pure, omlet.Options{})
	b.Run("single", func(b *testing.B) { benchSingle(b, rule, records) })
	b.Run("batch256", func(b *testing.B) { benchBatched(b, rule, records, benchBatch) })
	b.Run("single_c4", func(b *testing.B) { benchConcurrent(b, rule, records, 1, 4) })
	b.Run("batch256_c4", func(b *testing.B) { benchConcurrent(b, rule, records, benchBatch, 4) })
}

// BenchmarkReal: examples/nginx/nginx.oml with its knowdb (in-memory
// SQLite), the example's records cycled, as eval.rs's real/wasm_single and
// real/wasm_batch_256.
func BenchmarkReal(b *testing.B) {
	a := benchSetup(b)
	k, records := benchNginx(b, a)
	rule := benchLoad(b, a.nginx, omlet.Options{Knowledge: k})
	b.Run("single", func(b *testing.B) { benchSingle(b, rule, records) })
	b.Run("batch256", func(b *testing.B) { benchBatched(b, rule, records, benchBatch) })
}

// BenchmarkStart: per iteration, Load of the nginx rule's core module
// (compiling it, or reading wazero's compilation cache, and binding its
// statements to the knowdb, loaded once before the timer) and its first
// Evaluate. Closing the rule is not timed.
func BenchmarkStart(b *testing.B) {
	a := benchSetup(b)
	k, records := benchNginx(b, a)
	ctx := context.Background()
	start := func(b *testing.B, opts omlet.Options) {
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rule, err := omlet.Load(ctx, a.nginx, opts)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := rule.Evaluate(ctx, records[0], omlet.Only); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			_ = rule.Close(ctx)
			b.StartTimer()
		}
	}
	b.Run("cached", func(b *testing.B) {
		opts := omlet.Options{Knowledge: k, CompilationCacheDir: b.TempDir()}
		// Warm the cache before the timer.
		rule, err := omlet.Load(ctx, a.nginx, opts)
		if err != nil {
			b.Fatal(err)
		}
		_ = rule.Close(ctx)
		start(b, opts)
	})
	b.Run("cold", func(b *testing.B) { start(b, omlet.Options{Knowledge: k}) })
}
