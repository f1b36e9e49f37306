package omlet

import (
	"math"
	"strconv"
)

// Rendering records as JSON lines exactly as `omlet run` prints them (OML
// spec §11; omlet_lang::pipes::write_json is the reference): fields in
// order, top-level ignored fields left out, text escaped as below, floats
// always with a decimal point and never an exponent, addresses and times as
// text, bigints as bare JSON integers with all their digits.

// JSON is the record as one line of JSON, without a line end.
func (r Record) JSON() string { return string(r.AppendJSON(nil)) }

// AppendJSON appends the record's JSON line (without a line end) to out.
func (r Record) AppendJSON(out []byte) []byte {
	out = append(out, '{')
	first := true
	for _, f := range r.Fields {
		if f.Value.Kind == KindIgnore {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = appendJSONString(out, f.Name)
		out = append(out, ':')
		out = appendJSONValue(out, f.Value, false)
	}
	return append(out, '}')
}

// JSON is the value as JSON text (an ignored value is null, as an object
// member shows it).
func (v Value) JSON() string { return string(appendJSONValue(nil, v, false)) }

func appendJSONValue(out []byte, v Value, inArray bool) []byte {
	switch v.Kind {
	case KindChars:
		return appendJSONString(out, v.Str)
	case KindDigit:
		return strconv.AppendInt(out, v.Int, 10)
	case KindBigInt:
		return append(out, v.Str...)
	case KindFloat:
		switch {
		case math.IsNaN(v.Float):
			return append(out, "null"...)
		case math.IsInf(v.Float, 1):
			return append(out, `"Infinity"`...)
		case math.IsInf(v.Float, -1):
			return append(out, `"-Infinity"`...)
		}
		return appendJSONFloat(out, v.Float)
	case KindBool:
		return strconv.AppendBool(out, v.Bool)
	case KindIPv4, KindIPv6, KindTime:
		out = append(out, '"')
		out = appendRaw(out, v)
		return append(out, '"')
	case KindNull:
		return append(out, "null"...)
	case KindIgnore:
		if inArray {
			return append(out, `""`...)
		}
		return append(out, "null"...)
	case KindArray:
		out = append(out, '[')
		for i, f := range v.Fields {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendJSONValue(out, f.Value, true)
		}
		return append(out, ']')
	case KindObj:
		out = append(out, '{')
		for i, f := range v.Fields {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendJSONString(out, f.Name)
			out = append(out, ':')
			out = appendJSONValue(out, f.Value, false)
		}
		return append(out, '}')
	}
	return append(out, "null"...)
}

// appendRaw writes an address or a time as its text.
func appendRaw(out []byte, v Value) []byte {
	switch v.Kind {
	case KindIPv4:
		return v.IP.Unmap().AppendTo(out)
	case KindIPv6:
		// netip writes RFC 5952 text and IPv4-mapped addresses as
		// ::ffff:a.b.c.d, as Rust's Ipv6Addr does.
		return v.IP.AppendTo(out)
	case KindTime:
		return appendTime(out, v.Int)
	}
	return out
}

// appendJSONFloat writes a finite float as omlet_lang::value::JsonFloat: an
// integral value with one decimal (all its digits), any other as the
// shortest decimal that reads back to it, never with an exponent.
func appendJSONFloat(out []byte, f float64) []byte {
	if f == math.Trunc(f) {
		return strconv.AppendFloat(out, f, 'f', 1, 64)
	}
	return strconv.AppendFloat(out, f, 'f', -1, 64)
}

const hexDigits = "0123456789abcdef"

// appendJSONString writes s quoted, escaped as omlet_lang's
// json_escape_into: `"` and `\`, the short escapes \b \f \n \r \t, other
// control characters as \u00XX; everything else as it is.
func appendJSONString(out []byte, s string) []byte {
	out = append(out, '"')
	from := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		out = append(out, s[from:i]...)
		switch c {
		case '"':
			out = append(out, '\\', '"')
		case '\\':
			out = append(out, '\\', '\\')
		case 0x08:
			out = append(out, '\\', 'b')
		case 0x0c:
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		}
		from = i + 1
	}
	out = append(out, s[from:]...)
	return append(out, '"')
}

// civilFromDays is the proleptic Gregorian date of a day number since
// 1970-01-01 (omlet_lang::time::civil_from_days).
func civilFromDays(z int64) (year int64, month, day int64) {
	z += 719468
	era := z
	if z < 0 {
		era = z - 146096
	}
	era /= 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

func floorDiv(a, b int64) (q, r int64) {
	q, r = a/b, a%b
	if r < 0 {
		q--
		r += b
	}
	return q, r
}

// appendPadded writes n with at least width digits (a negative n as '-'
// and the padding after it, as Rust's {:0width} does).
func appendPadded(out []byte, n int64, width int) []byte {
	var buf [24]byte
	digits := strconv.AppendInt(buf[:0], n, 10)
	neg := n < 0
	if neg {
		out = append(out, '-')
		digits = digits[1:]
		width--
	}
	for i := len(digits); i < width; i++ {
		out = append(out, '0')
	}
	return append(out, digits...)
}

// appendTime writes naive nanoseconds as omlet_lang::time::write_time:
// `YYYY-MM-DD HH:MM:SS`, then `.mmm`, `.uuuuuu` or `.nnnnnnnnn` when the
// fraction is not zero.
func appendTime(out []byte, t int64) []byte {
	secs, nanos := floorDiv(t, 1_000_000_000)
	days, sod := floorDiv(secs, 86400)
	y, m, d := civilFromDays(days)
	out = appendPadded(out, y, 4)
	out = append(out, '-')
	out = appendPadded(out, m, 2)
	out = append(out, '-')
	out = appendPadded(out, d, 2)
	out = append(out, ' ')
	out = appendPadded(out, sod/3600, 2)
	out = append(out, ':')
	out = appendPadded(out, sod/60%60, 2)
	out = append(out, ':')
	out = appendPadded(out, sod%60, 2)
	switch {
	case nanos == 0:
	case nanos%1_000_000 == 0:
		out = append(out, '.')
		out = appendPadded(out, nanos/1_000_000, 3)
	case nanos%1000 == 0:
		out = append(out, '.')
		out = appendPadded(out, nanos/1000, 6)
	default:
		out = append(out, '.')
		out = appendPadded(out, nanos, 9)
	}
	return out
}
