package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"

	omlet "example.invalid/omlet/go"
)

// maxShown bounds one value a failure shows (conformance.rs MAX_SHOWN_BYTES).
const maxShown = 4096

func show(s string) string {
	if len(s) <= maxShown {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes more)", s[:maxShown], len(s)-maxShown)
}

// member is one member of a JSON object, its value decoded with numbers
// kept as their text.
type member struct {
	key   string
	value any
}

// orderedObject reads a JSON object keeping its members' order (as
// serde_json's preserve_order map: a repeated key keeps its first place
// and takes the last value). Nested objects are maps: they compare as maps.
func orderedObject(text string) ([]member, bool, error) {
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	tok, err := d.Token()
	if err != nil {
		return nil, false, err
	}
	if tok != json.Delim('{') {
		return nil, false, nil
	}
	var out []member
	at := map[string]int{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return nil, false, err
		}
		key := tok.(string)
		var v any
		if err := d.Decode(&v); err != nil {
			return nil, false, err
		}
		if i, ok := at[key]; ok {
			out[i].value = v
			continue
		}
		at[key] = len(out)
		out = append(out, member{key, v})
	}
	if _, err := d.Token(); err != nil {
		return nil, false, err
	}
	if _, err := d.Token(); err == nil {
		return nil, false, fmt.Errorf("text after the object")
	}
	return out, true, nil
}

func jsonText(v any) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	_ = e.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// field is the first field of fields named name (ignore fields included,
// as conformance.rs's `find` sees them).
func field(fields []omlet.Field, name string) *omlet.Value {
	for i := range fields {
		if fields[i].Name == name {
			return &fields[i].Value
		}
	}
	return nil
}

// Compare checks an output record against a case's expected JSON, its
// expected_types and expected_ignored, as conformance.rs `compare` does:
// every field missing, extra or different, then the order of the top-level
// keys, then every type mismatch. The error lists them all.
func Compare(c *Case, expected string, out omlet.Record) error {
	got := out.JSON()
	diff := fmt.Sprintf("expected: %s\n  actual: %s", show(expected), show(got))
	w, wObj, err := orderedObject(expected)
	if err != nil {
		return fmt.Errorf("expected is not JSON: %v", err)
	}
	g, gObj, err := orderedObject(got)
	if err != nil {
		return fmt.Errorf("output is not JSON: %v", err)
	}
	if !wObj || !gObj {
		return fmt.Errorf("%s", diff)
	}
	gm := map[string]any{}
	for _, m := range g {
		gm[m.key] = m.value
	}
	wm := map[string]bool{}
	var lines []string
	for _, m := range w {
		wm[m.key] = true
		gv, ok := gm[m.key]
		if !ok {
			lines = append(lines, fmt.Sprintf("missing  %s: expected %s", m.key, show(jsonText(m.value))))
		} else if !matches(m.value, gv, field(out.Fields, m.key)) {
			lines = append(lines, fmt.Sprintf("changed  %s: expected %s, got %s", m.key, show(jsonText(m.value)), show(jsonText(gv))))
		}
	}
	for _, m := range g {
		if !wm[m.key] {
			lines = append(lines, fmt.Sprintf("extra    %s: %s", m.key, show(jsonText(m.value))))
		}
	}
	if len(lines) == 0 {
		wk, gk := make([]string, len(w)), make([]string, len(g))
		for i := range w {
			wk[i] = w[i].key
		}
		for i := range g {
			gk[i] = g[i].key
		}
		if strings.Join(wk, "\x00") != strings.Join(gk, "\x00") {
			lines = append(lines, fmt.Sprintf("order    the fields are right, in another order: expected %s; got %s",
				strings.Join(wk, ", "), strings.Join(gk, ", ")))
		}
	}
	if len(lines) > 0 {
		return fmt.Errorf("%s\n%s", strings.Join(lines, "\n"), diff)
	}
	var wrong []string
	for _, k := range sortedKeys(c.ExpectedTypes) {
		ty, got := c.ExpectedTypes[k], "nothing"
		if v := field(out.Fields, k); v != nil {
			got = KindName(v.Kind)
		}
		if got != ty {
			wrong = append(wrong, fmt.Sprintf("field %s: expected type %s, got %s", k, ty, got))
		}
	}
	for _, k := range c.ExpectedIgnored {
		if v := field(out.Fields, k); v == nil || v.Kind != omlet.KindIgnore {
			wrong = append(wrong, fmt.Sprintf("field %s should be present as an ignore field", k))
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%s\n%s", strings.Join(wrong, "\n"), diff)
	}
	return nil
}

// matches is conformance.rs `matches`: the clock sentinels "<any:time>",
// "<any:digit>" and "<any:chars>" match any value of their kind at any
// depth (by the typed value where known, else by the rendered form);
// everything else is jsonEqual.
func matches(want, got any, typed *omlet.Value) bool {
	if s, ok := want.(string); ok {
		kind, sentinel := map[string]omlet.Kind{"<any:time>": omlet.KindTime, "<any:digit>": omlet.KindDigit,
			"<any:chars>": omlet.KindChars}[s]
		if sentinel {
			if typed != nil {
				return typed.Kind == kind
			}
			if kind == omlet.KindDigit {
				n, ok := got.(json.Number)
				return ok && numberIsInt(n) && fitsInt(n)
			}
			_, isText := got.(string)
			return isText
		}
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(w) != len(g) {
			return false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return false
			}
			var t *omlet.Value
			if typed != nil && typed.Kind == omlet.KindObj {
				t = field(typed.Fields, k)
			}
			if !matches(wv, gv, t) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(w) != len(g) {
			return false
		}
		// Ignore elements are not rendered: index the rendered ones.
		var elems []*omlet.Value
		if typed != nil && typed.Kind == omlet.KindArray {
			for i := range typed.Fields {
				if typed.Fields[i].Value.Kind != omlet.KindIgnore {
					elems = append(elems, &typed.Fields[i].Value)
				}
			}
			if len(elems) != len(g) {
				elems = nil
			}
		}
		for i := range w {
			var t *omlet.Value
			if elems != nil {
				t = elems[i]
			}
			if !matches(w[i], g[i], t) {
				return false
			}
		}
		return true
	}
	return jsonEqual(want, got)
}

func numberIsInt(n json.Number) bool { return !strings.ContainsAny(string(n), ".eE") }

// fitsInt: serde_json reads an integer that fits 64 bits (signed or not)
// as an integer, a longer one as a float.
func fitsInt(n json.Number) bool {
	if _, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return true
	}
	_, err := strconv.ParseUint(string(n), 10, 64)
	return err == nil
}

// jsonEqual is structural equality where numbers keep the integer/float
// distinction (5 is not 5.0). Integers compare exactly, at any length
// (serde_json would read one past 64 bits as a float, rounded: stricter
// here, so that a bigint output is compared digit for digit).
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok || numberIsInt(x) != numberIsInt(y) {
			return false
		}
		if numberIsInt(x) {
			p, ok1 := new(big.Int).SetString(string(x), 10)
			q, ok2 := new(big.Int).SetString(string(y), 10)
			return ok1 && ok2 && p.Cmp(q) == 0
		}
		p, err1 := strconv.ParseFloat(string(x), 64)
		q, err2 := strconv.ParseFloat(string(y), 64)
		return err1 == nil && err2 == nil && p == q
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	}
	return a == b
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
