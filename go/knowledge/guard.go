package knowledge

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxStatementBytes is the longest lookup statement read, as the rule wrote
// it and as written out for a database (MySQL's inline helpers copy their
// arguments).
const MaxStatementBytes = 64 * 1024

// MaxDepth is how deep parentheses, `not`s and calls may nest.
const MaxDepth = 64

// Aggregates are the aggregates a select list may call without the
// configuration listing them.
var Aggregates = []string{"count", "min", "max", "sum", "avg", "total", "group_concat", "string_agg"}

// catalogPrefixes begin the names of catalog tables and schemas.
var catalogPrefixes = []string{"pg_", "sqlite_", "pragma_", "information_schema"}

// catalogSchemas are MySQL's and MariaDB's system schemas.
var catalogSchemas = []string{"mysql", "performance_schema", "sys"}

// catalogNames are catalog tables without a catalog prefix.
var catalogNames = []string{"dbstat"}

// sessionWords are read by PostgreSQL or MySQL, without parentheses, as
// functions of the session.
var sessionWords = []string{
	"current_user", "session_user", "system_user", "current_role", "current_catalog",
	"current_schema", "current_database", "current_path",
}

// IsCatalog says whether table (maybe schema-qualified) names a catalog
// table: a part begins with pg_, sqlite_, pragma_ or information_schema, a
// part is dbstat, or its schema is one of MySQL's system schemas. Such
// tables are refused whatever the allow-list says.
func IsCatalog(table string) bool {
	parts := strings.Split(table, ".")
	for _, part := range parts {
		for _, p := range catalogPrefixes {
			if len(part) >= len(p) && strings.EqualFold(part[:len(p)], p) {
				return true
			}
		}
		if among(part, catalogNames) {
			return true
		}
	}
	for _, schema := range parts[:len(parts)-1] {
		if among(schema, catalogSchemas) {
			return true
		}
	}
	return false
}

// isSystemSchema says whether name is a MySQL or MariaDB system schema.
func isSystemSchema(name string) bool {
	return is(name, "information_schema") || among(name, catalogSchemas)
}

// Policy is what a rule's statements may reach.
type Policy struct {
	// Tables lookups may read; nil: any unqualified table.
	Tables []string
	// Functions allowed besides the helpers (case-insensitive).
	Functions []string
	// Database is "sqlite", "postgres" or "mysql"; "" for any.
	Database string
	// Qualified lets schema-qualified tables through without Tables
	// naming them (catalog tables stay refused).
	Qualified bool
}

func (p *Policy) sessionWord(w string) bool {
	return among(w, sessionWords) || (is(w, "user") && (p.Database == "" || p.Database == "postgres"))
}

// Checked is what a statement that passed reads.
type Checked struct {
	// Table is the table read (the innermost, through sub-queries).
	Table string
	// Columns are the selected columns, or ["*"].
	Columns []string
	// Plain: no aggregate and no sub-query.
	Plain bool
	// Calls are the functions the statement calls, lower case, each once.
	Calls []string
	// Named are the column names the statement mentions, each once.
	Named []string
}

// Refusal is why Check refuses a statement.
type Refusal struct {
	Message string
	// Function is the function refused, when that is why.
	Function string
}

func (r *Refusal) Error() string { return r.Message }

// Check reads one statement as the guest hands it over (before dialect
// rewrites) with the small grammar of the OML compiler (host/knowledge's
// guard) and checks it against policy.
func Check(sql string, policy *Policy) (*Checked, error) {
	plain := func(format string, a ...any) error { return &Refusal{Message: fmt.Sprintf(format, a...)} }
	if len(sql) > MaxStatementBytes {
		return nil, plain("the lookup is %d bytes long; at most %d are read", len(sql), MaxStatementBytes)
	}
	toks, err := tokens(sql)
	if err != nil {
		return nil, plain("%s", err.Error())
	}
	r := &reader{toks: toks, policy: policy, plain: true}
	checked, err := r.statement()
	if err != nil {
		return nil, &Refusal{Message: fmt.Sprintf("not a lookup omlet runs (%s)", err), Function: r.refused}
	}
	table := checked.Table
	if IsCatalog(table) {
		return nil, plain("the table `%s` is in the database's catalog, which lookups may not read (even when `tables` lists it)", table)
	}
	if policy.Database == "mysql" {
		if schema, name, ok := strings.Cut(table, "."); ok {
			return nil, plain("the table `%s` names the database `%s`: a MySQL or MariaDB lookup reads only the database "+
				"its URL names, by unqualified names (write `%s`), even when `tables` lists it", table, schema, name)
		}
	}
	if policy.Tables != nil {
		for _, t := range policy.Tables {
			if t == table {
				return checked, nil
			}
		}
		near := ""
		if n, ok := nearest(table, policy.Tables); ok {
			near = fmt.Sprintf("; did you mean `%s`?", n)
		}
		allowed := "none are allowed"
		if len(policy.Tables) > 0 {
			allowed = strings.Join(policy.Tables, ", ")
		}
		return nil, plain("the table `%s` is not among the knowledge tables this rule may read (%s)%s", table, allowed, near)
	}
	if strings.Contains(table, ".") && !policy.Qualified {
		return nil, plain("the schema-qualified table `%s` is refused: list it in `tables` of the knowledge config to allow it", table)
	}
	return checked, nil
}

// nearest is the known name closest to name (omlet_lang::parse::nearest):
// within one edit for names of up to 4 characters, two otherwise, or one
// that begins with name.
func nearest(name string, known []string) (string, bool) {
	limit := 2
	if utf8.RuneCountInString(name) <= 4 {
		limit = 1
	}
	best, bestD, found := "", 0, false
	for _, k := range known {
		d := editDistance(name, k)
		if d <= limit || (len(name) >= 3 && strings.HasPrefix(k, name)) {
			if !found || d < bestD {
				best, bestD, found = k, d, true
			}
		}
	}
	return best, found
}

func editDistance(a, b string) int {
	br := []rune(b)
	row := make([]int, len(br)+1)
	for j := range row {
		row[j] = j
	}
	i := 0
	for _, ca := range a {
		prev := row[0]
		row[0] = i + 1
		for j, cb := range br {
			cur := row[j+1]
			if ca == cb {
				row[j+1] = prev
			} else {
				row[j+1] = 1 + min(prev, cur, row[j])
			}
			prev = cur
		}
		i++
	}
	return row[len(br)]
}
