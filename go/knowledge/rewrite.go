package knowledge

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrTooLong: written out for the database, the statement would pass
// MaxStatementBytes (a helper call may copy its arguments).
var ErrTooLong = fmt.Errorf("written out for the database, the lookup would be longer than %d bytes "+
	"(a helper call may copy its arguments, so helper calls nested in helper calls multiply)", MaxStatementBytes)

// ErrTooDeep: helper calls nest deeper than MaxDepth.
var ErrTooDeep = fmt.Errorf("helper calls nested more than %d deep", MaxDepth)

// rewriteOutsideQuotes copies sql, passing quoted strings through
// untouched; elsewhere at may write a replacement for what starts at byte
// i and return where to go on (ok true), or leave the character as is.
func rewriteOutsideQuotes(sql string, at func(sql string, i int, out *strings.Builder) (int, bool, error)) (string, error) {
	var out strings.Builder
	out.Grow(len(sql) + 16)
	i := 0
	for i < len(sql) {
		c := sql[i]
		if c == '\'' || c == '"' {
			end := len(sql)
			if e := strings.IndexByte(sql[i+1:], c); e >= 0 {
				end = i + 1 + e + 1
			}
			out.WriteString(sql[i:end])
			i = end
			continue
		}
		next, ok, err := at(sql, i, &out)
		if err != nil {
			return "", err
		}
		if ok {
			i = next
			continue
		}
		_, n := utf8.DecodeRuneInString(sql[i:])
		out.WriteString(sql[i : i+n])
		i += n
	}
	return out.String(), nil
}

// helperAt is the helper whose call starts at byte i (its name in any
// case, then `(`), by its lower-case name.
func helperAt(sql string, i int) string {
	if i > 0 && (isIdent(sql[i-1]) || sql[i-1] == '.') {
		return ""
	}
	for _, n := range HelperFunctions {
		if i+len(n) <= len(sql) && strings.EqualFold(sql[i:i+len(n)], n) &&
			strings.HasPrefix(strings.TrimLeft(sql[i+len(n):], " \t\n\r\v\f"), "(") {
			return n
		}
	}
	return ""
}

// rewriteHelperCalls rewrites every helper call outside quotes to
// write(name, args), arguments first, bounded in size and depth.
func rewriteHelperCalls(sql string, write func(name string, args []string) string) (string, error) {
	return rewriteNested(sql, write, 0)
}

func rewriteNested(sql string, write func(string, []string) string, depth int) (string, error) {
	if len(sql) > MaxStatementBytes {
		return "", ErrTooLong
	}
	if depth > MaxDepth {
		return "", ErrTooDeep
	}
	return rewriteOutsideQuotes(sql, func(sql string, i int, out *strings.Builder) (int, bool, error) {
		name := helperAt(sql, i)
		if name == "" {
			return 0, false, nil
		}
		rest := sql[i+len(name):]
		open := i + len(name) + (len(rest) - len(strings.TrimLeft(rest, " \t\n\r\v\f")))
		args, end, ok := callArguments(sql, open+1)
		if !ok {
			return 0, false, nil
		}
		written := make([]string, len(args))
		for k, a := range args {
			w, err := rewriteNested(a, write, depth+1)
			if err != nil {
				return 0, false, err
			}
			written[k] = w
		}
		out.WriteString(write(name, written))
		if out.Len() > MaxStatementBytes {
			return 0, false, ErrTooLong
		}
		return end, true, nil
	})
}

// callArguments splits the arguments of a call whose `(` ends just before
// start at top-level commas; it returns them trimmed and the index after
// the `)`.
func callArguments(sql string, start int) ([]string, int, bool) {
	depth, from := 0, start
	var args []string
	for i := start; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == '\'' || c == '"':
			e := strings.IndexByte(sql[i+1:], c)
			if e < 0 {
				return nil, 0, false
			}
			i += e + 1
		case c == '(':
			depth++
		case c == ')' && depth > 0:
			depth--
		case c == ')':
			last := strings.TrimSpace(sql[from:i])
			if last != "" || len(args) > 0 {
				args = append(args, last)
			}
			return args, i + 1, true
		case c == ',' && depth == 0:
			args = append(args, strings.TrimSpace(sql[from:i]))
			from = i + 1
		}
	}
	return nil, 0, false
}

// qualifyHelpers prefixes helper calls with schema, names in lower case.
func qualifyHelpers(sql, schema string) (string, error) {
	return rewriteHelperCalls(sql, func(name string, args []string) string {
		return schema + "." + name + "(" + strings.Join(args, ", ") + ")"
	})
}

// Placeholders is how a database writes positional parameters.
type Placeholders uint8

const (
	// Question writes `?` for each parameter (SQLite, MySQL).
	Question Placeholders = iota
	// Dollar writes `$1`, `$2`, … (PostgreSQL).
	Dollar
)

// rewritePlaceholders rewrites :name parameters to positional
// placeholders, outside quotes; order gives, per placeholder, the index of
// its parameter in params. A name not in params is left as written.
func rewritePlaceholders(sql string, params []string, style Placeholders) (string, []int) {
	var order []int
	out, _ := rewriteOutsideQuotes(sql, func(sql string, i int, out *strings.Builder) (int, bool, error) {
		if sql[i] != ':' || i+1 >= len(sql) || !isIdent(sql[i+1]) {
			return 0, false, nil
		}
		end := i + 1
		for end < len(sql) && isIdent(sql[end]) {
			end++
		}
		idx := -1
		for k, p := range params {
			if p == sql[i+1:end] {
				idx = k
				break
			}
		}
		if idx < 0 {
			out.WriteString(sql[i:end])
			return end, true, nil
		}
		order = append(order, idx)
		if style == Dollar {
			out.WriteString("$" + strconv.Itoa(len(order)))
		} else {
			out.WriteByte('?')
		}
		return end, true, nil
	})
	return out, order
}

// helperMissingIn is the IPv6 helper that database cannot compute on its
// own columns, among calls (the guard's Checked.Calls), or "".
func helperMissingIn(calls []string, database string) string {
	var missing []string
	switch database {
	case "postgres":
		missing = []string{"ip_key", "cidr_min_key", "cidr_max_key", "cidr_contains"}
	case "mysql":
		missing = []string{"cidr_min_key", "cidr_max_key", "cidr_contains"}
	}
	for _, c := range calls {
		for _, m := range missing {
			if c == m {
				return m
			}
		}
	}
	return ""
}

// isRewriteLimit says whether err is a size or depth bound of a rewrite.
func isRewriteLimit(err error) bool { return errors.Is(err, ErrTooLong) || errors.Is(err, ErrTooDeep) }
