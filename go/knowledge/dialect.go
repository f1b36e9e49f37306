package knowledge

import (
	_ "embed"
	"fmt"
	"strings"
	"time"
)

// Dialect is what one SQL database does its own way: names, quoting,
// placeholders, column types, how statements reach the helper functions,
// and the session settings of a lookup connection.
type Dialect struct {
	// Kind names the database in messages and policies: "sqlite",
	// "postgres" or "mysql".
	Kind string
	// Quote wraps identifiers: `"`, or a backquote for MySQL.
	Quote byte
	// Placeholders says how positional parameters are written.
	Placeholders Placeholders
	// types are the column types for SQLite's INTEGER, REAL, BLOB and
	// TEXT, and for TEXT in a primary key.
	types [5]string
}

// The three dialects.
var (
	// SQLite: `"` quotes, `?` placeholders, helpers as registered functions.
	SQLite = Dialect{Kind: "sqlite", Quote: '"', Placeholders: Question,
		types: [5]string{"INTEGER", "REAL", "BLOB", "TEXT", "TEXT"}}
	// Postgres: `$n` placeholders, helpers as temporary functions (pg_temp).
	Postgres = Dialect{Kind: "postgres", Quote: '"', Placeholders: Dollar,
		types: [5]string{"BIGINT", "DOUBLE PRECISION", "BYTEA", "TEXT", "TEXT"}}
	// MySQL (and MariaDB): backquotes, `?` placeholders, helpers written
	// out inline.
	MySQL = Dialect{Kind: "mysql", Quote: '`', Placeholders: Question,
		types: [5]string{"BIGINT", "DOUBLE", "LONGBLOB", "TEXT", "VARCHAR(255)"}}
)

//go:embed pg_helpers.sql
var pgHelpersSQL string

// RewriteSQL adapts a statement, still with its :name parameters, to the
// dialect: PostgreSQL qualifies helper calls with pg_temp, MySQL writes
// them out inline. It fails with ErrTooLong or ErrTooDeep.
func (d Dialect) RewriteSQL(sql string) (string, error) {
	switch d.Kind {
	case "postgres":
		return qualifyHelpers(sql, "pg_temp")
	case "mysql":
		return rewriteHelperCalls(sql, mysqlHelper)
	}
	return sql, nil
}

// quoteIdent quotes name as an identifier of the dialect.
func (d Dialect) quoteIdent(name string) string {
	q := string(d.Quote)
	return q + strings.ReplaceAll(name, q, q+q) + q
}

// placeholder writes placeholder i (1-based).
func (d Dialect) placeholder(i int) string {
	if d.Placeholders == Dollar {
		return fmt.Sprintf("$%d", i)
	}
	return "?"
}

// columnType is a column type in SQLite's terms in this dialect's.
func (d Dialect) columnType(sqliteType string) string {
	if d.Kind == "sqlite" {
		return sqliteType
	}
	upper := strings.ToUpper(sqliteType)
	key := strings.Contains(upper, "PRIMARY KEY")
	first := "TEXT"
	if f := strings.Fields(upper); len(f) > 0 {
		first = f[0]
	}
	var base string
	switch {
	case first == "INTEGER" || first == "INT" || first == "BIGINT":
		base = d.types[0]
	case first == "REAL" || first == "FLOAT" || first == "DOUBLE":
		base = d.types[1]
	case first == "BLOB":
		base = d.types[2]
	case key:
		base = d.types[4]
	default:
		base = d.types[3]
	}
	if key {
		return base + " PRIMARY KEY"
	}
	return base
}

// tableOptions follows `create table t (…)`: MySQL's charset and
// collation (UTF-8 text compared byte for byte, as SQLite does).
func (d Dialect) tableOptions() string {
	if d.Kind == "mysql" {
		return " default charset=utf8mb4 collate=utf8mb4_bin"
	}
	return ""
}

// createTableSQL is `create table` for columns with SQLite types.
func (d Dialect) createTableSQL(table string, columns, types []string) string {
	cols := make([]string, len(columns))
	for i, c := range columns {
		t := "TEXT"
		if i < len(types) {
			t = types[i]
		}
		cols[i] = d.quoteIdent(c) + " " + d.columnType(t)
	}
	return "create table " + d.quoteIdent(table) + " (" + strings.Join(cols, ", ") + ")" + d.tableOptions()
}

// SessionSQL is what a lookup connection of this dialect runs when it
// opens, in order: on PostgreSQL standard strings (a backslash in a
// literal is a character, as the guard reads it), the helper functions as
// temporary functions, the server-side statement timeout, and read-only
// transactions; on MySQL NO_BACKSLASH_ESCAPES and PIPES_AS_CONCAT, read-only
// transactions (the statement timeout is set apart: MariaDB and MySQL name
// it differently). Open and OpenConfig run it on every connection; an
// embedder using FromDB runs it in its own pool's connect hook.
func (d Dialect) SessionSQL(statementTimeout time.Duration) []string {
	ms := max(statementTimeout.Milliseconds(), 1)
	switch d.Kind {
	case "postgres":
		return []string{
			"SET standard_conforming_strings = on",
			"SET backslash_quote = off",
			pgHelpersSQL,
			fmt.Sprintf("SET statement_timeout = %d", ms),
			"SET default_transaction_read_only = on",
		}
	case "mysql":
		return []string{
			"SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES,PIPES_AS_CONCAT')",
			"SET SESSION TRANSACTION READ ONLY",
		}
	}
	return nil
}

// mysqlHelper writes a helper call as an inline MySQL expression with the
// guest's results (host/knowledge/src/mysql.rs helper_expression).
// Arguments may be repeated, so they must be free of side effects. One
// difference remains: MySQL cannot tell the text '123' from the number
// 123, so digits-only text counts as a numeric address.
func mysqlHelper(name string, args []string) string {
	arg := func(i int) string {
		if i < len(args) {
			return "(" + args[i] + ")"
		}
		return "(NULL)"
	}
	ip4 := func(x string) string {
		return fmt.Sprintf("(CASE WHEN %[1]s REGEXP '^[[:space:]]*[0-9]{1,3}([.][0-9]{1,3}){3}[[:space:]]*$' THEN INET_ATON(TRIM(%[1]s)) "+
			"WHEN %[1]s REGEXP '^[0-9]+$' AND %[1]s + 0 <= 4294967295 THEN %[1]s + 0 END)", x)
	}
	cidr := func(x string, f func(net, bits string) string) string {
		net := fmt.Sprintf("INET_ATON(SUBSTRING_INDEX(TRIM(%s), '/', 1))", x)
		bits := fmt.Sprintf("CAST(SUBSTRING_INDEX(TRIM(%s), '/', -1) AS UNSIGNED)", x)
		return fmt.Sprintf("(CASE WHEN %s REGEXP '^[[:space:]]*[0-9]{1,3}([.][0-9]{1,3}){3}/[0-9]{1,2}[[:space:]]*$' "+
			"AND %s <= 32 AND %s IS NOT NULL THEN %s END)", x, bits, net, f(net, bits))
	}
	lo := func(net, bits string) string { return fmt.Sprintf("%s & (4294967295 ^ (4294967295 >> %s))", net, bits) }
	hi := func(net, bits string) string { return fmt.Sprintf("%s | (4294967295 >> %s)", net, bits) }
	switch name {
	case "ip4_int":
		return fmt.Sprintf("COALESCE(%s, 0)", ip4(arg(0)))
	case "ip4_between":
		return fmt.Sprintf("COALESCE(%s BETWEEN %s AND %s, 0)", ip4(arg(0)), ip4(arg(1)), ip4(arg(2)))
	case "cidr4_min":
		return cidr(arg(0), lo)
	case "cidr4_max":
		return cidr(arg(0), hi)
	case "cidr4_contains":
		return fmt.Sprintf("COALESCE(%s BETWEEN %s AND %s, 0)", ip4(arg(0)), cidr(arg(1), lo), cidr(arg(1), hi))
	case "ip4_text":
		x := arg(0)
		return fmt.Sprintf("(CASE WHEN %[1]s REGEXP '^[0-9]+$' AND %[1]s + 0 <= 4294967295 THEN INET_NTOA(%[1]s) END)", x)
	case "trim_quotes":
		x := arg(0)
		return fmt.Sprintf("(CASE WHEN CHAR_LENGTH(%[1]s) >= 2 AND LEFT(%[1]s, 1) IN ('\"', '''') AND RIGHT(%[1]s, 1) = LEFT(%[1]s, 1) "+
			"THEN SUBSTRING(%[1]s, 2, CHAR_LENGTH(%[1]s) - 2) ELSE %[1]s END)", x)
	case "ip_key":
		a := fmt.Sprintf("INET6_ATON(TRIM(%s))", arg(0))
		return fmt.Sprintf("(CASE WHEN LENGTH(%[1]s) = 4 THEN CONCAT('00000000000000000000ffff', LOWER(HEX(%[1]s))) "+
			"WHEN LENGTH(%[1]s) = 16 THEN LOWER(HEX(%[1]s)) END)", a)
	}
	return name + "(" + strings.Join(args, ", ") + ")"
}
