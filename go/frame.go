package omlet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"unicode/utf8"
)

// A frame is the bytes records cross the guest boundary in (docs/abi.md;
// guest/lang/src/frame.rs is the reference). Little-endian:
//
//	u32 records | u32 node-bytes | u32 text-bytes
//	u32 × records   each record's node count
//	node-bytes      the nodes, in pre-order, one record after another
//	text-bytes      UTF-8: every name and text value; nodes point into it
//
// A node is its tag (the Kind), its name's span (u32 start, u32 length into
// the text), then a payload by tag.

// MaxFrameDepth is the deepest nesting a frame may carry.
const MaxFrameDepth = 128

// FrameError says why bytes are not a frame.
type FrameError struct{ Reason string }

func (e *FrameError) Error() string { return e.Reason }

func frameErr(reason string) error { return &FrameError{Reason: reason} }

// frameWriter builds a frame record by record.
type frameWriter struct {
	sizes []uint32
	nodes []byte
	text  []byte
	count uint32
	err   error
	// out is the frame, for encodeReused.
	out []byte
}

func (w *frameWriter) span(s string) {
	w.nodes = binary.LittleEndian.AppendUint32(w.nodes, uint32(len(w.text)))
	w.nodes = binary.LittleEndian.AppendUint32(w.nodes, uint32(len(s)))
	w.text = append(w.text, s...)
}

func (w *frameWriter) head(k Kind, name string) {
	w.count++
	w.nodes = append(w.nodes, byte(k))
	w.span(name)
}

func (w *frameWriter) field(name string, v Value) {
	switch v.Kind {
	case KindChars:
		w.head(KindChars, name)
		w.span(v.Str)
	case KindBigInt:
		if !IsCanonicalBigInt(v.Str) && w.err == nil {
			w.err = fmt.Errorf("field %q: a bigint that is not canonical decimal digits: %q", name, v.Str)
		}
		w.head(KindBigInt, name)
		w.span(v.Str)
	case KindDigit, KindTime:
		w.head(v.Kind, name)
		w.nodes = binary.LittleEndian.AppendUint64(w.nodes, uint64(v.Int))
	case KindFloat:
		w.head(KindFloat, name)
		w.nodes = binary.LittleEndian.AppendUint64(w.nodes, math.Float64bits(v.Float))
	case KindBool:
		w.head(KindBool, name)
		b := byte(0)
		if v.Bool {
			b = 1
		}
		w.nodes = append(w.nodes, b)
	case KindIPv4:
		a := v.IP.Unmap()
		if !a.Is4() && w.err == nil {
			w.err = fmt.Errorf("field %q: an ipv4 value that is not an IPv4 address: %v", name, v.IP)
		}
		w.head(KindIPv4, name)
		b := a.As4()
		w.nodes = binary.LittleEndian.AppendUint32(w.nodes, binary.BigEndian.Uint32(b[:]))
	case KindIPv6:
		if !v.IP.IsValid() && w.err == nil {
			w.err = fmt.Errorf("field %q: an ipv6 value without an address", name)
		}
		w.head(KindIPv6, name)
		b := v.IP.As16()
		w.nodes = binary.LittleEndian.AppendUint64(w.nodes, binary.BigEndian.Uint64(b[:8]))
		w.nodes = binary.LittleEndian.AppendUint64(w.nodes, binary.BigEndian.Uint64(b[8:]))
	case KindNull, KindIgnore:
		w.head(v.Kind, name)
	case KindObj, KindArray:
		w.head(v.Kind, name)
		w.nodes = binary.LittleEndian.AppendUint32(w.nodes, uint32(len(v.Fields)))
		for _, f := range v.Fields {
			n := f.Name
			if v.Kind == KindArray {
				n = ""
			}
			w.field(n, f.Value)
		}
	default:
		if w.err == nil {
			w.err = fmt.Errorf("field %q: unknown value kind %d", name, v.Kind)
		}
	}
}

func (w *frameWriter) record(r Record) {
	w.count = 0
	for _, f := range r.Fields {
		w.field(f.Name, f.Value)
	}
	w.sizes = append(w.sizes, w.count)
}

// size is the bytes of the frame written so far.
func (w *frameWriter) size() int { return 12 + 4*len(w.sizes) + len(w.nodes) + len(w.text) }

func (w *frameWriter) appendTo(out []byte) []byte {
	out = binary.LittleEndian.AppendUint32(out, uint32(len(w.sizes)))
	out = binary.LittleEndian.AppendUint32(out, uint32(len(w.nodes)))
	out = binary.LittleEndian.AppendUint32(out, uint32(len(w.text)))
	for _, s := range w.sizes {
		out = binary.LittleEndian.AppendUint32(out, s)
	}
	out = append(out, w.nodes...)
	return append(out, w.text...)
}

// writerPool keeps frame writers (and their frames) for the one-record
// calls, whose frame is copied into the guest and then done with.
var writerPool = sync.Pool{New: func() any { return new(frameWriter) }}

// encodeReused is EncodeFrame into a pooled writer: the frame is good until
// release(w) gives the writer back.
func encodeReused(records ...Record) (*frameWriter, []byte, error) {
	w := writerPool.Get().(*frameWriter)
	w.sizes, w.nodes, w.text, w.count, w.err = w.sizes[:0], w.nodes[:0], w.text[:0], 0, nil
	for _, r := range records {
		w.record(r)
	}
	if w.err != nil {
		err := w.err
		releaseWriter(w)
		return nil, nil, err
	}
	if uint64(len(w.nodes)) > math.MaxUint32 || uint64(len(w.text)) > math.MaxUint32 {
		releaseWriter(w)
		return nil, nil, errors.New("frame too large")
	}
	w.out = w.appendTo(w.out[:0])
	return w, w.out, nil
}

// releaseWriter gives a writer back to the pool, unless it grew large.
func releaseWriter(w *frameWriter) {
	if cap(w.out) > 1<<20 || cap(w.nodes) > 1<<20 || cap(w.text) > 1<<20 {
		return
	}
	w.err = nil
	writerPool.Put(w)
}

// EncodeFrame writes records as one frame. It fails on a value that no
// frame can hold (a bigint that is not canonical, an ipv4 value holding an
// IPv6 address, an unknown kind) or a frame past 4 GiB.
func EncodeFrame(records ...Record) ([]byte, error) {
	var w frameWriter
	for _, r := range records {
		w.record(r)
	}
	if w.err != nil {
		return nil, w.err
	}
	if uint64(len(w.nodes)) > math.MaxUint32 || uint64(len(w.text)) > math.MaxUint32 {
		return nil, errors.New("frame too large")
	}
	return w.appendTo(make([]byte, 0, w.size())), nil
}

// frameReader reads a frame's records in order.
type frameReader struct {
	sizes []byte
	nodes []byte
	text  string
	at    int
}

func newFrameReader(b []byte) (*frameReader, error) {
	r := new(frameReader)
	if err := r.init(b); err != nil {
		return nil, err
	}
	return r, nil
}

// init sets r to read the frame b (its text copied: what r reads does not
// hold on to b).
func (r *frameReader) init(b []byte) error {
	if len(b) < 12 {
		return frameErr("truncated frame")
	}
	records := uint64(binary.LittleEndian.Uint32(b))
	nodeBytes := uint64(binary.LittleEndian.Uint32(b[4:]))
	textBytes := uint64(binary.LittleEndian.Uint32(b[8:]))
	sizesEnd := 12 + 4*records
	nodesEnd := sizesEnd + nodeBytes
	textEnd := nodesEnd + textBytes
	if textEnd != uint64(len(b)) {
		return frameErr("frame length does not match its header")
	}
	text := b[nodesEnd:textEnd]
	if !utf8.Valid(text) {
		return frameErr("frame text is not UTF-8")
	}
	*r = frameReader{sizes: b[12:sizesEnd], nodes: b[sizesEnd:nodesEnd], text: string(text)}
	return nil
}

func (r *frameReader) records() int { return len(r.sizes) / 4 }

func (r *frameReader) size(i int) uint32 { return binary.LittleEndian.Uint32(r.sizes[4*i:]) }

func (r *frameReader) take(n int) ([]byte, error) {
	if r.at+n > len(r.nodes) || r.at+n < r.at {
		return nil, frameErr("truncated node")
	}
	b := r.nodes[r.at : r.at+n]
	r.at += n
	return b, nil
}

func (r *frameReader) spanText() (string, error) {
	b, err := r.take(8)
	if err != nil {
		return "", err
	}
	start := uint64(binary.LittleEndian.Uint32(b))
	n := uint64(binary.LittleEndian.Uint32(b[4:]))
	if start+n > uint64(len(r.text)) {
		return "", frameErr("a span points outside the frame's text")
	}
	// A span that cuts a character in two is no text (the guest's reader
	// refuses it too).
	boundary := func(i uint64) bool { return i >= uint64(len(r.text)) || utf8.RuneStart(r.text[i]) }
	if !boundary(start) || !boundary(start+n) {
		return "", frameErr("a span points outside the frame's text")
	}
	return r.text[start : start+n], nil
}

// record reads the next record, of count top-level nodes.
func (r *frameReader) record(count uint32) (Record, error) {
	var read uint32
	fields := make([]Field, 0, min(int(count), len(r.nodes)/9+1))
	for read < count {
		f, err := r.tree(&read, 0)
		if err != nil {
			return Record{}, err
		}
		fields = append(fields, f)
	}
	if read != count {
		return Record{}, frameErr("a record's subtrees overrun its node count")
	}
	return Record{Fields: fields}, nil
}

func (r *frameReader) tree(read *uint32, depth int) (Field, error) {
	if depth > MaxFrameDepth {
		return Field{}, frameErr("record nested deeper than 128 levels")
	}
	tag, err := r.take(1)
	if err != nil {
		return Field{}, err
	}
	name, err := r.spanText()
	if err != nil {
		return Field{}, err
	}
	*read++
	k := Kind(tag[0])
	var v Value
	switch k {
	case KindChars, KindBigInt:
		s, err := r.spanText()
		if err != nil {
			return Field{}, err
		}
		if k == KindBigInt && !IsCanonicalBigInt(s) {
			return Field{}, frameErr("a bigint node that is not canonical decimal digits")
		}
		v = Value{Kind: k, Str: s}
	case KindDigit, KindTime, KindFloat:
		b, err := r.take(8)
		if err != nil {
			return Field{}, err
		}
		x := binary.LittleEndian.Uint64(b)
		if k == KindFloat {
			v = Float(math.Float64frombits(x))
		} else {
			v = Value{Kind: k, Int: int64(x)}
		}
	case KindBool:
		b, err := r.take(1)
		if err != nil {
			return Field{}, err
		}
		v = Bool(b[0] != 0)
	case KindIPv4:
		b, err := r.take(4)
		if err != nil {
			return Field{}, err
		}
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], binary.LittleEndian.Uint32(b))
		v = Value{Kind: KindIPv4, IP: netip.AddrFrom4(a)}
	case KindIPv6:
		b, err := r.take(16)
		if err != nil {
			return Field{}, err
		}
		var a [16]byte
		binary.BigEndian.PutUint64(a[:8], binary.LittleEndian.Uint64(b))
		binary.BigEndian.PutUint64(a[8:], binary.LittleEndian.Uint64(b[8:]))
		v = Value{Kind: KindIPv6, IP: netip.AddrFrom16(a)}
	case KindNull, KindIgnore:
		v = Value{Kind: k}
	case KindObj, KindArray:
		b, err := r.take(4)
		if err != nil {
			return Field{}, err
		}
		n := binary.LittleEndian.Uint32(b)
		members := make([]Field, 0, min(int(n), (len(r.nodes)-r.at)/9+1))
		for i := uint32(0); i < n; i++ {
			f, err := r.tree(read, depth+1)
			if err != nil {
				return Field{}, err
			}
			if k == KindArray {
				f.Name = ""
			}
			members = append(members, f)
		}
		v = Value{Kind: k, Fields: members}
	default:
		return Field{}, frameErr("unknown node tag")
	}
	return Field{Name: name, Value: v}, nil
}

// DecodeFrame reads every record of a frame. Damaged bytes are an error
// (a *FrameError), never a panic.
func DecodeFrame(b []byte) ([]Record, error) {
	r, err := newFrameReader(b)
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, r.records())
	for i := 0; i < r.records(); i++ {
		rec, err := r.record(r.size(i))
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	if r.at != len(r.nodes) {
		return nil, frameErr("nodes left over after the last record")
	}
	return out, nil
}

// decodeOne reads the one record of a frame (DecodeFrame's checks, without
// its slice of records).
func decodeOne(b []byte) (Record, error) {
	var r frameReader
	if err := r.init(b); err != nil {
		return Record{}, err
	}
	if n := r.records(); n != 1 {
		return Record{}, fmt.Errorf("expected one output record, the frame has %d", n)
	}
	rec, err := r.record(r.size(0))
	if err != nil {
		return Record{}, err
	}
	if r.at != len(r.nodes) {
		return Record{}, frameErr("nodes left over after the last record")
	}
	return rec, nil
}
