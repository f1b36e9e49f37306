package omlet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// instance is one instance of a rule's module: used by one goroutine at a
// time, taken from and given back to its rule's pool. One that trapped or
// was stopped is closed and never used again.
type instance struct {
	rule *Rule
	mod  api.Module
	mem  api.Memory

	input, evaluate, batch, lines, explain api.Function

	retArea uint32
	// The input buffer, as omlet_input last gave it.
	inAddr, inCap uint32
	// The answer kept for take.
	pending []byte
	// Set when the guest's memory could not grow past the rule's cap.
	memHit atomic.Bool
	clock  callClock
	stack  [4]uint64
}

// cappedMemory backs an instance's linear memory and refuses to grow it
// past max bytes, noting that it did (so that the trap that follows is
// reported as the memory limit, not as a bug).
type cappedMemory struct {
	buf []byte
	max uint64
	hit *atomic.Bool
}

func (m *cappedMemory) Reallocate(size uint64) []byte {
	if size > m.max {
		m.hit.Store(true)
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	grown := make([]byte, size, min(max(size, 2*uint64(cap(m.buf))), m.max))
	copy(grown, m.buf)
	m.buf = grown
	return grown
}

func (m *cappedMemory) Free() { m.buf = nil }

var moduleSeq atomic.Uint64

// newInstance instantiates the rule's module and checks its ABI version.
func (r *Rule) newInstance(ctx context.Context) (*instance, error) {
	in := &instance{rule: r}
	limit := r.opts.MaxMemoryBytes
	actx := experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(capacity, _ uint64) experimental.LinearMemory {
		return &cappedMemory{buf: make([]byte, 0, min(capacity, limit)), max: limit, hit: &in.memHit}
	}))
	cfg := wazero.NewModuleConfig().WithName(fmt.Sprintf("omlet-rule-%d", moduleSeq.Add(1))).WithStartFunctions()
	mod, err := r.runtime.InstantiateModule(actx, r.compiled, cfg)
	if err != nil {
		if in.memHit.Load() {
			return nil, &EvalError{Kind: Limit, Limit: LimitMemory, Message: fmt.Sprintf("the guest's initial memory is more than %d bytes", limit), Err: err}
		}
		return nil, &LoadError{What: "instantiate", Err: err}
	}
	in.mod = mod
	in.mem = mod.Memory()
	fn := func(name string) api.Function { return mod.ExportedFunction(name) }
	in.input, in.evaluate, in.batch = fn(exportInput), fn(exportEvaluate), fn(exportEvaluateBatch)
	in.lines, in.explain = fn(exportEvaluateLines), fn(exportExplain)
	if in.mem == nil || in.input == nil || in.evaluate == nil || in.batch == nil || in.lines == nil || in.explain == nil {
		in.close()
		return nil, loadErr("abi", "the module lacks an export of docs/abi.md")
	}
	cctx := context.WithValue(ctx, instanceKey{}, in)
	v, err := fn(exportABIVersion).Call(cctx)
	if err != nil || len(v) != 1 || uint32(v[0]) != abiVersion {
		in.close()
		if err != nil {
			return nil, &LoadError{What: "abi", Err: err}
		}
		return nil, loadErr("abi", "omlet_abi_version answers %d, this runtime speaks %d", uint32(v[0]), abiVersion)
	}
	ra, err := fn(exportReturnArea).Call(cctx)
	if err != nil || len(ra) != 1 {
		in.close()
		return nil, loadErr("abi", "omlet_return_area failed: %v", err)
	}
	in.retArea = uint32(ra[0])
	if _, ok := in.mem.Read(in.retArea, 12); !ok {
		in.close()
		return nil, loadErr("abi", "the return area at %d is outside the guest's memory", in.retArea)
	}
	return in, nil
}

func (in *instance) close() {
	if in.mod != nil {
		_ = in.mod.Close(context.Background())
	}
}

// answer reads the return area and copies out the answer it points at.
func (in *instance) answer() (status uint32, data []byte, err error) {
	ra, ok := in.mem.Read(in.retArea, 12)
	if !ok {
		return 0, nil, errors.New("the return area is outside the guest's memory")
	}
	status = binary.LittleEndian.Uint32(ra)
	ptr, n := binary.LittleEndian.Uint32(ra[4:]), binary.LittleEndian.Uint32(ra[8:])
	b, ok := in.mem.Read(ptr, n)
	if !ok {
		return 0, nil, fmt.Errorf("the answer (%d bytes at %d) is outside the guest's memory", n, ptr)
	}
	return status, append([]byte(nil), b...), nil
}

// info calls omlet_info.
func (in *instance) info(ctx context.Context) ([]byte, error) {
	cctx := context.WithValue(ctx, instanceKey{}, in)
	if _, err := in.mod.ExportedFunction(exportInfo).Call(cctx); err != nil {
		return nil, err
	}
	status, b, err := in.answer()
	if err != nil {
		return nil, err
	}
	if status != statusDone {
		return nil, fmt.Errorf("omlet_info answers status %d: %s", status, validText(b))
	}
	return b, nil
}

// route is a route as the ABI passes it.
type route struct {
	kind uint32
	text string
}

// call makes one evaluating call: the route's text and the frame written
// into the input buffer, fn called, the answer copied out. An error is a
// call that did not finish (the instance is then unusable: the caller drops
// it), as an *EvalError.
func (in *instance) call(ctx context.Context, fn api.Function, generation uint64, rt route, frame []byte) (uint32, []byte, *EvalError) {
	total := uint64(len(rt.text)) + uint64(len(frame))
	if total > uint64(in.inCap) {
		if total > 1<<32-1 {
			return 0, nil, &EvalError{Kind: Limit, Limit: LimitRecordBytes, Message: fmt.Sprintf("the call's input takes %d bytes", total)}
		}
		stack := in.stack[:]
		stack[0] = total
		if err := in.invoke(ctx, in.input, stack); err != nil {
			return 0, nil, err
		}
		addr := uint32(stack[0])
		if addr == 0 {
			return 0, nil, &EvalError{Kind: Limit, Limit: LimitMemory, Message: fmt.Sprintf("the guest cannot allocate %d bytes of input", total)}
		}
		in.inAddr, in.inCap = addr, uint32(total)
	}
	buf, ok := in.mem.Read(in.inAddr, uint32(total))
	if !ok {
		return 0, nil, internalError("the guest's input buffer is outside its memory")
	}
	copy(buf[copy(buf, rt.text):], frame)
	stack := in.stack[:]
	stack[0], stack[1], stack[2], stack[3] = generation, uint64(rt.kind), uint64(len(rt.text)), uint64(len(frame))
	if err := in.invoke(ctx, fn, stack); err != nil {
		return 0, nil, err
	}
	status, data, aerr := in.answer()
	if aerr != nil {
		return 0, nil, &EvalError{Kind: Internal, Message: aerr.Error()}
	}
	return status, data, nil
}

// invoke calls fn with the call deadline armed and the instance in the
// context for the imports.
func (in *instance) invoke(ctx context.Context, fn api.Function, stack []uint64) *EvalError {
	cctx := in.clock.start(context.WithValue(ctx, instanceKey{}, in), in.rule.opts.CallDeadline)
	err := fn.CallWithStack(cctx, stack)
	fired := in.clock.stop()
	if err == nil {
		return nil
	}
	switch {
	case fired:
		return &EvalError{Kind: Deadline, Limit: LimitDeadline, Message: fmt.Sprintf("the guest computed for more than %v", in.rule.opts.CallDeadline), Err: err}
	case ctx.Err() != nil:
		return &EvalError{Kind: Canceled, Message: ctx.Err().Error(), Err: ctx.Err()}
	case in.memHit.Load():
		return &EvalError{Kind: Limit, Limit: LimitMemory, Message: fmt.Sprintf("the guest needed more than %d bytes of memory", in.rule.opts.MaxMemoryBytes), Err: err}
	}
	return &EvalError{Kind: Trap, Message: err.Error(), Err: err}
}

var errDeadlinePassed = errors.New("the call deadline passed")

// callClock is one call's deadline: a timer that cancels the call's
// context once the guest has computed for the deadline. It stops while a
// lookup waits for the knowledge provider: that time is not the guest's.
type callClock struct {
	mu        sync.Mutex
	gen       uint64
	cancel    context.CancelCauseFunc
	timer     *time.Timer
	remaining time.Duration
	startedAt time.Time
	fired     bool
}

func (c *callClock) start(ctx context.Context, d time.Duration) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.fired = false
	c.timer, c.cancel = nil, nil
	if d <= 0 {
		return ctx
	}
	ctx, cancel := context.WithCancelCause(ctx)
	c.cancel = cancel
	c.remaining = d
	c.startedAt = time.Now()
	gen := c.gen
	c.timer = time.AfterFunc(d, func() { c.fire(gen) })
	return ctx
}

func (c *callClock) fire(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen && c.cancel != nil && c.timer != nil {
		c.fired = true
		c.cancel(errDeadlinePassed)
	}
}

// pause stops the clock while the host works for the guest.
func (c *callClock) pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil && c.timer.Stop() {
		c.remaining -= time.Since(c.startedAt)
	}
}

// resume starts the clock again after pause.
func (c *callClock) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil && !c.fired {
		if c.remaining <= 0 {
			c.remaining = time.Nanosecond
		}
		c.startedAt = time.Now()
		c.timer.Reset(c.remaining)
	}
}

// stop ends the call's clock (and releases its context); it reports
// whether the deadline fired.
func (c *callClock) stop() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.cancel != nil {
		c.cancel(nil)
		c.cancel = nil
	}
	return c.fired
}
