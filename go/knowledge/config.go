package knowledge

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Config is the knowledge config file of the CLI's --knowledge
// (host/knowledge/src/config.rs). Unknown keys are refused.
type Config struct {
	URL              string         `toml:"url"`
	Env              []string       `toml:"env"`
	PoolSize         *int           `toml:"pool_size"`
	ConnectTimeoutMS *int64         `toml:"connect_timeout_ms"`
	QueryTimeoutMS   *int64         `toml:"query_timeout_ms"`
	OnLookupError    string         `toml:"on_lookup_error"`
	BatchMisses      *bool          `toml:"batch_misses"`
	Knowdb           string         `toml:"knowdb"`
	KnowdbRoots      []string       `toml:"knowdb_roots"`
	Cache            configCache    `toml:"cache"`
	Tables           []string       `toml:"tables"`
	Functions        []string       `toml:"functions"`
	Reload           map[string]any `toml:"reload"`
	Memory           configMemory   `toml:"memory"`
	IntranetNets     *IntranetNets  `toml:"intranet_nets"`
}

type configCache struct {
	Mode          string `toml:"mode"`
	Capacity      *int64 `toml:"capacity"`
	MaxBytes      *int64 `toml:"max_bytes"`
	MaxEntryBytes *int64 `toml:"max_entry_bytes"`
	TTLMS         *int64 `toml:"ttl_ms"`
	Negative      *bool  `toml:"negative"`
	Guest         *bool  `toml:"guest"`
}

// configMemory is `[memory]`: which knowdb tables the Rust host holds in
// its own memory. Read and checked, but every lookup goes to SQL here.
type configMemory struct {
	Knowdb     *bool    `toml:"knowdb"`
	MaxTableMB *int64   `toml:"max_table_mb"`
	OverLimit  string   `toml:"over_limit"`
	Snapshots  []string `toml:"snapshots"`
}

// ReadConfig reads a knowledge config file: knowdb and knowdb_roots
// become relative to it, and `${VAR}`s in url are filled from the
// environment (only variables named OMLET_… or listed in env).
func ReadConfig(path string) (*Config, error) {
	text, err := readText(path, MaxConfigBytes, "knowledge config")
	if err != nil {
		return nil, fmt.Errorf("knowledge: %w", err)
	}
	var c Config
	md, err := toml.Decode(text, &c)
	if err != nil {
		return nil, fmt.Errorf("knowledge: %s: %w", path, err)
	}
	if u := md.Undecoded(); len(u) > 0 && !strings.HasPrefix(u[0].String(), "reload") {
		return nil, fmt.Errorf("knowledge: %s: unknown field `%s`", path, u[0].String())
	}
	dir := filepath.Dir(path)
	relative := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	if c.Knowdb != "" {
		c.Knowdb = relative(c.Knowdb)
	}
	for i, r := range c.KnowdbRoots {
		c.KnowdbRoots[i] = relative(r)
	}
	if c.URL == "" {
		c.URL = "sqlite::memory:"
	}
	if c.URL, err = expandEnv(c.URL, c.Env); err != nil {
		return nil, fmt.Errorf("knowledge: %s: url: %w", path, err)
	}
	return &c, nil
}

// expandEnv replaces ${NAME} with the environment variable NAME, for
// names that begin with OMLET_ and those in allowed.
func expandEnv(s string, allowed []string) (string, error) {
	var out strings.Builder
	rest := s
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			break
		}
		out.WriteString(rest[:i])
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("unclosed ${ in `%s`", Redact(s))
		}
		name := rest[i+2 : i+end]
		if !strings.HasPrefix(name, "OMLET_") && !among(name, allowed) {
			return "", fmt.Errorf("`${%s}` is not filled in: only environment variables named OMLET_… and those listed in `env = [...]` are", name)
		}
		v, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", name)
		}
		out.WriteString(v)
		rest = rest[i+end+1:]
	}
	out.WriteString(rest)
	return out.String(), nil
}

// Options are the config's settings as provider options.
func (c *Config) Options(what string) (Options, error) {
	var o Options
	if c.PoolSize != nil {
		o.PoolSize = max(*c.PoolSize, 1)
	}
	if c.ConnectTimeoutMS != nil {
		o.ConnectTimeout = time.Duration(*c.ConnectTimeoutMS) * time.Millisecond
	}
	if c.QueryTimeoutMS != nil {
		o.QueryTimeout = time.Duration(*c.QueryTimeoutMS) * time.Millisecond
	}
	switch c.OnLookupError {
	case "", "absent":
	case "fail":
		o.OnLookupError = Fail
	default:
		return o, fmt.Errorf("knowledge: %s: on_lookup_error is \"absent\" or \"fail\", not `%s`", what, c.OnLookupError)
	}
	switch c.Cache.Mode {
	case "", "shared":
	case "bypass":
		o.Cache.Mode = CacheBypass
	default:
		return o, fmt.Errorf("knowledge: %s: cache.mode is \"shared\" or \"bypass\", not `%s`", what, c.Cache.Mode)
	}
	if c.Cache.Capacity != nil {
		o.Cache.Capacity = max(*c.Cache.Capacity, 1)
	}
	if c.Cache.MaxBytes != nil {
		o.Cache.MaxBytes = max(*c.Cache.MaxBytes, 1)
	}
	if c.Cache.MaxEntryBytes != nil {
		o.Cache.MaxEntryBytes = max(*c.Cache.MaxEntryBytes, 1)
	}
	if c.Cache.TTLMS != nil {
		if *c.Cache.TTLMS == 0 && o.Cache.Mode == CacheShared {
			return o, fmt.Errorf("knowledge: cache.ttl_ms = 0 would cache nothing: set cache.mode = \"bypass\" instead")
		}
		o.Cache.TTL = time.Duration(*c.Cache.TTLMS) * time.Millisecond
	}
	o.Cache.NoNegative = c.Cache.Negative != nil && !*c.Cache.Negative
	o.Cache.NoGuest = c.Cache.Guest != nil && !*c.Cache.Guest
	o.Tables, o.Functions = c.Tables, c.Functions
	if c.IntranetNets != nil {
		nets, err := c.IntranetNets.Effective(what)
		if err != nil {
			return o, fmt.Errorf("knowledge: %w", err)
		}
		o.IntranetNets = nets
	}
	if c.Memory.OverLimit != "" && c.Memory.OverLimit != "sql" && c.Memory.OverLimit != "fail" {
		return o, fmt.Errorf("knowledge: %s: memory.over_limit is \"sql\" or \"fail\"", what)
	}
	return o, nil
}

// OpenConfig reads the knowledge config file at path and opens its
// database, loading its knowdb first (into that database; on PostgreSQL
// and MySQL through a loading connection of its own). Lookups may then
// read the config's `tables`, or the knowdb's tables, or any unqualified
// table. Left out, with an error: `[reload]` (watching the database for
// changes) and Warp Parse knowdbs. Read but without effect: `[memory]`
// (every lookup goes to SQL) and batch_misses (misses are not batched).
func OpenConfig(ctx context.Context, path string) (*Provider, error) {
	c, err := ReadConfig(path)
	if err != nil {
		return nil, err
	}
	if len(c.Reload) > 0 {
		return nil, fmt.Errorf("knowledge: %s: [reload] is not supported by this provider: call Provider.Reload, or set cache.ttl_ms", path)
	}
	opts, err := c.Options(path)
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	server := strings.HasPrefix(c.URL, "postgres://") || strings.HasPrefix(c.URL, "postgresql://") ||
		strings.HasPrefix(c.URL, "mysql://") || strings.HasPrefix(c.URL, "mariadb://")
	if strings.HasPrefix(c.URL, "postgres") {
		for _, t := range c.Tables {
			if strings.ToLower(t) != t {
				return nil, fmt.Errorf("knowledge: tables: `%s` has upper-case letters, but PostgreSQL folds the unquoted names "+
					"of lookups to lower case (a lookup of `%s` reads `%s`): list it in lower case", t, t, strings.ToLower(t))
			}
		}
	}
	var names []string
	if c.Knowdb != "" && server {
		var ldb loader
		if strings.HasPrefix(c.URL, "postgres") {
			db, err := openPostgres(ctx, c.URL, opts, false)
			if err != nil {
				return nil, err
			}
			defer db.Close()
			ldb = loader{db: db, d: Postgres}
		} else {
			db, err := openMySQL(ctx, c.URL, opts, false)
			if err != nil {
				return nil, err
			}
			defer db.Close()
			ldb = loader{db: db, d: MySQL}
		}
		if names, err = loadKnowdb(ctx, c.Knowdb, ldb, c.KnowdbRoots); err != nil {
			return nil, fmt.Errorf("knowledge: %w", err)
		}
	}
	p, err := Open(ctx, c.URL, opts)
	if err != nil {
		return nil, err
	}
	if c.Knowdb != "" && !server {
		if names, err = loadKnowdb(ctx, c.Knowdb, loader{db: p.db, d: p.dialect}, c.KnowdbRoots); err != nil {
			p.Close()
			return nil, fmt.Errorf("knowledge: %w", err)
		}
	}
	if p.opts.Tables == nil && names != nil {
		p.opts.Tables = names
	}
	p.Seal()
	return p, nil
}
