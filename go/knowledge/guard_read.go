package knowledge

import (
	"fmt"
	"strings"
)

// reserved are words that are never column names (guard/read.rs RESERVED).
var reserved = []string{
	"select", "from", "where", "union", "into", "outfile", "dumpfile", "intersect", "except", "join",
	"limit", "order", "group", "having", "with", "insert", "update", "delete", "drop", "create", "alter",
	"grant", "exec", "execute", "call", "copy", "load",
}

func is(word, keyword string) bool { return strings.EqualFold(word, keyword) }

func among(word string, list []string) bool {
	for _, x := range list {
		if is(word, x) {
			return true
		}
	}
	return false
}

// side is what one side of a comparison is.
type side uint8

const (
	sideColumn   side = iota // a column
	sideParam                // a parameter
	sideValue                // a literal, null, or a call of values
	sideComputed             // a call that reads a column
	sideOne                  // the literal 1
)

func (s side) value() bool { return s == sideValue || s == sideOne || s == sideParam }

// reader is the guard's recursive descent over a lookup's tokens.
type reader struct {
	toks    []tok
	at      int
	policy  *Policy
	depth   int
	plain   bool
	refused string
	calls   []string
	named   []string
}

func (r *reader) peek() *tok {
	if r.at < len(r.toks) {
		return &r.toks[r.at]
	}
	return nil
}

func (r *reader) peekIs(k tokKind) bool { t := r.peek(); return t != nil && t.kind == k }

func (r *reader) next() *tok {
	t := r.peek()
	r.at++
	return t
}

func (r *reader) nextIs(k tokKind) bool { t := r.next(); return t != nil && t.kind == k }

func (r *reader) keyword(k string) error {
	if t := r.next(); t != nil && t.kind == tokWord && is(t.text, k) {
		return nil
	}
	return fmt.Errorf("expected `%s`", k)
}

func (r *reader) eatWord(k string) bool {
	if t := r.peek(); t != nil && t.kind == tokWord && is(t.text, k) {
		r.at++
		return true
	}
	return false
}

func (r *reader) column(w string) error {
	if strings.Contains(w, ".") || among(w, reserved) {
		return fmt.Errorf("`%s` is not a column name", w)
	}
	if r.policy.sessionWord(w) {
		return fmt.Errorf("`%s` is not a column name: the database reads it as a function of the session", w)
	}
	for _, n := range r.named {
		if is(n, w) {
			return nil
		}
	}
	r.named = append(r.named, w)
	return nil
}

func (r *reader) enter() error {
	r.depth++
	if r.depth > MaxDepth {
		return fmt.Errorf("parentheses, `not`s and function calls nested more than %d deep", MaxDepth)
	}
	return nil
}

func (r *reader) statement() (*Checked, error) {
	if err := r.keyword("select"); err != nil {
		return nil, err
	}
	columns, err := r.items()
	if err != nil {
		return nil, err
	}
	if err := r.keyword("from"); err != nil {
		return nil, err
	}
	table, err := r.source()
	if err != nil {
		return nil, err
	}
	if err := r.keyword("where"); err != nil {
		return nil, err
	}
	if err := r.cond(); err != nil {
		return nil, err
	}
	if err := r.order(); err != nil {
		return nil, err
	}
	if r.eatWord("limit") && !r.nextIs(tokNumber) {
		return nil, fmt.Errorf("`limit` takes a number")
	}
	if r.at < len(r.toks) {
		return nil, fmt.Errorf("more text after the condition")
	}
	return &Checked{Table: table, Columns: columns, Plain: r.plain, Calls: r.calls, Named: r.named}, nil
}

func (r *reader) order() error {
	if !r.eatWord("order") {
		return nil
	}
	if err := r.keyword("by"); err != nil {
		return err
	}
	for {
		t := r.next()
		if t == nil || t.kind != tokWord {
			return fmt.Errorf("expected a column after `order by`")
		}
		if err := r.column(t.text); err != nil {
			return err
		}
		if !r.eatWord("desc") {
			r.eatWord("asc")
		}
		if !r.peekIs(tokComma) {
			return nil
		}
		r.at++
	}
}

func (r *reader) items() ([]string, error) {
	if r.peekIs(tokStar) {
		r.at++
		return []string{"*"}, nil
	}
	var columns []string
	for {
		t := r.next()
		switch {
		case t != nil && t.kind == tokWord && r.peekIs(tokOpen):
			a, err := r.aggregate(t.text)
			if err != nil {
				return nil, err
			}
			columns = append(columns, a)
		case t != nil && t.kind == tokWord:
			if err := r.column(t.text); err != nil {
				return nil, err
			}
			columns = append(columns, t.text)
		default:
			return nil, fmt.Errorf("expected a column")
		}
		if !r.peekIs(tokComma) {
			return columns, nil
		}
		r.at++
	}
}

func (r *reader) aggregate(name string) (string, error) {
	if !among(name, Aggregates) && !among(name, r.policy.Functions) {
		r.refused = name
		return "", fmt.Errorf("the aggregate `%s` is not allowed: a select list may call %s and the functions the knowledge config lists in `functions`",
			name, strings.Join(Aggregates, ", "))
	}
	r.plain = false
	r.at++
	distinct := r.eatWord("distinct")
	arg := ""
	t := r.next()
	switch {
	case t != nil && t.kind == tokStar && !distinct:
		arg = "*"
	case t != nil && t.kind == tokWord:
		if err := r.column(t.text); err != nil {
			return "", err
		}
		arg = t.text
	default:
		return "", fmt.Errorf("`%s` takes one column", name)
	}
	text := name + "("
	if distinct {
		text += "distinct "
	}
	text += arg
	if r.peekIs(tokComma) {
		r.at++
		if !r.nextIs(tokText) {
			return "", fmt.Errorf("the second argument of `%s` is a quoted separator", name)
		}
		text += ", …"
	}
	if !r.nextIs(tokClose) {
		return "", fmt.Errorf("expected `)` closing `%s`", name)
	}
	return text + ")", nil
}

func (r *reader) source() (string, error) {
	t := r.next()
	switch {
	case t != nil && t.kind == tokOpen:
		r.plain = false
		if err := r.enter(); err != nil {
			return "", err
		}
		if err := r.keyword("select"); err != nil {
			return "", err
		}
		if _, err := r.items(); err != nil {
			return "", err
		}
		if err := r.keyword("from"); err != nil {
			return "", err
		}
		table, err := r.source()
		if err != nil {
			return "", err
		}
		if !r.nextIs(tokClose) {
			return "", fmt.Errorf("expected `)` closing the sub-query (it has no condition of its own)")
		}
		r.depth--
		r.eatWord("as")
		if w := r.peek(); w != nil && w.kind == tokWord && !is(w.text, "where") {
			if strings.Contains(w.text, ".") || among(w.text, reserved) || r.policy.sessionWord(w.text) {
				return "", fmt.Errorf("`%s` is not an alias", w.text)
			}
			r.at++
		}
		return table, nil
	case t != nil && t.kind == tokWord && r.policy.sessionWord(t.text):
		return "", fmt.Errorf("`%s` is not a table: the database reads it as a function of the session", t.text)
	case t != nil && t.kind == tokWord && !among(t.text, reserved):
		return t.text, nil
	}
	return "", fmt.Errorf("expected a table")
}

func (r *reader) cond() error {
	if err := r.conj(); err != nil {
		return err
	}
	for r.eatWord("or") {
		if err := r.conj(); err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) conj() error {
	if err := r.unary(); err != nil {
		return err
	}
	for r.eatWord("and") {
		if err := r.unary(); err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) unary() error {
	if r.eatWord("not") {
		if err := r.enter(); err != nil {
			return err
		}
		if err := r.unary(); err != nil {
			return err
		}
		r.depth--
		return nil
	}
	if r.peekIs(tokOpen) {
		r.at++
		if err := r.enter(); err != nil {
			return err
		}
		if err := r.cond(); err != nil {
			return err
		}
		r.depth--
		if !r.nextIs(tokClose) {
			return fmt.Errorf("expected `)`")
		}
		return nil
	}
	left, err := r.operand(0)
	if err != nil {
		return err
	}
	if t := r.peek(); t != nil && t.kind == tokWord && is(t.text, "in") {
		r.next()
		if left != sideColumn {
			return fmt.Errorf("the left of `in` must be a column")
		}
		if !r.nextIs(tokOpen) {
			return fmt.Errorf("expected `(` after `in`")
		}
		for {
			s, err := r.operand(0)
			if err != nil {
				return err
			}
			if !s.value() {
				return fmt.Errorf("an `in` list holds values, not columns")
			}
			t := r.next()
			if t != nil && t.kind == tokComma {
				continue
			}
			if t != nil && t.kind == tokClose {
				return nil
			}
			return fmt.Errorf("expected `,` or `)` in the `in` list")
		}
	}
	if t := r.peek(); t != nil && t.kind == tokWord && is(t.text, "like") {
		r.next()
		if left != sideColumn {
			return fmt.Errorf("the left of `like` must be a column")
		}
		for {
			t := r.next()
			if t == nil || (t.kind != tokParam && t.kind != tokText) {
				return fmt.Errorf("a `like` pattern is text and parameters joined by `||`")
			}
			if !r.peekIs(tokConcat) {
				return nil
			}
			r.at++
		}
	}
	if !r.nextIs(tokOp) {
		return fmt.Errorf("expected a comparison")
	}
	_, err = r.operand(0)
	return err
}

func (r *reader) operand(depth int) (side, error) {
	if depth > 16 {
		return 0, fmt.Errorf("function calls nested too deep")
	}
	t := r.next()
	switch {
	case t == nil:
	case t.kind == tokParam && depth == 0:
		return sideParam, nil
	case t.kind == tokNumber && t.text == "1":
		return sideOne, nil
	case t.kind == tokParam || t.kind == tokText || t.kind == tokNumber:
		return sideValue, nil
	case t.kind == tokWord && is(t.text, "null"):
		return sideValue, nil
	case t.kind == tokWord && r.peekIs(tokOpen):
		w := t.text
		if !among(w, HelperFunctions) && !among(w, r.policy.Functions) {
			r.refused = w
			return 0, fmt.Errorf("the function `%s` is not allowed: lookups may call OML's helpers (%s) and the functions the knowledge config lists in `functions`",
				w, strings.Join(HelperFunctions, ", "))
		}
		name := strings.ToLower(w)
		seen := false
		for _, c := range r.calls {
			seen = seen || c == name
		}
		if !seen {
			r.calls = append(r.calls, name)
		}
		r.at++
		if err := r.enter(); err != nil {
			return 0, err
		}
		s := sideValue
		for {
			arg, err := r.operand(depth + 1)
			if err != nil {
				return 0, err
			}
			if arg == sideColumn || arg == sideComputed {
				s = sideComputed
			}
			t := r.next()
			if t != nil && t.kind == tokComma {
				continue
			}
			if t != nil && t.kind == tokClose {
				r.depth--
				return s, nil
			}
			return 0, fmt.Errorf("expected `,` or `)` in the arguments of `%s`", w)
		}
	case t.kind == tokWord:
		if err := r.column(t.text); err != nil {
			return 0, err
		}
		return sideColumn, nil
	}
	return 0, fmt.Errorf("expected a value or a column")
}
