#!/usr/bin/env node
// A second host for omlet rule components: Node.js instead of wasmtime, jco
// instead of omlet's bindings, sql.js instead of sqlx. It reads JSONL records,
// routes each by its rule-path field to the model that claims it, and writes
// what `omlet run --rule-path-field rule_path` writes: one JSON line per
// output record on stdout, one JSON line per failed or unrouted record on
// stderr, then a summary line on stderr.
//
//   node host.mjs SET.wasm RECORDS.jsonl [KNOWDB.toml ...] [--rule-path-field NAME]
//
// Exit status: 0 when every record gave an output, 1 when some failed or were
// unrouted (as omlet run), 2 when the host itself could not run.

import { readFileSync } from 'node:fs';
import { transpile } from '@bytecodealliance/jco';

import { decodeRecord, encodeRecord } from './lib/frame.mjs';
import { recordFromJson, recordToJson } from './lib/json.mjs';
import { Knowledge, QueryError } from './lib/knowledge.mjs';
import { loadKnowdb } from './lib/knowdb.mjs';

const USAGE = 'usage: node host.mjs SET.wasm RECORDS.jsonl [KNOWDB.toml ...] [--rule-path-field NAME]';

function parseArgs(argv) {
  const files = [];
  let field = 'rule_path';
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '-h' || a === '--help') {
      console.log(USAGE);
      process.exit(0);
    } else if (a === '--rule-path-field') {
      field = argv[++i];
      if (field === undefined) throw new Error(`--rule-path-field needs a name\n${USAGE}`);
    } else if (a.startsWith('--rule-path-field=')) {
      field = a.slice('--rule-path-field='.length);
    } else if (a.startsWith('-') && a !== '-') {
      throw new Error(`unknown option ${a}\n${USAGE}`);
    } else {
      files.push(a);
    }
  }
  if (files.length < 2) throw new Error(USAGE);
  const [component, records, ...knowdbs] = files;
  return { component, records, knowdbs, field };
}

/**
 * The clock import. The offset is 0 (UTC) unless OMLET_UTC_OFFSET gives it in
 * seconds, as it can for omlet; omlet itself otherwise asks the system zone.
 */
function now() {
  const offset = Number.parseInt(process.env.OMLET_UTC_OFFSET ?? '0', 10);
  return {
    unixNanos: BigInt(Date.now()) * 1000000n,
    utcOffsetSeconds: Number.isInteger(offset) ? offset : 0,
  };
}

/**
 * Transpiles the component with jco, in memory, and instantiates it with
 * `imports`. jco writes an ES module that takes its imports as an argument
 * (`instantiation: 'async'`) and a few core wasm modules; the module is
 * loaded from a data: URL and the core modules from the transpiled bytes,
 * so nothing is written to disk.
 */
async function instantiate(componentBytes, imports) {
  const { files } = await transpile(componentBytes, {
    name: 'rule',
    instantiation: 'async',
    noTypescript: true,
    quiet: true,
  });
  const js = Buffer.from(files['rule.js']).toString('base64');
  const mod = await import(`data:text/javascript;base64,${js}`);
  return mod.instantiate((name) => WebAssembly.compile(files[name]), imports);
}

// Rust's `str::trim` removes Unicode White_Space.
const BLANK = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$/;

/** The JSONL input as omlet reads it: lines, blank ones skipped; numbered from 1. */
function* jsonlRecords(text) {
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  let number = 0;
  for (let i = 0; i < lines.length; i++) {
    let raw = lines[i];
    if (i < lines.length - 1 || text.endsWith('\n')) raw = raw.replace(/\r$/, '');
    if (BLANK.test(raw)) continue;
    number += 1;
    yield { number, line: i + 1, raw };
  }
}

const v4net = (a, b, c, d, len) => ({
  high: 0n,
  low: (0xffffn << 32n) | BigInt(((a << 24) | (b << 16) | (c << 8) | d) >>> 0),
  prefix: 96 + len,
});
const INTRANET_NETS = [
  v4net(10, 0, 0, 0, 8),
  v4net(172, 16, 0, 0, 12),
  v4net(192, 168, 0, 0, 16),
  v4net(127, 0, 0, 0, 8),
  { high: 0n, low: 1n, prefix: 128 },
  { high: 0xfc00n << 48n, low: 0n, prefix: 7 },
];

async function main() {
  const args = parseArgs(process.argv.slice(2));

  let kb = null;
  if (args.knowdbs.length > 0) {
    kb = await Knowledge.open();
    for (const k of args.knowdbs) loadKnowdb(k, kb);
  }

  const knowledge = {
    query(statement, params) {
      if (!kb) throw new QueryError('unavailable', 'no knowledge base is configured');
      return kb.query(statement, params);
    },
    columns(statement) {
      if (!kb) throw new QueryError('unknown-statement', `no statement #${statement}`);
      return kb.columns(statement);
    },
    // OML 1.25 §9.1's built-in private ranges, as IPv6 prefixes (IPv4 as
    // ::ffff:a.b.c.d/(96 + n)); this host reads no [intranet_nets].
    intranetNets() {
      return INTRANET_NETS;
    },
  };
  const clock = { now };
  // The generated code looks its imports up by interface name; the typings
  // it comes with spell them with the package version. Both are given.
  const rule = await instantiate(readFileSync(args.component), {
    'omlet:rule/knowledge': knowledge,
    'omlet:rule/knowledge@0.6.0': knowledge,
    'omlet:rule/clock': clock,
    'omlet:rule/clock@0.6.0': clock,
    'omlet:rule/types': {},
    'omlet:rule/types@0.6.0': {},
  });

  let info;
  try {
    info = rule.meta.info();
  } catch (e) {
    throw new Error(`the component carries no usable rule: ${e.payload ?? e.message}`);
  }
  if (kb) {
    // A statement belongs to the model that may run it.
    const fileOf = (i) => info.models.find((m) => m.statements.includes(i))?.file ?? '';
    kb.bind(info.statements, fileOf);
  }
  // omlet's generation starts at 1 with a knowledge base, and is 0 without.
  const generation = kb ? 1n : 0n;

  const text = new TextDecoder('utf-8', { fatal: true }).decode(readFileSync(args.records));
  const started = process.hrtime.bigint();
  let out = [];
  const counts = { records: 0, written: 0, failed: 0, unrouted: 0 };
  const report = (input, kind, error) => {
    counts[kind] += 1;
    const line = { source: args.records, record: input.number, line: input.line, kind, error, input: input.raw };
    process.stderr.write(`${JSON.stringify(line)}\n`);
  };

  for (const input of jsonlRecords(text)) {
    counts.records += 1;
    let fields;
    try {
      fields = recordFromJson(input.raw);
    } catch (e) {
      report(input, 'failed', e.message);
      continue;
    }
    const path = fields.find(([name]) => name === args.field)?.[1];
    if (path === undefined) {
      report(input, 'unrouted', `the record has no rule-path field \`${args.field}\``);
      continue;
    }
    if (path.kind !== 'chars') {
      report(input, 'unrouted', `the rule-path field \`${args.field}\` is not text`);
      continue;
    }
    let output;
    try {
      output = rule.evaluator.evaluate(generation, { tag: 'path', val: path.v }, encodeRecord(fields));
    } catch (e) {
      // An `err` result arrives as a ComponentError carrying the eval-error;
      // anything else is a trap, and the instance is not to be used again.
      if (e?.payload?.kind === undefined) throw new Error(`record ${input.number}: the component trapped: ${e?.stack ?? e}`);
      // A fatal lookup error has a kind of its own; the line says `failed`, as omlet run's does.
      if (e.payload.kind === 'lookup') report(input, 'failed', `lookup failed: ${e.payload.message}`);
      else if (e.payload.kind === 'rejected') report(input, 'failed', `rejected by the rule: ${e.payload.message}`);
      else report(input, e.payload.kind, e.payload.message);
      continue;
    }
    let line;
    try {
      line = recordToJson(decodeRecord(output));
    } catch (e) {
      report(input, 'failed', e.message);
      continue;
    }
    counts.written += 1;
    out.push(line);
    if (out.length >= 4096) {
      process.stdout.write(`${out.join('\n')}\n`);
      out = [];
    }
  }
  if (out.length > 0) process.stdout.write(`${out.join('\n')}\n`);

  const secs = Number(process.hrtime.bigint() - started) / 1e9;
  process.stderr.write(
    `${counts.records} records in ${secs.toFixed(2)} s: ${counts.written} written, ${counts.failed} errors, ${counts.unrouted} unrouted\n`,
  );
  return counts.failed + counts.unrouted === 0 ? 0 : 1;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (e) => {
    process.stderr.write(`error: ${e.message}\n`);
    process.exitCode = 2;
  },
);
