package omlet

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// The defaults of Options, as the Rust host's EngineConfig has them.
const (
	DefaultMaxMemoryBytes   = 64 << 20
	DefaultCallDeadline     = 5 * time.Second
	DefaultMaxRecordBytes   = 16 << 20
	DefaultMaxArtifactBytes = 16 << 20
)

// Options says how to load a rule. The zero value is usable: every field
// has a default.
type Options struct {
	// Knowledge answers the rule's lookups. Load calls its Bind with the
	// rule's statements. Without one, a rule with lookups still loads, and
	// every lookup fails as unavailable (its fields are then absent, unless
	// the rule fails the record).
	Knowledge Knowledge
	// MaxInstances bounds the instances alive at once (default
	// 2 × GOMAXPROCS). A call that needs one past it waits for one to come
	// back.
	MaxInstances int
	// MaxMemoryBytes is the most linear memory an instance may have
	// (default 64 MiB). A call that needs more fails with a Limit error
	// (LimitMemory); its instance is dropped.
	MaxMemoryBytes uint64
	// CallDeadline is the most time one guest call may compute (default
	// 5 s; negative: none). Time spent waiting for lookups is not counted.
	// A call past it fails with a Deadline error; its instance is dropped.
	CallDeadline time.Duration
	// MaxRecordBytes is the most bytes of a frame sent to the guest
	// (default 16 MiB): a bigger record fails with a Limit error
	// (LimitRecordBytes) without a call; a bigger batch is sent record by
	// record.
	MaxRecordBytes int
	// MaxArtifactBytes is the most bytes of a module Load compiles (default
	// 16 MiB).
	MaxArtifactBytes int
	// CompilationCacheDir keeps compiled machine code between runs in this
	// directory (wazero's file cache); empty: compile at every load.
	CompilationCacheDir string
	// IntranetNets are the networks intranet_ip calls LAN. Unset: the bound
	// knowledge's (Bound.IntranetNets), else BuiltinIntranetNets.
	IntranetNets []Network
	// UTCOffset fixes the offset (seconds east of UTC) that Now:: sees;
	// unset: the local zone's offset at the time of the call.
	UTCOffset *int
	// Clock is the wall clock Now:: reads (default time.Now).
	Clock func() time.Time
	// EngineInterrupt stops a call past its deadline (or whose context
	// ends) with wazero's own interruption even when the module has yield
	// points (docs/abi.md). A module built by `omlet build --target core`
	// calls the import tick every few thousand loop headers, where the
	// runtime ends a call that must stop; without them, wazero watches each
	// call with a goroutine and leaves the guest's code for Go at every loop
	// header, which costs more than half of a one-record call. Set it for
	// modules from a source you do not trust to count their loops; a module
	// without yield points always gets wazero's interruption.
	EngineInterrupt bool
}

func (o Options) withDefaults() Options {
	if o.MaxInstances <= 0 {
		o.MaxInstances = 2 * runtime.GOMAXPROCS(0)
	}
	if o.MaxMemoryBytes == 0 {
		o.MaxMemoryBytes = DefaultMaxMemoryBytes
	}
	if o.CallDeadline == 0 {
		o.CallDeadline = DefaultCallDeadline
	}
	if o.MaxRecordBytes <= 0 {
		o.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if o.MaxArtifactBytes <= 0 {
		o.MaxArtifactBytes = DefaultMaxArtifactBytes
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return o
}

// Rule is a loaded rule, ready to evaluate records. Its methods may be
// called from many goroutines at once: each call takes an instance of its
// own from the rule's pool. Close it when done.
type Rule struct {
	opts     Options
	runtime  wazero.Runtime
	compiled wazero.CompiledModule
	info     RuleInfo
	bound    Bound
	// Calls are stopped at the module's yield points, not by wazero.
	yields bool
	// intranet_nets' answer, encoded once.
	netsAnswer []byte
	pool       pool
}

// Load compiles a core module built by `omlet build --target core`, checks
// its ABI (docs/abi.md), reads what it says about itself, and binds its
// statements to opts.Knowledge.
func Load(ctx context.Context, wasm []byte, opts Options) (*Rule, error) {
	opts = opts.withDefaults()
	if len(wasm) > opts.MaxArtifactBytes {
		return nil, &LoadError{What: "size", Err: fmt.Errorf("the module takes %d bytes, more than %d", len(wasm), opts.MaxArtifactBytes)}
	}
	yields := !opts.EngineInterrupt && exportsGlobal(wasm, exportTickBudget)
	cfg := wazero.NewRuntimeConfig().WithCloseOnContextDone(!yields)
	if opts.CompilationCacheDir != "" {
		// One folder serves both interruptions: wazero's module key
		// covers whether the code has its checks.
		cache, err := wazero.NewCompilationCacheWithDir(opts.CompilationCacheDir)
		if err != nil {
			return nil, &LoadError{What: "compile", Err: err}
		}
		cfg = cfg.WithCompilationCache(cache)
	}
	r := &Rule{opts: opts, runtime: wazero.NewRuntimeWithConfig(ctx, cfg), yields: yields}
	if err := r.load(ctx, wasm); err != nil {
		_ = r.runtime.Close(ctx)
		return nil, err
	}
	return r, nil
}

func (r *Rule) load(ctx context.Context, wasm []byte) error {
	compiled, err := r.runtime.CompileModule(ctx, wasm)
	if err != nil {
		return &LoadError{What: "compile", Err: err}
	}
	r.compiled = compiled
	if err := checkModule(compiled, r.opts.MaxMemoryBytes); err != nil {
		return err
	}
	if err := instantiateHost(ctx, r.runtime); err != nil {
		return &LoadError{What: "instantiate", Err: err}
	}
	first, err := r.newInstance(ctx)
	if err != nil {
		return err
	}
	raw, err := first.info(ctx)
	if err != nil {
		first.close()
		return &LoadError{What: "info", Err: err}
	}
	if r.info, err = parseInfo(raw); err != nil {
		first.close()
		return &LoadError{What: "info", Err: err}
	}
	if r.opts.Knowledge != nil {
		stmts := r.info.Statements
		if stmts == nil {
			stmts = []Statement{}
		}
		if r.bound, err = r.opts.Knowledge.Bind(ctx, stmts); err != nil {
			first.close()
			return &LoadError{What: "knowledge", Err: err}
		}
	}
	nets := r.opts.IntranetNets
	if nets == nil && r.bound != nil {
		nets = r.bound.IntranetNets()
	}
	if len(nets) == 0 && r.opts.IntranetNets == nil {
		nets = BuiltinIntranetNets
	}
	r.netsAnswer = encodeNets(nets)
	r.pool.init(r.opts.MaxInstances)
	r.pool.tokens <- struct{}{}
	r.pool.put(first)
	return nil
}

// checkModule refuses a module that is not an omlet core rule: one that
// imports anything but omlet:core@1 functions, or lacks an export.
func checkModule(m wazero.CompiledModule, maxMemory uint64) error {
	for _, f := range m.ImportedFunctions() {
		module, name, _ := f.Import()
		if module != importModule {
			return loadErr("abi", "the module imports %s.%s: an omlet rule imports only %s", module, name, importModule)
		}
	}
	if len(m.ImportedMemories()) > 0 {
		return loadErr("abi", "the module imports a memory: an omlet rule imports only %s functions", importModule)
	}
	exports := m.ExportedFunctions()
	for _, name := range requiredExports {
		if _, ok := exports[name]; !ok {
			return loadErr("abi", "the module does not export %s: it is not an omlet core rule (docs/abi.md)", name)
		}
	}
	mem, ok := m.ExportedMemories()[exportMemory]
	if !ok {
		return loadErr("abi", "the module does not export its memory as %q", exportMemory)
	}
	if uint64(mem.Min())*65536 > maxMemory {
		return &LoadError{What: "instantiate", Err: fmt.Errorf("the module's initial memory (%d bytes) is more than the %d an instance may have", uint64(mem.Min())*65536, maxMemory)}
	}
	return nil
}

// Info is what the rule says about itself, read at load.
func (r *Rule) Info() RuleInfo { return r.info }

// Close drops the rule's instances and compiled code.
func (r *Rule) Close(ctx context.Context) error {
	r.pool.drain()
	return r.runtime.Close(ctx)
}

// generation is the knowledge generation of a call.
func (r *Rule) generation() uint64 {
	if r.bound == nil {
		return 0
	}
	return r.bound.Generation()
}

// pool holds a rule's idle instances, and the tokens that bound how many
// are alive.
type pool struct {
	idle   chan *instance
	tokens chan struct{}
}

func (p *pool) init(n int) {
	p.idle = make(chan *instance, n)
	p.tokens = make(chan struct{}, n)
}

// get takes an idle instance, or makes one while the bound allows, or
// waits for one to come back.
func (r *Rule) get(ctx context.Context) (*instance, *EvalError) {
	select {
	case in := <-r.pool.idle:
		return in, nil
	default:
	}
	select {
	case in := <-r.pool.idle:
		return in, nil
	case r.pool.tokens <- struct{}{}:
		in, err := r.newInstance(ctx)
		if err != nil {
			<-r.pool.tokens
			var e *EvalError
			if errors.As(err, &e) {
				return nil, e
			}
			return nil, &EvalError{Kind: Internal, Message: "cannot make an instance: " + err.Error(), Err: err}
		}
		return in, nil
	case <-ctx.Done():
		return nil, &EvalError{Kind: Canceled, Message: ctx.Err().Error(), Err: ctx.Err()}
	}
}

func (p *pool) put(in *instance) { p.idle <- in }

// discard closes an instance that must not be used again, and frees its
// place.
func (r *Rule) discard(in *instance) {
	in.close()
	<-r.pool.tokens
}

func (p *pool) drain() {
	for {
		select {
		case in := <-p.idle:
			in.close()
		default:
			return
		}
	}
}

// callOn makes one evaluating call on an instance of the pool: the
// instance goes back when the call finished, and is dropped when it did not.
func (r *Rule) callOn(ctx context.Context, export string, rt route, frame []byte) (uint32, []byte, *EvalError) {
	return r.callOnView(ctx, export, rt, frame, nil)
}

// callOnView is callOn that, with view, gives view the answer in the
// guest's memory (not copied out) before the instance goes back: view must
// not keep the bytes. The data callOnView then returns is nil.
func (r *Rule) callOnView(ctx context.Context, export string, rt route, frame []byte, view func(status uint32, data []byte)) (uint32, []byte, *EvalError) {
	in, err := r.get(ctx)
	if err != nil {
		return 0, nil, err
	}
	var fn api.Function
	switch export {
	case exportEvaluate:
		fn = in.evaluate
	case exportEvaluateBatch:
		fn = in.batch
	case exportEvaluateLines:
		fn = in.lines
	default:
		fn = in.explain
	}
	status, data, cerr := r.safeCall(ctx, in, fn, rt, frame, view)
	if cerr == nil && view != nil {
		view(status, data)
		data = nil
	}
	if cerr != nil || in.dead {
		r.discard(in)
		if cerr != nil {
			return 0, nil, cerr
		}
		return status, data, nil
	}
	r.pool.put(in)
	return status, data, nil
}

// safeCall is instance.call with any panic made an error.
func (r *Rule) safeCall(ctx context.Context, in *instance, fn api.Function, rt route, frame []byte, view func(uint32, []byte)) (status uint32, data []byte, err *EvalError) {
	defer func() {
		if p := recover(); p != nil {
			status, data, err = 0, nil, internalError("a panic in the call: %v", p)
		}
	}()
	return in.call(ctx, fn, r.generation(), rt, frame, view != nil)
}
