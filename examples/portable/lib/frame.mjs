// Records to and from frames, the bytes that cross the component boundary
// (wit/omlet.wit, interface `types`; guest/lang/src/frame.rs is the
// reference). jco passes a frame as a Uint8Array.
//
// Layout, little-endian: u32 records | u32 node-bytes | u32 text-bytes, then
// a u32 node count per record, the nodes, and the UTF-8 text. A node is a tag
// byte, its name as a span of the text (u32 start, u32 length), then a
// payload by tag (see TAG). Nodes are in pre-order: an obj or array node is
// followed by its n members or elements.
//
// Values here are { kind, v }: digit and time as bigint, bigint (an integer
// past 64 bits) as its decimal digits, ipv4 as a number,
// ipv6 as [high, low] bigints, obj as [name, value] pairs, array as values.

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

const TAG = { chars: 0, digit: 1, float: 2, bool: 3, ipv4: 4, ipv6: 5, time: 6, null: 7, ignore: 8, obj: 9, array: 10, bigint: 11 };
const KIND = Object.fromEntries(Object.entries(TAG).map(([k, t]) => [t, k]));

/** A growable byte buffer with little-endian writers. */
class Bytes {
  constructor(size) {
    this.buf = new Uint8Array(size);
    this.view = new DataView(this.buf.buffer);
    this.len = 0;
  }

  room(n) {
    if (this.len + n <= this.buf.length) return;
    const grown = new Uint8Array(Math.max(this.len + n, this.buf.length * 2));
    grown.set(this.buf.subarray(0, this.len));
    this.buf = grown;
    this.view = new DataView(grown.buffer);
  }

  u8(x) { this.room(1); this.buf[this.len++] = x; }
  u32(x) { this.room(4); this.view.setUint32(this.len, x, true); this.len += 4; }
  i64(x) { this.room(8); this.view.setBigInt64(this.len, BigInt(x), true); this.len += 8; }
  u64(x) { this.room(8); this.view.setBigUint64(this.len, BigInt(x), true); this.len += 8; }
  f64(x) { this.room(8); this.view.setFloat64(this.len, x, true); this.len += 8; }

  /** Appends `s` as UTF-8; returns its [start, length]. */
  text(s) {
    // A UTF-8 encoding takes at most 3 bytes per UTF-16 code unit.
    this.room(s.length * 3);
    const start = this.len;
    this.len += encoder.encodeInto(s, this.buf.subarray(start)).written;
    return [start, this.len - start];
  }

  bytes() { return this.buf.subarray(0, this.len); }
}

function encodeField(nodes, text, name, v) {
  let count = 1;
  const head = (tag) => {
    nodes.u8(tag);
    const [start, len] = text.text(name);
    nodes.u32(start);
    nodes.u32(len);
  };
  switch (v.kind) {
    case 'chars': case 'bigint': {
      head(TAG[v.kind]);
      const [start, len] = text.text(v.v);
      nodes.u32(start);
      nodes.u32(len);
      break;
    }
    case 'digit': head(TAG.digit); nodes.i64(v.v); break;
    case 'float': head(TAG.float); nodes.f64(v.v); break;
    case 'bool': head(TAG.bool); nodes.u8(v.v ? 1 : 0); break;
    case 'ipv4': head(TAG.ipv4); nodes.u32(v.v); break;
    case 'ipv6': head(TAG.ipv6); nodes.u64(v.v[0]); nodes.u64(v.v[1]); break;
    case 'time': head(TAG.time); nodes.i64(v.v); break;
    case 'null': head(TAG.null); break;
    case 'ignore': head(TAG.ignore); break;
    case 'array':
      head(TAG.array);
      nodes.u32(v.v.length);
      for (const item of v.v) count += encodeField(nodes, text, '', item);
      break;
    case 'obj':
      // Members go in their input order: the guest sorts them (and keeps the
      // last of a repeated name), as it does for the Rust host.
      head(TAG.obj);
      nodes.u32(v.v.length);
      for (const [k, item] of v.v) count += encodeField(nodes, text, k, item);
      break;
    default:
      throw new Error(`unknown value kind ${v.kind}`);
  }
  return count;
}

/** One record ([name, value] pairs) as a frame. */
export function encodeRecord(fields) {
  const nodes = new Bytes(256);
  const text = new Bytes(256);
  let count = 0;
  for (const [name, v] of fields) count += encodeField(nodes, text, name, v);
  const out = new Bytes(16 + nodes.len + text.len);
  out.u32(1);
  out.u32(nodes.len);
  out.u32(text.len);
  out.u32(count);
  out.room(nodes.len + text.len);
  out.buf.set(nodes.bytes(), out.len);
  out.buf.set(text.bytes(), out.len + nodes.len);
  out.len += nodes.len + text.len;
  return out.bytes();
}

/** The one record of a frame as [name, value] pairs. */
export function decodeRecord(frame) {
  const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  if (frame.length < 12) throw new Error('truncated frame');
  const records = view.getUint32(0, true);
  const nodeBytes = view.getUint32(4, true);
  const textBytes = view.getUint32(8, true);
  if (records !== 1) throw new Error(`expected one record, the frame has ${records}`);
  let at = 12 + 4 * records;
  const nodesEnd = at + nodeBytes;
  if (nodesEnd + textBytes !== frame.length) throw new Error('frame length does not match its header');
  const size = view.getUint32(12, true);
  const text = frame.subarray(nodesEnd);
  const need = (n) => {
    if (at + n > nodesEnd) throw new Error('truncated node');
  };
  const u32 = () => { need(4); const x = view.getUint32(at, true); at += 4; return x; };
  const str = () => {
    const start = u32();
    const len = u32();
    if (start + len > text.length) throw new Error("a span points outside the frame's text");
    return decoder.decode(text.subarray(start, start + len));
  };
  let read = 0;
  const node = () => {
    need(1);
    const kind = KIND[frame[at++]];
    read += 1;
    const name = str();
    switch (kind) {
      case 'chars': case 'bigint': return [name, { kind, v: str() }];
      case 'digit': case 'time': { need(8); const v = view.getBigInt64(at, true); at += 8; return [name, { kind, v }]; }
      case 'float': { need(8); const v = view.getFloat64(at, true); at += 8; return [name, { kind, v }]; }
      case 'bool': need(1); return [name, { kind, v: frame[at++] !== 0 }];
      case 'ipv4': return [name, { kind, v: u32() }];
      case 'ipv6': {
        need(16);
        const v = [view.getBigUint64(at, true), view.getBigUint64(at + 8, true)];
        at += 16;
        return [name, { kind, v }];
      }
      case 'null': case 'ignore': return [name, { kind }];
      case 'obj': case 'array': {
        const n = u32();
        const children = [];
        for (let c = 0; c < n; c++) children.push(node());
        return kind === 'obj'
          ? [name, { kind, v: children }]
          : [name, { kind, v: children.map(([, v]) => v) }];
      }
      default:
        throw new Error('unknown node tag');
    }
  };
  const fields = [];
  while (read < size) fields.push(node());
  return fields;
}
