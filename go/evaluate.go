package omlet

import (
	"context"
	"fmt"
)

// Route says which model of a rule evaluates a record (OML spec §3.1).
type Route struct {
	kind  uint32
	text  string
	field bool
}

// Only routes to the rule's only model; a rule with several answers
// Unrouted.
var Only = Route{kind: routeOnly}

// Path routes by a rule path such as "/nginx/access_log": to the enabled
// model whose `rule :` pattern claims it.
func Path(rulePath string) Route { return Route{kind: routePath, text: rulePath} }

// Model routes to the model of this `name :`, enabled or not.
func Model(name string) Route { return Route{kind: routeModel, text: name} }

// ByField routes each record by the rule path its text field name holds
// (the field stays in the record), as `omlet run --rule-path-field` does. A
// record without such a text field is Unrouted.
func ByField(name string) Route { return Route{kind: routePath, text: name, field: true} }

func (rt Route) String() string {
	switch {
	case rt.field:
		return "field " + rt.text
	case rt.kind == routePath:
		return "path " + rt.text
	case rt.kind == routeModel:
		return "model " + rt.text
	}
	return "only"
}

// resolve is the ABI route of rec: a route by field becomes the path its
// field holds.
func (rt Route) resolve(rec Record) (route, *EvalError) {
	if !rt.field {
		return route{kind: rt.kind, text: rt.text}, nil
	}
	v, ok := rec.Get(rt.text)
	switch {
	case !ok:
		return route{}, &EvalError{Kind: Unrouted, Message: fmt.Sprintf("the record has no rule-path field `%s`", rt.text)}
	case v.Kind != KindChars:
		return route{}, &EvalError{Kind: Unrouted, Message: fmt.Sprintf("the rule-path field `%s` is not text", rt.text)}
	}
	return route{kind: routePath, text: v.Str}, nil
}

// Result is one record's outcome in a batch: its output, or its error (an
// *EvalError).
type Result struct {
	Record Record
	Err    error
}

// LineResult is one record's outcome as a JSON line: the line (without a
// line end) exactly as `omlet run` prints it, or the record's error.
type LineResult struct {
	Line []byte
	Err  error
}

// Explained is a record evaluated with a trace of how (Rule.Explain).
type Explained struct {
	// Output is what Evaluate would have given, when Err is nil.
	Output Record
	// Err is the record's own error (unrouted, a fatal lookup, fail(…)),
	// with the trace up to it.
	Err error
	// Trace is the guest's JSON account of the evaluation (the `explained`
	// record of wit/omlet.wit describes it); empty when the record was not
	// evaluated (a route by field that found no path).
	Trace []byte
}

// encode is rec's frame, refused past the record limit.
func (r *Rule) encode(recs ...Record) ([]byte, *EvalError) {
	frame, err := EncodeFrame(recs...)
	if err != nil {
		return nil, &EvalError{Kind: GuestFailed, Message: err.Error(), Err: err}
	}
	if len(frame) > r.opts.MaxRecordBytes {
		return nil, &EvalError{Kind: Limit, Limit: LimitRecordBytes, Message: fmt.Sprintf("the record takes %d bytes, more than %d", len(frame), r.opts.MaxRecordBytes)}
	}
	return frame, nil
}

// encodeReused is encode into a pooled writer (releaseWriter gives it
// back once the frame is no longer needed).
func (r *Rule) encodeReused(rec Record) (*frameWriter, []byte, *EvalError) {
	w, frame, err := encodeReused(rec)
	if err != nil {
		return nil, nil, &EvalError{Kind: GuestFailed, Message: err.Error(), Err: err}
	}
	if len(frame) > r.opts.MaxRecordBytes {
		releaseWriter(w)
		return nil, nil, &EvalError{Kind: Limit, Limit: LimitRecordBytes, Message: fmt.Sprintf("the record takes %d bytes, more than %d", len(frame), r.opts.MaxRecordBytes)}
	}
	return w, frame, nil
}

// Evaluate evaluates one record with the model route names.
func (r *Rule) Evaluate(ctx context.Context, rec Record, rt Route) (Record, error) {
	ar, rerr := rt.resolve(rec)
	if rerr != nil {
		return Record{}, rerr
	}
	w, frame, eerr := r.encodeReused(rec)
	if eerr != nil {
		return Record{}, eerr
	}
	var (
		out  Record
		oerr error
	)
	_, _, cerr := r.callOnView(ctx, exportEvaluate, ar, frame, func(status uint32, data []byte) {
		if status != statusDone {
			oerr = statusError(status, 0, validText(data))
			return
		}
		var err error
		if out, err = decodeOne(data); err != nil {
			oerr = internalError("the guest's output record: %v", err)
		}
	})
	releaseWriter(w)
	if cerr != nil {
		return Record{}, cerr
	}
	if oerr != nil {
		return Record{}, oerr
	}
	return out, nil
}

// EvaluateBatch evaluates records with the model route names, in as few
// guest calls as it can (one per rule path with ByField): each input gets
// its output or its error, in order. A call that traps or reaches a limit
// is made again record by record, so that only the records that fail on
// their own get the error. Errors name each record's place in records.
func (r *Rule) EvaluateBatch(ctx context.Context, records []Record, rt Route) []Result {
	out := make([]Result, len(records))
	r.batched(ctx, records, rt, false, func(i int, rec Record, line []byte, err *EvalError) {
		if err != nil {
			out[i] = Result{Err: err}
		} else {
			out[i] = Result{Record: rec}
		}
	})
	return out
}

// EvaluateLines is EvaluateBatch with each output as its JSON line, which
// the guest renders (omlet_evaluate_lines): what a program that only writes
// the outputs out needs, without building them as Records.
func (r *Rule) EvaluateLines(ctx context.Context, records []Record, rt Route) []LineResult {
	out := make([]LineResult, len(records))
	r.batched(ctx, records, rt, true, func(i int, _ Record, line []byte, err *EvalError) {
		if err != nil {
			out[i] = LineResult{Err: err}
		} else {
			out[i] = LineResult{Line: line}
		}
	})
	return out
}

// batched groups records by route and calls each group, giving every
// record's outcome to done (by its index in records).
func (r *Rule) batched(ctx context.Context, records []Record, rt Route, lines bool, done func(int, Record, []byte, *EvalError)) {
	if !rt.field {
		idx := make([]int, len(records))
		for i := range idx {
			idx[i] = i
		}
		r.group(ctx, records, idx, route{kind: rt.kind, text: rt.text}, lines, done)
		return
	}
	var order []string
	groups := map[string][]int{}
	for i, rec := range records {
		ar, err := rt.resolve(rec)
		if err != nil {
			done(i, Record{}, nil, err.at(i))
			continue
		}
		if _, ok := groups[ar.text]; !ok {
			order = append(order, ar.text)
		}
		groups[ar.text] = append(groups[ar.text], i)
	}
	for _, p := range order {
		r.group(ctx, records, groups[p], route{kind: routePath, text: p}, lines, done)
	}
}

// group evaluates records[idx…] with one route: in one call when they are
// several and their frame is within the record limit, and record by record
// when that call cannot be made or does not finish.
func (r *Rule) group(ctx context.Context, records []Record, idx []int, ar route, lines bool, done func(int, Record, []byte, *EvalError)) {
	if len(idx) >= 2 {
		recs := make([]Record, len(idx))
		for k, i := range idx {
			recs[k] = records[i]
		}
		w, frame, err := encodeReused(recs...)
		if err == nil && len(frame) > r.opts.MaxRecordBytes {
			releaseWriter(w)
		}
		if err == nil && len(frame) <= r.opts.MaxRecordBytes {
			outs, cerr := r.batchCall(ctx, ar, frame, len(idx), lines)
			releaseWriter(w)
			if cerr == nil {
				for k, i := range idx {
					o := outs[k]
					if o.err != nil {
						o.err = o.err.at(i)
					}
					done(i, o.rec, o.line, o.err)
				}
				return
			}
			// Made again record by record below: only the records that
			// fail alone fail.
		}
	}
	for _, i := range idx {
		w, frame, eerr := r.encodeReused(records[i])
		if eerr != nil {
			done(i, Record{}, nil, eerr.at(i))
			continue
		}
		outs, cerr := r.batchCall(ctx, ar, frame, 1, lines)
		releaseWriter(w)
		if cerr != nil {
			done(i, Record{}, nil, cerr.at(i))
			continue
		}
		o := outs[0]
		if o.err != nil {
			o.err = o.err.at(i)
		}
		done(i, o.rec, o.line, o.err)
	}
}

// outcome is one record's outcome in a batch call.
type outcome struct {
	rec  Record
	line []byte
	err  *EvalError
}

// batchCall makes one batch call of n records (as a frame, or as lines):
// each record's outcome, or the error of a call that failed as a whole.
func (r *Rule) batchCall(ctx context.Context, ar route, frame []byte, n int, lines bool) ([]outcome, *EvalError) {
	export := exportEvaluateBatch
	if lines {
		export = exportEvaluateLines
	}
	status, data, cerr := r.callOn(ctx, export, ar, frame)
	if cerr != nil {
		return nil, cerr
	}
	if status != statusDone {
		return nil, statusError(status, 0, validText(data))
	}
	outs := make([]outcome, n)
	var errs []recordError
	var successes int
	if lines {
		ls, es, err := linesAnswer(data, n)
		if err != nil {
			return nil, internalError("batch lines: %v", err)
		}
		errs, successes = es, len(ls)
		failed := markErrors(outs, errs)
		if successes != n-failed {
			return nil, internalError("batch lines: %d lines for %d records", successes, n-failed)
		}
		k := 0
		for i := range outs {
			if outs[i].err == nil {
				outs[i].line = ls[k]
				k++
			}
		}
		return outs, nil
	}
	out, es, err := batchAnswer(data, n)
	if err != nil {
		return nil, internalError("batch output: %v", err)
	}
	recs, err := DecodeFrame(out)
	if err != nil {
		return nil, internalError("batch output: %v", err)
	}
	failed := markErrors(outs, es)
	if len(recs) != n-failed {
		return nil, internalError("batch output: %d records for %d inputs", len(recs), n-failed)
	}
	k := 0
	for i := range outs {
		if outs[i].err == nil {
			outs[i].rec = recs[k]
			k++
		}
	}
	return outs, nil
}

// markErrors puts each error in its record's place; it returns how many
// records failed (an index named twice counts once).
func markErrors(outs []outcome, errs []recordError) int {
	failed := 0
	for _, e := range errs {
		if outs[e.index].err == nil {
			failed++
		}
		outs[e.index].err = statusError(e.status, e.index, e.message)
	}
	return failed
}

// Explain evaluates one record as Evaluate does, with a trace of how: for
// diagnosis, not throughput. It fails as Evaluate fails for what stops a
// call (a trap, a limit); the record's own errors (unrouted, a fatal lookup,
// fail(…)) are in Explained.Err, with the trace up to them.
func (r *Rule) Explain(ctx context.Context, rec Record, rt Route) (Explained, error) {
	ar, rerr := rt.resolve(rec)
	if rerr != nil {
		return Explained{Err: rerr}, nil
	}
	frame, eerr := r.encode(rec)
	if eerr != nil {
		return Explained{}, eerr
	}
	status, data, cerr := r.callOn(ctx, exportExplain, ar, frame)
	if cerr != nil {
		return Explained{}, cerr
	}
	if status != statusDone {
		return Explained{}, statusError(status, 0, validText(data))
	}
	st, out, trace, err := explainAnswer(data)
	if err != nil {
		return Explained{}, internalError("explain: %v", err)
	}
	ex := Explained{Trace: trace}
	if st != statusDone {
		ex.Err = statusError(st, 0, validText(out))
		return ex, nil
	}
	if ex.Output, err = decodeOne(out); err != nil {
		return Explained{}, internalError("the guest's output record: %v", err)
	}
	return ex, nil
}
