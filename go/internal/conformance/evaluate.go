package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	omlet "example.invalid/omlet/go"
)

// maxOutputBytes bounds a case's rendered output (conformance.rs
// MAX_OUTPUT_BYTES).
const maxOutputBytes = 16 << 20

// evaluateAll evaluates every unit: in parallel, except, when r.Serial,
// those with knowledge, which go one by one after their modules were
// compiled in parallel into a cache.
func (r *Runner) evaluateAll(ctx context.Context, dir string, units []*unit) error {
	cache := r.CacheDir
	if cache == "" {
		cache = filepath.Join(dir, "compiled")
	}
	var serial, parallel []*unit
	for _, u := range units {
		if r.Serial && u.items[0].c.Knowledge != nil {
			serial = append(serial, u)
		} else {
			parallel = append(parallel, u)
		}
	}
	r.parallel(len(serial), func(i int) {
		// Warming the cache only: a module that does not load fails its
		// case when it is evaluated.
		code, err := os.ReadFile(serial[i].wasm)
		if err != nil {
			return
		}
		rule, err := omlet.Load(ctx, code, omlet.Options{CompilationCacheDir: cache})
		if err == nil {
			rule.Close(ctx)
		}
	})
	r.parallel(len(parallel), func(i int) { r.evaluate(ctx, parallel[i], "") })
	for _, u := range serial {
		r.evaluate(ctx, u, cache)
	}
	return ctx.Err()
}

// evaluate loads a unit's module (with the knowledge and networks of its
// cases) and evaluates each of its items. An item of a set that does not
// come out as it should is evaluated again alone, once the set's
// knowledge is released (on a server, its tables are the same tables).
func (r *Runner) evaluate(ctx context.Context, u *unit, cache string) {
	type again struct {
		it    *item
		inSet string
	}
	var rerun []again
	settle := func(it *item, verdict error, loaded, crossChecked bool) {
		if u.set && (verdict == nil) == it.shadow {
			rerun = append(rerun, again{it, fmt.Sprint(verdict)})
			return
		}
		it.out.Evaluated, it.out.CrossChecked = loaded, crossChecked
		if verdict != nil {
			it.out.Status, it.out.Why = Failed, verdict.Error()
		} else {
			it.out.Status = Passed
		}
	}
	func() {
		failAll := func(format string, a ...any) {
			for _, it := range u.items {
				settle(it, fmt.Errorf(format, a...), false, false)
			}
		}
		// The items of a set share their knowledge tables, and have no
		// networks of their own.
		c := u.items[0].c
		opts := omlet.Options{CompilationCacheDir: cache}
		if c.Knowledge != nil {
			k, done, err := r.Knowledge(ctx, c)
			if err != nil {
				failAll("knowledge: %v", err)
				return
			}
			defer done()
			opts.Knowledge = k
		}
		if c.IntranetNets != nil {
			nets, err := r.Nets(c.IntranetNets)
			if err != nil {
				failAll("intranet_nets: %v", err)
				return
			}
			opts.IntranetNets = nets
		}
		code, err := os.ReadFile(u.wasm)
		if err != nil {
			failAll("%v", err)
			return
		}
		rule, err := omlet.Load(ctx, code, opts)
		if err != nil {
			failAll("omlet.Load: %v", err)
			return
		}
		defer rule.Close(ctx)
		for _, it := range u.items {
			out, err := rule.Evaluate(ctx, it.rec, it.route)
			verdict := Check(it.c, it.expect, out, err)
			cross := verdict == nil
			if cross {
				// In a set, UsesClock is the set's: a case's own rule
				// reads the clock when it names Now:: (else the exact
				// comparison fails, and says so).
				clock := rule.Info().UsesClock && strings.Contains(it.c.OML, "Now::")
				verdict = sameThroughBatches(ctx, rule, it, out, err, clock)
			}
			settle(it, verdict, true, cross)
		}
	}()
	for _, a := range rerun {
		r.alone(ctx, a.it, a.inSet)
	}
}

// alone evaluates an item of a set again, with its own module: that run
// decides the case (a set renames the models, which no case should see).
func (r *Runner) alone(ctx context.Context, it *item, inSet string) {
	one := *it
	one.route = omlet.Only
	r.evaluate(ctx, &unit{wasm: it.alone, items: []*item{&one}}, "")
	if it.out.Status == Failed {
		it.out.Why += "\n(in a rule set with other cases it gave: " + strings.TrimSpace(inSet) + ")"
	}
}

// Check is the verdict on a case's evaluation (conformance.rs, the end of
// run_case_inner): the output compared with expect, or the record's error
// matched against expected_record_error (its text must contain it).
func Check(c *Case, expect string, out omlet.Record, err error) error {
	if err == nil {
		if n := len(out.JSON()); n > maxOutputBytes {
			err = fmt.Errorf("output bytes: the output record takes %d bytes, more than %d", n, maxOutputBytes)
		}
	}
	if c.ExpectedRecordError == nil {
		if err != nil {
			return err
		}
		return Compare(c, expect, out)
	}
	want := *c.ExpectedRecordError
	switch {
	case err != nil && strings.Contains(err.Error(), want):
		return nil
	case err != nil:
		return fmt.Errorf("expected a record error containing `%s`, got `%s`", show(want), show(err.Error()))
	}
	return fmt.Errorf("expected a record error containing `%s`, but the record gave %s", show(want), show(out.JSON()))
}

// sameThroughBatches checks that EvaluateBatch (the record twice, in one
// frame), EvaluateLines (the JSON line the guest renders) and Explain give
// what Evaluate gave: the same output, or the same error. For a rule that
// reads the clock, whose outputs differ from call to call, the outputs of
// EvaluateBatch and Explain are checked against the case instead, and
// EvaluateLines is left out.
func sameThroughBatches(ctx context.Context, rule *omlet.Rule, it *item, out omlet.Record, err error, clock bool) error {
	text := func(rec omlet.Record, err error) string {
		if err != nil {
			return "error: " + err.Error()
		}
		return rec.JSON()
	}
	want := text(out, err)
	same := func(call string, rec omlet.Record, err error) error {
		if clock {
			if v := Check(it.c, it.expect, rec, err); v != nil {
				return fmt.Errorf("through %s: %w", call, v)
			}
			return nil
		}
		if got := text(rec, err); got != want {
			return fmt.Errorf("%s gave %s where Evaluate gave %s", call, show(got), show(want))
		}
		return nil
	}
	for i, res := range rule.EvaluateBatch(ctx, []omlet.Record{it.rec, it.rec}, it.route) {
		if err := same(fmt.Sprintf("EvaluateBatch (record %d of 2)", i+1), res.Record, res.Err); err != nil {
			return err
		}
	}
	ex, xerr := rule.Explain(ctx, it.rec, it.route)
	if xerr != nil {
		return fmt.Errorf("Explain failed: %v (Evaluate gave %s)", xerr, show(want))
	}
	if err := same("Explain", ex.Output, ex.Err); err != nil {
		return err
	}
	if clock {
		return nil
	}
	lines := rule.EvaluateLines(ctx, []omlet.Record{it.rec}, it.route)
	if len(lines) != 1 {
		return fmt.Errorf("EvaluateLines gave %d results for one record", len(lines))
	}
	got := "error: " + fmt.Sprint(lines[0].Err)
	if lines[0].Err == nil {
		got = string(lines[0].Line)
	}
	if got != want {
		return fmt.Errorf("EvaluateLines gave %s where Evaluate gave %s", show(got), show(want))
	}
	return nil
}
