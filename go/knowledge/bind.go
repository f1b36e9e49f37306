package knowledge

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	omlet "example.invalid/omlet/go"
	"github.com/jackc/pgx/v5/stdlib"
)

// boundStatement is one statement bound to the provider: rewritten,
// prepared and described.
type boundStatement struct {
	source  omlet.Statement
	sql     string
	order   []int
	types   []paramType
	columns []string
	stmt    *sql.Stmt
}

// bound is a provider bound to one rule's statements (omlet.Bound).
type bound struct {
	p     *Provider
	stmts []*boundStatement
}

// Bind checks a rule's statements against the provider's policy (the
// guard: grammar, tables, functions, catalog), rewrites them for the
// database and prepares them. It fails with a *StatementError (or a
// *LimitError) naming the first statement refused.
func (p *Provider) Bind(ctx context.Context, statements []omlet.Statement) (omlet.Bound, error) {
	b := &bound{p: p}
	for _, s := range statements {
		st, err := p.bindOne(ctx, s)
		if err != nil {
			b.close()
			return nil, err
		}
		b.stmts = append(b.stmts, st)
	}
	return b, nil
}

// close releases the prepared statements.
func (b *bound) close() {
	for _, s := range b.stmts {
		s.stmt.Close()
	}
}

func (p *Provider) bindOne(ctx context.Context, s omlet.Statement) (*boundStatement, error) {
	refused := func(message, name string) error {
		return &StatementError{File: s.File, Line: s.Line, Column: s.Column, SQL: s.SQL, Message: message, Name: name}
	}
	tooLong := func(message string) error {
		return &LimitError{Limit: "lookup statement bytes", Message: fmt.Sprintf("%s:%d:%d: lookup: %s", s.File, s.Line, s.Column, message)}
	}
	if len(s.SQL) > MaxStatementBytes {
		return nil, tooLong(fmt.Sprintf("%d bytes long; at most %d are read", len(s.SQL), MaxStatementBytes))
	}
	policy := &Policy{Tables: p.opts.Tables, Functions: p.opts.Functions, Database: p.dialect.Kind, Qualified: p.opts.Qualified}
	checked, err := Check(s.SQL, policy)
	if err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			return nil, refused(r.Message, r.Function)
		}
		return nil, refused(err.Error(), "")
	}
	if h := helperMissingIn(checked.Calls, p.dialect.Kind); h != "" {
		return nil, refused(fmt.Sprintf("`%s` is applied to a column, which %s cannot compute: keep the keys in columns of the "+
			"table (made when the data is, or by a knowdb loaded on SQLite, which has every helper) "+
			"and compare them with helpers of values, such as ip_key(read(ip))", h, p.dialect.Kind), "")
	}
	rewritten, err := p.dialect.RewriteSQL(s.SQL)
	if err != nil {
		if isRewriteLimit(err) {
			return nil, tooLong(err.Error())
		}
		return nil, refused(err.Error(), "")
	}
	text, order := rewritePlaceholders(rewritten, s.Params, p.dialect.Placeholders)
	stmt, err := p.db.PrepareContext(ctx, text)
	if err != nil {
		message, name := p.unknownColumn(ctx, checked, Redact(err.Error()))
		return nil, refused(message, name)
	}
	columns, types, err := p.describe(ctx, text, len(order))
	if err != nil {
		stmt.Close()
		message, name := p.unknownColumn(ctx, checked, Redact(err.Error()))
		return nil, refused(message, name)
	}
	return &boundStatement{source: s, sql: text, order: order, types: types, columns: columns, stmt: stmt}, nil
}

// describe gives the columns a statement returns and, on PostgreSQL
// through pgx, the types of its parameters.
func (p *Provider) describe(ctx context.Context, text string, params int) ([]string, []paramType, error) {
	if p.pgx {
		conn, err := p.db.Conn(ctx)
		if err != nil {
			return nil, nil, err
		}
		defer conn.Close()
		var columns []string
		var types []paramType
		err = conn.Raw(func(dc any) error {
			c, ok := dc.(*stdlib.Conn)
			if !ok {
				return fmt.Errorf("not a pgx connection: %T", dc)
			}
			sd, err := c.Conn().Prepare(ctx, "", text)
			if err != nil {
				return err
			}
			for _, f := range sd.Fields {
				columns = append(columns, f.Name)
			}
			for _, oid := range sd.ParamOIDs {
				types = append(types, pgParamType(oid))
			}
			return nil
		})
		return columns, types, err
	}
	nulls := make([]any, params)
	// The statement as a derived table of no rows: its columns, without
	// running it.
	columns, err := p.columnsOf(ctx, "select * from ("+text+") omlet_describe limit 0", nulls)
	if err != nil {
		columns, err = p.columnsOf(ctx, text, nulls)
	}
	return columns, nil, err
}

// columnsOf runs query and gives the names of its columns.
func (p *Provider) columnsOf(ctx context.Context, query string, args []any) ([]string, error) {
	rows, err := p.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return rows.Columns()
}

// unknownColumn is the database's message with the columns the table has
// and the nearest to the first named column it lacks (also returned).
func (p *Provider) unknownColumn(ctx context.Context, c *Checked, message string) (string, string) {
	columns, err := p.columnsOf(ctx, "select * from "+c.Table+" limit 0", nil)
	if err != nil || len(columns) == 0 {
		return message, ""
	}
	unknown := ""
	for _, n := range c.Named {
		has := false
		for _, col := range columns {
			has = has || strings.EqualFold(col, n)
		}
		if !has {
			unknown = n
			break
		}
	}
	near := ""
	if unknown != "" {
		if n, ok := nearest(unknown, columns); ok {
			near = fmt.Sprintf("; did you mean `%s` for `%s`?", n, unknown)
		}
	}
	return fmt.Sprintf("%s (the table `%s` has the columns %s)%s", message, c.Table, strings.Join(columns, ", "), near), unknown
}

// isPgx says whether db's driver is pgx's stdlib driver.
func isPgx(db *sql.DB) bool {
	_, ok := db.Driver().(*stdlib.Driver)
	return ok
}
