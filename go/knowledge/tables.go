package knowledge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	omlet "example.invalid/omlet/go"
)

// Table is one table given in memory: its columns, their SQLite types
// (INTEGER, REAL, NUMERIC, TEXT, BLOB and the other names a knowdb's
// `types` accepts; missing ones are TEXT) and its rows in order.
type Table struct {
	Columns []string
	Types   []string
	Rows    [][]omlet.Cell
}

// TablesFromJSON reads the conformance corpus's `knowledge` JSON,
// `{"tables": {"t": {"columns": [...], "types": [...], "rows": [[...]]}}}`:
// integers become INTEGER cells, other numbers REAL, true and false 1 and
// 0, arrays and objects their JSON text (as the Rust CLI's
// tables_from_json).
func TablesFromJSON(data []byte) (map[string]Table, error) {
	var spec struct {
		Tables map[string]struct {
			Columns []string            `json:"columns"`
			Types   []string            `json:"types"`
			Rows    [][]json.RawMessage `json:"rows"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("knowledge: %w", err)
	}
	out := make(map[string]Table, len(spec.Tables))
	for name, t := range spec.Tables {
		rows := make([][]omlet.Cell, len(t.Rows))
		for i, r := range t.Rows {
			rows[i] = make([]omlet.Cell, len(r))
			for j, raw := range r {
				c, err := jsonCell(raw)
				if err != nil {
					return nil, fmt.Errorf("table %s: row %d: %w", name, i+1, err)
				}
				rows[i][j] = c
			}
		}
		out[name] = Table{Columns: t.Columns, Types: t.Types, Rows: rows}
	}
	return out, nil
}

func jsonCell(raw json.RawMessage) (omlet.Cell, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return null, err
	}
	switch x := v.(type) {
	case nil:
		return null, nil
	case bool:
		if x {
			return omlet.Cell{Kind: omlet.CellInteger, Int: 1}, nil
		}
		return omlet.Cell{Kind: omlet.CellInteger, Int: 0}, nil
	case json.Number:
		if i, err := strconv.ParseInt(x.String(), 10, 64); err == nil {
			return omlet.Cell{Kind: omlet.CellInteger, Int: i}, nil
		}
		f, _ := strconv.ParseFloat(x.String(), 64)
		return omlet.Cell{Kind: omlet.CellReal, Real: f}, nil
	case string:
		return omlet.Cell{Kind: omlet.CellText, Text: x}, nil
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return null, err
	}
	return omlet.Cell{Kind: omlet.CellText, Text: compact.String()}, nil
}

// FromTables makes an in-memory SQLite provider holding tables (with the
// default options: any table may be read). Table names must be lower-case
// identifiers, column names identifiers, types those a knowdb accepts.
func FromTables(ctx context.Context, tables map[string]Table) (*Provider, error) {
	return FromTablesWith(ctx, tables, Options{})
}

// FromTablesWith is FromTables with options.
func FromTablesWith(ctx context.Context, tables map[string]Table, opts Options) (*Provider, error) {
	p, err := openSQLiteMemory(ctx, opts.withDefaults())
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(tables))
	for n := range tables {
		names = append(names, n)
	}
	sort.Strings(names)
	l := loader{db: p.db, d: p.dialect}
	for _, name := range names {
		t := tables[name]
		types, err := checkTable(name, t.Columns, t.Types)
		if err == nil {
			err = l.loadTable(ctx, name, t.Columns, types, t.Rows)
		}
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("knowledge: %w", err)
		}
	}
	p.Seal()
	return p, nil
}

// checkTable checks a table given in memory and gives its SQLite types.
func checkTable(name string, columns, types []string) ([]string, error) {
	if !isTableName(name) {
		return nil, fmt.Errorf("table name `%s` is refused: a table name must be a lower-case identifier ([a-z_][a-z0-9_]*, at most 63 bytes)", name)
	}
	for _, c := range columns {
		if !isColumnName(c) || len(c) > 63 {
			return nil, fmt.Errorf("table %s: column name `%s` is refused: a column name must be an identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes)", name, c)
		}
	}
	if len(types) > len(columns) {
		return nil, fmt.Errorf("table %s: %d types for %d columns", name, len(types), len(columns))
	}
	out := make([]string, len(types))
	for i, t := range types {
		ct, ok := columnType(t)
		if !ok {
			return nil, fmt.Errorf("table %s: column type `%s` is not one omlet knows (%s)", name, t, knownTypes)
		}
		out[i] = ct
	}
	return out, nil
}

// loader creates and fills tables of a database, outside the lookups'
// allow-list.
type loader struct {
	db *sql.DB
	d  Dialect
}

// rowsPerStatement is how many rows of width cells one insert carries.
func rowsPerStatement(width int) int {
	return min(max(30_000/max(width, 1), 1), 1000)
}

func (l loader) insertSQL(table string, width, rows int) string {
	tuples := make([]string, rows)
	for r := range rows {
		ph := make([]string, width)
		for i := range width {
			ph[i] = l.d.placeholder(r*width + i + 1)
		}
		tuples[r] = "(" + strings.Join(ph, ", ") + ")"
	}
	return "insert into " + l.d.quoteIdent(table) + " values " + strings.Join(tuples, ", ")
}

func rowArgs(rows [][]omlet.Cell) []any {
	var out []any
	for _, r := range rows {
		for _, c := range r {
			out = append(out, arg(c, paramAny))
		}
	}
	return out
}

// loadTable creates table and inserts rows, all or nothing.
func (l loader) loadTable(ctx context.Context, table string, columns, types []string, rows [][]omlet.Cell) error {
	if err := l.exec(ctx, l.d.createTableSQL(table, columns, types)); err != nil {
		return err
	}
	_, _, err := l.insertRows(ctx, table, len(columns), rows, false)
	return err
}

// insertRows inserts rows into table. With skipBad a row the database
// rejects is skipped and counted; without, the rows go in all or nothing
// and the error names the row at fault.
func (l loader) insertRows(ctx context.Context, table string, width int, rows [][]omlet.Cell, skipBad bool) (int, int, error) {
	for n, r := range rows {
		if len(r) != width {
			return 0, 0, fmt.Errorf("table %s, row %d: %d cells for %d columns", table, n+1, len(r), width)
		}
	}
	one := l.insertSQL(table, width, 1)
	if skipBad {
		inserted, skipped := 0, 0
		for _, r := range rows {
			if _, err := l.db.ExecContext(ctx, one, rowArgs([][]omlet.Cell{r})...); err != nil {
				skipped++
				continue
			}
			inserted++
		}
		return inserted, skipped, nil
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback()
	per := rowsPerStatement(width)
	for start := 0; start < len(rows); start += per {
		chunk := rows[start:min(start+per, len(rows))]
		if _, err := tx.ExecContext(ctx, l.insertSQL(table, width, len(chunk)), rowArgs(chunk)...); err != nil {
			tx.Rollback()
			// Row by row, to name the row at fault.
			tx2, err2 := l.db.BeginTx(ctx, nil)
			if err2 == nil {
				defer tx2.Rollback()
				for n, r := range chunk {
					if _, e := tx2.ExecContext(ctx, one, rowArgs([][]omlet.Cell{r})...); e != nil {
						return 0, 0, fmt.Errorf("table %s, row %d: %w", table, start+n+1, e)
					}
				}
			}
			return 0, 0, fmt.Errorf("table %s: %w", table, err)
		}
	}
	return len(rows), 0, tx.Commit()
}

// exec runs administrative SQL (one statement or several).
func (l loader) exec(ctx context.Context, query string) error {
	if _, err := l.db.ExecContext(ctx, query); err != nil {
		return fmt.Errorf("`%s`: %w", strings.TrimSpace(query), err)
	}
	return nil
}

// count is the number of rows of table.
func (l loader) count(ctx context.Context, table string) (int64, error) {
	var n int64
	err := l.db.QueryRowContext(ctx, "select count(*) from "+l.d.quoteIdent(table)).Scan(&n)
	return n, err
}

// indexName names omlet's index on columns of table: omlet_TABLE_COLS, or
// with a hash in place of the columns past 63 bytes.
func indexName(table string, columns []string) string {
	plain := "omlet_" + table + "_" + strings.Join(columns, "_")
	if len(plain) <= 63 {
		return plain
	}
	sum := sha256.Sum256([]byte(plain))
	t := []rune(table)
	if len(t) > 40 {
		t = t[:40]
	}
	return "omlet_" + string(t) + "_" + hex.EncodeToString(sum[:6])
}

// createIndex creates an index on columns (plain identifiers) of table
// unless one of its name exists.
func (l loader) createIndex(ctx context.Context, table string, columns []string) error {
	q := fmt.Sprintf("create index if not exists %s on %s (%s)", indexName(table, columns), table, strings.Join(columns, ", "))
	return l.exec(ctx, q)
}
