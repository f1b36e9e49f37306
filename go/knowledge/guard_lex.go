package knowledge

import (
	"fmt"
	"unicode/utf8"
)

// tokKind is the kind of one token of a lookup's SQL, as the guard reads it.
type tokKind uint8

const (
	tokWord   tokKind = iota // a name or keyword (may hold dots)
	tokParam                 // :name, text is the name
	tokText                  // a quoted text literal
	tokNumber                // a number, as written
	tokOp                    // =, !=, <>, <, <=, >, >=
	tokOpen
	tokClose
	tokComma
	tokStar
	tokConcat // ||
)

type tok struct {
	kind tokKind
	text string
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }
func isIdent(c byte) bool { return isAlpha(c) || isDigit(c) || c == '_' }

// tokens splits sql into the guard's tokens (guard/lex.rs); a character
// with no place in a lookup is refused.
func tokens(sql string) ([]tok, error) {
	var out []tok
	b := sql
	i := 0
	for i < len(b) {
		c := b[i]
		start := i
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case c == '\'':
			i++
			for {
				if i >= len(b) {
					return nil, fmt.Errorf("an unterminated text literal")
				}
				if b[i] == '\'' && i+1 < len(b) && b[i+1] == '\'' {
					i += 2
				} else if b[i] == '\'' {
					i++
					break
				} else {
					i++
				}
			}
			out = append(out, tok{tokText, sql[start:i]})
		case c == ':':
			i++
			for i < len(b) && isIdent(b[i]) {
				i++
			}
			if i == start+1 {
				return nil, fmt.Errorf("a `:` without a parameter name")
			}
			out = append(out, tok{tokParam, sql[start+1 : i]})
		case isDigit(c) || c == '-' || c == '.':
			i++
			for i < len(b) && (isDigit(b[i]) || b[i] == '.' ||
				((b[i] == 'e' || b[i] == 'E') && i > start) ||
				((b[i] == '+' || b[i] == '-') && (b[i-1] == 'e' || b[i-1] == 'E'))) {
				i++
			}
			hasDigit := false
			for j := start; j < i; j++ {
				hasDigit = hasDigit || isDigit(b[j])
			}
			if !hasDigit {
				return nil, fmt.Errorf("`%s` is not a number", sql[start:i])
			}
			out = append(out, tok{tokNumber, sql[start:i]})
		case c == '=' || c == '(' || c == ')' || c == ',' || c == '*':
			i++
			k := map[byte]tokKind{'=': tokOp, '(': tokOpen, ')': tokClose, ',': tokComma, '*': tokStar}[c]
			out = append(out, tok{k, sql[start:i]})
		case c == '|' && i+1 < len(b) && b[i+1] == '|':
			i += 2
			out = append(out, tok{tokConcat, "||"})
		case c == '!' || c == '<' || c == '>':
			i++
			if i < len(b) && (b[i] == '=' || (c == '<' && b[i] == '>')) {
				i++
			} else if c == '!' {
				return nil, fmt.Errorf("`!` alone")
			}
			out = append(out, tok{tokOp, sql[start:i]})
		case isAlpha(c) || c == '_':
			for i < len(b) && (isIdent(b[i]) || b[i] == '.') {
				i++
			}
			out = append(out, tok{tokWord, sql[start:i]})
		default:
			r, _ := utf8.DecodeRuneInString(sql[start:])
			return nil, fmt.Errorf("the character `%c` has no place in a lookup", r)
		}
	}
	return out, nil
}
