// Package omlet runs omlet rules in Go: log-record transformations written
// in OML and compiled to WebAssembly by the omlet CLI, evaluated here on
// wazero (pure Go, no cgo).
//
// Build a rule set as a plain WebAssembly module, the artifact this package
// loads (the default build, a WebAssembly component, is for hosts with the
// component model):
//
//	omlet build --target core rules/ -o rules.wasm
//
// Then load it once and evaluate records, from as many goroutines as you
// like:
//
//	wasm, _ := os.ReadFile("rules.wasm")
//	rule, err := omlet.Load(ctx, wasm, omlet.Options{})
//	if err != nil { … }
//	defer rule.Close(ctx)
//
//	in, _ := omlet.ParseRecord([]byte(`{"status":"200","remote_addr":"10.0.0.7"}`))
//	out, err := rule.Evaluate(ctx, in, omlet.Path("/nginx/access_log"))
//	fmt.Println(out.JSON())
//
// # Records
//
// A Record is an ordered list of named Values. A Value has a Kind: text
// (chars), integers (digit, and bigint for integers past 64 bits, kept as
// their digits), floats, booleans, IPv4 and IPv6 addresses, times (naive
// nanoseconds since 1970-01-01, no zone), null, ignore (a field hidden from
// the JSON output), objects and arrays. ParseRecord reads a JSON object
// into a Record exactly as the omlet CLI reads one; Record.JSON writes the
// line the CLI would print. EncodeFrame and DecodeFrame are the binary
// layout records cross into the rule in (docs/abi.md).
//
// # Routes
//
// A rule set holds models; a Route picks the one that evaluates a record:
// Only (the set has one model), Path (a rule path such as
// "/nginx/access_log", matched against the models' `rule :` patterns),
// Model (a model by name), or ByField (the rule path held in a text field
// of each record).
//
// # Calls
//
// Evaluate takes one record; EvaluateBatch many, in one call into the rule
// per route, with one Result per record in order; EvaluateLines is
// EvaluateBatch with each output as its JSON line, rendered inside the rule
// (what a program that only writes outputs needs); Explain adds a trace of
// how the record was evaluated.
//
// Every record gets an output or an error, never a panic. A record's error
// is an *EvalError (use errors.As) whose Kind says why: Unrouted, Lookup,
// Rejected (the rule's fail(…)), Limit, Deadline, Trap, GuestFailed,
// Canceled or Internal. A call that traps or runs past a limit costs only
// its instance, which is dropped and replaced; in a batch the records are
// then evaluated one by one, so that only the records that fail alone get
// the error.
//
// # Limits
//
// Options bounds what a rule may take, with the defaults of the Rust host:
// 64 MiB of memory per instance, 5 s of computing per call (time waiting
// for lookups not counted), 16 MiB per record frame, 16 MiB of module, and
// 2 × GOMAXPROCS instances alive at once.
//
// # Lookups
//
// Rules may look values up in SQL tables. Options.Knowledge answers them:
// package knowledge (example.invalid/omlet/go/knowledge) implements it over
// database/sql, and any type with the Knowledge interface will do. Without
// one a rule with lookups still loads, and each lookup fails as
// unavailable: its fields are absent.
package omlet
