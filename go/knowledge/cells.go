package knowledge

import (
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	omlet "example.invalid/omlet/go"
)

// paramType is the type a database expects for a parameter, when it says
// (PostgreSQL types every parameter when it prepares a statement).
type paramType uint8

const (
	paramAny paramType = iota // not known: bound as it is
	paramInt16
	paramInt32
	paramInt64
	paramFloat
	paramText
	paramBool
	paramBytes
)

// pgParamType is the paramType of a PostgreSQL type OID.
func pgParamType(oid uint32) paramType {
	switch oid {
	case 21:
		return paramInt16
	case 23:
		return paramInt32
	case 20:
		return paramInt64
	case 700, 701:
		return paramFloat
	case 16:
		return paramBool
	case 17:
		return paramBytes
	}
	return paramText
}

var null = omlet.Cell{Kind: omlet.CellNull}

// rustFloat formats f as Rust's f64 Display does.
func rustFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// parseRustFloat reads a number as Rust's f64 parser does (no hex, no
// underscores).
func parseRustFloat(s string) (float64, bool) {
	if s == "" || strings.ContainsAny(s, "_xXpP") {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !strings.Contains(err.Error(), "out of range") {
		return 0, false
	}
	return f, true
}

// coerce converts a parameter to the type the database expects, the way
// SQLite's affinity would compare it; NULL when it cannot be (it then
// matches nothing). As host/knowledge's `coerce`.
func coerce(c omlet.Cell, ty paramType) omlet.Cell {
	if ty == paramAny || c.Kind == omlet.CellNull {
		return c
	}
	switch ty {
	case paramInt16, paramInt32, paramInt64, paramBool:
		var i int64
		ok := false
		switch c.Kind {
		case omlet.CellInteger:
			i, ok = c.Int, true
		case omlet.CellReal:
			if c.Real == math.Trunc(c.Real) && math.Abs(c.Real) < 9.2e18 {
				i, ok = int64(c.Real), true
			}
		case omlet.CellText:
			t := strings.TrimSpace(c.Text)
			if v, err := strconv.ParseInt(t, 10, 64); err == nil && !strings.Contains(t, "_") {
				i, ok = v, true
			} else if f, fok := parseRustFloat(t); fok && f == math.Trunc(f) && math.Abs(f) < 9.2e18 {
				i, ok = int64(f), true
			}
		}
		if ok && ty == paramInt16 && (i < math.MinInt16 || i > math.MaxInt16) {
			ok = false
		}
		if ok && ty == paramInt32 && (i < math.MinInt32 || i > math.MaxInt32) {
			ok = false
		}
		if !ok {
			return null
		}
		return omlet.Cell{Kind: omlet.CellInteger, Int: i}
	case paramFloat:
		switch c.Kind {
		case omlet.CellInteger:
			return omlet.Cell{Kind: omlet.CellReal, Real: float64(c.Int)}
		case omlet.CellText:
			if f, ok := parseRustFloat(strings.TrimSpace(c.Text)); ok {
				return omlet.Cell{Kind: omlet.CellReal, Real: f}
			}
			return null
		case omlet.CellReal:
			return c
		}
		return null
	case paramText:
		switch c.Kind {
		case omlet.CellInteger:
			return omlet.Cell{Kind: omlet.CellText, Text: strconv.FormatInt(c.Int, 10)}
		case omlet.CellReal:
			return omlet.Cell{Kind: omlet.CellText, Text: rustFloat(c.Real)}
		case omlet.CellBlob:
			return omlet.Cell{Kind: omlet.CellText, Text: lossyText(c.Blob)}
		}
		return c
	case paramBytes:
		switch c.Kind {
		case omlet.CellText:
			return omlet.Cell{Kind: omlet.CellBlob, Blob: []byte(c.Text)}
		case omlet.CellBlob:
			return c
		}
		return null
	}
	return c
}

// arg is a cell as a database/sql argument of the type ty asks for.
func arg(c omlet.Cell, ty paramType) any {
	c = coerce(c, ty)
	switch c.Kind {
	case omlet.CellInteger:
		switch ty {
		case paramInt16:
			return int16(c.Int)
		case paramInt32:
			return int32(c.Int)
		case paramBool:
			return c.Int != 0
		}
		return c.Int
	case omlet.CellReal:
		return c.Real
	case omlet.CellText:
		return c.Text
	case omlet.CellBlob:
		if c.Blob == nil {
			return []byte{}
		}
		return c.Blob
	}
	return nil
}

// cellOf is a scanned value as a cell. blob says whether bytes are a
// BLOB (SQLite's BLOB, PostgreSQL's BYTEA); otherwise bytes that are UTF-8
// are text (MySQL sends text of a binary collation as bytes).
func cellOf(v any, blob bool) omlet.Cell {
	switch x := v.(type) {
	case nil:
		return null
	case int64:
		return omlet.Cell{Kind: omlet.CellInteger, Int: x}
	case int32:
		return omlet.Cell{Kind: omlet.CellInteger, Int: int64(x)}
	case int16:
		return omlet.Cell{Kind: omlet.CellInteger, Int: int64(x)}
	case int:
		return omlet.Cell{Kind: omlet.CellInteger, Int: int64(x)}
	case uint64:
		if x <= math.MaxInt64 {
			return omlet.Cell{Kind: omlet.CellInteger, Int: int64(x)}
		}
		return omlet.Cell{Kind: omlet.CellReal, Real: float64(x)}
	case float64:
		return omlet.Cell{Kind: omlet.CellReal, Real: x}
	case float32:
		return omlet.Cell{Kind: omlet.CellReal, Real: float64(x)}
	case bool:
		if x {
			return omlet.Cell{Kind: omlet.CellInteger, Int: 1}
		}
		return omlet.Cell{Kind: omlet.CellInteger, Int: 0}
	case string:
		return omlet.Cell{Kind: omlet.CellText, Text: x}
	case []byte:
		b := append([]byte(nil), x...)
		if !blob && utf8.Valid(b) {
			return omlet.Cell{Kind: omlet.CellText, Text: string(b)}
		}
		return omlet.Cell{Kind: omlet.CellBlob, Blob: b}
	case time.Time:
		return omlet.Cell{Kind: omlet.CellText, Text: x.Format("2006-01-02 15:04:05.999999999Z07:00")}
	}
	return omlet.Cell{Kind: omlet.CellText, Text: strconv.Quote("unsupported value")}
}

// cellBytes is the size a cell is counted at: the cell and its text or blob.
func cellBytes(c omlet.Cell) int64 {
	return 48 + int64(len(c.Text)) + int64(len(c.Blob))
}

// encodeKey writes cells as an exact, compact key.
func encodeKey(sb *strings.Builder, cells []omlet.Cell) {
	for _, c := range cells {
		sb.WriteByte(byte(c.Kind))
		switch c.Kind {
		case omlet.CellInteger:
			sb.WriteString(strconv.FormatInt(c.Int, 10))
		case omlet.CellReal:
			sb.WriteString(strconv.FormatUint(math.Float64bits(c.Real), 16))
		case omlet.CellText:
			sb.WriteString(strconv.Itoa(len(c.Text)))
			sb.WriteByte(':')
			sb.WriteString(c.Text)
		case omlet.CellBlob:
			sb.WriteString(strconv.Itoa(len(c.Blob)))
			sb.WriteByte(':')
			sb.Write(c.Blob)
		}
		sb.WriteByte(0)
	}
}
