// `knowledge.query` and `knowledge.columns` answered by SQLite compiled to
// WebAssembly (sql.js), the way omlet's SqliteProvider answers them
// (host/src/knowledge/sqlite.rs and mod.rs):
//
// - a rule's statements are bound once, at load: `:name` parameters become
//   one `?` per occurrence (quoted text left alone), and each statement is
//   prepared, so a missing table or column fails the load;
// - `query(i, params)` binds the parameters in the order of the statement's
//   `params`, runs it and answers its first row, cells typed by SQLite's
//   storage class;
// - errors are `failed`, not fatal (omlet's default `on_lookup_error =
//   "absent"`: the lookup then reads as absent).
//
// sql.js binds a JavaScript number as an integer when it fits 32 bits and as
// a double otherwise, and a bigint as text. To bind exactly what the Rust
// host binds, a placeholder whose cell sql.js would bind with another type is
// written `+CAST(? AS INTEGER)` or `+CAST(? AS REAL)`: the same value, and
// (with the unary `+`) no affinity, like a bound parameter.

import initSqlJs from 'sql.js';

const I32_MIN = -(2n ** 31n);
const I32_MAX = 2n ** 31n - 1n;

/** The SQL text for one placeholder and the JavaScript value to bind to it. */
function placeholder(cell) {
  switch (cell.tag) {
    case 'null': return ['?', null];
    case 'integer':
      return cell.val >= I32_MIN && cell.val <= I32_MAX ? ['?', Number(cell.val)] : ['+CAST(? AS INTEGER)', cell.val.toString()];
    case 'real':
      // sql.js binds an integral number that fits 32 bits with sqlite3_bind_int.
      return cell.val === (cell.val | 0) ? ['+CAST(? AS REAL)', cell.val] : ['?', cell.val];
    case 'text': return ['?', cell.val];
    case 'blob': return ['?', cell.val];
    default: throw new Error(`unknown cell ${cell.tag}`);
  }
}

// One letter per placeholder form: the key of a statement's prepared variants.
const SIGNATURE = { '?': 'p', '+CAST(? AS INTEGER)': 'i', '+CAST(? AS REAL)': 'r' };

/** A value sql.js returns (with useBigInt) as a WIT `cell`. */
function toCell(v) {
  if (v === null || v === undefined) return { tag: 'null' };
  if (typeof v === 'bigint') return { tag: 'integer', val: v };
  if (typeof v === 'number') return { tag: 'real', val: v };
  if (typeof v === 'string') return { tag: 'text', val: v };
  return { tag: 'blob', val: v };
}

const quoteIdent = (s) => `"${s.replaceAll('"', '""')}"`;
const isIdent = (c) => c !== undefined && /[A-Za-z0-9_]/.test(c);

/**
 * mod.rs `rewrite_placeholders`: `:name` → `?` for each occurrence outside
 * quotes; returns the pieces of SQL between placeholders and, per
 * placeholder, the index of the parameter it takes.
 */
export function splitPlaceholders(sql, params) {
  const pieces = [];
  const order = [];
  let cur = '';
  let i = 0;
  while (i < sql.length) {
    const c = sql[i];
    if (c === "'" || c === '"') {
      const close = sql.indexOf(c, i + 1);
      const end = close < 0 ? sql.length : close + 1;
      cur += sql.slice(i, end);
      i = end;
    } else if (c === ':' && isIdent(sql[i + 1])) {
      let end = i + 1;
      while (isIdent(sql[end])) end++;
      const idx = params.indexOf(sql.slice(i + 1, end));
      if (idx >= 0) {
        pieces.push(cur);
        cur = '';
        order.push(idx);
      } else {
        cur += sql.slice(i, end);
      }
      i = end;
    } else {
      cur += c;
      i++;
    }
  }
  pieces.push(cur);
  return { pieces, order };
}

// ----- the OML SQL helper functions (spec §8.11.4), as in omlet_lang::pipes::helper

const IPV4 = /^(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})$/;

function ip4(v) {
  if (typeof v === 'string') {
    const m = IPV4.exec(v.trim());
    if (!m) return undefined;
    const o = m.slice(1).map(Number);
    if (o.some((x) => x > 255)) return undefined;
    return ((o[0] << 24) | (o[1] << 16) | (o[2] << 8) | o[3]) >>> 0;
  }
  if (typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 0xffffffff) return v;
  return undefined;
}

function cidr4(v) {
  if (typeof v !== 'string') return undefined;
  const s = v.trim();
  const slash = s.indexOf('/');
  if (slash < 0) return undefined;
  const ip = ip4(s.slice(0, slash));
  const bits = s.slice(slash + 1);
  if (ip === undefined || !/^\+?[0-9]+$/.test(bits) || Number(bits) > 32) return undefined;
  const mask = Number(bits) === 0 ? 0 : (0xffffffff << (32 - Number(bits))) >>> 0;
  return [(ip & mask) >>> 0, (ip | ~mask) >>> 0];
}

const ipText = (n) => `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;

// sql.js hands integer arguments over as numbers, and returns a number as a
// REAL (a boolean as an INTEGER 0 or 1). OML lookups select plain columns
// only, so a helper's result is only ever compared, never returned.
const HELPERS = {
  ip4_int: (a) => ip4(a) ?? 0,
  ip4_between: (a, lo, hi) => {
    const [x, l, h] = [ip4(a), ip4(lo), ip4(hi)];
    return x !== undefined && l !== undefined && h !== undefined && l <= x && x <= h;
  },
  cidr4_min: (c) => cidr4(c)?.[0] ?? null,
  cidr4_max: (c) => cidr4(c)?.[1] ?? null,
  cidr4_contains: (a, c) => {
    const [x, r] = [ip4(a), cidr4(c)];
    return x !== undefined && r !== undefined && r[0] <= x && x <= r[1];
  },
  ip4_text: (n) => (typeof n === 'number' && Number.isInteger(n) && n >= 0 && n <= 0xffffffff ? ipText(n) : null),
  trim_quotes: (s) => {
    if (typeof s !== 'string' || s.length < 2) return s;
    const q = s[0];
    return (q === '"' || q === "'") && s[s.length - 1] === q ? s.slice(1, -1) : s;
  },
};

export class QueryError extends Error {
  constructor(code, message) {
    super(message);
    // jco turns an exception with a `payload` into the import's `err` result.
    this.payload = { code, message, fatal: false };
  }
}

export class Knowledge {
  static async open() {
    const SQL = await initSqlJs();
    return new Knowledge(new SQL.Database());
  }

  constructor(db) {
    this.db = db;
    for (const [name, fn] of Object.entries(HELPERS)) {
      this.db.create_function(name, fn);
    }
    this.bound = [];
  }

  /** Runs administrative SQL (one or more statements). */
  execute(sql) {
    try {
      this.db.exec(sql);
    } catch (e) {
      throw new Error(`\`${sql.trim()}\`: ${e.message}`);
    }
  }

  /** Runs `sql` with `cells` for its `?`s (the pieces between them), returning the first row or undefined. */
  #run(pieces, cells, cache) {
    let text = pieces[0];
    const values = [];
    let signature = '';
    cells.forEach((cell, k) => {
      const [ph, v] = placeholder(cell);
      text += ph + pieces[k + 1];
      values.push(v);
      signature += SIGNATURE[ph];
    });
    let stmt = cache?.get(signature);
    if (!stmt) {
      stmt = this.db.prepare(text);
      cache?.set(signature, stmt);
    }
    try {
      stmt.bind(values);
      return stmt.step() ? stmt.get(null, { useBigInt: true }) : undefined;
    } finally {
      if (cache) stmt.reset();
      else stmt.free();
    }
  }

  /** Creates a table from column types (SQLite's names) and inserts the rows, all or nothing. */
  loadTable(table, columns, types, rows) {
    const cols = columns.map((c, i) => `${quoteIdent(c)} ${types[i] ?? 'TEXT'}`);
    this.execute(`create table ${quoteIdent(table)} (${cols.join(', ')})`);
    this.insertRows(table, columns.length, rows, false);
  }

  /** Inserts rows; with `skipBad`, a row SQLite rejects is skipped and counted. */
  insertRows(table, width, rows, skipBad) {
    const pieces = [`insert into ${quoteIdent(table)} values (`, ...Array(width - 1).fill(', '), ')'];
    const cache = new Map();
    let skipped = 0;
    if (!skipBad) this.db.exec('begin');
    try {
      rows.forEach((row, n) => {
        try {
          this.#run(pieces, row, cache);
        } catch (e) {
          if (!skipBad) throw new Error(`table ${table}, row ${n + 1}: ${e.message}`);
          skipped++;
          console.warn(`table ${table}, row ${n + 1}: ${e.message}; skipped`);
        }
      });
      if (!skipBad) this.db.exec('commit');
    } catch (e) {
      if (!skipBad) this.db.exec('rollback');
      throw e;
    } finally {
      for (const s of cache.values()) s.free();
    }
    return skipped;
  }

  count(table) {
    return this.#run([`select count(*) from ${quoteIdent(table)}`], [])[0];
  }

  /**
   * Binds a rule's statements (meta.info's `statements`): rewrites and
   * prepares each. Throws naming the first the database rejects.
   */
  bind(statements, fileOf) {
    this.bound = statements.map((s, index) => {
      const { pieces, order } = splitPlaceholders(s.sql, s.params);
      let columns;
      try {
        const stmt = this.db.prepare(pieces.join('?'));
        columns = stmt.getColumnNames();
        stmt.free();
      } catch (e) {
        throw new Error(`${fileOf(index)}:${s.line}:${s.column}: lookup \`${s.sql}\` fails on the knowledge base: ${e.message}`);
      }
      return { sql: pieces.join('?'), pieces, order, columns, prepared: new Map() };
    });
  }

  /** knowledge.query: the first row of statement `index` with `params` bound. */
  query(index, params) {
    const s = this.bound[index];
    if (!s) throw new QueryError('unknown-statement', `no statement #${index}`);
    const cells = s.order.map((i) => params[i] ?? { tag: 'null' });
    let row;
    try {
      row = this.#run(s.pieces, cells, s.prepared);
    } catch (e) {
      throw new QueryError('failed', `\`${s.sql}\`: ${e.message}`);
    }
    return { row: row?.map(toCell), cacheable: true };
  }

  /** knowledge.columns: the column names statement `index` returns. */
  columns(index) {
    const s = this.bound[index];
    if (!s) throw new QueryError('unknown-statement', `no statement #${index}`);
    return s.columns;
  }
}
