package knowledge

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// What a knowdb's own SQL files (`create`, `insert`) may do: build and
// fill the knowdb's tables, in the knowdb's database, and nothing else
// (guard/script.rs). Read statement by statement before the file runs, on
// every dialect, so that a refusal names the statement and why; on SQLite
// the connection's authorizer (confine) refuses the same things whatever
// the text looks like. Refused:
//   - ATTACH and DETACH: they open other database files;
//   - VACUUM (and VACUUM INTO 'file', which writes the database out);
//   - a PRAGMA outside sqlitePragmas, or on a schema other than main or temp;
//   - the functions of sqliteDeniedFunctions (load_extension loads native code);
//   - a virtual table of a module outside sqliteModules.

// scriptRefusal is why a statement of a knowdb's SQL file is refused.
type scriptRefusal struct {
	// statement is the statement as written (its blanks collapsed, at
	// most 200 characters).
	statement string
	// line is the line of the file the statement starts on (from 1).
	line int
	// why it is refused.
	why string
}

func (r *scriptRefusal) Error() string {
	return fmt.Sprintf("the statement `%s` is refused: %s", r.statement, r.why)
}

type scriptTokKind uint8

const (
	scriptWord scriptTokKind = iota
	scriptDot
	scriptOpen
	scriptSemi
	scriptOther
)

type scriptTok struct {
	at   int // byte offset in the file
	kind scriptTokKind
	word string // for scriptWord
}

// scriptTokens are the tokens of sql with the byte offset of each: words
// (unquoted identifiers and keywords), `.`, `(`, `;`, and everything else
// as other; literals, quoted identifiers and comments are skipped whole.
func scriptTokens(sql string) []scriptTok {
	b := sql
	var out []scriptTok
	skipTo := func(from int, end byte) int {
		j := from
		for j < len(b) {
			if b[j] == end {
				// A doubled quote is one quote inside it.
				if end != ']' && j+1 < len(b) && b[j+1] == end {
					j += 2
					continue
				}
				return j + 1
			}
			j++
		}
		return len(b)
	}
	isWordByte := func(c byte) bool { return isIdent(c) || c == '$' || c >= 0x80 }
	i := 0
	for i < len(b) {
		c := b[i]
		start := i
		switch {
		case c == '\'' || c == '"' || c == '`':
			i = skipTo(i+1, c)
			out = append(out, scriptTok{at: start, kind: scriptOther})
		case c == '[':
			i = skipTo(i+1, ']')
			out = append(out, scriptTok{at: start, kind: scriptOther})
		case c == '-' && i+1 < len(b) && b[i+1] == '-', c == '#':
			// `#` is MySQL's line comment; SQLite has no `#` outside a literal.
			for i < len(b) && b[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			if e := strings.Index(b[i+2:], "*/"); e >= 0 {
				i = i + 2 + e + 2
			} else {
				i = len(b)
			}
		case c == '.':
			i++
			out = append(out, scriptTok{at: start, kind: scriptDot})
		case c == '(':
			i++
			out = append(out, scriptTok{at: start, kind: scriptOpen})
		case c == ';':
			i++
			out = append(out, scriptTok{at: start, kind: scriptSemi})
		case isAlpha(c) || c == '_' || c >= 0x80:
			for i < len(b) && isWordByte(b[i]) {
				i++
			}
			out = append(out, scriptTok{at: start, kind: scriptWord, word: b[start:i]})
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		default:
			i++
			out = append(out, scriptTok{at: start, kind: scriptOther})
		}
	}
	return out
}

// checkScript checks a knowdb SQL file: nil when no statement does what
// guard_script.go refuses, else the first that does and why.
func checkScript(sql string) *scriptRefusal {
	toks := scriptTokens(sql)
	for from := 0; from < len(toks); {
		end := len(toks)
		for j := from; j < len(toks); j++ {
			if toks[j].kind == scriptSemi {
				end = j
				break
			}
		}
		if why, refused := scriptStatementRefusal(toks[from:end]); refused {
			start := toks[from].at
			stop := len(sql)
			if end < len(toks) {
				stop = toks[end].at
			}
			text := strings.Join(strings.Fields(sql[start:stop]), " ")
			if utf8.RuneCountInString(text) > 200 {
				n := 0
				for cut := range text {
					if n == 200 {
						text = text[:cut] + "…"
						break
					}
					n++
				}
			}
			return &scriptRefusal{statement: text, line: 1 + strings.Count(sql[:start], "\n"), why: why}
		}
		from = end + 1
	}
	return nil
}

// scriptStatementRefusal is why one statement (its tokens, without the
// `;`) is refused, if it is.
func scriptStatementRefusal(st []scriptTok) (string, bool) {
	word := func(i int) (string, bool) {
		if i < len(st) && st[i].kind == scriptWord {
			return st[i].word, true
		}
		return "", false
	}
	first, ok := word(0)
	if !ok {
		return "", false
	}
	if asciiIs(first, "attach") || asciiIs(first, "detach") {
		return fmt.Sprintf("%s opens a database file outside the knowdb's own database; a knowdb's SQL builds its tables there only",
			strings.ToUpper(first)), true
	}
	if asciiIs(first, "vacuum") {
		return "VACUUM (and VACUUM INTO, which writes the database to another file) is not run from a knowdb", true
	}
	if asciiIs(first, "pragma") {
		w1, ok1 := word(1)
		w3, ok3 := word(3)
		var schema, name string
		switch {
		case ok1 && len(st) > 2 && st[2].kind == scriptDot && ok3:
			schema, name = w1, w3
		case ok1:
			name = w1
		default:
			return "a PRAGMA without a name", true
		}
		if schema != "" && !asciiIs(schema, "main") && !asciiIs(schema, "temp") {
			return fmt.Sprintf("PRAGMA on the schema `%s`: a knowdb's SQL reaches its own database (`main`) only", schema), true
		}
		if !asciiAmong(name, sqlitePragmas) {
			return fmt.Sprintf("PRAGMA %s is not among those a knowdb may run (%s)", name, strings.Join(sqlitePragmas, ", ")), true
		}
	}
	for i, t := range st {
		if t.kind != scriptWord {
			continue
		}
		w := t.word
		if asciiAmong(w, sqliteDeniedFunctions) && i+1 < len(st) && st[i+1].kind == scriptOpen {
			return fmt.Sprintf("the function `%s` is not called from a knowdb (it reaches outside the database)", w), true
		}
		if asciiIs(w, "using") && i > 0 {
			virtual := false
			for _, p := range st[:i] {
				if p.kind == scriptWord && asciiIs(p.word, "virtual") {
					virtual = true
					break
				}
			}
			if m, ok := word(i + 1); virtual && ok && !asciiAmong(m, sqliteModules) {
				return fmt.Sprintf("a virtual table of the module `%s`: a knowdb may create those of %s only",
					m, strings.Join(sqliteModules, ", ")), true
			}
		}
	}
	return "", false
}

// asciiIs compares as Rust's eq_ignore_ascii_case (SQLite folds ASCII only).
func asciiIs(word, keyword string) bool {
	if len(word) != len(keyword) {
		return false
	}
	for i := 0; i < len(word); i++ {
		a, b := word[i], keyword[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

func asciiAmong(word string, list []string) bool {
	for _, x := range list {
		if asciiIs(word, x) {
			return true
		}
	}
	return false
}
