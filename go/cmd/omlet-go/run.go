package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	omlet "example.invalid/omlet/go"
)

// maxChunkBytes closes a chunk at this much raw input, whatever its
// records (omlet's MAX_BATCH_BYTES).
const maxChunkBytes = 4 << 20

// maxErrorInputChars is how much of a failed record's input its error line
// repeats (omlet's MAX_ERROR_INPUT_CHARS).
const maxErrorInputChars = 4096

// chunk is records read together and evaluated in one batch call.
type chunk struct {
	inputs  []inputRecord
	results []omlet.LineResult // by input; nil Line and Err for an input error
	done    chan struct{}
}

// tally is what became of a run's records.
type tally struct {
	records, written, failed, unrouted uint64
}

func run(ctx context.Context, o runOptions) (int, error) {
	st, err := os.Stat(o.artifact)
	if err != nil {
		return 1, err
	}
	if st.Size() > omlet.DefaultMaxArtifactBytes {
		return 1, fmt.Errorf("limit reached (component bytes): %s takes %d bytes, more than %d", o.artifact, st.Size(), omlet.DefaultMaxArtifactBytes)
	}
	wasm, err := os.ReadFile(o.artifact)
	if err != nil {
		return 1, fmt.Errorf("%s: %w", o.artifact, err)
	}
	k, err := openKnowledge(ctx, o.knowdb, o.knowledge)
	if err != nil {
		return 1, err
	}
	rule, err := omlet.Load(ctx, wasm, loadOptions(k, o.concurrency*2+4))
	if err != nil {
		return 1, err
	}
	defer rule.Close(ctx)
	if err := refuseEarly(rule.Info(), o, k != nil); err != nil {
		return 1, err
	}
	var in io.Reader = os.Stdin
	source := "stdin"
	if o.input != "-" {
		f, err := os.Open(o.input)
		if err != nil {
			return 1, fmt.Errorf("%s: %w", o.input, err)
		}
		defer f.Close()
		in, source = f, o.input
	}
	out, closeOut, err := create(o.output, os.Stdout)
	if err != nil {
		return 1, err
	}
	errOut, closeErr, err := create(o.errors, os.Stderr)
	if err != nil {
		return 1, err
	}
	started := time.Now()
	t, runErr := evaluateAll(ctx, rule, o, newLineReader(in), source, out, errOut)
	flushErr := errors.Join(out.Flush(), errOut.Flush(), closeOut(), closeErr())
	if runErr != nil {
		return 1, runErr
	}
	if flushErr != nil {
		return 1, flushErr
	}
	secs := time.Since(started).Seconds()
	rate := float64(t.records) / max(secs, 1e-9)
	fmt.Fprintf(os.Stderr, "%d records in %.2f s (%.0f records/s): %d written, %d errors, %d unrouted\n",
		t.records, secs, rate, t.written, t.failed, t.unrouted)
	if t.failed+t.unrouted > 0 {
		return 1, nil
	}
	return 0, nil
}

// create is a buffered writer on path, or on std for "" and "-".
func create(path string, std *os.File) (*bufio.Writer, func() error, error) {
	if path == "" || path == "-" {
		return bufio.NewWriterSize(std, 64<<10), func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return bufio.NewWriterSize(f, 64<<10), f.Close, nil
}

// evaluateAll reads chunks on one goroutine, evaluates up to
// o.concurrency of them at once, and writes each chunk's lines in input
// order as it comes.
func evaluateAll(ctx context.Context, rule *omlet.Rule, o runOptions, lr *lineReader, source string, out, errOut *bufio.Writer) (tally, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ordered := make(chan *chunk, o.concurrency)
	work := make(chan *chunk, o.concurrency)
	readErr := make(chan error, 1)
	go func() {
		defer close(ordered)
		defer close(work)
		readErr <- readChunks(ctx, lr, o.batch, ordered, work)
	}()
	route := o.route()
	for w := 0; w < o.concurrency; w++ {
		go func() {
			for c := range work {
				evaluateChunk(ctx, rule, route, c)
				close(c.done)
			}
		}()
	}
	var t tally
	for c := range ordered {
		<-c.done
		if err := writeChunk(c, source, out, errOut, &t); err != nil {
			cancel()
			for range ordered {
			}
			return t, err
		}
	}
	return t, <-readErr
}

func readChunks(ctx context.Context, lr *lineReader, batch int, ordered, work chan<- *chunk) error {
	c := &chunk{done: make(chan struct{})}
	bytes := 0
	send := func() bool {
		select {
		case ordered <- c:
		case <-ctx.Done():
			return false
		}
		select {
		case work <- c:
		case <-ctx.Done():
			return false
		}
		c, bytes = &chunk{done: make(chan struct{})}, 0
		return true
	}
	for {
		in, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if len(c.inputs) > 0 {
				send()
			}
			return fmt.Errorf("input: %w", err)
		}
		c.inputs = append(c.inputs, in)
		bytes += len(in.raw)
		if len(c.inputs) >= batch || bytes >= maxChunkBytes {
			if !send() {
				return ctx.Err()
			}
		}
	}
	if len(c.inputs) > 0 {
		send()
	}
	return nil
}

// evaluateChunk evaluates the records of c that were read, in one batch.
func evaluateChunk(ctx context.Context, rule *omlet.Rule, route omlet.Route, c *chunk) {
	c.results = make([]omlet.LineResult, len(c.inputs))
	var records []omlet.Record
	var at []int
	for i, in := range c.inputs {
		if in.err == nil {
			records = append(records, in.record)
			at = append(at, i)
		}
	}
	for k, r := range rule.EvaluateLines(ctx, records, route) {
		c.results[at[k]] = r
	}
}

func writeChunk(c *chunk, source string, out, errOut *bufio.Writer, t *tally) error {
	for i, in := range c.inputs {
		t.records++
		err := in.err
		if err == nil {
			err = c.results[i].Err
		}
		if err == nil {
			t.written++
			out.Write(c.results[i].Line)
			if e := out.WriteByte('\n'); e != nil {
				return e
			}
			continue
		}
		kind := "failed"
		if omlet.IsKind(err, omlet.Unrouted) {
			kind = "unrouted"
			t.unrouted++
		} else {
			t.failed++
		}
		if _, e := errOut.Write(errorLine(source, in, kind, err.Error())); e != nil {
			return e
		}
	}
	return nil
}

// errorLine is a failed record's line, as `omlet run` writes it: a JSON
// object naming the source, the record and its line, the kind and the
// error, and the input (its first 4096 characters, then …).
func errorLine(source string, in inputRecord, kind, message string) []byte {
	b := []byte(`{"source":`)
	b = appendString(b, source)
	b = append(b, `,"record":`...)
	b = strconv.AppendUint(b, in.number, 10)
	b = append(b, `,"line":`...)
	b = strconv.AppendUint(b, in.line, 10)
	b = append(b, `,"kind":`...)
	b = appendString(b, kind)
	b = append(b, `,"error":`...)
	b = appendString(b, message)
	b = append(b, `,"input":`...)
	b = appendString(b, excerpt(in.raw))
	return append(b, "}\n"...)
}

func excerpt(raw string) string {
	n := 0
	for i := range raw {
		if n == maxErrorInputChars {
			return raw[:i] + "…"
		}
		n++
	}
	return raw
}

// appendString writes s as serde_json writes a string: `"` and `\`
// escaped, control characters as \b \t \n \f \r or \u00XX, the rest as is.
func appendString(b []byte, s string) []byte {
	return append(b, omlet.Chars(s).JSON()...)
}
