package omlet

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// These tests run the runtime against testdata/fake_guest.wasm, a
// hand-written module that speaks the ABI (its .wat says how it behaves),
// so that loading, the imports, limits and the pool are tested without the
// omlet CLI. The end-to-end tests (e2e_test.go) run real rules.

func fakeGuest(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/fake_guest.wasm")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type fakeKnowledge struct {
	bound      *fakeBound
	statements []Statement
	refuse     error
}

func (k *fakeKnowledge) Bind(_ context.Context, s []Statement) (Bound, error) {
	k.statements = s
	if k.refuse != nil {
		return nil, k.refuse
	}
	return k.bound, nil
}

type fakeBound struct {
	gen     atomic.Uint64
	nets    []Network
	params  []Cell
	answer  Answer
	qerr    *QueryError
	sleep   time.Duration
	columns []string
}

func (b *fakeBound) Query(_ context.Context, statement uint32, params []Cell) (Answer, *QueryError) {
	time.Sleep(b.sleep)
	b.params = params
	return b.answer, b.qerr
}
func (b *fakeBound) Columns(context.Context, uint32) ([]string, *QueryError) { return b.columns, nil }
func (b *fakeBound) IntranetNets() []Network                                 { return b.nets }
func (b *fakeBound) Generation() uint64                                      { return b.gen.Load() }

func load(t *testing.T, opts Options) *Rule {
	t.Helper()
	r, err := Load(context.Background(), fakeGuest(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func sample() Record {
	return NewRecord(F("a", Chars("x")), F("n", Digit(7)), F("o", Obj(F("k", Bool(true)))))
}

func TestLoadReadsInfoAndBindsStatements(t *testing.T) {
	k := &fakeKnowledge{bound: &fakeBound{}}
	r := load(t, Options{Knowledge: k})
	info := r.Info()
	if info.IRVersion != 7 || !info.UsesClock || len(info.Models) != 1 || info.Models[0].Name != "m" {
		t.Fatalf("info: %+v", info)
	}
	if len(k.statements) != 1 || k.statements[0].SQL != "select a from t where k = :k" || k.statements[0].Column != 5 {
		t.Fatalf("Bind got %+v", k.statements)
	}
	if l := info.Models[0].Lookups; len(l) != 1 || l[0].Line != 3 {
		t.Fatalf("lookups: %+v", l)
	}
}

func TestLoadRefusesWhatIsNoOmletRule(t *testing.T) {
	ctx := context.Background()
	// (module (import "env" "f" (func)))
	foreign := []byte{0, 'a', 's', 'm', 1, 0, 0, 0, 1, 4, 1, 0x60, 0, 0, 2, 9, 1, 3, 'e', 'n', 'v', 1, 'f', 0, 0}
	for name, wasm := range map[string][]byte{"foreign import": foreign, "not wasm": []byte("hello")} {
		_, err := Load(ctx, wasm, Options{})
		var le *LoadError
		if !errors.As(err, &le) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	_, err := Load(ctx, foreign, Options{})
	if !strings.Contains(err.Error(), "imports env.f") {
		t.Fatalf("foreign import: %v", err)
	}
	if _, err := Load(ctx, fakeGuest(t), Options{MaxArtifactBytes: 100}); err == nil || !strings.Contains(err.Error(), "more than 100") {
		t.Fatalf("size: %v", err)
	}
	refused := errors.New("t.x:3:5: no table t")
	if _, err := Load(ctx, fakeGuest(t), Options{Knowledge: &fakeKnowledge{refuse: refused}}); !errors.Is(err, refused) {
		t.Fatalf("refused bind: %v", err)
	}
}

func TestEvaluateRoundTripsARecordThroughTheGuest(t *testing.T) {
	r := load(t, Options{})
	out, err := r.Evaluate(context.Background(), sample(), Only)
	if err != nil {
		t.Fatal(err)
	}
	if out.JSON() != sample().JSON() {
		t.Fatalf("got %s", out.JSON())
	}
}

func TestRecordErrorsAreTyped(t *testing.T) {
	r := load(t, Options{})
	ctx := context.Background()
	_, err := r.Evaluate(ctx, sample(), Model("rule says no"))
	var e *EvalError
	if !errors.As(err, &e) || e.Kind != Rejected || err.Error() != "rejected by the rule: rule says no" {
		t.Fatalf("rejected: %v", err)
	}
	_, err = r.Evaluate(ctx, sample(), Model("unknown"))
	if !IsKind(err, Unrouted) || err.Error() != "unknown" {
		t.Fatalf("unrouted: %v", err)
	}
	_, err = r.Evaluate(ctx, sample(), ByField("route"))
	if !IsKind(err, Unrouted) || err.Error() != "the record has no rule-path field `route`" {
		t.Fatalf("by field: %v", err)
	}
	_, err = r.Evaluate(ctx, sample(), ByField("n"))
	if !IsKind(err, Unrouted) || err.Error() != "the rule-path field `n` is not text" {
		t.Fatalf("by field: %v", err)
	}
	_, err = r.Evaluate(ctx, sample(), Model("E"))
	if !IsKind(err, GuestFailed) || err.Error() != "internal error: the guest could not evaluate record 0: E" {
		t.Fatalf("failed: %v", err)
	}
}

// bothInterrupts runs f with the rule's calls stopped at the module's
// yield points, and by wazero's own interruption (EngineInterrupt).
func bothInterrupts(t *testing.T, opts Options, f func(t *testing.T, r *Rule)) {
	for _, engine := range []bool{false, true} {
		t.Run(map[bool]string{false: "yield points", true: "engine"}[engine], func(t *testing.T) {
			opts.EngineInterrupt = engine
			r := load(t, opts)
			if r.yields == engine {
				t.Fatalf("EngineInterrupt %v: the rule's calls are stopped at yield points: %v", engine, r.yields)
			}
			f(t, r)
		})
	}
}

func TestTrapsAndLimitsDropTheInstanceAndTheRuleGoesOn(t *testing.T) {
	bothInterrupts(t, Options{CallDeadline: 200 * time.Millisecond, MaxMemoryBytes: 4 << 20, MaxRecordBytes: 200, MaxInstances: 1}, trapsAndLimits)
}

func trapsAndLimits(t *testing.T, r *Rule) {
	ctx := context.Background()
	cases := []struct {
		route Route
		kind  ErrorKind
		text  string
	}{
		{Model("trap"), Trap, "the rule trapped: "},
		{Model("loop"), Deadline, "limit reached (call deadline): the guest computed for more than 200ms"},
		{Model("grow"), Limit, "limit reached (instance memory): the guest needed more than 4194304 bytes of memory"},
	}
	for _, c := range cases {
		start := time.Now()
		_, err := r.Evaluate(ctx, sample(), c.route)
		if !IsKind(err, c.kind) || !strings.HasPrefix(err.Error(), c.text) {
			t.Fatalf("%v: %v", c.route, err)
		}
		if time.Since(start) > 3*time.Second {
			t.Fatalf("%v took %v", c.route, time.Since(start))
		}
		// With one instance allowed, the rule goes on only if the broken
		// one was dropped and its place freed.
		if _, err := r.Evaluate(ctx, sample(), Only); err != nil {
			t.Fatalf("after %v: %v", c.route, err)
		}
	}
	big := NewRecord(F("s", Chars(strings.Repeat("x", 300))))
	_, err := r.Evaluate(ctx, big, Only)
	var e *EvalError
	if !errors.As(err, &e) || e.Kind != Limit || e.Limit != LimitRecordBytes {
		t.Fatalf("record bytes: %v", err)
	}
}

func TestACanceledContextStopsTheCall(t *testing.T) {
	bothInterrupts(t, Options{CallDeadline: -1}, canceledContext)
}

func canceledContext(t *testing.T, r *Rule) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := r.Evaluate(ctx, sample(), Model("loop"))
	if !IsKind(err, Canceled) {
		t.Fatalf("got %v", err)
	}
	if _, err := r.Evaluate(context.Background(), sample(), Only); err != nil {
		t.Fatal(err)
	}
}

// params is `u32 count | cells` of docs/abi.md.
func params(cells ...Cell) []byte {
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(cells)))
	for _, c := range cells {
		out = appendCell(out, c)
	}
	return out
}

func TestQueryPassesParamsAndAnswersByTake(t *testing.T) {
	b := &fakeBound{answer: Answer{Found: true, Cacheable: true, Row: []Cell{{Kind: CellText, Text: "zone-a"}, {Kind: CellInteger, Int: -3}}}}
	r := load(t, Options{Knowledge: &fakeKnowledge{bound: b}})
	ctx := context.Background()
	in := []Cell{{Kind: CellNull}, {Kind: CellInteger, Int: 42}, {Kind: CellReal, Real: 1.5}, {Kind: CellText, Text: "é"}, {Kind: CellBlob, Blob: []byte{0, 1}}}
	status, data, err := r.callOn(ctx, exportEvaluate, route{kind: routeModel, text: "q"}, params(in...))
	if err != nil || status != 0 {
		t.Fatal(status, err)
	}
	if len(b.params) != len(in) || b.params[1].Int != 42 || b.params[2].Real != 1.5 || b.params[3].Text != "é" || string(b.params[4].Blob) != "\x00\x01" {
		t.Fatalf("params: %+v", b.params)
	}
	want := append([]byte{0, 1}, params(b.answer.Row...)...)
	if string(data) != string(want) {
		t.Fatalf("answer % x, want % x", data, want)
	}
	// An error: the statement's SQL named, fatal passed on.
	b.qerr = &QueryError{Code: Timeout, Message: "too slow", Fatal: true}
	_, data, _ = r.callOn(ctx, exportEvaluate, route{kind: routeModel, text: "q"}, params())
	msg := "`select a from t where k = :k`: too slow"
	want = binary.LittleEndian.AppendUint32([]byte{2, byte(Timeout), 1}, uint32(len(msg)))
	if string(data) != string(append(want, msg...)) {
		t.Fatalf("error answer %q", data)
	}
	// Damaged parameters are a failed lookup, not a crash.
	_, data, _ = r.callOn(ctx, exportEvaluate, route{kind: routeModel, text: "q"}, []byte{9, 0, 0, 0, 7})
	if len(data) < 2 || data[0] != 2 || data[1] != byte(Failed) {
		t.Fatalf("damaged params: %q", data)
	}
}

func TestLookupsWithoutKnowledgeAreUnavailable(t *testing.T) {
	r := load(t, Options{})
	_, data, err := r.callOn(context.Background(), exportEvaluate, route{kind: routeModel, text: "q"}, params())
	if err != nil || len(data) < 3 || data[0] != 2 || data[1] != byte(Unavailable) || data[2] != 0 {
		t.Fatalf("%q %v", data, err)
	}
	if !strings.HasSuffix(string(data), "no knowledge base is configured") {
		t.Fatalf("%q", data)
	}
}

func TestLookupTimeIsNotTheGuestsTime(t *testing.T) {
	b := &fakeBound{sleep: 300 * time.Millisecond}
	r := load(t, Options{Knowledge: &fakeKnowledge{bound: b}, CallDeadline: 150 * time.Millisecond})
	if _, _, err := r.callOn(context.Background(), exportEvaluate, route{kind: routeModel, text: "q"}, params()); err != nil {
		t.Fatalf("a slow lookup counted against the deadline: %v", err)
	}
}

func TestColumnsNetsNowAndGeneration(t *testing.T) {
	b := &fakeBound{columns: []string{"zone", "owner"}}
	offset := 3600
	clock := func() time.Time { return time.Unix(1700000000, 5) }
	r := load(t, Options{Knowledge: &fakeKnowledge{bound: b}, UTCOffset: &offset, Clock: clock})
	ctx := context.Background()
	call := func(name string) []byte {
		status, data, err := r.callOn(ctx, exportEvaluate, route{kind: routeModel, text: name}, params())
		if err != nil || status != 0 {
			t.Fatal(name, status, err)
		}
		return data
	}
	cols := binary.LittleEndian.AppendUint32([]byte{0}, 2)
	cols = append(binary.LittleEndian.AppendUint32(cols, 4), "zone"...)
	cols = append(binary.LittleEndian.AppendUint32(cols, 5), "owner"...)
	if got := call("c"); string(got) != string(cols) {
		t.Fatalf("columns % x", got)
	}
	if got := call("i"); string(got) != string(encodeNets(BuiltinIntranetNets)) {
		t.Fatalf("nets % x", got)
	}
	now := call("n")
	if int64(binary.LittleEndian.Uint64(now)) != 1700000000_000000005 || int32(binary.LittleEndian.Uint32(now[8:])) != 3600 {
		t.Fatalf("now % x", now)
	}
	b.gen.Store(9)
	if g := call("G"); binary.LittleEndian.Uint64(g) != 9 {
		t.Fatalf("generation % x", g)
	}
	// The rule's own networks win over the built-in ones.
	mine := []Network{{High: 0, Low: 0xffff0a000000, Prefix: 104}}
	r2 := load(t, Options{IntranetNets: mine})
	_, data, _ := r2.callOn(ctx, exportEvaluate, route{kind: routeModel, text: "i"}, params())
	if string(data) != string(encodeNets(mine)) {
		t.Fatalf("own nets % x", data)
	}
}

func TestBatchesKeepOrderAndRetryRecordByRecord(t *testing.T) {
	r := load(t, Options{})
	ctx := context.Background()
	recs := []Record{sample(), NewRecord(F("b", Float(2.5))), NewRecord()}
	for _, rt := range []Route{Only, Model("Trap when more than one")} {
		res := r.EvaluateBatch(ctx, recs, rt)
		for i, x := range res {
			if x.Err != nil || x.Record.JSON() != recs[i].JSON() {
				t.Fatalf("%v: record %d: %v %s", rt, i, x.Err, x.Record.JSON())
			}
		}
	}
	res := r.EvaluateBatch(ctx, recs, Model("E"))
	for i, x := range res {
		var e *EvalError
		if !errors.As(x.Err, &e) || e.Kind != GuestFailed || e.Index != i {
			t.Fatalf("record %d: %v", i, x.Err)
		}
	}
	// By field: the records without the field are unrouted in their place.
	routed := []Record{NewRecord(F("p", Chars("r1"))), NewRecord(F("q", Digit(1))), NewRecord(F("p", Chars("r2")))}
	res = r.EvaluateBatch(ctx, routed, ByField("p"))
	if res[0].Err != nil || !IsKind(res[1].Err, Unrouted) || res[2].Err != nil {
		t.Fatalf("by field: %+v", res)
	}
}

func TestLinesComeBackInTheirPlacesBetweenErrors(t *testing.T) {
	r := load(t, Options{})
	recs := []Record{sample(), sample(), sample()}
	res := r.EvaluateLines(context.Background(), recs, Model("x"))
	if string(res[0].Line) != `{"n":0}` || string(res[2].Line) != `{"n":2}` {
		t.Fatalf("lines: %q %q", res[0].Line, res[2].Line)
	}
	var e *EvalError
	if !errors.As(res[1].Err, &e) || e.Kind != Rejected || e.Index != 1 || e.Message != "no" {
		t.Fatalf("error: %v", res[1].Err)
	}
}

func TestExplainGivesTheOutputAndTheTrace(t *testing.T) {
	r := load(t, Options{})
	ex, err := r.Explain(context.Background(), sample(), Only)
	if err != nil || ex.Err != nil || ex.Output.JSON() != sample().JSON() || string(ex.Trace) != `{"steps":[]}` {
		t.Fatalf("%+v %v", ex, err)
	}
	ex, err = r.Explain(context.Background(), sample(), Model("r"))
	if err != nil || !IsKind(ex.Err, Rejected) || ex.Err.(*EvalError).Message != "boo" || string(ex.Trace) != `{"steps":[]}` {
		t.Fatalf("%+v %v", ex, err)
	}
}

func TestManyGoroutinesShareABoundedPool(t *testing.T) {
	r := load(t, Options{MaxInstances: 2})
	var wg sync.WaitGroup
	var failed atomic.Int32
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				rec := NewRecord(F("g", Digit(int64(g))), F("i", Digit(int64(i))), F("f", Float(math.Pi)))
				route := Only
				if i%7 == 3 {
					route = Model("trap")
				}
				out, err := r.Evaluate(context.Background(), rec, route)
				if route == Only && (err != nil || out.JSON() != rec.JSON()) {
					failed.Add(1)
				}
				if route != Only && !IsKind(err, Trap) {
					failed.Add(1)
				}
			}
		}(g)
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d calls went wrong", failed.Load())
	}
	if n := len(r.pool.tokens); n > 2 {
		t.Fatalf("%d instances alive, at most 2 allowed", n)
	}
}

// A rule loaded with EngineInterrupt after one without, from one cache
// folder, gets code that wazero can stop, even in a loop without a yield
// point (model "bare"): the cached code of the other is not taken.
func TestEngineInterruptCodeIsCachedApart(t *testing.T) {
	dir := t.TempDir()
	opts := Options{CallDeadline: 100 * time.Millisecond, CompilationCacheDir: dir}
	_ = load(t, opts) // fills the cache with code compiled without wazero's checks
	opts.EngineInterrupt = true
	r := load(t, opts)
	if r.yields {
		t.Fatal("EngineInterrupt: the calls are stopped at yield points")
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Evaluate(context.Background(), sample(), Model("bare"))
		done <- err
	}()
	select {
	case err := <-done:
		if !IsKind(err, Deadline) {
			t.Fatalf("got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the looping call was not stopped")
	}
}
