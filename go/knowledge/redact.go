package knowledge

import (
	"strings"
	"unicode"
)

// Redact is text with every password in it replaced by `***`: that of a
// URL (`scheme://user:secret@host`, the secret taken to run from the first
// `:` after `://` to the last `@`, so that a password may hold any
// character), and the value of every parameter whose name holds password,
// passwd or secret, or is pass or pwd. Every message that may show a
// knowledge URL goes through it (as config.rs `redact`).
func Redact(text string) string {
	return redactParameters(redactUserinfo(text))
}

func redactUserinfo(text string) string {
	var out strings.Builder
	rest := text
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			break
		}
		out.WriteString(rest[:i+3])
		rest = rest[i+3:]
		user := strings.IndexFunc(rest, func(c rune) bool {
			return c == ':' || c == '/' || c == '?' || c == '#' || c == '`' || unicode.IsSpace(c)
		})
		if user < 0 || rest[user] != ':' {
			continue
		}
		at := strings.LastIndexByte(rest, '@')
		if at <= user {
			continue
		}
		out.WriteString(rest[:user+1])
		out.WriteString("***")
		rest = rest[at:]
	}
	out.WriteString(rest)
	return out.String()
}

func isSecretKey(key string) bool {
	for _, k := range []string{"password", "passwd", "secret"} {
		if strings.Contains(key, k) {
			return true
		}
	}
	return key == "pass" || key == "pwd"
}

func redactParameters(text string) string {
	var out strings.Builder
	copied, from := 0, 0
	for {
		off := strings.IndexByte(text[from:], '=')
		if off < 0 {
			break
		}
		eq := from + off
		from = eq + 1
		start := eq
		for start > 0 {
			c := text[start-1]
			if isIdent(c) || c == '.' || c == '-' {
				start--
				continue
			}
			break
		}
		if start == eq || !isSecretKey(strings.ToLower(text[start:eq])) {
			continue
		}
		value := eq + 1
		end := len(text)
		if value < len(text) && (text[value] == '\'' || text[value] == '"') {
			if p := strings.IndexByte(text[value+1:], text[value]); p >= 0 {
				end = value + 1 + p + 1
			}
		} else if p := strings.IndexFunc(text[value:], func(c rune) bool {
			return c == '&' || c == ';' || c == '`' || unicode.IsSpace(c)
		}); p >= 0 {
			end = value + p
		}
		out.WriteString(text[copied:value])
		out.WriteString("***")
		copied, from = end, end
	}
	out.WriteString(text[copied:])
	return out.String()
}
