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
	// The budget of a module with yield points (docs/abi.md): a mutable i32
	// global counting loop headers down to the next call of tick.
	exportTickBudget = "omlet_tick_budget"

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

// exportsGlobal reports whether the module wasm exports a global named
// name. It reads only the section headers and the export section, before
// wazero compiles the module (a malformed module answers false, and wazero
// then refuses it).
func exportsGlobal(wasm []byte, name string) bool {
	if len(wasm) < 8 {
		return false
	}
	b := wasm[8:]
	for len(b) > 0 {
		id := b[0]
		size, n := uleb32(b[1:])
		if n == 0 || uint64(len(b)-1-n) < uint64(size) {
			return false
		}
		body := b[1+n : 1+n+int(size)]
		b = b[1+n+int(size):]
		if id != 7 {
			continue
		}
		count, n := uleb32(body)
		if n == 0 {
			return false
		}
		body = body[n:]
		for range count {
			l, n := uleb32(body)
			if n == 0 || uint64(len(body)-n) < uint64(l)+1 {
				return false
			}
			export := string(body[n : n+int(l)])
			kind := body[n+int(l)]
			body = body[n+int(l)+1:]
			if _, n = uleb32(body); n == 0 {
				return false
			}
			body = body[n:]
			if export == name && kind == 3 {
				return true
			}
		}
		return false
	}
	return false
}

// uleb32 decodes an unsigned LEB128 of at most 32 bits: the value and the
// bytes it took (0 when b does not start with one).
func uleb32(b []byte) (uint32, int) {
	var v uint32
	for i := 0; i < 5 && i < len(b); i++ {
		v |= uint32(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}
