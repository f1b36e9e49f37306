package knowledge

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	omlet "example.invalid/omlet/go"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// Query runs statement with params bound in order: from the shared cache,
// else the database (one query for concurrent misses of one key), under
// the query timeout.
func (b *bound) Query(ctx context.Context, statement uint32, params []omlet.Cell) (omlet.Answer, *omlet.QueryError) {
	p := b.p
	if int(statement) >= len(b.stmts) {
		return omlet.Answer{}, &omlet.QueryError{Code: omlet.UnknownStatement,
			Message: fmt.Sprintf("no statement %d (the rule has %d)", statement, len(b.stmts))}
	}
	st := b.stmts[statement]
	args := make([]omlet.Cell, len(st.order))
	for i, k := range st.order {
		if k < len(params) {
			args[i] = params[k]
		}
	}
	if p.cache == nil {
		return p.fetch(ctx, st, args)
	}
	var sb strings.Builder
	sb.WriteString(strconv.FormatUint(p.Generation(), 10))
	sb.WriteByte(0)
	sb.WriteString(st.sql)
	sb.WriteByte(0)
	encodeKey(&sb, args)
	key := sb.String()
	if a, ok := p.cache.get(key); ok {
		return a, nil
	}
	a, qe, ok := p.cache.once(key, ctx.Done, func() (omlet.Answer, *omlet.QueryError) {
		a, qe := p.fetch(ctx, st, args)
		if qe == nil && (a.Found || !p.opts.Cache.NoNegative) {
			p.cache.put(key, a, p.opts.Cache.MaxEntryBytes)
		}
		return a, qe
	})
	if !ok {
		return omlet.Answer{}, p.failure(st, omlet.Unavailable, "the lookup was cancelled while another made its query")
	}
	return a, qe
}

// fetch is one database round trip under the query timeout.
func (p *Provider) fetch(parent context.Context, st *boundStatement, params []omlet.Cell) (omlet.Answer, *omlet.QueryError) {
	ctx, cancel := context.WithTimeout(parent, p.opts.QueryTimeout)
	defer cancel()
	args := make([]any, len(params))
	for i, c := range params {
		ty := paramAny
		if i < len(st.types) {
			ty = st.types[i]
		}
		args[i] = arg(c, ty)
	}
	rows, err := st.stmt.QueryContext(ctx, args...)
	if err != nil {
		return omlet.Answer{}, p.classify(parent, ctx, st, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return omlet.Answer{}, p.classify(parent, ctx, st, err)
		}
		return p.answer(false, nil), nil
	}
	n := len(st.columns)
	if cols, err := rows.Columns(); err == nil {
		n = len(cols)
	}
	vals := make([]any, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return omlet.Answer{}, p.classify(parent, ctx, st, err)
	}
	row := make([]omlet.Cell, n)
	var size int64
	for i, v := range vals {
		row[i] = cellOf(v, p.dialect.Kind != "mysql")
		size += cellBytes(row[i])
	}
	if size > p.opts.MaxAnswerBytes {
		return omlet.Answer{}, p.failure(st, omlet.Failed, (&LimitError{Limit: "lookup answer bytes",
			Message: fmt.Sprintf("the answer takes more than %d bytes", p.opts.MaxAnswerBytes)}).Error())
	}
	return p.answer(true, row), nil
}

func (p *Provider) answer(found bool, row []omlet.Cell) omlet.Answer {
	return omlet.Answer{Found: found, Row: row, Cacheable: p.cache != nil && !p.opts.Cache.NoGuest}
}

// failure is a failed lookup naming its statement, fatal when the policy
// says so.
func (p *Provider) failure(st *boundStatement, code omlet.QueryErrorCode, message string) *omlet.QueryError {
	s := st.source
	return &omlet.QueryError{
		Code:    code,
		Message: fmt.Sprintf("%s:%d:%d: lookup `%s`: %s", s.File, s.Line, s.Column, s.SQL, Redact(message)),
		Fatal:   p.opts.OnLookupError == Fail,
	}
}

// classify turns a database error into a QueryError: the timeout (omlet's
// or the server's statement timeout), a connection that could not be had
// or broke (unavailable), or a refusal (failed).
func (p *Provider) classify(parent, ctx context.Context, st *boundStatement, err error) *omlet.QueryError {
	if ctx.Err() == context.DeadlineExceeded && parent.Err() == nil {
		return p.failure(st, omlet.Timeout, fmt.Sprintf("query timed out after %v", p.opts.QueryTimeout))
	}
	if parent.Err() != nil {
		return p.failure(st, omlet.Unavailable, "the lookup was cancelled: "+parent.Err().Error())
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		if pg.Code == "57014" {
			return p.failure(st, omlet.Timeout, fmt.Sprintf("query timed out after %v (the server's statement_timeout)", p.opts.QueryTimeout))
		}
		if strings.HasPrefix(pg.Code, "08") || strings.HasPrefix(pg.Code, "57P") {
			return p.failure(st, omlet.Unavailable, err.Error())
		}
		return p.failure(st, omlet.Failed, err.Error())
	}
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		if my.Number == 1969 || my.Number == 3024 {
			return p.failure(st, omlet.Timeout, fmt.Sprintf("query timed out after %v (the server's statement time)", p.opts.QueryTimeout))
		}
		return p.failure(st, omlet.Failed, err.Error())
	}
	var netErr net.Error
	var connect *pgconn.ConnectError
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.As(err, &netErr) || errors.As(err, &connect) {
		return p.failure(st, omlet.Unavailable, err.Error())
	}
	return p.failure(st, omlet.Failed, err.Error())
}

// Columns names what statement returns.
func (b *bound) Columns(_ context.Context, statement uint32) ([]string, *omlet.QueryError) {
	if int(statement) >= len(b.stmts) {
		return nil, &omlet.QueryError{Code: omlet.UnknownStatement,
			Message: fmt.Sprintf("no statement %d (the rule has %d)", statement, len(b.stmts))}
	}
	return append([]string(nil), b.stmts[statement].columns...), nil
}

// IntranetNets is the networks intranet_ip calls LAN.
func (b *bound) IntranetNets() []omlet.Network {
	return append([]omlet.Network(nil), b.p.opts.IntranetNets...)
}

// Generation is the provider's.
func (b *bound) Generation() uint64 { return b.p.Generation() }
