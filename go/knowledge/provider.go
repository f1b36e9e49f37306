package knowledge

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	omlet "example.invalid/omlet/go"
)

// Provider answers lookups from one SQL database. It implements
// omlet.Knowledge; its Bound values serve many goroutines at once.
type Provider struct {
	db      *sql.DB
	dialect Dialect
	opts    Options
	cache   *answerCache // nil in bypass mode
	gen     atomic.Uint64
	born    time.Time
	// pgx: PostgreSQL statements are described through pgx, which gives
	// the parameter types to coerce to.
	pgx bool
	// sealed, on SQLite providers omlet opened: once set, the connections
	// refuse every write (the authorizer reads it).
	sealed *atomic.Bool
	// closers run at Close, after the pool (a pinned connection of an
	// in-memory SQLite).
	closeOnce sync.Once
	closers   []func() error
	ownsDB    bool
}

// FromDB makes a provider over an embedder's own pool, of dialect
// SQLite, Postgres or MySQL. The pool's connections are used as they are:
// the session settings omlet's own connections get (Dialect.SessionSQL:
// standard strings, read-only transactions, the helper functions on
// PostgreSQL, NO_BACKSLASH_ESCAPES on MySQL) are the embedder's to run in
// its connect hook, and on SQLite the helper functions exist only if its
// driver registered them (RegisterHelpers does, on a modernc.org/sqlite
// Driver). Close does not close db.
func FromDB(db *sql.DB, dialect Dialect, opts Options) (*Provider, error) {
	switch dialect.Kind {
	case "sqlite", "postgres", "mysql":
	default:
		return nil, fmt.Errorf("knowledge: unknown dialect %q", dialect.Kind)
	}
	p := newProvider(db, dialect, opts)
	p.pgx = dialect.Kind == "postgres" && isPgx(db)
	return p, nil
}

func newProvider(db *sql.DB, dialect Dialect, opts Options) *Provider {
	opts = opts.withDefaults()
	p := &Provider{db: db, dialect: dialect, opts: opts, born: time.Now()}
	p.gen.Store(1)
	if opts.Cache.Mode == CacheShared {
		p.cache = newAnswerCache(opts.Cache.Capacity, opts.Cache.MaxBytes, opts.Cache.TTL)
	}
	return p
}

// Open connects to the database url names: `sqlite::memory:` (an empty
// in-memory database), `sqlite://FILE`, `postgres://…` (or
// `postgresql://`), `mysql://…` (or `mariadb://`). Its lookup connections
// run Dialect.SessionSQL. Errors never show the URL's password.
func Open(ctx context.Context, url string, opts Options) (*Provider, error) {
	opts = opts.withDefaults()
	switch {
	case url == "sqlite::memory:":
		return openSQLiteMemory(ctx, opts)
	case strings.HasPrefix(url, "sqlite://"):
		return openSQLiteFile(ctx, strings.TrimPrefix(url, "sqlite://"), opts)
	case strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://"):
		db, err := openPostgres(ctx, url, opts, true)
		if err != nil {
			return nil, err
		}
		p := newProvider(db, Postgres, opts)
		p.pgx, p.ownsDB = true, true
		return p, nil
	case strings.HasPrefix(url, "mysql://") || strings.HasPrefix(url, "mariadb://"):
		db, err := openMySQL(ctx, url, opts, true)
		if err != nil {
			return nil, err
		}
		p := newProvider(db, MySQL, opts)
		p.ownsDB = true
		return p, nil
	}
	return nil, fmt.Errorf("knowledge: unsupported knowledge URL `%s`: use sqlite::memory:, sqlite://FILE, postgres://… or mysql://…", Redact(url))
}

// DB is the provider's pool.
func (p *Provider) DB() *sql.DB { return p.db }

// Dialect is the provider's dialect.
func (p *Provider) Dialect() Dialect { return p.dialect }

// Options are the provider's settings, defaults filled in.
func (p *Provider) Options() Options { return p.opts }

// Close closes the pool (when the provider opened it).
func (p *Provider) Close() error {
	var err error
	p.closeOnce.Do(func() {
		if p.ownsDB {
			err = p.db.Close()
		}
		for _, c := range p.closers {
			if e := c(); err == nil {
				err = e
			}
		}
	})
	return err
}

// Generation changes at every Reload and, with a cache TTL, every TTL
// period: guests then drop the answers they kept.
func (p *Provider) Generation() uint64 {
	base := p.gen.Load()
	if ttl := p.opts.Cache.TTL; ttl > 0 {
		epoch := uint64(time.Since(p.born) / ttl)
		return base<<32 | epoch&0xFFFF_FFFF
	}
	return base
}

// Reload marks everything cached stale: the next lookups ask the database.
func (p *Provider) Reload() {
	p.gen.Add(1)
	if p.cache != nil {
		p.cache.clear()
	}
}

// CachedEntries is the number of answers in the shared cache and their
// weight in bytes, as the cache counts them.
func (p *Provider) CachedEntries() (int, int64) {
	if p.cache == nil {
		return 0, 0
	}
	return p.cache.size()
}

// StatementError is a lookup statement refused at Bind.
type StatementError struct {
	File         string
	Line, Column uint32
	// SQL is the lookup as the rule's component gave it.
	SQL string
	// Message says why.
	Message string
	// Name is the name the error is about (a column, a function), if any.
	Name string
}

func (e *StatementError) Error() string {
	return fmt.Sprintf("%s:%d:%d: lookup `%s` fails on the knowledge base: %s", e.File, e.Line, e.Column, e.SQL, e.Message)
}

// LimitError is a limit reached (its text as the Rust host's
// `limit reached (<limit>): …`).
type LimitError struct {
	Limit   string
	Message string
}

func (e *LimitError) Error() string { return fmt.Sprintf("limit reached (%s): %s", e.Limit, e.Message) }

// The provider is a knowledge provider of the omlet runtime.
var _ omlet.Knowledge = (*Provider)(nil)
