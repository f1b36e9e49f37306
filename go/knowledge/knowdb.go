package knowledge

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	omlet "example.invalid/omlet/go"
	"github.com/BurntSushi/toml"
)

// knownTypes lists the column types a knowdb may declare.
const knownTypes = "TEXT, INTEGER, REAL, NUMERIC, BLOB, or INT, BIGINT, SMALLINT, BOOLEAN, FLOAT, DOUBLE, DECIMAL, VARCHAR, CHAR, BYTEA; optionally followed by PRIMARY KEY"

// knowdbTable is one `[[tables]]` entry of a knowdb.toml.
type knowdbTable struct {
	Name         string   `toml:"name"`
	CSV          string   `toml:"csv"`
	Types        []string `toml:"types"`
	Create       string   `toml:"create"`
	Insert       string   `toml:"insert"`
	ExpectedRows *int64   `toml:"expected_rows"`
	OnError      string   `toml:"on_error"`
	Index        []string `toml:"index"`
	line         int
	types        []string
	index        [][]string
}

// isTableName: [a-z_][a-z0-9_]*, at most 63 bytes.
func isTableName(name string) bool {
	if name == "" || len(name) > 63 || !(name[0] == '_' || (name[0] >= 'a' && name[0] <= 'z')) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || (c >= 'a' && c <= 'z') || isDigit(c)) {
			return false
		}
	}
	return true
}

// isColumnName: [A-Za-z_][A-Za-z0-9_]*.
func isColumnName(c string) bool {
	if c == "" || !(isAlpha(c[0]) || c[0] == '_') {
		return false
	}
	for i := 0; i < len(c); i++ {
		if !isIdent(c[i]) {
			return false
		}
	}
	return true
}

// columnType is a knowdb column type as SQLite names it, built from fixed
// words only (knowdb.rs column_type).
func columnType(written string) (string, bool) {
	words := strings.Fields(strings.ToUpper(written))
	if len(words) == 0 {
		return "", false
	}
	first, rest := words[0], words[1:]
	base, size, sized := strings.Cut(first, "(")
	if sized {
		digits, ok := strings.CutSuffix(size, ")")
		if !ok || digits == "" {
			return "", false
		}
		for _, d := range strings.Split(digits, ",") {
			if d == "" || strings.Trim(d, "0123456789") != "" {
				return "", false
			}
		}
		if base != "VARCHAR" && base != "CHAR" && base != "NUMERIC" && base != "DECIMAL" {
			return "", false
		}
	}
	var t string
	switch base {
	case "TEXT", "VARCHAR", "CHAR":
		t = "TEXT"
	case "INTEGER", "INT", "BIGINT", "SMALLINT", "BOOLEAN", "BOOL":
		t = "INTEGER"
	case "REAL", "FLOAT":
		t = "REAL"
	case "DOUBLE":
		if len(rest) > 0 && rest[0] == "PRECISION" {
			rest = rest[1:]
		}
		t = "REAL"
	case "NUMERIC", "DECIMAL":
		t = "NUMERIC"
	case "BLOB", "BYTEA":
		t = "BLOB"
	default:
		return "", false
	}
	switch {
	case len(rest) == 0:
		return t, true
	case len(rest) == 2 && rest[0] == "PRIMARY" && rest[1] == "KEY":
		return t + " PRIMARY KEY", true
	}
	return "", false
}

// tableLines are the lines of each `[[tables]]` entry's name, in order.
func tableLines(text string) []int {
	var out []int
	inTable := false
	for i, line := range strings.Split(text, "\n") {
		l := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(l, "[[") && strings.Contains(l, "tables"):
			out = append(out, i+1)
			inTable = true
		case inTable && strings.HasPrefix(l, "name") && strings.Contains(l, "="):
			out[len(out)-1] = i + 1
			inTable = false
		}
	}
	return out
}

// readKnowdb parses and checks a knowdb.toml's text.
func readKnowdb(path, text string) ([]*knowdbTable, error) {
	var raw map[string]any
	if _, err := toml.Decode(text, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, ok := raw["version"]; ok {
		return nil, fmt.Errorf("%s: a Warp Parse knowdb (version = 2): this provider reads omlet's own layout only ([[tables]] with name, csv, …)", path)
	}
	var spec struct {
		Tables []*knowdbTable `toml:"tables"`
	}
	md, err := toml.Decode(text, &spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if u := md.Undecoded(); len(u) > 0 {
		return nil, fmt.Errorf("%s: unknown key `%s`", path, u[0].String())
	}
	lines := tableLines(text)
	for i, t := range spec.Tables {
		if i < len(lines) {
			t.line = lines[i]
		}
		at := fmt.Sprintf("%s:%d", path, t.line)
		if !isTableName(t.Name) {
			return nil, fmt.Errorf("%s: table name `%s` is refused: a knowdb table name must be a lower-case identifier "+
				"([a-z_][a-z0-9_]*, at most 63 bytes), which every database reads as written", at, t.Name)
		}
		if t.OnError != "" && t.OnError != "fail" && t.OnError != "skip" {
			return nil, fmt.Errorf("%s: table %s: on_error is \"fail\" or \"skip\"", at, t.Name)
		}
		for _, ty := range t.Types {
			ct, ok := columnType(ty)
			if !ok {
				return nil, fmt.Errorf("%s: table %s: column type `%s` is not one omlet knows (%s)", at, t.Name, ty, knownTypes)
			}
			t.types = append(t.types, ct)
		}
		for _, entry := range t.Index {
			var cols []string
			for _, c := range strings.Split(entry, ",") {
				cols = append(cols, strings.TrimSpace(c))
			}
			for _, c := range cols {
				if !isColumnName(c) {
					return nil, fmt.Errorf("%s: table %s: index `%s` is refused: write its columns as identifiers, several separated by commas", at, t.Name, entry)
				}
			}
			t.index = append(t.index, cols)
		}
	}
	return spec.Tables, nil
}

// readCSV reads a knowdb CSV file as the Rust csv crate does by default:
// a header row (trimmed), comma-separated, `"` quotes, every record as
// wide as the header, a UTF-8 byte-order mark ignored, empty lines skipped.
func readCSV(path string, skipBad bool) ([]string, [][]string, error) {
	f, err := openLines(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.LazyQuotes = true
	r.ReuseRecord = false
	header, err := r.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	columns := make([]string, len(header))
	for i, h := range header {
		if i == 0 {
			h = strings.TrimPrefix(h, "\ufeff")
		}
		columns[i] = strings.TrimSpace(h)
	}
	var rows [][]string
	for n := 1; ; n++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if skipBad && errors.As(err, &pe) {
				continue
			}
			return nil, nil, fmt.Errorf("%s record %d: %w", path, n, err)
		}
		rows = append(rows, rec)
	}
	return columns, rows, nil
}

// inferTypes: INTEGER if every non-empty value is an integer, REAL if
// every one is a number, else TEXT.
func inferTypes(n int, rows [][]string) []string {
	out := make([]string, n)
	for i := range n {
		isInt, isReal, any := true, true, false
		for _, r := range rows {
			if i >= len(r) || r[i] == "" {
				continue
			}
			any = true
			_, e1 := strconv.ParseInt(r[i], 10, 64)
			isInt = isInt && e1 == nil && !strings.Contains(r[i], "_")
			_, ok := parseRustFloat(r[i])
			isReal = isReal && ok
		}
		switch {
		case any && isInt:
			out[i] = "INTEGER"
		case any && isReal:
			out[i] = "REAL"
		default:
			out[i] = "TEXT"
		}
	}
	return out
}

// typedRow is a CSV row as cells of the column types: integers and reals
// where they parse, an empty value NULL there, text otherwise.
func typedRow(row, types []string) []omlet.Cell {
	out := make([]omlet.Cell, 0, len(row))
	for i, v := range row {
		t := ""
		if i < len(types) {
			if f := strings.Fields(strings.ToUpper(types[i])); len(f) > 0 {
				t = f[0]
			}
		}
		text := omlet.Cell{Kind: omlet.CellText, Text: v}
		switch t {
		case "INTEGER", "INT", "BIGINT":
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && !strings.Contains(v, "_") {
				out = append(out, omlet.Cell{Kind: omlet.CellInteger, Int: n})
			} else if v == "" {
				out = append(out, null)
			} else {
				out = append(out, text)
			}
		case "REAL", "FLOAT", "DOUBLE":
			if f, ok := parseRustFloat(v); ok {
				out = append(out, omlet.Cell{Kind: omlet.CellReal, Real: f})
			} else if v == "" {
				out = append(out, null)
			} else {
				out = append(out, text)
			}
		default:
			out = append(out, text)
		}
	}
	return out
}

// LoadKnowdb loads a knowdb folder (its knowdb.toml) into a fresh
// in-memory SQLite, as the Rust CLI's --knowdb does: same column types,
// same rows. Lookups may read the knowdb's tables only.
func LoadKnowdb(ctx context.Context, path string) (*Provider, error) {
	return LoadKnowdbWith(ctx, path, Options{})
}

// LoadKnowdbWith is LoadKnowdb with options (opts.Tables, when nil,
// becomes the knowdb's tables).
func LoadKnowdbWith(ctx context.Context, path string, opts Options) (*Provider, error) {
	p, err := openSQLiteMemory(ctx, opts.withDefaults())
	if err != nil {
		return nil, err
	}
	names, err := loadKnowdb(ctx, path, loader{db: p.db, d: p.dialect}, nil)
	if err != nil {
		p.Close()
		return nil, err
	}
	if p.opts.Tables == nil {
		p.opts.Tables = names
	}
	p.Seal()
	return p, nil
}

// loadKnowdb loads every table of the knowdb.toml at path through l, in
// order; the files it names must lie inside its folder or one of roots.
// It returns the names of its tables.
func loadKnowdb(ctx context.Context, path string, l loader, roots []string) ([]string, error) {
	dir := folder(path)
	var allowed []string
	for _, d := range append([]string{dir}, roots...) {
		real, err := filepath.EvalSymlinks(d)
		if err == nil {
			real, err = filepath.Abs(real)
		}
		if err != nil {
			return nil, err
		}
		allowed = append(allowed, real)
	}
	text, err := readText(path, MaxConfigBytes, "knowdb.toml")
	if err != nil {
		return nil, err
	}
	tables, err := readKnowdb(path, text)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range tables {
		at := fmt.Sprintf("%s:%d", path, t.line)
		file := func(key, p string) (string, error) {
			real, err := filepath.EvalSymlinks(filepath.Join(dir, p))
			if err == nil {
				real, err = filepath.Abs(real)
			}
			if err != nil {
				return "", err
			}
			for _, a := range allowed {
				if real == a || strings.HasPrefix(real, a+string(filepath.Separator)) {
					return real, nil
				}
			}
			return "", fmt.Errorf("%s: table %s: %s `%s` is %s, outside the knowdb's folder %s: a knowdb may only read files inside it",
				at, t.Name, key, p, real, allowed[0])
		}
		// A SQL file the table names, read and checked (checkScript); an
		// error running it names it.
		sqlFile := func(key, p string) (string, string, error) {
			real, err := file(key, p)
			if err != nil {
				return "", "", err
			}
			s, err := readText(real, MaxConfigBytes, "knowdb SQL file")
			if err != nil {
				return "", "", err
			}
			// Checked before any of it runs, on every dialect
			// (guard_script.go, as the Rust loader checks it).
			if r := checkScript(s); r != nil {
				return "", "", fmt.Errorf("%s:%d: %w", real, r.line, r)
			}
			return s, real, nil
		}
		skip := t.OnError == "skip"
		if t.Create != "" {
			s, name, err := sqlFile("create", t.Create)
			if err != nil {
				return nil, err
			}
			if err := l.exec(ctx, s); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		if t.CSV != "" {
			real, err := file("csv", t.CSV)
			if err != nil {
				return nil, err
			}
			columns, rows, err := readCSV(real, skip)
			if err != nil {
				return nil, err
			}
			types := t.types
			if t.Types != nil && len(types) != len(columns) {
				return nil, fmt.Errorf("%s: table %s has %d columns but %d types", at, t.Name, len(columns), len(types))
			}
			if t.Types == nil {
				types = inferTypes(len(columns), rows)
			}
			typed := make([][]omlet.Cell, len(rows))
			for i, r := range rows {
				typed[i] = typedRow(r, types)
			}
			if t.Create != "" {
				if _, _, err := l.insertRows(ctx, t.Name, len(columns), typed, skip); err != nil {
					return nil, err
				}
			} else if err := l.loadTable(ctx, t.Name, columns, types, typed); err != nil {
				return nil, err
			}
		} else if t.Create == "" {
			return nil, fmt.Errorf("%s: table %s needs `csv` or `create`", at, t.Name)
		}
		if t.Insert != "" {
			s, name, err := sqlFile("insert", t.Insert)
			if err != nil {
				return nil, err
			}
			if err := l.exec(ctx, s); err != nil && !skip {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		for _, cols := range t.index {
			if err := l.createIndex(ctx, t.Name, cols); err != nil {
				return nil, fmt.Errorf("%s: table %s: %w", at, t.Name, err)
			}
		}
		if t.ExpectedRows != nil {
			got, err := l.count(ctx, t.Name)
			if err != nil {
				return nil, err
			}
			if got != *t.ExpectedRows {
				return nil, fmt.Errorf("%s: table %s has %d rows, expected %d", at, t.Name, got, *t.ExpectedRows)
			}
		}
		names = append(names, t.Name)
	}
	return names, nil
}
