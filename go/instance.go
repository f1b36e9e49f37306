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
	// Set when the instance must not be used again.
	dead  bool
	stack [4]uint64
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
	if r.yields {
		if g, ok := mod.ExportedGlobal(exportTickBudget).(api.MutableGlobal); !ok || g.Type() != api.ValueTypeI32 {
			in.close()
			return nil, loadErr("abi", "the module's %s is not a mutable i32 global", exportTickBudget)
		}
	}
	if _, ok := in.mem.Read(in.retArea, 12); !ok {
		in.close()
		return nil, loadErr("abi", "the return area at %d is outside the guest's memory", in.retArea)
	}
	return in, nil
}

func (in *instance) close() {
	in.clock.close()
	if in.mod != nil {
		_ = in.mod.Close(context.Background())
	}
}

// answer reads the return area and copies out the answer it points at.
func (in *instance) answer() (status uint32, data []byte, err error) {
	status, b, err := in.answerView()
	if err != nil {
		return 0, nil, err
	}
	return status, append([]byte(nil), b...), nil
}

// answerView is answer without the copy: the bytes are the guest's, good
// until the instance is called again.
func (in *instance) answerView() (status uint32, data []byte, err error) {
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
	return status, b, nil
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
// it), as an *EvalError. With view, the answer is not copied out: it is the
// guest's bytes, good until the instance is called again.
func (in *instance) call(ctx context.Context, fn api.Function, generation uint64, rt route, frame []byte, view bool) (uint32, []byte, *EvalError) {
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
	answer := in.answer
	if view {
		answer = in.answerView
	}
	status, data, aerr := answer()
	if aerr != nil {
		return 0, nil, &EvalError{Kind: Internal, Message: aerr.Error()}
	}
	return status, data, nil
}

// invoke calls fn with the call deadline armed and the instance in the
// context for the imports.
func (in *instance) invoke(ctx context.Context, fn api.Function, stack []uint64) *EvalError {
	cctx := in.clock.start(ctx, in, in.rule.opts.CallDeadline)
	err := fn.CallWithStack(cctx, stack)
	fired, stopped := in.clock.stop()
	if stopped {
		// The instance's context is done for good (the deadline or the
		// caller's context ended it, perhaps just as the call returned):
		// the instance must not be used again.
		in.dead = true
	}
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

// callContext is the context of an instance's calls: the caller's context,
// with the instance as its instanceKey value, done once the call deadline
// passed or the caller's context ended during a call. It lives as long as
// its instance (one allocation, not one a call); once done it stays done,
// and the instance is dropped.
type callContext struct {
	parent context.Context
	in     *instance
	done   chan struct{}
	ended  atomic.Bool
}

func (c *callContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *callContext) Done() <-chan struct{}       { return c.done }

// Err is context.Canceled once the context is done: wazero closes the
// module (stopping the guest) only for Canceled or DeadlineExceeded.
func (c *callContext) Err() error {
	if c.ended.Load() {
		return context.Canceled
	}
	return nil
}

func (c *callContext) Value(key any) any {
	if key == (instanceKey{}) {
		return c.in
	}
	if c.parent == nil {
		return nil
	}
	return c.parent.Value(key)
}

// callClock is one instance's call deadline: one timer for the instance's
// life, that ends the running call's context once the guest has computed
// for the deadline. The clock stops while a lookup waits for the knowledge
// provider: that time is not the guest's.
//
// A call does not arm and disarm the timer: it notes when it started, and
// the timer, when it fires, ends the call that has overrun or sets itself
// for when the running call would (and, no call running, stays unset until
// the next call). Back-to-back short calls so touch the timer about once a
// deadline, not twice a call.
type callClock struct {
	mu    sync.Mutex
	ctx   callContext
	timer *time.Timer
	d     time.Duration
	// Set while the timer is set.
	pending bool
	// running: a call with a deadline is running; paused: its clock is
	// stopped for a lookup, since pausedAt.
	running, paused bool
	// The running call's start, moved on by the time it was paused for.
	startedAt, pausedAt time.Duration
	fired               bool
	// stopParent releases the watch on the caller's context (only the
	// calling goroutine touches it).
	stopParent func() bool
}

// clockBase is what the clock's times count from (its monotonic reading).
var clockBase = time.Now()

func clockNow() time.Duration { return time.Since(clockBase) }

func (c *callClock) start(parent context.Context, in *instance, d time.Duration) context.Context {
	c.mu.Lock()
	if c.ctx.done == nil {
		c.ctx.done = make(chan struct{})
		c.ctx.in = in
	}
	c.ctx.parent = parent
	c.fired = false
	if d > 0 {
		c.d = d
		c.running, c.paused = true, false
		c.startedAt = clockNow()
		c.arm(d)
	}
	c.mu.Unlock()
	if parent.Done() != nil {
		c.stopParent = context.AfterFunc(parent, c.parentDone)
	}
	return &c.ctx
}

// arm sets the timer for after, unless it is set already (for no later
// than the running call's deadline: it fires, and sets itself again if it
// is early). c.mu held.
func (c *callClock) arm(after time.Duration) {
	if c.pending {
		return
	}
	c.pending = true
	if c.timer == nil {
		c.timer = time.AfterFunc(after, c.fire)
	} else {
		c.timer.Reset(after)
	}
}

// end makes the call's context done, for good: wazero then stops the call,
// or, for a module with yield points, its next tick does (c.mu held).
func (c *callClock) end() {
	if !c.ctx.ended.Load() {
		c.ctx.ended.Store(true)
		close(c.ctx.done)
	}
}

// fire is the timer's: it ends the running call if it has overrun its
// deadline, and otherwise sets the timer for when it would.
func (c *callClock) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = false
	if !c.running || c.paused {
		return // resume, or the next call, sets the timer again
	}
	if left := c.startedAt + c.d - clockNow(); left > 0 {
		c.arm(left)
		return
	}
	c.running = false
	c.fired = true
	c.end()
}

// parentDone ends the call when the caller's context ends.
func (c *callClock) parentDone() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.end()
}

// pause stops the clock while the host works for the guest.
func (c *callClock) pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running && !c.paused {
		c.paused = true
		c.pausedAt = clockNow()
	}
}

// resume starts the clock again after pause.
func (c *callClock) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running && c.paused {
		c.paused = false
		now := clockNow()
		c.startedAt += now - c.pausedAt
		c.arm(max(c.startedAt+c.d-now, time.Nanosecond))
	}
}

// stop ends the call's clock; it reports whether the deadline fired, and
// whether the instance's context is done (by the deadline or the caller).
func (c *callClock) stop() (fired, ended bool) {
	if c.stopParent != nil {
		c.stopParent()
		c.stopParent = nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running, c.paused = false, false
	c.ctx.parent = nil
	return c.fired, c.ctx.ended.Load()
}

// close stops the timer for good.
func (c *callClock) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.running = false
}
