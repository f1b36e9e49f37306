package omlet

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
)

// Reading JSON into records as the Rust host reads it (host/src/record/json.rs,
// serde_json with preserve_order):
//
//   - a record is a JSON object; its keys keep their order, and a repeated
//     key keeps its first place and its last value;
//   - the members of a nested object are sorted by name (bytes), the last
//     of a repeated name kept, as OML holds objects;
//   - an integer that fits 64 bits is a digit, a larger one a bigint with
//     all its digits; `-0` and any number with a fraction or an exponent is
//     a float; text is chars; true/false bool; null null; arrays arrays.
//
// Errors read as serde_json words them, prefixed as omlet's are ("invalid
// JSON: …" or "a record must be a JSON object").

// serde_json's recursion limit: nesting deeper than this is an error.
const maxJSONDepth = 127

// JSONError is why a text holds no record.
type JSONError struct {
	// NotAnObject: the text is JSON but not an object.
	NotAnObject bool
	// Message is serde_json's wording, with the line and column.
	Message string
}

func (e *JSONError) Error() string {
	if e.NotAnObject {
		return "a record must be a JSON object"
	}
	return "invalid JSON: " + e.Message
}

// ParseRecord reads one JSON object (a JSONL line) as a record.
func ParseRecord(text []byte) (Record, error) {
	p := jsonParser{s: text}
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == '{' {
		fields, err := p.object(true)
		if err != nil {
			return Record{}, err
		}
		p.ws()
		if p.i < len(p.s) {
			return Record{}, p.fail("trailing characters", p.i)
		}
		return Record{Fields: fields}, nil
	}
	if _, err := p.value(); err != nil {
		return Record{}, err
	}
	p.ws()
	if p.i < len(p.s) {
		return Record{}, p.fail("trailing characters", p.i)
	}
	return Record{}, &JSONError{NotAnObject: true}
}

type jsonParser struct {
	s     []byte
	i     int
	depth int
}

// fail is an error at byte at, as "… at line L column C" (lines of the text,
// columns in bytes, clamped to the text as serde_json reports them).
func (p *jsonParser) fail(what string, at int) error {
	if at > len(p.s) {
		at = len(p.s)
	}
	line := 1 + bytes.Count(p.s[:at], []byte{'\n'})
	start := bytes.LastIndexByte(p.s[:at], '\n') + 1
	col := at - start + 1
	if at == len(p.s) && col > 1 {
		col--
	}
	return &JSONError{Message: fmt.Sprintf("%s at line %d column %d", what, line, col)}
}

func (p *jsonParser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) eof(inside string) error {
	return p.fail("EOF while parsing "+inside, len(p.s))
}

func (p *jsonParser) value() (Value, error) {
	p.ws()
	if p.i >= len(p.s) {
		return Value{}, p.eof("a value")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		fields, err := p.object(false)
		return Value{Kind: KindObj, Fields: fields}, err
	case c == '[':
		return p.array()
	case c == '"':
		s, err := p.str()
		return Chars(s), err
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return Bool(true), p.literal("true")
	case c == 'f':
		return Bool(false), p.literal("false")
	case c == 'n':
		return Null(), p.literal("null")
	}
	return Value{}, p.fail("expected value", p.i)
}

func (p *jsonParser) literal(word string) error {
	n := 0
	for n < len(word) && p.i+n < len(p.s) && p.s[p.i+n] == word[n] {
		n++
	}
	if n < len(word) {
		if p.i+n >= len(p.s) {
			return p.eof("a value")
		}
		return p.fail("expected ident", p.i+n)
	}
	p.i += n
	return nil
}

func (p *jsonParser) enter() error {
	p.depth++
	if p.depth > maxJSONDepth {
		return p.fail("recursion limit exceeded", p.i)
	}
	return nil
}

func (p *jsonParser) array() (Value, error) {
	if err := p.enter(); err != nil {
		return Value{}, err
	}
	p.i++
	var items []Field
	p.ws()
	if p.i >= len(p.s) {
		return Value{}, p.eof("a list")
	}
	if p.s[p.i] == ']' {
		p.i++
		p.depth--
		return Value{Kind: KindArray, Fields: []Field{}}, nil
	}
	for {
		v, err := p.value()
		if err != nil {
			return Value{}, err
		}
		items = append(items, Field{Value: v})
		p.ws()
		if p.i >= len(p.s) {
			return Value{}, p.eof("a list")
		}
		switch p.s[p.i] {
		case ',':
			p.i++
			p.ws()
			if p.i < len(p.s) && p.s[p.i] == ']' {
				return Value{}, p.fail("trailing comma", p.i)
			}
		case ']':
			p.i++
			p.depth--
			return Value{Kind: KindArray, Fields: items}, nil
		default:
			return Value{}, p.fail("expected `,` or `]`", p.i)
		}
	}
}

// object reads an object: a record's fields (top: first place, last value)
// or an object's members (sorted by name, the last of a name kept).
func (p *jsonParser) object(top bool) ([]Field, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.i++
	fields := []Field{}
	var index map[string]int
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		p.depth--
		return fields, nil
	}
	for {
		p.ws()
		if p.i >= len(p.s) {
			return nil, p.eof("an object")
		}
		if p.s[p.i] != '"' {
			return nil, p.fail("key must be a string", p.i)
		}
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		p.ws()
		if p.i >= len(p.s) {
			return nil, p.eof("an object")
		}
		if p.s[p.i] != ':' {
			return nil, p.fail("expected `:`", p.i)
		}
		p.i++
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		if top {
			// A repeated key keeps its first place and takes the last value.
			if index == nil && len(fields) >= 32 {
				index = make(map[string]int, 2*len(fields))
				for i, f := range fields {
					if _, seen := index[f.Name]; !seen {
						index[f.Name] = i
					}
				}
			}
			at := -1
			if index != nil {
				if i, ok := index[key]; ok {
					at = i
				} else {
					index[key] = len(fields)
				}
			} else {
				for i := range fields {
					if fields[i].Name == key {
						at = i
						break
					}
				}
			}
			if at >= 0 {
				fields[at].Value = v
			} else {
				fields = append(fields, Field{Name: key, Value: v})
			}
		} else {
			fields = append(fields, Field{Name: key, Value: v})
		}
		p.ws()
		if p.i >= len(p.s) {
			return nil, p.eof("an object")
		}
		switch p.s[p.i] {
		case ',':
			p.i++
			p.ws()
			if p.i < len(p.s) && p.s[p.i] == '}' {
				return nil, p.fail("trailing comma", p.i)
			}
		case '}':
			p.i++
			p.depth--
			if !top {
				fields = sortMembers(fields)
			}
			return fields, nil
		default:
			return nil, p.fail("expected `,` or `}`", p.i)
		}
	}
}

// sortMembers orders an object's members by name (bytes), stably, and
// keeps the last of each repeated name (omlet_lang::value::obj_from).
func sortMembers(fields []Field) []Field {
	slices.SortStableFunc(fields, func(a, b Field) int { return strings.Compare(a.Name, b.Name) })
	out := fields[:0]
	for _, f := range fields {
		if n := len(out); n > 0 && out[n-1].Name == f.Name {
			out[n-1] = f
			continue
		}
		out = append(out, f)
	}
	return out
}

func (p *jsonParser) hex4() (rune, error) {
	if p.i+4 > len(p.s) {
		return 0, p.eof("a string")
	}
	var r rune
	for k := 0; k < 4; k++ {
		c := p.s[p.i+k]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, p.fail("invalid escape", p.i+3)
		}
		r = r<<4 | rune(d)
	}
	p.i += 4
	return r, nil
}

func (p *jsonParser) str() (string, error) {
	p.i++
	from := p.i
	// The common case: no escape.
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '"' {
			s := string(p.s[from:p.i])
			p.i++
			return s, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		p.i++
	}
	var b strings.Builder
	b.Write(p.s[from:p.i])
	for {
		if p.i >= len(p.s) {
			return "", p.eof("a string")
		}
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return b.String(), nil
		case c < 0x20:
			return "", p.fail("control character (\\u0000-\\u001F) found while parsing a string", p.i)
		case c != '\\':
			b.WriteByte(c)
			p.i++
			continue
		}
		p.i++
		if p.i >= len(p.s) {
			return "", p.eof("a string")
		}
		e := p.s[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return "", err
			}
			switch {
			case r >= 0xdc00 && r < 0xe000:
				return "", p.fail("lone leading surrogate in hex escape", p.i-1)
			case r >= 0xd800 && r < 0xdc00:
				if p.i+2 > len(p.s) || p.s[p.i] != '\\' || p.s[p.i+1] != 'u' {
					return "", p.fail("unexpected end of hex escape", p.i)
				}
				p.i += 2
				lo, err := p.hex4()
				if err != nil {
					return "", err
				}
				if lo < 0xdc00 || lo >= 0xe000 {
					return "", p.fail("lone leading surrogate in hex escape", p.i-1)
				}
				r = utf16.DecodeRune(r, lo)
			}
			b.WriteRune(r)
		default:
			return "", p.fail("invalid escape", p.i-1)
		}
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (p *jsonParser) number() (Value, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	if p.i >= len(p.s) {
		return Value{}, p.eof("a value")
	}
	if !isDigit(p.s[p.i]) {
		return Value{}, p.fail("invalid number", p.i)
	}
	if p.s[p.i] == '0' {
		p.i++
		if p.i < len(p.s) && isDigit(p.s[p.i]) {
			return Value{}, p.fail("invalid number", p.i)
		}
	} else {
		for p.i < len(p.s) && isDigit(p.s[p.i]) {
			p.i++
		}
	}
	integral := true
	if p.i < len(p.s) && p.s[p.i] == '.' {
		integral = false
		p.i++
		if p.i >= len(p.s) {
			return Value{}, p.eof("a value")
		}
		if !isDigit(p.s[p.i]) {
			return Value{}, p.fail("invalid number", p.i)
		}
		for p.i < len(p.s) && isDigit(p.s[p.i]) {
			p.i++
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		integral = false
		p.i++
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		if p.i >= len(p.s) {
			return Value{}, p.eof("a value")
		}
		if !isDigit(p.s[p.i]) {
			return Value{}, p.fail("invalid number", p.i)
		}
		for p.i < len(p.s) && isDigit(p.s[p.i]) {
			p.i++
		}
	}
	lit := string(p.s[start:p.i])
	if integral {
		if lit == "-0" {
			return Float(math.Copysign(0, -1)), nil
		}
		if d, err := strconv.ParseInt(lit, 10, 64); err == nil {
			return Digit(d), nil
		}
		// Past 64 bits: all the digits, as the Rust host keeps them, unless
		// it is past what a float holds (serde_json refuses it then).
		if f, _ := strconv.ParseFloat(lit, 64); math.IsInf(f, 0) {
			return Value{}, p.fail("number out of range", p.i-1)
		}
		return BigInt(lit), nil
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil && (math.IsInf(f, 0)) {
		return Value{}, p.fail("number out of range", p.i-1)
	}
	return Float(f), nil
}
