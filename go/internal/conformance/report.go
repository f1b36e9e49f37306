package conformance

import (
	"fmt"
	"testing"
)

// Counts are a file's outcomes.
type Counts struct {
	Passed, Evaluated, CrossChecked, Skipped, Failed int
}

// Report logs each file's counts and every skip with its reason, and fails
// t once per failed case, naming its file and case. It returns the totals.
func Report(t testing.TB, label string, outs []*Outcome) Counts {
	t.Helper()
	var files []string
	per := map[string]*Counts{}
	var total Counts
	for _, o := range outs {
		f := o.Case.File
		if per[f] == nil {
			per[f] = &Counts{}
			files = append(files, f)
		}
		n := per[f]
		switch o.Status {
		case Passed:
			n.Passed++
			if o.Evaluated {
				n.Evaluated++
			}
			if o.CrossChecked {
				n.CrossChecked++
			}
		case Skipped:
			n.Skipped++
			t.Logf("%s: skipped %s: %s: %s", label, f, o.Case.Name, o.Why)
		case Undecided:
			n.Failed++
			t.Errorf("%s: FAILED %s: %s: the runner reached no verdict", label, f, o.Case.Name)
		case Failed:
			n.Failed++
			t.Errorf("%s: FAILED %s: %s:\n  %s", label, f, o.Case.Name, o.Why)
		}
	}
	for _, f := range files {
		n := per[f]
		t.Logf("%s: %-22s %3d passed (%3d evaluated by the Go host, %3d of them also through EvaluateBatch, EvaluateLines "+
			"and Explain; %2d decided at build time), %d skipped, %d failed",
			label, f, n.Passed, n.Evaluated, n.CrossChecked, n.Passed-n.Evaluated, n.Skipped, n.Failed)
		total.Passed += n.Passed
		total.Evaluated += n.Evaluated
		total.CrossChecked += n.CrossChecked
		total.Skipped += n.Skipped
		total.Failed += n.Failed
	}
	t.Logf("%s: %d cases: %d passed (%d evaluated by the Go host), %d skipped, %d failed", label,
		total.Passed+total.Skipped+total.Failed, total.Passed, total.Evaluated, total.Skipped, total.Failed)
	return total
}

// String is the counts as a sentence.
func (c Counts) String() string {
	return fmt.Sprintf("%d passed, %d skipped, %d failed", c.Passed, c.Skipped, c.Failed)
}
