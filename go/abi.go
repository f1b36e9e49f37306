package omlet

import (
	"encoding/binary"
	"errors"
	"unicode/utf8"
)

// The core ABI's names and numbers (docs/abi.md).
const (
	abiVersion   = 1
	importModule = "omlet:core@1"

	exportMemory        = "memory"
	exportABIVersion    = "omlet_abi_version"
	exportReturnArea    = "omlet_return_area"
	exportInput         = "omlet_input"
	exportInfo          = "omlet_info"
	exportEvaluate      = "omlet_evaluate"
	exportEvaluateBatch = "omlet_evaluate_batch"
	exportEvaluateLines = "omlet_evaluate_lines"
	exportExplain       = "omlet_explain"

	routeOnly  = 0
	routePath  = 1
	routeModel = 2

	statusDone     = 0
	statusUnrouted = 1
	statusLookup   = 2
	statusFailed   = 3
	statusRejected = 4
)

// requiredExports are the functions every core rule exports.
var requiredExports = []string{
	exportABIVersion, exportReturnArea, exportInput, exportInfo,
	exportEvaluate, exportEvaluateBatch, exportEvaluateLines, exportExplain,
}

// recordError is one entry of a batch answer's error list.
type recordError struct {
	index   int
	status  uint32
	message string
}

// abiReader reads a guest's answer with bounds: a short or damaged answer
// is an error, never a panic.
type abiReader struct {
	b   []byte
	at  int
	bad bool
}

func (r *abiReader) u32() uint32 {
	if r.bad || len(r.b)-r.at < 4 {
		r.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.at:])
	r.at += 4
	return v
}

func (r *abiReader) bytes(n uint32) []byte {
	if r.bad || uint64(len(r.b)-r.at) < uint64(n) {
		r.bad = true
		return nil
	}
	v := r.b[r.at : r.at+int(n)]
	r.at += int(n)
	return v
}

func (r *abiReader) rest() []byte {
	if r.bad {
		return nil
	}
	v := r.b[r.at:]
	r.at = len(r.b)
	return v
}

var errShortAnswer = errors.New("the guest's answer is shorter than its layout")

// errors reads a batch answer's error list, each index below n.
func (r *abiReader) errors(n int) ([]recordError, error) {
	count := r.u32()
	if r.bad {
		return nil, errShortAnswer
	}
	// Each error takes at least 12 bytes: a count past that is damage.
	if uint64(count)*12 > uint64(len(r.b)-r.at) {
		return nil, errShortAnswer
	}
	out := make([]recordError, 0, count)
	for i := uint32(0); i < count; i++ {
		index, status, msg := r.u32(), r.u32(), r.u32()
		text := r.bytes(msg)
		if r.bad {
			return nil, errShortAnswer
		}
		if int64(index) >= int64(n) {
			return nil, errors.New("the guest names a record past the batch in its errors")
		}
		out = append(out, recordError{index: int(index), status: status, message: validText(text)})
	}
	if r.at != len(r.b) {
		return nil, errors.New("the guest's answer has bytes past its errors")
	}
	return out, nil
}

// validText is b as text, invalid UTF-8 replaced (a message from the guest
// is shown, not trusted).
func validText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return string([]rune(string(b)))
}

// batchAnswer is omlet_evaluate_batch's answer: the successes' frame and
// the errors.
func batchAnswer(b []byte, n int) (frame []byte, errs []recordError, err error) {
	r := abiReader{b: b}
	frame = r.bytes(r.u32())
	if r.bad {
		return nil, nil, errShortAnswer
	}
	errs, err = r.errors(n)
	return frame, errs, err
}

// linesAnswer is omlet_evaluate_lines' answer: the successes' lines (each
// without its line feed) and the errors.
func linesAnswer(b []byte, n int) (lines [][]byte, errs []recordError, err error) {
	r := abiReader{b: b}
	text := r.bytes(r.u32())
	count := r.u32()
	if r.bad || uint64(count)*4 > uint64(len(b)-r.at) {
		return nil, nil, errShortAnswer
	}
	if !utf8.Valid(text) {
		return nil, nil, errors.New("the guest's lines are not UTF-8")
	}
	lines = make([][]byte, 0, count)
	start := 0
	for i := uint32(0); i < count; i++ {
		end := int(r.u32())
		if end <= start || end > len(text) || text[end-1] != '\n' {
			return nil, nil, errors.New("a line's end is not a line feed after the line before")
		}
		lines = append(lines, text[start:end-1])
		start = end
	}
	if start != len(text) {
		return nil, nil, errors.New("the guest's text runs past its last line")
	}
	errs, err = r.errors(n)
	return lines, errs, err
}

// explainAnswer is omlet_explain's answer: the record's status, its output
// frame or message, and the trace.
func explainAnswer(b []byte) (status uint32, out []byte, trace []byte, err error) {
	r := abiReader{b: b}
	status = r.u32()
	out = r.bytes(r.u32())
	trace = r.rest()
	if r.bad {
		return 0, nil, nil, errShortAnswer
	}
	return status, out, trace, nil
}
