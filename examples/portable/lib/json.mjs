// JSON input and output, the way omlet's host reads and writes records.
//
// Input (host/src/record.rs `from_json_str`, serde_json with preserve_order):
// keys keep their order (a repeated key keeps its first position and its last
// value), an integer literal that fits a signed 64-bit integer is a `digit`,
// every other number is a `float` (`-0` too, as serde_json reads it), strings
// are `chars`. JSON.parse cannot be used: it reorders integer-like keys and
// turns `1.0` and 2^63 into the same kind of number as `1` and `5`.
//
// Output (host/src/record.rs `to_json_string`, spec §11): top-level ignore
// fields are skipped, floats always have a decimal point and never an
// exponent, ip and time values are text, everything else as JSON.
//
// Values are plain objects: { kind, v }, with kind one of chars, digit
// (a JS bigint), bigint (an integer past 64 bits: its decimal digits), float
// (number), bool, null, array (v: values), obj (v: [name,
// value] pairs), and, coming back from the guest, ipv4 (number), ipv6
// ([bigint, bigint]), time (bigint nanoseconds) and ignore.

const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;
// serde_json's default recursion limit: nesting deeper than this is an error.
const MAX_DEPTH = 127;

const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;

class JsonError extends Error {}

/** Parses one JSON text into a value (see the top of this file). */
export function parseJson(text) {
  let i = 0;
  let depth = 0;
  // Messages use serde_json's words where they can; a JSONL record is one line.
  const fail = (what, at = i) => {
    throw new JsonError(`${what} at line 1 column ${Math.max(1, Math.min(at + 1, text.length))}`);
  };
  const ws = () => {
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) i++;
      else break;
    }
  };
  const expect = (ch, what, inside) => {
    if (text[i] !== ch) fail(i < text.length ? what : `EOF while parsing ${inside}`);
    i++;
  };
  const hex4 = () => {
    const h = text.slice(i, i + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(h)) fail(h.length < 4 ? 'unexpected end of hex escape' : 'invalid escape', i + 3);
    i += 4;
    return parseInt(h, 16);
  };
  const string = () => {
    i++;
    let out = '';
    let from = i;
    for (;;) {
      if (i >= text.length) fail('EOF while parsing a string');
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        out += text.slice(from, i);
        i++;
        return out;
      }
      if (c < 0x20) fail('control character (\\u0000-\\u001F) found while parsing a string');
      if (c !== 0x5c) {
        i++;
        continue;
      }
      out += text.slice(from, i);
      i++;
      const e = text[i++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          const hi = hex4();
          if (hi >= 0xdc00 && hi < 0xe000) fail('lone leading surrogate in hex escape', i - 1);
          if (hi >= 0xd800 && hi < 0xdc00) {
            if (text[i] !== '\\' || text[i + 1] !== 'u') fail('unexpected end of hex escape');
            i += 2;
            const lo = hex4();
            if (lo < 0xdc00 || lo >= 0xe000) fail('lone leading surrogate in hex escape', i - 1);
            out += String.fromCharCode(hi, lo);
          } else {
            out += String.fromCharCode(hi);
          }
          break;
        }
        default:
          i--;
          fail('invalid escape');
      }
      from = i;
    }
  };
  const number = () => {
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (!m) fail('invalid number', i + 1);
    const lit = m[0];
    i += lit.length;
    if (/^-?0$/.test(lit) && text[i] >= '0' && text[i] <= '9') fail('invalid number');
    if (m[1] === undefined && m[2] === undefined) {
      const n = BigInt(lit);
      if (lit[0] === '-' && n === 0n) return { kind: 'float', v: -0 };
      if (n >= I64_MIN && n <= I64_MAX) return { kind: 'digit', v: n };
      // Past 64 bits an integer keeps its digits, as the Rust host keeps them.
      return { kind: 'bigint', v: n.toString() };
    }
    const f = Number(lit);
    if (!Number.isFinite(f)) fail('number out of range', i - 1);
    return { kind: 'float', v: f };
  };
  const nested = (parse) => {
    if (++depth > MAX_DEPTH) fail('recursion limit exceeded');
    const v = parse();
    depth--;
    return v;
  };
  const literal = (word, v) => {
    let n = 0;
    while (n < word.length && text[i + n] === word[n]) n++;
    if (n < word.length) fail(i + n < text.length ? 'expected ident' : 'EOF while parsing a value', i + n);
    i += n;
    return v;
  };
  const value = () => {
    ws();
    const c = text[i];
    if (c === '{') return nested(object);
    if (c === '[') return nested(array);
    if (c === '"') return { kind: 'chars', v: string() };
    if (c === '-' || (c >= '0' && c <= '9')) return number();
    if (c === 't') return literal('true', { kind: 'bool', v: true });
    if (c === 'f') return literal('false', { kind: 'bool', v: false });
    if (c === 'n') return literal('null', { kind: 'null' });
    return fail(i < text.length ? 'expected value' : 'EOF while parsing a value');
  };
  const array = () => {
    i++;
    const items = [];
    ws();
    if (text[i] === ']') {
      i++;
      return { kind: 'array', v: items };
    }
    for (;;) {
      items.push(value());
      ws();
      if (text[i] === ',') {
        i++;
        ws();
        if (text[i] === ']') fail('trailing comma');
        continue;
      }
      expect(']', 'expected `,` or `]`', 'a list');
      return { kind: 'array', v: items };
    }
  };
  const object = () => {
    i++;
    // A Map keeps a key's first position and takes its last value, as
    // serde_json's IndexMap does.
    const members = new Map();
    ws();
    if (text[i] === '}') {
      i++;
      return { kind: 'obj', v: [] };
    }
    for (;;) {
      ws();
      if (text[i] !== '"') fail(i < text.length ? 'key must be a string' : 'EOF while parsing an object');
      const k = string();
      ws();
      expect(':', 'expected `:`', 'an object');
      members.set(k, value());
      ws();
      if (text[i] === ',') {
        i++;
        ws();
        if (text[i] === '}') fail('trailing comma');
        continue;
      }
      expect('}', 'expected `,` or `}`', 'an object');
      return { kind: 'obj', v: [...members] };
    }
  };
  const v = value();
  ws();
  if (i < text.length) fail('trailing characters');
  return v;
}

/**
 * One input record: its fields as [name, value] pairs, in order. Throws an
 * Error whose message is the reason, as omlet words it.
 */
export function recordFromJson(text) {
  let v;
  try {
    v = parseJson(text);
  } catch (e) {
    if (e instanceof JsonError) throw new Error(`invalid JSON: ${e.message}`);
    throw e;
  }
  if (v.kind !== 'obj') throw new Error('a record must be a JSON object');
  return v.v;
}

// ----- output -------------------------------------------------------------

/** JSON string escaping as omlet_lang::pipes::json_escape_into does it. */
export function jsonEscape(s) {
  let out = '';
  let from = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    let esc;
    if (c === 0x22) esc = '\\"';
    else if (c === 0x5c) esc = '\\\\';
    else if (c >= 0x20) continue;
    else if (c === 0x08) esc = '\\b';
    else if (c === 0x0c) esc = '\\f';
    else if (c === 0x0a) esc = '\\n';
    else if (c === 0x0d) esc = '\\r';
    else if (c === 0x09) esc = '\\t';
    else esc = '\\u' + c.toString(16).padStart(4, '0');
    out += s.slice(from, i) + esc;
    from = i + 1;
  }
  return out + s.slice(from);
}

/**
 * A finite float the way Rust's `{}` writes an f64: the shortest digits that
 * read back to the same number (what JavaScript picks too), but never in
 * exponent form.
 */
function plainDecimal(v) {
  const s = String(v);
  const m = /^(-?)([0-9]+)(?:\.([0-9]+))?e([+-][0-9]+)$/.exec(s);
  if (!m) return s;
  const [, sign, int, frac = '', exp] = m;
  const digits = (int + frac).replace(/^0+(?=[0-9])/, '');
  const point = int.length + Number(exp);
  if (point <= 0) return `${sign}0.${'0'.repeat(-point)}${digits}`;
  if (point >= digits.length) return sign + digits + '0'.repeat(point - digits.length);
  return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
}

/** omlet_lang::value::JsonFloat, with the NaN and infinity cases of write_json. */
export function jsonFloat(v) {
  if (Number.isNaN(v)) return 'null';
  if (!Number.isFinite(v)) return v > 0 ? '"Infinity"' : '"-Infinity"';
  if (v % 1 === 0) {
    // Rust's `{:.1}` prints the exact value of the double; BigInt does too.
    return (Object.is(v, -0) ? '-0' : BigInt(v).toString()) + '.0';
  }
  return plainDecimal(v);
}

export function ipv4Text(n) {
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

/** Rust's Display for Ipv6Addr: RFC 5952 compression, IPv4-mapped as ::ffff:a.b.c.d. */
export function ipv6Text([hi, lo]) {
  const seg = [];
  for (const half of [hi, lo]) {
    for (let shift = 48n; shift >= 0n; shift -= 16n) seg.push(Number((half >> shift) & 0xffffn));
  }
  if (seg.slice(0, 5).every((s) => s === 0) && seg[5] === 0xffff) {
    return `::ffff:${ipv4Text(((seg[6] << 16) | seg[7]) >>> 0)}`;
  }
  // The longest run of zero segments (the first of equals), if longer than one.
  let best = { start: 0, len: 0 };
  let cur = { start: 0, len: 0 };
  seg.forEach((s, i) => {
    if (s !== 0) {
      cur = { start: 0, len: 0 };
      return;
    }
    if (cur.len === 0) cur.start = i;
    cur.len++;
    if (cur.len > best.len) best = { ...cur };
  });
  const hex = (part) => part.map((s) => s.toString(16)).join(':');
  if (best.len > 1) return `${hex(seg.slice(0, best.start))}::${hex(seg.slice(best.start + best.len))}`;
  return hex(seg);
}

/** omlet_lang::time::civil_from_days: the date of a day number since 1970-01-01. */
function civilFromDays(z0) {
  const z = z0 + 719468;
  const era = Math.trunc((z >= 0 ? z : z - 146096) / 146097);
  const doe = z - era * 146097;
  const yoe = Math.trunc((doe - Math.trunc(doe / 1460) + Math.trunc(doe / 36524) - Math.trunc(doe / 146096)) / 365);
  const y = yoe + era * 400;
  const doy = doe - (365 * yoe + Math.trunc(yoe / 4) - Math.trunc(yoe / 100));
  const mp = Math.trunc((5 * doy + 2) / 153);
  const d = doy - Math.trunc((153 * mp + 2) / 5) + 1;
  const m = mp < 10 ? mp + 3 : mp - 9;
  return [m <= 2 ? y + 1 : y, m, d];
}

const pad = (n, w) => String(n).padStart(w, '0');

/** omlet_lang::time::write_time: `YYYY-MM-DD HH:MM:SS[.fraction]` of naive nanoseconds. */
export function timeText(t) {
  const NS = 1000000000n;
  let secs = t / NS;
  let nanos = t % NS;
  if (nanos < 0n) {
    nanos += NS;
    secs -= 1n;
  }
  let days = secs / 86400n;
  let sod = secs % 86400n;
  if (sod < 0n) {
    sod += 86400n;
    days -= 1n;
  }
  const [year, month, day] = civilFromDays(Number(days));
  const s = Number(sod);
  const yyyy = year < 0 ? `-${pad(-year, 3)}` : pad(year, 4);
  let out = `${yyyy}-${pad(month, 2)}-${pad(day, 2)} ${pad(Math.trunc(s / 3600), 2)}:${pad(Math.trunc(s / 60) % 60, 2)}:${pad(s % 60, 2)}`;
  const ns = Number(nanos);
  if (ns !== 0) {
    if (ns % 1000000 === 0) out += '.' + pad(ns / 1000000, 3);
    else if (ns % 1000 === 0) out += '.' + pad(ns / 1000, 6);
    else out += '.' + pad(ns, 9);
  }
  return out;
}

/** omlet_lang::pipes::write_json. */
function writeValue(v, inArray) {
  switch (v.kind) {
    case 'chars': return `"${jsonEscape(v.v)}"`;
    case 'digit': return v.v.toString();
    case 'bigint': return v.v;
    case 'float': return jsonFloat(v.v);
    case 'bool': return v.v ? 'true' : 'false';
    case 'ipv4': return `"${ipv4Text(v.v)}"`;
    case 'ipv6': return `"${ipv6Text(v.v)}"`;
    case 'time': return `"${timeText(v.v)}"`;
    case 'null': return 'null';
    case 'ignore': return inArray ? '""' : 'null';
    case 'array': return `[${v.v.map((x) => writeValue(x, true)).join(',')}]`;
    case 'obj': return `{${v.v.map(([k, x]) => `"${jsonEscape(k)}":${writeValue(x, false)}`).join(',')}}`;
    default: throw new Error(`unknown value kind ${v.kind}`);
  }
}

/** host/src/record.rs `to_json_string`: one record as one line of JSON. */
export function recordToJson(fields) {
  const parts = [];
  for (const [name, v] of fields) {
    if (v.kind === 'ignore') continue;
    parts.push(`"${jsonEscape(name)}":${writeValue(v, false)}`);
  }
  return `{${parts.join(',')}}`;
}
