package knowledge

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"sync/atomic"

	omlet "example.invalid/omlet/go"
	"modernc.org/sqlite"
)

// sqlitePragmas are the pragmas SQL run on omlet's SQLite connections
// (a knowdb's create and insert files) may run (guard/script.rs PRAGMAS).
var sqlitePragmas = []string{
	"analysis_limit", "application_id", "automatic_index", "cache_size", "case_sensitive_like",
	"defer_foreign_keys", "encoding", "foreign_key_check", "foreign_key_list", "foreign_keys", "index_info",
	"index_list", "index_xinfo", "integrity_check", "journal_mode", "optimize", "quick_check",
	"recursive_triggers", "synchronous", "table_info", "table_list", "table_xinfo", "temp_store", "user_version",
}

// sqliteDeniedFunctions may not be called: native code, pointers, files.
var sqliteDeniedFunctions = []string{"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit", "fsdir"}

// sqliteModules are the virtual-table modules a knowdb may create.
var sqliteModules = []string{"fts3", "fts4", "fts5", "rtree", "rtree_i32", "geopoly"}

// sqliteLimitAttached is SQLITE_LIMIT_ATTACHED.
const sqliteLimitAttached = 7

// sqliteDriver is omlet's own modernc.org/sqlite driver: the helper
// functions are registered on it alone, not on the process's "sqlite".
var sqliteDriver = func() *sqlite.Driver {
	d := &sqlite.Driver{}
	if err := RegisterHelpers(d); err != nil {
		panic(err)
	}
	return d
}()

// RegisterHelpers registers the OML helper functions on a
// modernc.org/sqlite driver (for an embedder's own SQLite pool given to
// FromDB), computing what the guest computes (Helper).
func RegisterHelpers(d *sqlite.Driver) error {
	for _, name := range HelperFunctions {
		name := name
		err := d.RegisterFunction(name, &sqlite.FunctionImpl{
			NArgs:         int32(helperArity(name)),
			Deterministic: true,
			Scalar: func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
				cells := make([]omlet.Cell, len(args))
				for i, a := range args {
					switch v := a.(type) {
					case int64:
						cells[i] = omlet.Cell{Kind: omlet.CellInteger, Int: v}
					case float64:
						cells[i] = omlet.Cell{Kind: omlet.CellReal, Real: v}
					case string:
						cells[i] = omlet.Cell{Kind: omlet.CellText, Text: v}
					case []byte:
						cells[i] = omlet.Cell{Kind: omlet.CellText, Text: lossyText(v)}
					}
				}
				switch c := Helper(name, cells); c.Kind {
				case omlet.CellInteger:
					return c.Int, nil
				case omlet.CellReal:
					return c.Real, nil
				case omlet.CellText:
					return c.Text, nil
				case omlet.CellBlob:
					return c.Blob, nil
				}
				return nil, nil
			},
		})
		if err != nil {
			return fmt.Errorf("cannot register SQL function %s: %w", name, err)
		}
	}
	return nil
}

// sqliteConnector opens confined connections to one database.
type sqliteConnector struct {
	dsn    string
	sealed *atomic.Bool
}

func (c *sqliteConnector) Driver() driver.Driver { return sqliteDriver }

func (c *sqliteConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := sqliteDriver.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	if err := confine(ctx, conn, c.sealed); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// confine keeps a connection to its own database, whatever SQL it runs:
// no database may be attached (which also stops VACUUM INTO), and an
// authorizer refuses ATTACH, DETACH, pragmas outside sqlitePragmas, the
// functions of sqliteDeniedFunctions, virtual tables of other modules,
// writes outside main and temp and, once sealed, every write.
func confine(ctx context.Context, conn driver.Conn, sealed *atomic.Bool) error {
	reg, ok := conn.(sqlite.AuthorizerRegisterer)
	if !ok {
		return fmt.Errorf("sqlite: the driver has no authorizer")
	}
	err := reg.RegisterAuthorizer(func(action sqlite.AuthorizerActionCode, a1, a2, schema, _ string) sqlite.AuthorizerReturnCode {
		deny := false
		switch action {
		case sqlite.AuthAttach, sqlite.AuthDetach:
			deny = true
		case sqlite.AuthPragma:
			deny = !among(a1, sqlitePragmas)
		case sqlite.AuthFunction:
			deny = among(a2, sqliteDeniedFunctions)
		case sqlite.AuthCreateVTable, sqlite.AuthDropVTable:
			deny = !among(a2, sqliteModules) || sealed.Load()
		case sqlite.AuthInsert, sqlite.AuthUpdate, sqlite.AuthDelete, sqlite.AuthCreateTable, sqlite.AuthCreateIndex,
			sqlite.AuthCreateTrigger, sqlite.AuthCreateView, sqlite.AuthDropTable, sqlite.AuthDropIndex,
			sqlite.AuthDropTrigger, sqlite.AuthDropView, sqlite.AuthAlterTable, sqlite.AuthReindex, sqlite.AuthAnalyze,
			sqlite.AuthCreateTempTable, sqlite.AuthCreateTempIndex, sqlite.AuthCreateTempTrigger, sqlite.AuthCreateTempView,
			sqlite.AuthDropTempTable, sqlite.AuthDropTempIndex, sqlite.AuthDropTempTrigger, sqlite.AuthDropTempView:
			deny = sealed.Load() || (schema != "" && !is(schema, "main") && !is(schema, "temp"))
		}
		if deny {
			return sqlite.AuthorizerDeny
		}
		return sqlite.AuthorizerOK
	})
	if err != nil {
		return err
	}
	// sqlite.Limit takes a *sql.Conn: a pool of this one connection, which
	// closing leaves open, gives one.
	one := sql.OpenDB(&oneConn{conn: conn})
	defer one.Close()
	c, err := one.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = sqlite.Limit(c, sqliteLimitAttached, 0)
	return err
}

// oneConn is a connector of one existing connection, which it never closes.
type oneConn struct{ conn driver.Conn }

func (o *oneConn) Connect(context.Context) (driver.Conn, error) { return keepOpen{o.conn}, nil }
func (o *oneConn) Driver() driver.Driver                        { return sqliteDriver }

type keepOpen struct{ driver.Conn }

func (k keepOpen) Close() error                       { return nil }
func (k keepOpen) Unwrap() driver.Conn                { return k.Conn }
func (k keepOpen) ResetSession(context.Context) error { return nil }

// sqliteLanes is how many connections look things up in SQLite.
const sqliteLanes = 4

var memoryDatabases atomic.Uint64

// openSQLiteMemory is a fresh in-memory database (SQLite's memdb VFS),
// shared by the provider's connections, kept alive by one pinned
// connection until Close.
func openSQLiteMemory(ctx context.Context, opts Options) (*Provider, error) {
	dsn := fmt.Sprintf("file:/omlet-%d-%d?vfs=memdb", os.Getpid(), memoryDatabases.Add(1))
	return openSQLite(ctx, dsn, opts, true)
}

// openSQLiteFile is a database file, created if missing.
func openSQLiteFile(ctx context.Context, path string, opts Options) (*Provider, error) {
	return openSQLite(ctx, path, opts, false)
}

func openSQLite(ctx context.Context, dsn string, opts Options, pin bool) (*Provider, error) {
	sealed := new(atomic.Bool)
	db := sql.OpenDB(&sqliteConnector{dsn: dsn, sealed: sealed})
	db.SetMaxOpenConns(sqliteLanes + 1)
	db.SetMaxIdleConns(sqliteLanes + 1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	p := newProvider(db, SQLite, opts)
	p.sealed, p.ownsDB = sealed, true
	if pin {
		c, err := db.Conn(ctx)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("knowledge: sqlite: %w", err)
		}
		p.closers = append(p.closers, c.Close)
	} else if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("knowledge: sqlite: %w", err)
	}
	return p, nil
}

// Seal makes an SQLite provider that omlet opened refuse every write
// from now on, whatever SQL reaches it (lookups are read-only by the
// guard already; this makes sure). LoadKnowdb, FromTables and
// OpenConfig seal what they load. It does nothing on other providers.
func (p *Provider) Seal() {
	if p.sealed != nil {
		p.sealed.Store(true)
	}
}
