package omlet

import (
	"fmt"
	"net/netip"
	"time"
)

// Kind is the kind of an OML value. Its numbers are the frame's node tags
// (docs/abi.md).
type Kind uint8

// The kinds of a Value.
const (
	KindChars  Kind = 0  // text
	KindDigit  Kind = 1  // a signed 64-bit integer
	KindFloat  Kind = 2  // a 64-bit float
	KindBool   Kind = 3  // true or false
	KindIPv4   Kind = 4  // an IPv4 address
	KindIPv6   Kind = 5  // an IPv6 address
	KindTime   Kind = 6  // a naive date and time, as nanoseconds since 1970-01-01T00:00:00
	KindNull   Kind = 7  // null
	KindIgnore Kind = 8  // a field the rule marked as ignored (not shown in JSON)
	KindObj    Kind = 9  // an object: named members
	KindArray  Kind = 10 // an array: elements (whose names are empty)
	KindBigInt Kind = 11 // an integer past 64 bits, as its decimal digits
)

var kindNames = [...]string{"chars", "digit", "float", "bool", "ipv4", "ipv6", "time", "null", "ignore", "obj", "array", "bigint"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Value is one OML value. Only the fields of its Kind are meaningful:
//
//   - KindChars: Str (UTF-8 text); KindBigInt: Str (canonical decimal digits,
//     an optional '-', no leading zeros)
//   - KindDigit: Int; KindTime: Int (naive nanoseconds since the epoch)
//   - KindFloat: Float; KindBool: Bool
//   - KindIPv4, KindIPv6: IP
//   - KindObj: Fields, the members; KindArray: Fields, the elements, each
//     with an empty Name
//   - KindNull, KindIgnore: nothing
//
// Build values with the constructors (Chars, Digit, …) rather than by hand.
type Value struct {
	Kind   Kind
	Str    string
	Int    int64
	Float  float64
	Bool   bool
	IP     netip.Addr
	Fields []Field
}

// Field is a named value: a field of a record, or a member of an object.
type Field struct {
	Name  string
	Value Value
}

// Record is one log record: its fields, in order.
type Record struct {
	Fields []Field
}

// Chars is a text value.
func Chars(s string) Value { return Value{Kind: KindChars, Str: s} }

// Digit is an integer value.
func Digit(i int64) Value { return Value{Kind: KindDigit, Int: i} }

// BigInt is an integer past 64 bits, given as its canonical decimal digits
// (see IsCanonicalBigInt).
func BigInt(digits string) Value { return Value{Kind: KindBigInt, Str: digits} }

// Float is a float value.
func Float(f float64) Value { return Value{Kind: KindFloat, Float: f} }

// Bool is a boolean value.
func Bool(b bool) Value { return Value{Kind: KindBool, Bool: b} }

// IP is an address value: KindIPv4 for a 4-byte address, else KindIPv6 (an
// IPv4-mapped IPv6 address stays IPv6).
func IP(a netip.Addr) Value {
	if a.Is4() {
		return Value{Kind: KindIPv4, IP: a}
	}
	return Value{Kind: KindIPv6, IP: a.WithZone("")}
}

// Time is a naive time value: nanoseconds since 1970-01-01T00:00:00, in no
// particular zone.
func Time(nanos int64) Value { return Value{Kind: KindTime, Int: nanos} }

// TimeOf is the naive time that t's clock shows in its own location (its
// wall-clock reading, with the zone dropped).
func TimeOf(t time.Time) Value {
	_, offset := t.Zone()
	return Time(t.UnixNano() + int64(offset)*int64(time.Second))
}

// Null is the null value.
func Null() Value { return Value{Kind: KindNull} }

// Ignore is the ignored value: a field holding it is not shown in JSON.
func Ignore() Value { return Value{Kind: KindIgnore} }

// Obj is an object of these members, kept as given. (Objects that OML makes
// have their members sorted by name, as the JSON reader sorts them too.)
func Obj(members ...Field) Value { return Value{Kind: KindObj, Fields: members} }

// Array is an array of these elements.
func Array(items ...Value) Value {
	fields := make([]Field, len(items))
	for i, v := range items {
		fields[i] = Field{Value: v}
	}
	return Value{Kind: KindArray, Fields: fields}
}

// Items are an array's elements (nil for other kinds).
func (v Value) Items() []Value {
	if v.Kind != KindArray {
		return nil
	}
	out := make([]Value, len(v.Fields))
	for i, f := range v.Fields {
		out[i] = f.Value
	}
	return out
}

// NewRecord is a record of these fields.
func NewRecord(fields ...Field) Record { return Record{Fields: fields} }

// F is a Field, for brevity: omlet.NewRecord(omlet.F("status", omlet.Digit(200))).
func F(name string, v Value) Field { return Field{Name: name, Value: v} }

// Get is the value of the record's first field named name.
func (r Record) Get(name string) (Value, bool) {
	for _, f := range r.Fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return Value{}, false
}

// Set replaces the value of the record's first field named name, or appends
// the field when there is none.
func (r *Record) Set(name string, v Value) {
	for i := range r.Fields {
		if r.Fields[i].Name == name {
			r.Fields[i].Value = v
			return
		}
	}
	r.Fields = append(r.Fields, Field{Name: name, Value: v})
}

// IsCanonicalBigInt reports whether s is an integer as a bigint holds it:
// decimal digits, an optional leading '-', no leading zero ("0" alone).
func IsCanonicalBigInt(s string) bool {
	d := s
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if d == "" {
		return false
	}
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return false
		}
	}
	return (d == "0" && len(s) == 1) || d[0] != '0'
}
