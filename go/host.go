package omlet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// The host side of the imports of module omlet:core@1 (docs/abi.md): query,
// columns, intranet_nets, take and now. Each call finds its instance in its
// context (instance.call puts it there), so that one host module serves
// every instance of a rule.

type instanceKey struct{}

func instanceOf(ctx context.Context) *instance {
	in, _ := ctx.Value(instanceKey{}).(*instance)
	return in
}

// BuiltinIntranetNets are the networks intranet_ip calls LAN when nothing
// else is configured (OML 1.25 §9.1): 10.0.0.0/8, 172.16.0.0/12,
// 192.168.0.0/16, 127.0.0.0/8, ::1/128 and fc00::/7, IPv4 ones as mapped
// IPv6 prefixes.
var BuiltinIntranetNets = []Network{
	v4Net(10, 0, 0, 0, 8),
	v4Net(172, 16, 0, 0, 12),
	v4Net(192, 168, 0, 0, 16),
	v4Net(127, 0, 0, 0, 8),
	{High: 0, Low: 1, Prefix: 128},
	{High: 0xfc00 << 48, Low: 0, Prefix: 7},
}

func v4Net(a, b, c, d byte, prefix uint8) Network {
	return Network{High: 0, Low: 0xffff<<32 | uint64(a)<<24 | uint64(b)<<16 | uint64(c)<<8 | uint64(d), Prefix: 96 + prefix}
}

// guestPanic stops a call whose guest passed the host something it cannot
// use (a buffer outside its memory): the call fails and its instance is
// dropped.
func guestPanic(format string, args ...any) {
	panic(fmt.Errorf("omlet:core@1: "+format, args...))
}

func readMem(mod api.Module, addr, n uint32) []byte {
	b, ok := mod.Memory().Read(addr, n)
	if !ok {
		guestPanic("%d bytes at %d are outside the guest's memory", n, addr)
	}
	return b
}

// deliver hands an answer to the guest: written at buf when it fits in
// capacity bytes, else kept for take. It returns the answer's length.
func deliver(in *instance, mod api.Module, answer []byte, buf, capacity uint32) uint64 {
	in.pending = answer
	if uint64(len(answer)) <= uint64(capacity) {
		if !mod.Memory().Write(buf, answer) {
			guestPanic("the answer's buffer at %d is outside the guest's memory", buf)
		}
	}
	return uint64(uint32(len(answer)))
}

func instantiateHost(ctx context.Context, rt wazero.Runtime) error {
	i32 := api.ValueTypeI32
	b := rt.NewHostModuleBuilder(importModule)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostQuery), []api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}).Export("query")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostColumns), []api.ValueType{i32, i32, i32}, []api.ValueType{i32}).Export("columns")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostIntranetNets), []api.ValueType{i32, i32}, []api.ValueType{i32}).Export("intranet_nets")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostTake), []api.ValueType{i32, i32}, nil).Export("take")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostNow), []api.ValueType{i32}, nil).Export("now")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostTick), nil, []api.ValueType{i32}).Export("tick")
	_, err := b.Instantiate(ctx)
	return err
}

func mustInstance(ctx context.Context) *instance {
	in := instanceOf(ctx)
	if in == nil {
		guestPanic("a call outside an evaluation")
	}
	return in
}

// hostQuery: query(statement, params, params_len, buf, cap) -> n.
func hostQuery(ctx context.Context, mod api.Module, stack []uint64) {
	in := mustInstance(ctx)
	statement := api.DecodeU32(stack[0])
	raw := readMem(mod, api.DecodeU32(stack[1]), api.DecodeU32(stack[2]))
	var answer []byte
	params, err := decodeCells(raw)
	if err != nil {
		answer = encodeQueryError(&QueryError{Code: Failed, Message: "the guest's parameters do not read: " + err.Error()})
	} else {
		answer = in.rule.query(ctx, in, statement, params)
	}
	stack[0] = deliver(in, mod, answer, api.DecodeU32(stack[3]), api.DecodeU32(stack[4]))
}

// query runs one lookup and encodes its answer.
func (r *Rule) query(ctx context.Context, in *instance, statement uint32, params []Cell) []byte {
	if r.bound == nil {
		return encodeQueryError(&QueryError{Code: Unavailable, Message: "no knowledge base is configured"})
	}
	if int(statement) >= len(r.info.Statements) {
		return encodeQueryError(&QueryError{Code: UnknownStatement, Message: fmt.Sprintf("no statement #%d", statement)})
	}
	// Waiting for a lookup is not the guest's computing time.
	in.clock.pause()
	answer, qerr := safeQuery(ctx, r.bound, statement, params)
	in.clock.resume()
	if qerr != nil {
		e := *qerr
		if e.Code != UnknownStatement {
			e.Message = fmt.Sprintf("`%s`: %s", r.info.Statements[statement].SQL, e.Message)
		}
		return encodeQueryError(&e)
	}
	out := make([]byte, 0, 16)
	if !answer.Found {
		return append(out, 1, boolByte(answer.Cacheable))
	}
	out = append(out, 0, boolByte(answer.Cacheable))
	out = binary.LittleEndian.AppendUint32(out, uint32(len(answer.Row)))
	for _, c := range answer.Row {
		out = appendCell(out, c)
	}
	return out
}

// safeQuery is Bound.Query with a panic of the provider made a failed lookup.
func safeQuery(ctx context.Context, b Bound, statement uint32, params []Cell) (a Answer, qerr *QueryError) {
	defer func() {
		if p := recover(); p != nil {
			a, qerr = Answer{}, &QueryError{Code: Failed, Message: fmt.Sprintf("the knowledge provider panicked: %v", p)}
		}
	}()
	return b.Query(ctx, statement, params)
}

func safeColumns(ctx context.Context, b Bound, statement uint32) (cols []string, qerr *QueryError) {
	defer func() {
		if p := recover(); p != nil {
			cols, qerr = nil, &QueryError{Code: Failed, Message: fmt.Sprintf("the knowledge provider panicked: %v", p)}
		}
	}()
	return b.Columns(ctx, statement)
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func encodeQueryError(e *QueryError) []byte {
	out := []byte{2, byte(e.Code), boolByte(e.Fatal)}
	out = binary.LittleEndian.AppendUint32(out, uint32(len(e.Message)))
	return append(out, e.Message...)
}

func appendCell(out []byte, c Cell) []byte {
	switch c.Kind {
	case CellInteger:
		out = append(out, 1)
		return binary.LittleEndian.AppendUint64(out, uint64(c.Int))
	case CellReal:
		out = append(out, 2)
		return binary.LittleEndian.AppendUint64(out, math.Float64bits(c.Real))
	case CellText:
		out = append(out, 3)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(c.Text)))
		return append(out, c.Text...)
	case CellBlob:
		out = append(out, 4)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(c.Blob)))
		return append(out, c.Blob...)
	}
	return append(out, 0)
}

// decodeCells reads `u32 count | cells`.
func decodeCells(b []byte) ([]Cell, error) {
	r := abiReader{b: b}
	count := r.u32()
	if r.bad || uint64(count) > uint64(len(b)) {
		return nil, errShortAnswer
	}
	cells := make([]Cell, 0, count)
	for i := uint32(0); i < count; i++ {
		tag := r.bytes(1)
		if r.bad {
			return nil, errShortAnswer
		}
		var c Cell
		switch tag[0] {
		case 0:
			c = Cell{Kind: CellNull}
		case 1:
			v := r.bytes(8)
			if r.bad {
				return nil, errShortAnswer
			}
			c = Cell{Kind: CellInteger, Int: int64(binary.LittleEndian.Uint64(v))}
		case 2:
			v := r.bytes(8)
			if r.bad {
				return nil, errShortAnswer
			}
			c = Cell{Kind: CellReal, Real: math.Float64frombits(binary.LittleEndian.Uint64(v))}
		case 3, 4:
			v := r.bytes(r.u32())
			if r.bad {
				return nil, errShortAnswer
			}
			if tag[0] == 3 {
				c = Cell{Kind: CellText, Text: string(v)}
			} else {
				c = Cell{Kind: CellBlob, Blob: append([]byte(nil), v...)}
			}
		default:
			return nil, fmt.Errorf("unknown cell tag %d", tag[0])
		}
		cells = append(cells, c)
	}
	if r.at != len(b) {
		return nil, fmt.Errorf("bytes past the last parameter")
	}
	return cells, nil
}

// hostColumns: columns(statement, buf, cap) -> n.
func hostColumns(ctx context.Context, mod api.Module, stack []uint64) {
	in := mustInstance(ctx)
	statement := api.DecodeU32(stack[0])
	var answer []byte
	r := in.rule
	switch {
	case r.bound == nil || int(statement) >= len(r.info.Statements):
		answer = encodeQueryError(&QueryError{Code: UnknownStatement, Message: fmt.Sprintf("no statement #%d", statement)})
	default:
		in.clock.pause()
		cols, qerr := safeColumns(ctx, r.bound, statement)
		in.clock.resume()
		if qerr != nil {
			answer = encodeQueryError(qerr)
			break
		}
		answer = binary.LittleEndian.AppendUint32([]byte{0}, uint32(len(cols)))
		for _, c := range cols {
			answer = binary.LittleEndian.AppendUint32(answer, uint32(len(c)))
			answer = append(answer, c...)
		}
	}
	stack[0] = deliver(in, mod, answer, api.DecodeU32(stack[1]), api.DecodeU32(stack[2]))
}

// hostIntranetNets: intranet_nets(buf, cap) -> n.
func hostIntranetNets(ctx context.Context, mod api.Module, stack []uint64) {
	in := mustInstance(ctx)
	stack[0] = deliver(in, mod, in.rule.netsAnswer, api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
}

func encodeNets(nets []Network) []byte {
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(nets)))
	for _, n := range nets {
		out = binary.LittleEndian.AppendUint64(out, n.High)
		out = binary.LittleEndian.AppendUint64(out, n.Low)
		out = append(out, n.Prefix)
	}
	return out
}

// hostTake: take(buf, len) copies the kept answer.
func hostTake(ctx context.Context, mod api.Module, stack []uint64) {
	in := mustInstance(ctx)
	buf, n := api.DecodeU32(stack[0]), api.DecodeU32(stack[1])
	if uint64(n) > uint64(len(in.pending)) {
		guestPanic("take of %d bytes, the answer has %d", n, len(in.pending))
	}
	if !mod.Memory().Write(buf, in.pending[:n]) {
		guestPanic("take's buffer at %d is outside the guest's memory", buf)
	}
}

// hostNow: now(out) writes i64 unix-nanos | i32 utc-offset-seconds.
func hostNow(ctx context.Context, mod api.Module, stack []uint64) {
	in := mustInstance(ctx)
	now := in.rule.opts.Clock()
	_, offset := now.Zone()
	if o := in.rule.opts.UTCOffset; o != nil {
		offset = *o
	}
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:], uint64(now.UnixNano()))
	binary.LittleEndian.PutUint32(b[8:], uint32(int32(offset)))
	if !mod.Memory().Write(api.DecodeU32(stack[0]), b[:]) {
		guestPanic("now's buffer is outside the guest's memory")
	}
}

// tickBudget is the loop headers a guest with yield points may pass before
// it calls tick again: about 10 to 100 µs of its work, so that a call past
// its deadline, or a garbage collection waiting for the guest's goroutine,
// waits no longer than that, for a host call (about 0.1 µs) each time.
const tickBudget = 10_000

// errInterrupted ends a call at its yield point (hostTick).
var errInterrupted = errors.New("the call was stopped at a yield point")

// hostTick: tick() -> budget, the guest's yield point. It ends the call
// when its context is done (the deadline passed, or the caller's context
// ended); otherwise it answers the next budget. Entering Go here is also
// what lets the runtime preempt the guest's goroutine.
func hostTick(ctx context.Context, _ api.Module, stack []uint64) {
	if mustInstance(ctx).clock.ctx.ended.Load() {
		panic(errInterrupted)
	}
	stack[0] = tickBudget
}
