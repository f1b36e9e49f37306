package knowledge

import (
	"time"

	omlet "example.invalid/omlet/go"
)

// OnLookupError is what a failed lookup (a database error or a timeout)
// does to the record.
type OnLookupError uint8

const (
	// Absent (the default): the lookup's targets are absent.
	Absent OnLookupError = iota
	// Fail: the record fails (QueryError.Fatal).
	Fail
)

// CacheMode says whether answers are cached at all.
type CacheMode uint8

const (
	// CacheShared (the default): answers are kept in the provider's cache
	// and, unless NoGuest, in each guest instance.
	CacheShared CacheMode = iota
	// CacheBypass: nothing is cached; every lookup is a query.
	CacheBypass
)

// CacheOptions are the `[cache]` settings of the knowledge config.
type CacheOptions struct {
	Mode CacheMode
	// Capacity is the most entries kept (default 100 000).
	Capacity int64
	// MaxBytes is the most bytes kept, as estimated (default 64 MiB).
	MaxBytes int64
	// MaxEntryBytes: a bigger answer is not kept (default 1 MiB).
	MaxEntryBytes int64
	// TTL of entries (0: none). With a TTL the generation also advances
	// every TTL period, so guest caches forget too.
	TTL time.Duration
	// NoNegative: "no row" answers are not kept (kept by default).
	NoNegative bool
	// NoGuest: guests may not keep answers (they may by default).
	NoGuest bool
}

// Options are a provider's policy and limits. The zero value is the
// Rust host's defaults.
type Options struct {
	// Tables lookups may read; nil: any unqualified table (a knowdb's
	// tables when loaded from one).
	Tables []string
	// Functions lookups may call besides OML's helpers.
	Functions []string
	// QueryTimeout bounds each lookup's database round trip, waiting for
	// a connection included (default 2 s).
	QueryTimeout time.Duration
	// OnLookupError: Absent (default) or Fail.
	OnLookupError OnLookupError
	// Cache settings.
	Cache CacheOptions
	// PoolSize is the most connections for PostgreSQL or MySQL lookups
	// (default 8). SQLite uses 4.
	PoolSize int
	// ConnectTimeout bounds connecting (default 5 s).
	ConnectTimeout time.Duration
	// IntranetNets are the networks intranet_ip calls LAN (nil: the
	// built-in private ranges).
	IntranetNets []omlet.Network
	// MaxAnswerBytes bounds one answer's row (default 64 MiB).
	MaxAnswerBytes int64
	// Qualified lets schema-qualified tables through without Tables
	// naming them.
	Qualified bool
}

func (o Options) withDefaults() Options {
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = 2 * time.Second
	}
	if o.Cache.Capacity <= 0 {
		o.Cache.Capacity = 100_000
	}
	if o.Cache.MaxBytes <= 0 {
		o.Cache.MaxBytes = 64 << 20
	}
	if o.Cache.MaxEntryBytes <= 0 {
		o.Cache.MaxEntryBytes = 1 << 20
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 8
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	if o.IntranetNets == nil {
		o.IntranetNets = BuiltinIntranetNets()
	}
	if o.MaxAnswerBytes <= 0 {
		o.MaxAnswerBytes = 64 << 20
	}
	return o
}
