package conformance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"

	omlet "example.invalid/omlet/go"
)

// Status is how a case came out.
type Status int

// The statuses of an Outcome.
const (
	// Undecided: the runner never reached a verdict (a bug of the runner;
	// Report fails it).
	Undecided Status = iota
	Passed
	Failed
	Skipped
)

// Outcome is one case's result.
type Outcome struct {
	Case   *Case
	Status Status
	// Why says why a case failed or was skipped.
	Why string
	// Evaluated: the case's record went through the Go host (else the case
	// was decided at build time: a compile error expected, or allowed).
	Evaluated bool
	// CrossChecked: EvaluateBatch, EvaluateLines and Explain gave what
	// Evaluate gave (checked unless the rule reads the clock).
	CrossChecked bool
	// Note says how a passed case was decided, when not by evaluation.
	Note string
}

// Runner runs cases through the Go host.
type Runner struct {
	// Bin is the omlet CLI that builds each rule (`build --target core`).
	Bin string
	// Workers bounds the builds and loads run at once (default GOMAXPROCS,
	// at least 2).
	Workers int
	// Knowledge gives the knowledge of a case that has `knowledge` tables,
	// and what to call once the case is done.
	Knowledge func(ctx context.Context, c *Case) (omlet.Knowledge, func(), error)
	// Nets turns a case's intranet_nets into networks.
	Nets func(n *Nets) ([]omlet.Network, error)
	// Serial evaluates the cases with knowledge one at a time (their tables
	// share one database); their modules are compiled beforehand, in
	// parallel, into a compilation cache.
	Serial bool
	// SetSize is the most cases of one file built into one rule set, each
	// case's model renamed (compiling a module in wazero takes most of a
	// case's time, and a set is compiled once). 0 or 1: every case alone.
	// Only cases routed to their only model, without knowledge, intranet
	// networks or an `enable` header, go into sets; a case that does not
	// come out as it should in its set is run again alone, and that run
	// decides.
	SetSize int
	// Skip, when set, gives why a case is not run ("": run it).
	Skip func(c *Case) string
	// CacheDir, when set, is the compilation cache of Serial runs (default:
	// a temporary one per Run); runs that evaluate the same cases share it.
	CacheDir string

	mu    sync.Mutex
	fatal error // the CLI could not be run
}

// item is one case to evaluate, with what it must give.
type item struct {
	c      *Case
	expect string
	rec    omlet.Record
	route  omlet.Route
	alone  string // the case's own module
	out    *Outcome
	// shadow: the corpus's own expectation of an amended case, which must
	// now fail.
	shadow bool
}

// unit is one module and the cases evaluated with it.
type unit struct {
	wasm  string
	items []*item
	set   bool
}

// Run runs cases, each amended case also as the corpus gives it; one
// Outcome per case, in order.
func (r *Runner) Run(ctx context.Context, cases []*Case) ([]*Outcome, error) {
	if r.Workers <= 0 {
		r.Workers = max(2, runtime.GOMAXPROCS(0))
	}
	bin, err := filepath.Abs(r.Bin) // builds run in the case's folder
	if err != nil {
		return nil, err
	}
	if strings.ContainsRune(r.Bin, filepath.Separator) {
		r.Bin = bin
	}
	dir, err := os.MkdirTemp("", "omlet-go-conformance-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	outs := make([]*Outcome, len(cases))
	shadows := make([]*Outcome, len(cases))
	builds := make([]build, len(cases))
	r.parallel(len(cases), func(i int) {
		c := cases[i]
		if c.OMLFile != nil || c.Knowdb != nil || r.skip(c) != "" {
			return // skipped below
		}
		builds[i] = r.build(filepath.Join(dir, fmt.Sprint("case", i)), map[string]string{fileName(c.Name): c.OML})
	})
	var units []*unit
	sets := map[string][]*item{}
	var setOrder []string
	for i, c := range cases {
		outs[i] = &Outcome{Case: c}
		if c.OMLFile != nil || c.Knowdb != nil {
			outs[i].Status, outs[i].Why = Skipped, "oml_file and knowdb are not read by this runner (no case of the repository's corpora has them)"
			continue
		}
		if why := r.skip(c); why != "" {
			outs[i].Status, outs[i].Why = Skipped, why
			continue
		}
		todo := []*item{r.plan(c, builds[i], outs[i], false)}
		if c.Original != nil {
			shadows[i] = &Outcome{Case: c.Original}
			todo = append(todo, r.plan(c.Original, builds[i], shadows[i], true))
		}
		for _, it := range todo {
			if it == nil {
				continue
			}
			if name := setName(it, r.SetSize); name != "" {
				if _, ok := sets[name]; !ok {
					setOrder = append(setOrder, name)
				}
				sets[name] = append(sets[name], it)
			} else {
				units = append(units, &unit{wasm: it.alone, items: []*item{it}})
			}
		}
	}
	if r.fatal != nil {
		return nil, r.fatal
	}
	units = append(units, r.buildSets(dir, sets, setOrder)...)
	if err := r.evaluateAll(ctx, dir, units); err != nil {
		return nil, err
	}
	// An amended case passes when its amended output comes out and the
	// corpus's own does not.
	for i, s := range shadows {
		if s == nil || s.Status == Failed || outs[i].Status == Skipped {
			continue
		}
		why := "the corpus's own expectation passes too: drop its amendment (tests/amendments.toml)"
		if s.Status != Passed {
			why = "no verdict on the corpus's own expectation"
		}
		outs[i].Status, outs[i].Why = Failed, strings.TrimPrefix(outs[i].Why+"\n", "\n")+why
	}
	return outs, nil
}

func (r *Runner) skip(c *Case) string {
	if r.Skip == nil {
		return ""
	}
	return r.Skip(c)
}

// build is a case's module, or why it did not build.
type build struct {
	wasm   string
	failed string // the CLI's error text; "" when built
}

// build writes files (name → rule text) into dir and builds them with the
// CLI into one core module.
func (r *Runner) build(dir string, files map[string]string) build {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return build{failed: err.Error()}
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return build{failed: err.Error()}
		}
	}
	// Named relative to their folder, as conformance.rs names a case's
	// rule (`NAME.oml`): the module then does not depend on where it was
	// built (and its compiled code is found in a cache by a later run).
	wasm := dir + ".wasm"
	args := []string{"build", "--target", "core", "-o", wasm}
	args = append(args, slices.Sorted(maps.Keys(files))...)
	cmd := exec.Command(r.Bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return build{failed: fmt.Sprintf("omlet build exited with %d:\n%s", exit.ExitCode(), out)}
	case err != nil:
		// Not the rule's fault: no CLI to run. Run fails.
		r.mu.Lock()
		r.fatal = fmt.Errorf("running %s: %w", r.Bin, err)
		r.mu.Unlock()
		return build{failed: err.Error()}
	}
	return build{wasm: wasm}
}

// fileName is the rule file of a case, as conformance.rs names it
// (`NAME.oml`), made safe as a file name.
func fileName(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 {
			return '_'
		}
		return r
	}, name) + ".oml"
}

// plan decides a case that needs no evaluation (conformance.rs
// run_case_inner up to the evaluation), or gives the item to evaluate.
func (r *Runner) plan(c *Case, b build, out *Outcome, shadow bool) *item {
	compiled := b.failed == ""
	fail := func(format string, a ...any) *item {
		out.Status, out.Why = Failed, fmt.Sprintf(format, a...)
		return nil
	}
	if c.ExpectedError != nil {
		if compiled {
			return fail("expected a compile error (%s), but `omlet build --target core` built the rule", *c.ExpectedError)
		}
		out.Status, out.Note = Passed, "rejected at build time, as expected"
		return nil
	}
	var expect string
	optional := false
	switch {
	case c.ExpectedRecordError != nil && (c.Expected != nil || c.SpecExpected != nil):
		return fail("expected_record_error stands alone: the record has no output")
	case c.Expected != nil:
		expect = *c.Expected
	case c.SpecExpected != nil:
		expect, optional = *c.SpecExpected, c.SpecRequired != nil && !*c.SpecRequired
	case c.ExpectedRecordError == nil:
		return fail("the case has no expectation")
	}
	if !compiled {
		if optional {
			out.Status, out.Note = Passed, "EXTENDED (spec_required = false): rejected at build time, which the spec allows"
			return nil
		}
		return fail("compile error:\n%s", b.failed)
	}
	rec, err := InputRecord(c)
	if err != nil {
		return fail("%v", err)
	}
	route := omlet.Only
	switch {
	case c.RulePath != nil:
		route = omlet.Path(*c.RulePath)
	case c.Model != nil:
		route = omlet.Model(*c.Model)
	}
	return &item{c: c, expect: expect, rec: rec, route: route, alone: b.wasm, out: out, shadow: shadow}
}

var (
	headerName = regexp.MustCompile(`(?m)^[ \t]*name[ \t]*:.*$`)
	headerEnd  = regexp.MustCompile(`(?m)^[ \t]*---[ \t]*\r?$`)
	enableKey  = regexp.MustCompile(`(?m)^[ \t]*enable[ \t]*:`)
	ruleKey    = regexp.MustCompile(`(?m)^[ \t]*rule[ \t]*:`)
)

// header is the end of a rule's header (its `---` line), or -1.
func header(oml string) int {
	if end := headerEnd.FindStringIndex(oml); end != nil {
		return end[0]
	}
	return -1
}

// setName is the group of sets an item may go into ("" for none): the
// items without knowledge, or those with the same knowledge tables (read
// only, so one provider answers all of them as each one's would).
func setName(it *item, size int) string {
	c := it.c
	if size < 2 || c.IntranetNets != nil || c.RulePath != nil || c.Model != nil {
		return ""
	}
	end := header(c.OML)
	if end < 0 || len(headerName.FindAllString(c.OML[:end], -1)) != 1 || enableKey.MatchString(c.OML[:end]) {
		return ""
	}
	if c.Knowledge != nil {
		return "knowledge " + *c.Knowledge
	}
	return "plain"
}

// chunks cuts a group into sets of at most size items, with at most one
// model with `rule :` patterns in each (two may claim the same paths,
// which a set refuses).
func chunks(items []*item, size int) [][]*item {
	var plain, ruled []*item
	for _, it := range items {
		if ruleKey.MatchString(it.c.OML[:header(it.c.OML)]) {
			ruled = append(ruled, it)
		} else {
			plain = append(plain, it)
		}
	}
	var out [][]*item
	for len(plain) > 0 {
		n := min(size, len(plain))
		out = append(out, plain[:n:n])
		plain = plain[n:]
	}
	for i, it := range ruled {
		if i < len(out) {
			out[i] = append(out[i], it)
		} else {
			out = append(out, []*item{it})
		}
	}
	return out
}

// buildSets builds each group's items into sets, each model renamed.
func (r *Runner) buildSets(dir string, groups map[string][]*item, order []string) []*unit {
	var all [][]*item
	for _, name := range order {
		all = append(all, chunks(groups[name], r.SetSize)...)
	}
	units := make([][]*unit, len(all))
	r.parallel(len(all), func(k int) { units[k] = r.buildSet(filepath.Join(dir, fmt.Sprint("set", k)), all[k]) })
	var out []*unit
	for _, u := range units {
		out = append(out, u...)
	}
	return out
}

// buildSet builds items into one set; a set that does not build is cut in
// two, down to items alone.
func (r *Runner) buildSet(dir string, items []*item) []*unit {
	if len(items) == 1 {
		return []*unit{{wasm: items[0].alone, items: items}}
	}
	files := map[string]string{}
	u := &unit{set: true}
	for j, it := range items {
		model := fmt.Sprintf("omlet_set_case_%d", j)
		end := header(it.c.OML)
		name := fileName(it.c.Name)
		if it.shadow {
			name = fileName(it.c.Name + ".corpus")
		}
		files[name] = headerName.ReplaceAllLiteralString(it.c.OML[:end], "name : "+model) + it.c.OML[end:]
		in := *it
		in.route = omlet.Model(model)
		u.items = append(u.items, &in)
	}
	b := r.build(dir, files)
	if b.failed != "" {
		h := len(items) / 2
		return append(r.buildSet(dir+"a", items[:h]), r.buildSet(dir+"b", items[h:])...)
	}
	u.wasm = b.wasm
	return []*unit{u}
}

// parallel runs f(0..n-1) on r.Workers goroutines.
func (r *Runner) parallel(n int, f func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(r.Workers, n) {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
