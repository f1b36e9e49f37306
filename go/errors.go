package omlet

import (
	"errors"
	"fmt"
)

// ErrorKind says why a record got no output.
type ErrorKind uint8

// The kinds of an EvalError.
const (
	// Unrouted: no model takes the record (its route names none, or a
	// route by field found no text field). The record was not evaluated.
	Unrouted ErrorKind = iota + 1
	// Lookup: a lookup failed and the knowledge's policy fails the record
	// (QueryError.Fatal).
	Lookup
	// GuestFailed: the guest could not evaluate the record (a damaged frame, a
	// rule it cannot run, a bad call). A bug somewhere, not the record's
	// fault.
	GuestFailed
	// Rejected: the rule failed the record itself with fail(…).
	Rejected
	// Limit: a limit was reached (Limit says which): the record is too big,
	// or the guest needed more memory than an instance may have.
	Limit
	// Deadline: the guest computed for longer than Options.CallDeadline.
	Deadline
	// Trap: the guest trapped (a bug, or it gave up).
	Trap
	// Canceled: the caller's context ended before the call did.
	Canceled
	// Internal: a failure of this runtime or of the guest's answer's layout.
	Internal
)

var errorKindNames = [...]string{"", "unrouted", "lookup", "failed", "rejected", "limit", "deadline", "trap", "canceled", "internal"}

func (k ErrorKind) String() string {
	if int(k) < len(errorKindNames) && k != 0 {
		return errorKindNames[k]
	}
	return fmt.Sprintf("ErrorKind(%d)", uint8(k))
}

// The limits an EvalError of kind Limit names (the Rust host's words).
const (
	LimitMemory      = "instance memory"
	LimitRecordBytes = "record bytes"
	LimitDeadline    = "call deadline"
)

// EvalError is the error of one record. Use errors.As to get it:
//
//	var e *omlet.EvalError
//	if errors.As(err, &e) && e.Kind == omlet.Unrouted { … }
//
// Its text is the text `omlet run` prints for the same error.
type EvalError struct {
	Kind ErrorKind
	// Index is the record's 0-based place in its batch (0 for one record).
	Index int
	// Limit names the limit of a Limit or Deadline error (LimitMemory, …).
	Limit string
	// Message says what happened; Error() adds the kind's wording.
	Message string
	// Err is the underlying error, when there is one (wazero's, the
	// context's).
	Err error
}

func (e *EvalError) Error() string {
	switch e.Kind {
	case Unrouted:
		return e.Message
	case Lookup:
		return "lookup failed: " + e.Message
	case Rejected:
		return "rejected by the rule: " + e.Message
	case GuestFailed:
		return "internal error: " + e.Message
	case Limit, Deadline:
		return fmt.Sprintf("limit reached (%s): %s", e.Limit, e.Message)
	case Trap:
		return "the rule trapped: " + e.Message
	case Canceled:
		return "canceled: " + e.Message
	default:
		return "internal error: " + e.Message
	}
}

func (e *EvalError) Unwrap() error { return e.Err }

// at is the error for the record at index of its batch.
func (e *EvalError) at(index int) *EvalError {
	c := *e
	c.Index = index
	return &c
}

func internalError(format string, args ...any) *EvalError {
	return &EvalError{Kind: Internal, Message: fmt.Sprintf(format, args...)}
}

// statusError is the error of a guest status (docs/abi.md) for the record
// at index.
func statusError(status uint32, index int, message string) *EvalError {
	switch status {
	case statusUnrouted:
		return &EvalError{Kind: Unrouted, Index: index, Message: message}
	case statusLookup:
		return &EvalError{Kind: Lookup, Index: index, Message: message}
	case statusFailed:
		// Worded as the Rust host words it, with the record's place in
		// the guest call.
		return &EvalError{Kind: GuestFailed, Index: index, Message: fmt.Sprintf("the guest could not evaluate record %d: %s", index, message)}
	case statusRejected:
		return &EvalError{Kind: Rejected, Index: index, Message: message}
	}
	return internalError("the guest answered an unknown status %d for record %d: %s", status, index, message)
}

// LoadError is why a rule did not load: not an omlet core module, a
// refused statement, a failed compile.
type LoadError struct {
	// What is the step that failed ("abi", "compile", "instantiate",
	// "info", "knowledge", "size").
	What string
	Err  error
}

func (e *LoadError) Error() string {
	if e.What == "knowledge" {
		return e.Err.Error()
	}
	return fmt.Sprintf("cannot load the rule (%s): %v", e.What, e.Err)
}

func (e *LoadError) Unwrap() error { return e.Err }

func loadErr(what string, format string, args ...any) error {
	return &LoadError{What: what, Err: fmt.Errorf(format, args...)}
}

// IsKind reports whether err is an *EvalError of kind k.
func IsKind(err error, k ErrorKind) bool {
	var e *EvalError
	return errors.As(err, &e) && e.Kind == k
}
