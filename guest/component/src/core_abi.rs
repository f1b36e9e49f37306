//! The core ABI's door (docs/abi.md): plain exports over integers and the
//! guest's memory, and the imports of module `omlet:core@1`, for hosts
//! without the component model (wazero, Chicory). Built with the feature
//! `core-abi` instead of the WIT door (`wit.rs`); both call the same
//! functions of the crate root, so the two artifacts cannot drift apart.
//!
//! The buffers that cross the boundary live in [`Door`]: the input buffer
//! the host writes calls into, the answer the return area points at, and
//! the scratch buffers of the imports. Each keeps its allocation from call
//! to call, so a one-record call allocates nothing here.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use omlet_lang::Route;
use omlet_lang::eval::{Cell, QueryError};
use omlet_lang::intranet::Net;
use omlet_lang::ir::IR_VERSION;
use omlet_lang::pipes::json_escape_into;

use crate::{Kind, RecordFailure};

/// The ABI version `omlet_abi_version` reports; the import module's name
/// carries it too.
const ABI_VERSION: u32 = 1;

/// The input buffer's least size, so that small records never regrow it.
const MIN_INPUT: usize = 4096;

/// The answer buffer's first size for the imports' answers: one row of a
/// few cells fits, larger answers come through `take`.
const ANSWER_START: usize = 1024;

#[link(wasm_import_module = "omlet:core@1")]
unsafe extern "C" {
    #[link_name = "query"]
    fn host_query(statement: u32, params: *const u8, params_len: u32, buf: *mut u8, cap: u32) -> u32;
    #[link_name = "columns"]
    fn host_columns(statement: u32, buf: *mut u8, cap: u32) -> u32;
    #[link_name = "intranet_nets"]
    fn host_intranet_nets(buf: *mut u8, cap: u32) -> u32;
    #[link_name = "take"]
    fn host_take(buf: *mut u8, len: u32);
    #[link_name = "now"]
    fn host_now(out: *mut u8);
    #[link_name = "tick"]
    fn host_tick() -> u32;
}

/// The guest's yield point (docs/abi.md, `tick`): where the host may end a
/// call. Batch calls pass it before they start; a module built by `omlet
/// build --target core` also passes it every so many loop headers, counted
/// in its `omlet_tick_budget` global (whose next count the host answers,
/// unused here).
fn tick() {
    // SAFETY: the import takes no arguments and only answers a number.
    let _ = unsafe { host_tick() };
}

/// The buffers of the boundary.
struct Door {
    /// What the host writes a call's route and frame into (`omlet_input`);
    /// its length is its capacity, all of it the host's to write.
    input: Vec<u8>,
    /// The answer of the last call, which the return area points at.
    output: Vec<u8>,
    /// A frame on its way into `output` (batches and explains).
    scratch: Vec<u8>,
    /// `status, ptr, len` of the last call.
    ret: [u32; 3],
    /// A lookup's parameters, encoded.
    params: Vec<u8>,
    /// An import's answer; its length is its capacity.
    answer: Vec<u8>,
}

static mut DOOR: Door =
    Door { input: Vec::new(), output: Vec::new(), scratch: Vec::new(), ret: [0; 3], params: Vec::new(), answer: Vec::new() };

/// Calls do not nest and the guest has one thread: one `&mut` at a time
/// (the imports' helpers take it while no export holds it).
fn door() -> &'static mut Door {
    // SAFETY: as `crate::state`: one call at a time, on one thread.
    #[allow(clippy::deref_addrof, reason = "the raw pointer is the way to a static in edition 2024")]
    unsafe {
        &mut *(&raw mut DOOR)
    }
}

fn status(kind: Kind) -> u32 {
    match kind {
        Kind::Unrouted => 1,
        Kind::Lookup => 2,
        Kind::Failed => 3,
        Kind::Rejected => 4,
    }
}

/// Points the return area at `d.output` with `status`.
fn finish(d: &mut Door, status: u32) {
    d.ret = [status, d.output.as_ptr() as usize as u32, d.output.len() as u32];
}

/// Puts a message in the output and returns `status` for it.
fn fail_with(d: &mut Door, status: u32, message: &str) {
    d.output.clear();
    d.output.extend_from_slice(message.as_bytes());
    finish(d, status);
}

#[unsafe(no_mangle)]
pub extern "C" fn omlet_abi_version() -> u32 {
    ABI_VERSION
}

#[unsafe(no_mangle)]
pub extern "C" fn omlet_return_area() -> u32 {
    door().ret.as_ptr() as usize as u32
}

#[unsafe(no_mangle)]
pub extern "C" fn omlet_input(capacity: u32) -> u32 {
    let d = door();
    let want = capacity as usize;
    if want > d.input.len() {
        // Room to grow into, so that slightly larger records do not ask
        // again; just what was asked for when that much is not to be had.
        let roomy = want.checked_next_power_of_two().unwrap_or(want).max(MIN_INPUT);
        let mut fresh = Vec::new();
        if fresh.try_reserve_exact(roomy).is_err() && fresh.try_reserve_exact(want).is_err() {
            return 0;
        }
        fresh.resize(fresh.capacity().min(roomy), 0);
        d.input = fresh;
    }
    d.input.as_ptr() as usize as u32
}

/// The route and frame of an evaluating call, read from the input buffer.
fn call_input(d: &Door, route: u32, route_len: u32, frame_len: u32) -> Result<(Route<'static>, &'static [u8]), String> {
    let (route_len, frame_len) = (route_len as usize, frame_len as usize);
    if route_len.checked_add(frame_len).is_none_or(|n| n > d.input.len()) {
        return Err("the call's route and frame run past the input buffer (ask `omlet_input` first)".to_string());
    }
    // SAFETY: the input buffer lives in a static and is replaced only by
    // `omlet_input`, which no evaluating call makes.
    let input: &'static [u8] = unsafe { core::slice::from_raw_parts(d.input.as_ptr(), route_len + frame_len) };
    let text = core::str::from_utf8(&input[..route_len]).map_err(|_| "the route is not UTF-8".to_string())?;
    let route = match route {
        0 => Route::Only,
        1 => Route::Path(text),
        2 => Route::Model(text),
        other => return Err(alloc::format!("unknown route kind {other} (0 only, 1 path, 2 model)")),
    };
    Ok((route, &input[route_len..]))
}

#[unsafe(no_mangle)]
pub extern "C" fn omlet_evaluate(generation: u64, route: u32, route_len: u32, frame_len: u32) {
    let d = door();
    let (route, frame) = match call_input(d, route, route_len, frame_len) {
        Ok(x) => x,
        Err(m) => return fail_with(d, 3, &m),
    };
    match crate::evaluate(generation, route, frame, &mut d.output) {
        Ok(()) => finish(d, 0),
        Err(f) => fail_with(d, status(f.kind), &f.message),
    }
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn put_errors(out: &mut Vec<u8>, errors: &[RecordFailure]) {
    put_u32(out, errors.len());
    for e in errors {
        put_u32(out, e.index as usize);
        put_u32(out, status(e.failure.kind) as usize);
        put_u32(out, e.failure.message.len());
        out.extend_from_slice(e.failure.message.as_bytes());
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn omlet_evaluate_batch(generation: u64, route: u32, route_len: u32, frame_len: u32) {
    tick();
    let d = door();
    let (route, frame) = match call_input(d, route, route_len, frame_len) {
        Ok(x) => x,
        Err(m) => return fail_with(d, 3, &m),
    };
    let errors = crate::batch_frame(generation, route, frame, &mut d.scratch);
    d.output.clear();
    put_u32(&mut d.output, d.scratch.len());
    d.output.extend_from_slice(&d.scratch);
    put_errors(&mut d.output, &errors);
    finish(d, 0);
}

#[unsafe(no_mangle)]
pub extern "C" fn omlet_evaluate_lines(generation: u64, route: u32, route_len: u32, frame_len: u32) {
    tick();
    let d = door();
    let (route, frame) = match call_input(d, route, route_len, frame_len) {
        Ok(x) => x,
        Err(m) => return fail_with(d, 3, &m),
    };
    let (text, ends, errors) = crate::batch_lines(generation, route, frame);
    d.output.clear();
    put_u32(&mut d.output, text.len());
    d.output.extend_from_slice(&text);
    put_u32(&mut d.output, ends.len());
    for e in &ends {
        d.output.extend_from_slice(&e.to_le_bytes());
    }
    put_errors(&mut d.output, &errors);
    finish(d, 0);
}

#[unsafe(no_mangle)]
pub extern "C" fn omlet_explain(generation: u64, route: u32, route_len: u32, frame_len: u32) {
    tick();
    let d = door();
    let (route, frame) = match call_input(d, route, route_len, frame_len) {
        Ok(x) => x,
        Err(m) => return fail_with(d, 3, &m),
    };
    let (output, trace) = crate::explain(generation, route, frame);
    d.output.clear();
    match &output {
        Ok(frame) => {
            put_u32(&mut d.output, 0);
            put_u32(&mut d.output, frame.len());
            d.output.extend_from_slice(frame);
        }
        Err(f) => {
            put_u32(&mut d.output, status(f.kind) as usize);
            put_u32(&mut d.output, f.message.len());
            d.output.extend_from_slice(f.message.as_bytes());
        }
    }
    d.output.extend_from_slice(trace.as_bytes());
    finish(d, 0);
}

#[unsafe(no_mangle)]
pub extern "C" fn omlet_info() {
    let d = door();
    match crate::program_now() {
        Ok(p) => {
            let json = info_json(p);
            d.output.clear();
            d.output.extend_from_slice(json.as_bytes());
            finish(d, 0);
        }
        Err(m) => fail_with(d, 3, &m),
    }
}

fn json_string(o: &mut String, s: &str) {
    o.push('"');
    json_escape_into(s, o);
    o.push('"');
}

fn json_strings<'a>(o: &mut String, items: impl IntoIterator<Item = &'a str>) {
    o.push('[');
    for (i, s) in items.into_iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        json_string(o, s);
    }
    o.push(']');
}

/// `omlet_info`'s JSON (docs/abi.md): `meta.info` of the WIT door, plus the
/// helpers each statement calls and the file it came from.
fn info_json(p: &omlet_lang::Program) -> String {
    use core::fmt::Write;
    let mut o = String::with_capacity(1024);
    let _ = write!(o, "{{\"abi\":{ABI_VERSION},\"ir_version\":{IR_VERSION},\"source_hash\":");
    json_string(&mut o, &p.source_hash);
    let _ = write!(o, ",\"uses_clock\":{},\"models\":[", p.uses_clock());
    for (i, m) in p.models.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        o.push_str("{\"name\":");
        json_string(&mut o, &m.name);
        o.push_str(",\"patterns\":");
        json_strings(&mut o, m.patterns.iter().map(String::as_str));
        let _ = write!(o, ",\"enabled\":{},\"file\":", m.enabled);
        json_string(&mut o, &m.file);
        o.push_str(",\"statements\":[");
        for (j, s) in crate::model_statements(m).iter().enumerate() {
            let _ = write!(o, "{}{s}", if j > 0 { "," } else { "" });
        }
        o.push_str("],\"lookups\":[");
        for (j, (statement, line, sql)) in crate::model_lookups(p, m).iter().enumerate() {
            let _ = write!(o, "{}{{\"statement\":{statement},\"line\":{line},\"sql\":", if j > 0 { "," } else { "" });
            json_string(&mut o, sql);
            o.push('}');
        }
        o.push_str("]}");
    }
    o.push_str("],\"statements\":[");
    for (i, s) in p.statements.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        o.push_str("{\"sql\":");
        json_string(&mut o, &s.sql);
        o.push_str(",\"params\":");
        json_strings(&mut o, s.params.iter().map(String::as_str));
        o.push_str(",\"table\":");
        json_string(&mut o, &s.table);
        o.push_str(",\"columns\":");
        json_strings(&mut o, s.columns.iter().map(String::as_str));
        o.push_str(",\"helpers\":");
        json_strings(&mut o, helpers_in(&s.sql));
        o.push_str(",\"file\":");
        json_string(&mut o, &s.file);
        let _ = write!(o, ",\"line\":{},\"column\":{}}}", s.line, s.column);
    }
    o.push_str("]}");
    o
}

/// The SQL helper functions `sql` calls: each helper's name followed by
/// `(`, not preceded by a name's character.
fn helpers_in(sql: &str) -> impl Iterator<Item = &'static str> + '_ {
    let named = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    omlet_lang::ir::Helper::ALL.into_iter().map(|h| h.name()).filter(move |name| {
        sql.match_indices(name).any(|(at, _)| {
            let before = at.checked_sub(1).map(|i| sql.as_bytes()[i]);
            let after = sql[at + name.len()..].trim_start().as_bytes().first().copied();
            !before.is_some_and(named) && after == Some(b'(')
        })
    })
}

// --- the imports, as `DoorHost` calls them ---

/// Calls an answering import with the answer buffer, and fetches the answer
/// with `take` when it did not fit: the answer's bytes.
fn answered(call: impl FnOnce(*mut u8, u32) -> u32) -> Result<&'static [u8], QueryError> {
    let d = door();
    if d.answer.len() < ANSWER_START {
        d.answer.resize(ANSWER_START, 0);
    }
    let n = call(d.answer.as_mut_ptr(), d.answer.len() as u32) as usize;
    if n > d.answer.len() {
        if d.answer.try_reserve(n - d.answer.len()).is_err() {
            return Err(bad(alloc::format!("the host's answer of {n} bytes does not fit in memory")));
        }
        d.answer.resize(n, 0);
        // SAFETY: the buffer holds `n` bytes; the host copies its held answer.
        unsafe { host_take(d.answer.as_mut_ptr(), n as u32) };
    }
    Ok(&d.answer[..n])
}

fn bad(message: String) -> QueryError {
    QueryError { message, fatal: false }
}

/// Reads the answers' bytes.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], QueryError> {
        if n > self.0.len() {
            return Err(bad("the host's answer is cut short".to_string()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, QueryError> {
        Ok(self.bytes(1)?[0])
    }
    fn u32(&mut self) -> Result<usize, QueryError> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().unwrap_or_default()) as usize)
    }
    fn u64(&mut self) -> Result<u64, QueryError> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().unwrap_or_default()))
    }
    fn text(&mut self) -> Result<String, QueryError> {
        let n = self.u32()?;
        let b = self.bytes(n)?;
        core::str::from_utf8(b).map(str::to_string).map_err(|_| bad("the host's answer holds text that is not UTF-8".to_string()))
    }
    fn cell(&mut self) -> Result<Cell, QueryError> {
        omlet_lang::cell::read_cell(&mut self.0)
            .ok_or_else(|| bad("the host's answer holds a cell that does not read".to_string()))
    }
    /// An error answer's `code | fatal | message` (after its kind byte).
    fn error(&mut self) -> QueryError {
        let read = |c: &mut Self| -> Result<QueryError, QueryError> {
            let _code = c.u8()?;
            let fatal = c.u8()? != 0;
            Ok(QueryError { message: c.text()?, fatal })
        };
        read(self).unwrap_or_else(|e| e)
    }
}

/// `query`: the first row, or none, and whether it may be kept.
pub(crate) fn query(statement: u32, params: &[Cell]) -> Result<(Option<Vec<Cell>>, bool), QueryError> {
    let d = door();
    d.params.clear();
    put_u32(&mut d.params, params.len());
    for c in params {
        omlet_lang::cell::push_cell(&mut d.params, c);
    }
    let (p, len) = (d.params.as_ptr(), d.params.len() as u32);
    // SAFETY: the parameters and the buffer are the guest's, valid for the call.
    let mut c = Cursor(answered(|buf, cap| unsafe { host_query(statement, p, len, buf, cap) })?);
    match c.u8()? {
        0 => {
            let cacheable = c.u8()? != 0;
            let n = c.u32()?;
            // At most one cell per byte left: a bound on what a bad count reserves.
            let mut row = Vec::with_capacity(n.min(c.0.len()));
            for _ in 0..n {
                row.push(c.cell()?);
            }
            Ok((Some(row), cacheable))
        }
        1 => Ok((None, c.u8()? != 0)),
        2 => Err(c.error()),
        k => Err(bad(alloc::format!("the host's answer is of unknown kind {k}"))),
    }
}

/// `columns`: the names a statement returns.
pub(crate) fn columns(statement: u32) -> Result<Vec<String>, QueryError> {
    // SAFETY: the buffer is the guest's, valid for the call.
    let mut c = Cursor(answered(|buf, cap| unsafe { host_columns(statement, buf, cap) })?);
    match c.u8()? {
        0 => {
            let n = c.u32()?;
            let mut names = Vec::with_capacity(n.min(c.0.len()));
            for _ in 0..n {
                names.push(c.text()?);
            }
            Ok(names)
        }
        2 => Err(c.error()),
        k => Err(bad(alloc::format!("the host's answer is of unknown kind {k}"))),
    }
}

/// `intranet_nets`: the networks that are LAN. An answer that cannot be
/// read gives the built-in ones.
pub(crate) fn intranet_nets() -> Vec<Net> {
    let read = || -> Result<Vec<Net>, QueryError> {
        // SAFETY: the buffer is the guest's, valid for the call.
        let mut c = Cursor(answered(|buf, cap| unsafe { host_intranet_nets(buf, cap) })?);
        let n = c.u32()?;
        let mut nets = Vec::with_capacity(n.min(c.0.len() / 17));
        for _ in 0..n {
            let (high, low) = (c.u64()?, c.u64()?);
            nets.push(Net::from_bits((u128::from(high) << 64) | u128::from(low), c.u8()?));
        }
        Ok(nets)
    };
    read().unwrap_or_else(|_| omlet_lang::intranet::BUILTIN.to_vec())
}

/// `now`: nanoseconds since the epoch and the local offset.
pub(crate) fn now() -> (i64, i32) {
    let mut b = [0u8; 12];
    // SAFETY: `b` holds the 12 bytes the host writes.
    unsafe { host_now(b.as_mut_ptr()) };
    let nanos = i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let offset = i32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    (nanos, offset)
}
