package conformance

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	omlet "example.invalid/omlet/go"
)

// InputRecord reads a case's input as the Rust runner does: the JSON
// object as the CLI reads it (omlet.ParseRecord), then its input_types.
func InputRecord(c *Case) (omlet.Record, error) {
	rec, err := omlet.ParseRecord([]byte(c.Input))
	if err != nil {
		return omlet.Record{}, fmt.Errorf("input: %w", err)
	}
	if err := Retype(&rec, c.InputTypes); err != nil {
		return omlet.Record{}, fmt.Errorf("input %w", err)
	}
	return rec, nil
}

// Retype types top-level fields as host/src/record/mod.rs `Record::retype`
// does: `time` and `bool` from the value's text, `ip`, `digit`, `float` and
// `chars` by the evaluator's conversion of a typed target (a value already
// of the kind stays). A field whose text does not read as its type is an
// error naming it, and the record is left as it was. The value's text is
// known here for text, integers and booleans; a conversion from another
// kind is refused, so that no case passes on a guess.
func Retype(rec *omlet.Record, types map[string]string) error {
	typed := append([]omlet.Field(nil), rec.Fields...)
	for i, f := range typed {
		ty, ok := types[f.Name]
		if !ok {
			continue
		}
		bad := func(format string, a ...any) error {
			return fmt.Errorf("field %s: %s", f.Name, fmt.Sprintf(format, a...))
		}
		kind := map[string]omlet.Kind{"chars": omlet.KindChars, "ip": omlet.KindIPv4, "digit": omlet.KindDigit, "float": omlet.KindFloat}
		want, known := kind[ty]
		if !known && ty != "time" && ty != "bool" {
			return bad("unknown type %s (ip, time, digit, float, bool or chars)", ty)
		}
		if known && KindName(f.Value.Kind) == ty {
			continue
		}
		text, ok := rawText(f.Value)
		if !ok {
			return bad("this runner cannot type a %s value as %s", f.Value.Kind, ty)
		}
		switch ty {
		case "time":
			t, ok := parseTime(text)
			if !ok {
				return bad("not a time (YYYY-MM-DD HH:MM:SS): %s", text)
			}
			typed[i].Value = omlet.Time(t)
			continue
		case "bool":
			typed[i].Value = omlet.Bool(text == "true")
			continue
		}
		v, ok := convert(f.Value, text, want)
		if !ok {
			return bad("not %s: %s", ty, text)
		}
		typed[i].Value = v
	}
	rec.Fields = typed
	return nil
}

// rawText is a value's text (omlet_lang Value::raw_text) for the kinds
// whose text is plain.
func rawText(v omlet.Value) (string, bool) {
	switch v.Kind {
	case omlet.KindChars, omlet.KindBigInt:
		return v.Str, true
	case omlet.KindDigit:
		return strconv.FormatInt(v.Int, 10), true
	case omlet.KindBool:
		return strconv.FormatBool(v.Bool), true
	}
	return "", false
}

// convert is omlet_lang value::convert to chars, ip, digit or float.
func convert(v omlet.Value, text string, to omlet.Kind) (omlet.Value, bool) {
	switch to {
	case omlet.KindChars:
		return omlet.Chars(text), true
	case omlet.KindIPv4:
		if v.Kind != omlet.KindChars {
			return v, false
		}
		a, err := netip.ParseAddr(strings.TrimSpace(text))
		if err != nil || a.Zone() != "" {
			return v, false // null in the evaluator: not an ip, an error here
		}
		return omlet.IP(a), true
	case omlet.KindDigit:
		switch v.Kind {
		case omlet.KindChars:
			s := strings.TrimPrefix(text, "+")
			if d := strings.TrimPrefix(s, "-"); d == "" || strings.Trim(d, "0123456789") != "" {
				return v, false
			}
			n, err := strconv.ParseInt(s, 10, 64)
			return omlet.Digit(n), err == nil
		case omlet.KindBigInt:
			n, err := strconv.ParseInt(text, 10, 64)
			return omlet.Digit(n), err == nil
		}
	case omlet.KindFloat:
		if v.Kind != omlet.KindChars && v.Kind != omlet.KindBigInt {
			return v, false
		}
		if text == "" || strings.ContainsAny(text, " \t\r\n\f_xXpP") {
			return v, false
		}
		f, err := strconv.ParseFloat(text, 64)
		return omlet.Float(f), err == nil || errors.Is(err, strconv.ErrRange)
	}
	return v, false
}

// parseTime is omlet_lang time::parse_time: `Y-M-D H:M:S` with up to 6
// digits of year and 2 of the rest, `-` or `/` in the date, `T` or spaces
// between date and time, an optional `.fraction` and an optional zone,
// which is ignored (the value is naive nanoseconds).
func parseTime(text string) (int64, bool) {
	s, i := strings.TrimSpace(text), 0
	number := func(max int) (int64, bool) {
		start, v := i, int64(0)
		for i < len(s) && s[i] >= '0' && s[i] <= '9' && i-start < max {
			v = v*10 + int64(s[i]-'0')
			i++
		}
		return v, i > start
	}
	eat := func(set string) bool {
		if i < len(s) && strings.IndexByte(set, s[i]) >= 0 {
			i++
			return true
		}
		return false
	}
	var p [6]int64
	seps := []string{"-/", "-/", " Tt", ":", ":", ""}
	for k := range p {
		if k == 3 {
			for eat(" ") {
			}
		}
		n, ok := number(map[bool]int{true: 6, false: 2}[k == 0])
		if !ok || (seps[k] != "" && !eat(seps[k])) {
			return 0, false
		}
		p[k] = n
	}
	var nanos int64
	if eat(".,") {
		start := i
		frac, ok := number(9)
		if !ok {
			return 0, false
		}
		for d := i - start; d < 9; d++ {
			frac *= 10
		}
		nanos = frac
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	for eat(" ") {
	}
	if i < len(s) {
		if !eat("Zz") {
			if !eat("+-") {
				return 0, false
			}
			h, ok := number(2)
			if !ok {
				return 0, false
			}
			eat(":")
			m, _ := number(2)
			if h > 23 || m > 59 {
				return 0, false
			}
		}
	}
	if i < len(s) {
		return 0, false
	}
	year, month, day, hour, minute, second := p[0], p[1], p[2], p[3], p[4], p[5]
	if month < 1 || month > 12 || day == 0 || hour > 23 || minute > 59 || second > 60 {
		return 0, false
	}
	first := time.Date(int(year), time.Month(month), 1, 0, 0, 0, 0, time.UTC)
	if day > int64(first.AddDate(0, 1, -1).Day()) {
		return 0, false
	}
	secs := first.Unix() + (day-1)*86400 + hour*3600 + minute*60 + second
	if secs > math.MaxInt64/1_000_000_000-1 || secs < math.MinInt64/1_000_000_000+1 {
		return 0, false
	}
	return secs*1_000_000_000 + nanos, true
}

// KindName is the OML name of a kind (omlet_lang Kind::name).
func KindName(k omlet.Kind) string {
	switch k {
	case omlet.KindChars:
		return "chars"
	case omlet.KindDigit:
		return "digit"
	case omlet.KindFloat:
		return "float"
	case omlet.KindBool:
		return "bool"
	case omlet.KindIPv4, omlet.KindIPv6:
		return "ip"
	case omlet.KindTime:
		return "time"
	case omlet.KindObj:
		return "obj"
	case omlet.KindArray:
		return "array"
	case omlet.KindNull:
		return "null"
	case omlet.KindIgnore:
		return "ignore"
	case omlet.KindBigInt:
		return "bigint"
	}
	return fmt.Sprintf("kind(%d)", k)
}
