package knowledge

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// serverErr is a connection error without the URL's password.
func serverErr(kind string, err error) error {
	return fmt.Errorf("knowledge: %s: %s", kind, Redact(err.Error()))
}

// openPostgres connects to PostgreSQL at rawURL through pgx. Lookup
// connections (lookups true) run all of Dialect.SessionSQL; loading ones
// standard strings and the helpers only.
func openPostgres(ctx context.Context, rawURL string, opts Options, lookups bool) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, serverErr("postgres", err)
	}
	cfg.ConnectTimeout = opts.ConnectTimeout
	setup := Postgres.SessionSQL(opts.QueryTimeout)
	if !lookups {
		setup = setup[:3]
	}
	connector := stdlib.GetConnector(*cfg, stdlib.OptionAfterConnect(func(ctx context.Context, c *pgx.Conn) error {
		for _, s := range setup {
			if _, err := c.PgConn().Exec(ctx, s).ReadAll(); err != nil {
				return fmt.Errorf("cannot set up the session (%.40s…): %w", s, err)
			}
		}
		return nil
	}))
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(opts.PoolSize)
	db.SetMaxIdleConns(opts.PoolSize)
	pctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, serverErr("postgres", err)
	}
	return db, nil
}

// mysqlConfig reads a `mysql://user:password@host:port/db` URL (or
// `mariadb://`). Query parameters are refused, but for ssl-mode
// (disabled, preferred, required, verify_identity).
func mysqlConfig(rawURL string) (*mysql.Config, error) {
	u, err := url.Parse(strings.Replace(rawURL, "mariadb://", "mysql://", 1))
	if err != nil {
		return nil, err
	}
	cfg := mysql.NewConfig()
	cfg.Net = "tcp"
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "3306")
	}
	cfg.Addr = host
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	for k, v := range u.Query() {
		switch strings.ToLower(strings.ReplaceAll(k, "_", "-")) {
		case "ssl-mode", "sslmode":
			switch strings.ToLower(v[0]) {
			case "disabled":
				cfg.TLSConfig = "false"
			case "preferred":
				cfg.TLSConfig = "preferred"
			case "required":
				cfg.TLSConfig = "skip-verify"
			case "verify-identity", "verify_identity", "verify-ca", "verify_ca":
				cfg.TLSConfig = "true"
			default:
				return nil, fmt.Errorf("ssl-mode `%s` is not one omlet knows", v[0])
			}
		default:
			return nil, fmt.Errorf("the URL parameter `%s` is not one omlet reads (only ssl-mode)", k)
		}
	}
	return cfg, nil
}

// setupConnector runs a session's setup on every connection it opens.
type setupConnector struct {
	inner driver.Connector
	setup func(ctx context.Context, c driver.ExecerContext) error
}

func (s *setupConnector) Driver() driver.Driver { return s.inner.Driver() }

func (s *setupConnector) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := s.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := c.(driver.ExecerContext)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("the driver's connection cannot run its session setup")
	}
	if err := s.setup(ctx, ex); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// openMySQL connects to MySQL or MariaDB. Every connection runs with
// NO_BACKSLASH_ESCAPES and PIPES_AS_CONCAT; lookup connections also read
// only and carry a server-side statement timeout (MariaDB's
// max_statement_time, else MySQL's max_execution_time). A URL whose
// database is a system schema is refused.
func openMySQL(ctx context.Context, rawURL string, opts Options, lookups bool) (*sql.DB, error) {
	cfg, err := mysqlConfig(rawURL)
	if err != nil {
		return nil, serverErr("mysql", err)
	}
	if isSystemSchema(cfg.DBName) {
		return nil, fmt.Errorf("knowledge: mysql: the URL's database `%s` is a system schema; lookups read the tables of a database of your own", cfg.DBName)
	}
	cfg.Timeout = opts.ConnectTimeout
	cfg.MultiStatements = !lookups
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, serverErr("mysql", err)
	}
	setup := MySQL.SessionSQL(opts.QueryTimeout)
	if !lookups {
		setup = setup[:1]
	}
	timeout := opts.QueryTimeout
	db := sql.OpenDB(&setupConnector{inner: inner, setup: func(ctx context.Context, c driver.ExecerContext) error {
		for _, s := range setup {
			if _, err := c.ExecContext(ctx, s, nil); err != nil {
				return fmt.Errorf("cannot set up the session (%s): %w", s, err)
			}
		}
		if !lookups {
			return nil
		}
		mariadb := fmt.Sprintf("SET SESSION max_statement_time = %.3f", max(timeout.Seconds(), 0.001))
		if _, err := c.ExecContext(ctx, mariadb, nil); err == nil {
			return nil
		}
		mysqlTime := fmt.Sprintf("SET SESSION max_execution_time = %d", max(timeout.Milliseconds(), 1))
		_, _ = c.ExecContext(ctx, mysqlTime, nil) // neither: omlet's own timeout still applies
		return nil
	}})
	db.SetMaxOpenConns(opts.PoolSize)
	db.SetMaxIdleConns(opts.PoolSize)
	pctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	var name sql.NullString
	if err := db.QueryRowContext(pctx, "select database()").Scan(&name); err != nil {
		db.Close()
		return nil, serverErr("mysql", err)
	}
	if name.Valid && isSystemSchema(name.String) {
		db.Close()
		return nil, fmt.Errorf("knowledge: mysql: the URL's database `%s` is a system schema; lookups read the tables of a database of your own", name.String)
	}
	return db, nil
}
