package omlet

import "context"

// This file is the contract between the runtime (this package) and a
// knowledge provider (package knowledge, or an embedder's own). The runtime
// calls a provider only through these types.

// CellKind is the kind of a SQL value crossing the rule's boundary.
type CellKind uint8

// The kinds of a Cell, numbered as the core ABI's cell tags (docs/abi.md).
const (
	CellNull    CellKind = 0
	CellInteger CellKind = 1
	CellReal    CellKind = 2
	CellText    CellKind = 3
	CellBlob    CellKind = 4
)

// Cell is a SQL value: a lookup's parameter going out, or a column of its
// answer coming back. Only the field of its Kind is meaningful.
type Cell struct {
	Kind CellKind
	Int  int64
	Real float64
	Text string
	Blob []byte
}

// Statement is one SQL statement a rule may run, as omlet_info describes it.
type Statement struct {
	SQL     string   `json:"sql"`
	Params  []string `json:"params"`
	Table   string   `json:"table"`
	Columns []string `json:"columns"`
	Helpers []string `json:"helpers"`
	File    string   `json:"file"`
	Line    uint32   `json:"line"`
	Column  uint32   `json:"column"`
}

// QueryErrorCode says why a lookup failed, numbered as in docs/abi.md.
type QueryErrorCode uint8

// The codes of a QueryError.
const (
	UnknownStatement QueryErrorCode = 0
	Unavailable      QueryErrorCode = 1
	Timeout          QueryErrorCode = 2
	Failed           QueryErrorCode = 3
)

// QueryError is a failed lookup. Fatal says that the provider's policy
// (on_lookup_error = fail) fails the whole record.
type QueryError struct {
	Code    QueryErrorCode
	Message string
	Fatal   bool
}

func (e *QueryError) Error() string { return e.Message }

// Answer is a lookup's first row (Found false when no row matched).
// Cacheable lets the guest keep it until the knowledge generation changes.
type Answer struct {
	Found     bool
	Row       []Cell
	Cacheable bool
}

// Network is an IPv6 prefix (an IPv4 network a.b.c.d/n is the mapped
// ::ffff:a.b.c.d/(96+n)).
type Network struct {
	High, Low uint64
	Prefix    uint8
}

// Knowledge answers a loaded rule's lookups. Bind is called once per rule,
// at load, with the rule's statements: a provider checks them against its
// allow-lists there and refuses the rule with an error naming the
// statement. The returned Bound serves that rule's calls, from many
// goroutines at once.
type Knowledge interface {
	Bind(ctx context.Context, statements []Statement) (Bound, error)
}

// Bound is a provider bound to one rule's statements.
type Bound interface {
	// Query runs statement (an index into the statements given to Bind)
	// with params bound in order.
	Query(ctx context.Context, statement uint32, params []Cell) (Answer, *QueryError)
	// Columns names what statement returns (asked for `select *` lookups).
	Columns(ctx context.Context, statement uint32) ([]string, *QueryError)
	// IntranetNets is the networks intranet_ip calls LAN.
	IntranetNets() []Network
	// Generation changes when the knowledge changes (a reload): the guest
	// then drops the answers it kept.
	Generation() uint64
}
