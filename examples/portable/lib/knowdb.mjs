// Reading knowdb.toml files and their CSV tables (what
// host/src/knowledge/knowdb.rs reads), without dependencies.

import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

// ----- TOML, the subset knowdb files use ------------------------------------
//
// Comments, `[table]` and `[[array-of-tables]]` headers, and `key = value`
// with bare or quoted keys; values are strings ("basic" with escapes, or
// 'literal'), integers, booleans and arrays of those. Anything else is an
// error, never a silent misreading.

export function parseToml(text, file = 'TOML') {
  const root = {};
  let table = root;
  let i = 0;
  let line = 1;
  const fail = (what) => {
    throw new Error(`${file}:${line}: ${what}`);
  };
  const skip = (newlines) => {
    while (i < text.length) {
      const c = text[i];
      if (c === ' ' || c === '\t' || c === '\r') i++;
      else if (c === '\n' && newlines) {
        i++;
        line++;
      } else if (c === '#') {
        while (i < text.length && text[i] !== '\n') i++;
      } else break;
    }
  };
  const basic = () => {
    i++;
    let out = '';
    for (;;) {
      const c = text[i++];
      if (c === undefined || c === '\n') fail('unterminated string');
      if (c === '"') return out;
      if (c !== '\\') {
        out += c;
        continue;
      }
      const e = text[i++];
      const simple = { b: '\b', t: '\t', n: '\n', f: '\f', r: '\r', '"': '"', '\\': '\\' }[e];
      if (simple !== undefined) out += simple;
      else if (e === 'u' || e === 'U') {
        const n = e === 'u' ? 4 : 8;
        const h = text.slice(i, i + n);
        if (!/^[0-9a-fA-F]+$/.test(h) || h.length !== n) fail('invalid unicode escape');
        out += String.fromCodePoint(parseInt(h, 16));
        i += n;
      } else fail(`invalid escape \\${e}`);
    }
  };
  const literal = () => {
    const end = text.indexOf("'", i + 1);
    const nl = text.indexOf('\n', i + 1);
    if (end < 0 || (nl >= 0 && nl < end)) fail('unterminated string');
    const s = text.slice(i + 1, end);
    i = end + 1;
    return s;
  };
  const key = () => {
    if (text[i] === '"') return basic();
    if (text[i] === "'") return literal();
    const m = /[A-Za-z0-9_-]+/y;
    m.lastIndex = i;
    const k = m.exec(text);
    if (!k) fail('expected a key');
    i += k[0].length;
    return k[0];
  };
  const value = () => {
    const c = text[i];
    if (c === '"') {
      if (text.startsWith('"""', i)) fail('multi-line strings are not supported here');
      return basic();
    }
    if (c === "'") {
      if (text.startsWith("'''", i)) fail('multi-line strings are not supported here');
      return literal();
    }
    if (c === '[') {
      i++;
      const items = [];
      for (;;) {
        skip(true);
        if (text[i] === ']') {
          i++;
          return items;
        }
        items.push(value());
        skip(true);
        if (text[i] === ',') i++;
        else if (text[i] !== ']') fail('expected `,` or `]` in array');
      }
    }
    const m = /(true|false|[+-]?[0-9](?:_?[0-9])*)(?=[\s,\]#]|$)/y;
    m.lastIndex = i;
    const v = m.exec(text);
    if (!v) fail('unsupported value (this reader knows strings, integers, booleans and arrays)');
    i += v[0].length;
    if (v[1] === 'true' || v[1] === 'false') return v[1] === 'true';
    const n = BigInt(v[1].replaceAll('_', ''));
    return Number.isSafeInteger(Number(n)) ? Number(n) : n;
  };
  const endOfLine = () => {
    skip(false);
    if (i < text.length && text[i] !== '\n') fail('expected the end of the line');
  };
  for (;;) {
    skip(true);
    if (i >= text.length) return root;
    if (text.startsWith('[[', i)) {
      i += 2;
      const name = key();
      if (!text.startsWith(']]', i)) fail('expected `]]`');
      i += 2;
      if (root[name] !== undefined && !Array.isArray(root[name])) fail(`\`${name}\` is not an array of tables`);
      table = {};
      (root[name] ??= []).push(table);
      endOfLine();
    } else if (text[i] === '[') {
      i++;
      const name = key();
      if (text[i] !== ']') fail('expected `]` (dotted table names are not supported here)');
      i++;
      if (root[name] !== undefined) fail(`table \`${name}\` defined twice`);
      table = root[name] = {};
      endOfLine();
    } else {
      const k = key();
      skip(false);
      if (text[i] !== '=') fail('expected `=` (dotted keys are not supported here)');
      i++;
      skip(false);
      if (Object.hasOwn(table, k)) fail(`duplicate key \`${k}\``);
      table[k] = value();
      endOfLine();
    }
  }
}

// ----- CSV, as the Rust `csv` crate reads it by default ----------------------
//
// Comma-separated, `"` quotes with `""` inside, CRLF, LF or CR line ends, a
// UTF-8 byte-order mark ignored, empty lines skipped.

export function parseCsv(text) {
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  const rows = [];
  let row = [];
  let field = '';
  let i = 0;
  let lineStart = true;
  const endRow = () => {
    row.push(field);
    rows.push(row);
    row = [];
    field = '';
    lineStart = true;
  };
  while (i < text.length) {
    const c = text[i];
    if (c === '\r' || c === '\n') {
      i += c === '\r' && text[i + 1] === '\n' ? 2 : 1;
      if (lineStart && row.length === 0 && field === '') continue;
      endRow();
      continue;
    }
    lineStart = false;
    if (c === '"' && field === '') {
      i++;
      for (;;) {
        if (i >= text.length) break;
        if (text[i] === '"') {
          if (text[i + 1] === '"') {
            field += '"';
            i += 2;
            continue;
          }
          i++;
          break;
        }
        field += text[i++];
      }
      continue;
    }
    if (c === ',') {
      row.push(field);
      field = '';
      i++;
      continue;
    }
    field += c;
    i++;
  }
  if (!lineStart || row.length > 0 || field !== '') endRow();
  return rows;
}

/** Reads a CSV file: trimmed header names, rows, and the rows of the wrong width. */
function readCsv(path, skipBad) {
  const [header, ...records] = parseCsv(readFileSync(path, 'utf8'));
  if (!header) throw new Error(`${path}: no header row`);
  const columns = header.map((h) => h.trim());
  const rows = [];
  records.forEach((r, n) => {
    if (r.length === columns.length) rows.push(r);
    else {
      const msg = `${path} record ${n + 1}: found record with ${r.length} fields, but the previous record has ${columns.length} fields`;
      if (!skipBad) throw new Error(msg);
      console.warn(`${msg}; skipped`);
    }
  });
  return { columns, rows };
}

// ----- types, as knowdb.rs infers and converts them --------------------------

const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;

/** Rust's `str::parse::<i64>`: an optional sign and decimal digits, in range. */
export function parseI64(s) {
  if (!/^[+-]?[0-9]+$/.test(s)) return undefined;
  const n = BigInt(s);
  return n >= I64_MIN && n <= I64_MAX ? n : undefined;
}

/** Rust's `str::parse::<f64>`: decimal with optional exponent, `inf`, `infinity`, `nan`. */
export function parseF64(s) {
  const m = /^([+-]?)(?:(inf|infinity|nan)|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)$/i.exec(s);
  if (!m) return undefined;
  if (m[2] !== undefined) {
    if (m[2].toLowerCase() === 'nan') return NaN;
    return m[1] === '-' ? -Infinity : Infinity;
  }
  return Number(m[1] + m[3] + (m[4] ?? ''));
}

function inferTypes(n, rows) {
  return Array.from({ length: n }, (_, i) => {
    let int = true;
    let real = true;
    let any = false;
    for (const r of rows) {
      const v = r[i];
      if (v === undefined || v === '') continue;
      any = true;
      int &&= parseI64(v) !== undefined;
      real &&= parseF64(v) !== undefined;
    }
    if (any && int) return 'INTEGER';
    if (any && real) return 'REAL';
    return 'TEXT';
  });
}

/** A CSV row as cells of the column types (knowdb.rs `typed_row`). */
function typedRow(row, types) {
  return row.map((v, i) => {
    const t = (types[i] ?? 'TEXT').toUpperCase();
    if (t === 'INTEGER' || t === 'INT' || t === 'BIGINT') {
      const n = parseI64(v);
      if (n !== undefined) return { tag: 'integer', val: n };
    } else if (t === 'REAL' || t === 'FLOAT' || t === 'DOUBLE') {
      const f = parseF64(v);
      if (f !== undefined) return { tag: 'real', val: f };
    } else {
      return { tag: 'text', val: v };
    }
    return v === '' ? { tag: 'null' } : { tag: 'text', val: v };
  });
}

const TABLE_KEYS = new Set(['name', 'csv', 'types', 'create', 'insert', 'expected_rows', 'on_error']);

/**
 * Loads every table of a knowdb.toml into `kb` (a Knowledge, see
 * knowledge.mjs), the way knowdb.rs `load` does.
 */
export function loadKnowdb(path, kb) {
  const spec = parseToml(readFileSync(path, 'utf8'), path);
  const dir = dirname(path);
  for (const t of spec.tables ?? []) {
    for (const k of Object.keys(t)) {
      if (!TABLE_KEYS.has(k)) throw new Error(`${path}: unknown field \`${k}\` in a table`);
    }
    if (typeof t.name !== 'string') throw new Error(`${path}: a table needs a \`name\``);
    const onError = t.on_error ?? 'fail';
    if (onError !== 'fail' && onError !== 'skip') throw new Error(`${path}: on_error is "fail" or "skip"`);
    const skip = onError === 'skip';
    const sqlFile = (p) => readFileSync(resolve(dir, p), 'utf8');
    if (t.create !== undefined) kb.execute(sqlFile(t.create));
    if (t.csv !== undefined) {
      const { columns, rows } = readCsv(resolve(dir, t.csv), skip);
      let types = t.types;
      if (types !== undefined && types.length !== columns.length) {
        throw new Error(`${path}: table ${t.name} has ${columns.length} columns but ${types.length} types`);
      }
      types ??= inferTypes(columns.length, rows);
      const typed = rows.map((r) => typedRow(r, types));
      if (t.create !== undefined) {
        const skipped = kb.insertRows(t.name, columns.length, typed, skip);
        if (skipped > 0) console.warn(`table ${t.name}: ${skipped} rows skipped`);
      } else {
        kb.loadTable(t.name, columns, types, typed);
      }
    } else if (t.create === undefined) {
      throw new Error(`${path}: table ${t.name} needs \`csv\` or \`create\``);
    }
    if (t.insert !== undefined) {
      try {
        kb.execute(sqlFile(t.insert));
      } catch (e) {
        if (!skip) throw e;
        console.warn(`table ${t.name}: insert file failed; skipped: ${e.message}`);
      }
    }
    if (t.expected_rows !== undefined) {
      const got = kb.count(t.name);
      if (BigInt(got) !== BigInt(t.expected_rows)) {
        throw new Error(`${path}: table ${t.name} has ${got} rows, expected ${t.expected_rows}`);
      }
    }
  }
}
