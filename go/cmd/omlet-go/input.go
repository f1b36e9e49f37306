package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	omlet "example.invalid/omlet/go"
)

// Reading JSONL input as `omlet run` reads it (host/src/stream/read.rs):
// physical lines numbered from 1, a byte-order mark dropped from the first,
// a CR before the line feed dropped, lines of only spaces and tabs skipped
// (they are no records), every other line one record or one error.

// maxLineBytes is the reader's line bound (omlet's default, 16 MiB).
const maxLineBytes = 16 << 20

// rawPrefix is how much of a line over the bound is kept to name it.
const rawPrefix = 256

// inputRecord is one record as read.
type inputRecord struct {
	number uint64 // 1-based among the records
	line   uint64 // 1-based line
	raw    string // the line as written (a damaged one made readable)
	record omlet.Record
	err    error // why the line holds no record
}

// lineError is an input error whose text is its own message (the error
// line names the record already).
type lineError struct{ message string }

func (e *lineError) Error() string { return e.message }

type lineReader struct {
	r       *bufio.Reader
	line    uint64
	records uint64
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 1<<16)}
}

// next reads the next record; io.EOF at the end.
func (lr *lineReader) next() (inputRecord, error) {
	for {
		buf, total, err := lr.readLine()
		if err != nil {
			return inputRecord{}, err
		}
		lr.line++
		if lr.line == 1 && bytes.HasPrefix(buf, []byte("\xEF\xBB\xBF")) {
			buf = buf[3:]
		}
		if total > maxLineBytes {
			lr.records++
			return inputRecord{
				number: lr.records, line: lr.line, raw: lossyUTF8(buf),
				err: fmt.Errorf("limit reached (line bytes): line %d takes %d bytes, more than %d", lr.line, total, maxLineBytes),
			}, nil
		}
		if n := len(buf); n > 0 && buf[n-1] == '\r' {
			buf = buf[:n-1]
		}
		if blank(buf) {
			continue
		}
		lr.records++
		in := inputRecord{number: lr.records, line: lr.line}
		if !utf8.Valid(buf) {
			at := validPrefix(buf)
			in.raw = lossyUTF8(buf)
			in.err = &lineError{fmt.Sprintf("not UTF-8: an invalid byte at byte %d of the line", at+1)}
			return in, nil
		}
		in.raw = string(buf)
		rec, err := omlet.ParseRecord(buf)
		if err != nil {
			in.err = &lineError{err.Error()}
		} else {
			in.record = rec
		}
		return in, nil
	}
}

// readLine reads one physical line without its line feed: its bytes (only
// the first rawPrefix past the bound) and its whole length. io.EOF when no
// byte is left.
func (lr *lineReader) readLine() ([]byte, int, error) {
	var buf []byte
	total := 0
	any := false
	for {
		chunk, err := lr.r.ReadSlice('\n')
		if len(chunk) > 0 {
			any = true
		}
		end := len(chunk)
		done := false
		if end > 0 && chunk[end-1] == '\n' {
			end--
			done = true
		}
		// Past the bound only the first bytes are kept, to name the line.
		if total+end <= maxLineBytes {
			buf = append(buf, chunk[:end]...)
		} else {
			buf = append(buf, chunk[:min(end, max(0, rawPrefix-len(buf)))]...)
		}
		total += end
		switch {
		case done:
			return buf, total, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			if !any {
				return nil, 0, io.EOF
			}
			return buf, total, nil
		case err != nil:
			return nil, 0, err
		}
	}
}

func blank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' {
			return false
		}
	}
	return true
}

// validPrefix is how many leading bytes of b are UTF-8.
func validPrefix(b []byte) int {
	i := 0
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return i
}

// lossyUTF8 is b as text the way Rust's String::from_utf8_lossy makes it:
// each maximal invalid subsequence replaced by one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var out []byte
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		out = append(out, "\uFFFD"...)
		i += invalidRun(b[i:])
	}
	return string(out)
}

// invalidRun is the length of the maximal subpart of an ill-formed
// sequence at the start of b (at least 1), as Unicode and Rust count it.
func invalidRun(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c >= 0xE0 && c <= 0xEF:
		need = 2
		if c == 0xE0 {
			lo = 0xA0
		} else if c == 0xED {
			hi = 0x9F
		}
	case c >= 0xF0 && c <= 0xF4:
		need = 3
		if c == 0xF0 {
			lo = 0x90
		} else if c == 0xF4 {
			hi = 0x8F
		}
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k == 0 && (x < lo || x > hi) || k > 0 && (x < 0x80 || x > 0xBF) {
			break
		}
		n++
	}
	return n
}
