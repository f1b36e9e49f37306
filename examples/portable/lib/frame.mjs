// Records to and from the flat WIT encoding (wit/omlet.wit, interface
// `types`), in jco's representation: a record is { text: Uint8Array, nodes },
// each node { name: span, value: { tag, val } }, spans { start, len } into
// `text` (UTF-8 bytes), s64/u64 as bigint. Nodes are in pre-order: an `obj(n)`
// or `array(n)` node is followed by its n children. Same layout as
// host/src/wire.rs writes and reads.

const encoder = new TextEncoder();
// Not fatal: invalid UTF-8 becomes U+FFFD, like Rust's from_utf8_lossy.
const decoder = new TextDecoder('utf-8');

class TextBuffer {
  constructor() {
    this.bytes = new Uint8Array(256);
    this.len = 0;
  }

  span(s) {
    // A UTF-8 encoding takes at most 3 bytes per UTF-16 code unit.
    const need = this.len + s.length * 3;
    if (need > this.bytes.length) {
      const grown = new Uint8Array(Math.max(need, this.bytes.length * 2));
      grown.set(this.bytes.subarray(0, this.len));
      this.bytes = grown;
    }
    const start = this.len;
    this.len += encoder.encodeInto(s, this.bytes.subarray(start)).written;
    return { start, len: this.len - start };
  }

  finish() {
    return this.bytes.slice(0, this.len);
  }
}

function encodeField(text, nodes, name, v) {
  const span = text.span(name);
  switch (v.kind) {
    case 'chars': nodes.push({ name: span, value: { tag: 'chars', val: text.span(v.v) } }); return;
    case 'digit': nodes.push({ name: span, value: { tag: 'digit', val: v.v } }); return;
    case 'float': nodes.push({ name: span, value: { tag: 'float', val: v.v } }); return;
    case 'bool': nodes.push({ name: span, value: { tag: 'boolean', val: v.v } }); return;
    case 'null': nodes.push({ name: span, value: { tag: 'null' } }); return;
    case 'ignore': nodes.push({ name: span, value: { tag: 'ignore' } }); return;
    case 'ipv4': nodes.push({ name: span, value: { tag: 'ipv4', val: v.v } }); return;
    case 'ipv6': nodes.push({ name: span, value: { tag: 'ipv6', val: v.v } }); return;
    case 'time': nodes.push({ name: span, value: { tag: 'time', val: v.v } }); return;
    case 'array':
      nodes.push({ name: span, value: { tag: 'array', val: v.v.length } });
      for (const item of v.v) encodeField(text, nodes, '', item);
      return;
    case 'obj':
      // Members go in their input order: the guest sorts them (and keeps the
      // last of a repeated name), as the Rust host's reader does.
      nodes.push({ name: span, value: { tag: 'obj', val: v.v.length } });
      for (const [k, item] of v.v) encodeField(text, nodes, k, item);
      return;
    default:
      throw new Error(`unknown value kind ${v.kind}`);
  }
}

/** A record ([name, value] pairs) as a WIT `record`. */
export function encodeRecord(fields) {
  const text = new TextBuffer();
  const nodes = [];
  for (const [name, v] of fields) encodeField(text, nodes, name, v);
  return { text: text.finish(), nodes };
}

/** A WIT `record` (or one record's nodes of a frame) as [name, value] pairs. */
export function decodeRecord(text, nodes) {
  const str = ({ start, len }) => {
    if (start + len > text.length) throw new Error('span outside the text buffer');
    return decoder.decode(text.subarray(start, start + len));
  };
  let i = 0;
  const node = () => {
    const n = nodes[i++];
    if (n === undefined) throw new Error('truncated node list');
    const name = str(n.name);
    const { tag, val } = n.value;
    switch (tag) {
      case 'chars': return [name, { kind: 'chars', v: str(val) }];
      case 'digit': return [name, { kind: 'digit', v: val }];
      case 'float': return [name, { kind: 'float', v: val }];
      case 'boolean': return [name, { kind: 'bool', v: val }];
      case 'ipv4': return [name, { kind: 'ipv4', v: val }];
      case 'ipv6': return [name, { kind: 'ipv6', v: val }];
      case 'time': return [name, { kind: 'time', v: val }];
      case 'null': return [name, { kind: 'null' }];
      case 'ignore': return [name, { kind: 'ignore' }];
      case 'obj':
      case 'array': {
        const children = [];
        for (let c = 0; c < val; c++) children.push(node());
        return tag === 'obj'
          ? [name, { kind: 'obj', v: children }]
          : [name, { kind: 'array', v: children.map(([, v]) => v) }];
      }
      default:
        throw new Error(`unknown value tag ${tag}`);
    }
  };
  const fields = [];
  while (i < nodes.length) fields.push(node());
  return fields;
}
