//! Evaluation traces: why a field is there, or why it is absent.
//!
//! Why: OML fails quietly by design. A missing field, a conversion that
//! gives nothing, a lookup that misses or errs, or a match that no arm
//! takes all leave a target absent, and the output alone cannot say which.
//! A trace records, for each statement of the record's model, what was
//! read and from where, each conversion, pipe step and match arm, each
//! lookup's parameters and answer, and what was written or why nothing was.
//!
//! What it replaces: nothing on the normal path. [`explain`](crate::eval::explain)
//! runs the same evaluator with a [`Trace`] attached; `evaluate` runs it
//! without one.
//!
//! Cost: off, one test of an `Option` at each point of note (a branch the
//! processor predicts; the benches show no difference). On, the values are
//! rendered as text, each at most [`MAX_VALUE_BYTES`], and the whole trace
//! at most [`MAX_TRACE_BYTES`]; past that the rest is left out and the trace
//! says `truncated`.
//!
//! The trace crosses the WIT boundary as JSON ([`Trace::to_json`]); hosts
//! read it back with serde (the derives below give the same shape).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

use crate::value::Value;

/// Most bytes of a trace (its text, roughly): past it, events are left out.
pub const MAX_TRACE_BYTES: usize = 64 * 1024;

/// Most bytes of one value as a trace shows it; a longer one is cut, with `…`.
pub const MAX_VALUE_BYTES: usize = 200;

/// How one record was evaluated.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Trace {
    /// The model that evaluated it.
    pub model: String,
    /// The model's rule file.
    pub file: String,
    /// One per statement, in order.
    pub steps: Vec<Step>,
    /// Events were left out past [`MAX_TRACE_BYTES`].
    pub truncated: bool,
    /// The record failed: the error, as the output says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip)]
    bytes: usize,
    /// The fields taken so far, and the line of the statement that took
    /// each: a later read of one is absent because of it.
    #[serde(skip)]
    taken: Vec<(String, u32)>,
}

/// One statement's evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Its line in the rule file (1-based; 0 when the rule was compiled
    /// without positions).
    pub line: u32,
    /// Its targets as written (`a, b`, or a batch pattern `x*`).
    pub targets: String,
    /// What happened, in order.
    pub events: Vec<Event>,
}

/// Something that happened while a statement was evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A field was looked for (`read`, `take`, `@name`).
    Read {
        /// The field's name.
        key: String,
        /// `take` (the field is removed) rather than `read`.
        take: bool,
        /// Where it was found: `output` (written by an earlier statement),
        /// `input`, `option <name>`, `default` (the default body), or
        /// `absent`.
        from: String,
        /// The value found, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<String>,
    },
    /// A value converted to a target's type.
    Convert {
        /// The type.
        to: String,
        /// The value before.
        input: String,
        /// The value after (`null` when it does not convert).
        output: String,
    },
    /// One function of a pipe.
    Pipe {
        /// The function.
        function: String,
        /// Its input.
        input: String,
        /// Its output.
        output: String,
    },
    /// A match: the arm taken (1-based), or none (`null`: the default, or
    /// nothing when there is no default).
    Match {
        /// The values matched, in order.
        values: Vec<String>,
        /// The arm taken.
        #[serde(default)]
        arm: Option<u32>,
        /// How many arms there are.
        arms: u32,
        /// Whether a default body was evaluated.
        default: bool,
    },
    /// A SQL lookup.
    Lookup {
        /// The statement's index in the rule's statement table.
        statement: u32,
        /// Its parameters, in order.
        params: Vec<String>,
        /// Who answered: `guest cache`, or the host (`host`, which a host
        /// may refine: `in-memory table`, `shared cache`, `database`), or
        /// `not sent` when every parameter read from the record was null.
        layer: String,
        /// The row's cells, or `null` for no row.
        #[serde(default)]
        row: Option<Vec<String>>,
        /// The lookup's error, if it failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Microseconds the host took, when it says.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        micros: Option<u64>,
    },
    /// A field was written to the output.
    Write {
        /// Its name.
        target: String,
        /// Its value.
        value: String,
    },
    /// A target got no field.
    NotWritten {
        /// Its name.
        target: String,
        /// Why not.
        why: String,
    },
    /// `fail(…)` failed the record.
    Failed {
        /// The rule's message.
        message: String,
    },
}

/// Traces are equal when they say the same (their byte count aside).
impl PartialEq for Trace {
    fn eq(&self, other: &Trace) -> bool {
        (&self.model, &self.file, &self.steps, self.truncated, &self.error)
            == (&other.model, &other.file, &other.steps, other.truncated, &other.error)
    }
}

impl Trace {
    /// An empty trace of model `model` from `file`.
    pub fn new(model: &str, file: &str) -> Trace {
        Trace { model: model.into(), file: file.into(), ..Default::default() }
    }

    /// Starts the next statement's step.
    pub fn begin(&mut self, line: u32, targets: String) {
        if self.room(targets.len() + 32) {
            self.steps.push(Step { line, targets, events: Vec::new() });
        }
    }

    /// Notes that the current statement took the field `key`.
    pub fn took(&mut self, key: &str) {
        let line = self.steps.last().map_or(0, |s| s.line);
        if self.taken.len() < 1024 && !self.taken.iter().any(|(k, _)| k == key) {
            self.taken.push((key.into(), line));
        }
    }

    /// Where a field that is not found went: `absent`, or `absent (taken
    /// at line N)`.
    pub fn absent(&self, key: &str) -> String {
        match self.taken.iter().find(|(k, _)| k == key) {
            Some((_, line)) => format!("absent (taken at line {line})"),
            None => String::from("absent"),
        }
    }

    /// Adds `e` to the current step, unless the trace is full.
    pub fn push(&mut self, e: Event) {
        if self.room(event_bytes(&e))
            && let Some(s) = self.steps.last_mut()
        {
            s.events.push(e);
        }
    }

    /// Whether `bytes` more fit; marks the trace truncated when not.
    fn room(&mut self, bytes: usize) -> bool {
        if self.truncated || self.bytes + bytes > MAX_TRACE_BYTES {
            self.truncated = true;
            return false;
        }
        self.bytes += bytes;
        true
    }

    /// The trace as JSON: what crosses the WIT boundary (`explain`).
    pub fn to_json(&self) -> String {
        let mut o = String::with_capacity(self.bytes * 2 + 64);
        o.push_str("{\"model\":");
        string(&mut o, &self.model);
        o.push_str(",\"file\":");
        string(&mut o, &self.file);
        o.push_str(",\"steps\":[");
        for (i, s) in self.steps.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            o.push_str(&format!("{{\"line\":{},\"targets\":", s.line));
            string(&mut o, &s.targets);
            o.push_str(",\"events\":[");
            for (j, e) in s.events.iter().enumerate() {
                if j > 0 {
                    o.push(',');
                }
                event_json(&mut o, e);
            }
            o.push_str("]}");
        }
        o.push_str("],\"truncated\":");
        o.push_str(if self.truncated { "true" } else { "false" });
        if let Some(e) = &self.error {
            o.push_str(",\"error\":");
            string(&mut o, e);
        }
        o.push('}');
        o
    }
}

impl Trace {
    /// The trace as text for people: a line per statement (its line and
    /// targets), then one per event, indented.
    pub fn to_text(&self) -> String {
        use core::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(o, "model {} ({})", self.model, self.file);
        for s in &self.steps {
            let _ = writeln!(o, "  line {}: {}", s.line, s.targets);
            for e in &s.events {
                o.push_str("    ");
                event_text(&mut o, e);
                o.push('\n');
            }
        }
        if let Some(e) = &self.error {
            let _ = writeln!(o, "  the record failed: {e}");
        }
        if self.truncated {
            let _ = writeln!(o, "  … (the trace stops here: it is at most {MAX_TRACE_BYTES} bytes)");
        }
        o
    }
}

fn event_text(o: &mut String, e: &Event) {
    use core::fmt::Write;
    let _ = match e {
        Event::Read { key, take, from, value } => {
            let verb = if *take { "take" } else { "read" };
            match value {
                Some(v) => write!(o, "{verb} {key} from {from}: {v}"),
                None => write!(o, "{verb} {key}: {from}"),
            }
        }
        Event::Convert { to, input, output } => write!(o, "convert to {to}: {input} → {output}"),
        Event::Pipe { function, input, output } => write!(o, "pipe {function}: {input} → {output}"),
        Event::Match { values, arm, arms, default } => {
            let taken = match (arm, default) {
                (Some(a), _) => alloc::format!("arm {a} of {arms}"),
                (None, true) => alloc::format!("no arm of {arms}: the default"),
                (None, false) => alloc::format!("no arm of {arms}, and no default"),
            };
            write!(o, "match [{}]: {taken}", values.join(", "))
        }
        Event::Lookup { statement, params, layer, row, error, micros } => {
            let time = micros.map(|m| alloc::format!(", {m} µs")).unwrap_or_default();
            let answer = match (row, error) {
                (_, Some(e)) => alloc::format!("failed: {e}"),
                (Some(r), None) => alloc::format!("row [{}]", r.join(", ")),
                (None, None) => String::from("no row"),
            };
            write!(o, "lookup #{statement} ({layer}{time}) with [{}]: {answer}", params.join(", "))
        }
        Event::Write { target, value } => write!(o, "wrote {target}: {value}"),
        Event::NotWritten { target, why } => write!(o, "{target} not written: {why}"),
        Event::Failed { message } => write!(o, "fail: {message}"),
    };
}

fn event_bytes(e: &Event) -> usize {
    let texts: usize = match e {
        Event::Read { key, from, value, .. } => key.len() + from.len() + value.as_ref().map_or(0, String::len),
        Event::Convert { to, input, output } => to.len() + input.len() + output.len(),
        Event::Pipe { function, input, output } => function.len() + input.len() + output.len(),
        Event::Match { values, .. } => values.iter().map(String::len).sum(),
        Event::Lookup { params, layer, row, error, .. } => {
            params.iter().map(String::len).sum::<usize>()
                + layer.len()
                + row.iter().flatten().map(String::len).sum::<usize>()
                + error.as_ref().map_or(0, String::len)
        }
        Event::Write { target, value } => target.len() + value.len(),
        Event::NotWritten { target, why } => target.len() + why.len(),
        Event::Failed { message } => message.len(),
    };
    texts + 48
}

fn string(o: &mut String, s: &str) {
    o.push('"');
    crate::pipes::json_escape_into(s, o);
    o.push('"');
}

fn strings(o: &mut String, v: &[String]) {
    o.push('[');
    for (i, s) in v.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        string(o, s);
    }
    o.push(']');
}

fn event_json(o: &mut String, e: &Event) {
    let field = |o: &mut String, name: &str, value: &str| {
        o.push_str(",\"");
        o.push_str(name);
        o.push_str("\":");
        string(o, value);
    };
    match e {
        Event::Read { key, take, from, value } => {
            o.push_str("{\"event\":\"read\"");
            field(o, "key", key);
            o.push_str(if *take { ",\"take\":true" } else { ",\"take\":false" });
            field(o, "from", from);
            if let Some(v) = value {
                field(o, "value", v);
            }
        }
        Event::Convert { to, input, output } => {
            o.push_str("{\"event\":\"convert\"");
            field(o, "to", to);
            field(o, "input", input);
            field(o, "output", output);
        }
        Event::Pipe { function, input, output } => {
            o.push_str("{\"event\":\"pipe\"");
            field(o, "function", function);
            field(o, "input", input);
            field(o, "output", output);
        }
        Event::Match { values, arm, arms, default } => {
            o.push_str("{\"event\":\"match\",\"values\":");
            strings(o, values);
            match arm {
                Some(a) => o.push_str(&format!(",\"arm\":{a}")),
                None => o.push_str(",\"arm\":null"),
            }
            o.push_str(&format!(",\"arms\":{arms},\"default\":{default}"));
        }
        Event::Lookup { statement, params, layer, row, error, micros } => {
            o.push_str(&format!("{{\"event\":\"lookup\",\"statement\":{statement},\"params\":"));
            strings(o, params);
            field(o, "layer", layer);
            o.push_str(",\"row\":");
            match row {
                Some(r) => strings(o, r),
                None => o.push_str("null"),
            }
            if let Some(e) = error {
                field(o, "error", e);
            }
            if let Some(m) = micros {
                o.push_str(&format!(",\"micros\":{m}"));
            }
        }
        Event::Write { target, value } => {
            o.push_str("{\"event\":\"write\"");
            field(o, "target", target);
            field(o, "value", value);
        }
        Event::NotWritten { target, why } => {
            o.push_str("{\"event\":\"not_written\"");
            field(o, "target", target);
            field(o, "why", why);
        }
        Event::Failed { message } => {
            o.push_str("{\"event\":\"failed\"");
            field(o, "message", message);
        }
    }
    o.push('}');
}

/// A value as a trace shows it: its kind, then its text (chars quoted),
/// at most [`MAX_VALUE_BYTES`] of it.
pub fn describe(v: &Value<'_>) -> String {
    let mut text = String::new();
    match v {
        Value::Null => return String::from("null"),
        Value::Ignore => return String::from("ignore"),
        Value::Chars(s) => {
            text.push('"');
            text.push_str(s);
            text.push('"');
        }
        other => other.write_raw(&mut text),
    }
    let mut out = String::from(v.kind().name());
    out.push(' ');
    out.push_str(&cut(text));
    out
}

/// A SQL cell as a trace shows it.
pub fn describe_cell(c: &crate::cell::Cell) -> String {
    use crate::cell::Cell;
    match c {
        Cell::Null => String::from("NULL"),
        Cell::Integer(i) => format!("{i}"),
        Cell::Real(f) => format!("{f}"),
        Cell::Text(t) => cut(format!("'{t}'")),
        Cell::Blob(b) => format!("blob of {} bytes", b.len()),
    }
}

/// `text` cut to [`MAX_VALUE_BYTES`] at a character boundary, marked with `…`.
pub fn cut(text: String) -> String {
    cut_to(text, MAX_VALUE_BYTES)
}

/// `text` cut to at most `max` bytes at a character boundary, marked with
/// `…` when cut.
pub fn cut_to(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push('…');
    }
    text
}

/// A pipe function's name as OML writes it (`base64_decode`, `nth(2)`).
pub fn pipe_name(f: &crate::ir::PipeFn) -> String {
    let debug = format!("{f:?}");
    let args = debug.find(['(', ' ', '{']).map_or("", |i| &debug[i..]);
    let name = crate::pipes::catalogue::row_of(f).map_or("(a pipe function)", |row| row.name);
    // `Path(Some(Name))` reads as `path(name)`, `ToTs { zone_hours: 8, .. }`
    // as `Time::to_ts(zone_hours: 8, ..)`.
    let args = args.trim();
    let args = match args.strip_prefix('{').and_then(|a| a.strip_suffix('}')) {
        Some(fields) => format!("({})", fields.trim()),
        None => args.replace("Some(", "(").replace("((", "(").replace("))", ")"),
    };
    cut(format!("{name}{}", args.to_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_trace_stops_growing_and_says_so() {
        let mut t = Trace::new("m", "f.oml");
        t.begin(1, "x".into());
        let big = String::from_utf8(alloc::vec![b'a'; 1000]).unwrap();
        for _ in 0..200 {
            t.push(Event::Write { target: "x".into(), value: big.clone() });
        }
        assert!(t.truncated);
        assert!(t.to_json().len() < MAX_TRACE_BYTES + 4096);
    }

    #[test]
    fn values_are_told_by_kind_and_cut() {
        assert_eq!(describe(&Value::Digit(42)), "digit 42");
        assert_eq!(describe(&Value::Chars("a\"b".into())), "chars \"a\"b\"");
        let long = String::from_utf8(alloc::vec![b'x'; 500]).unwrap();
        assert!(describe(&Value::Chars(long.into())).ends_with('…'));
        assert_eq!(pipe_name(&crate::ir::PipeFn::Base64Decode), "base64_decode");
        // Named by the pipe catalogue, not by the variant.
        let to_ms = crate::ir::PipeFn::ToTs { zone_hours: 8, unit: crate::time::TsUnit::Millis };
        assert_eq!(pipe_name(&to_ms), "Time::to_ts_ms(zone_hours: 8, unit: millis)");
    }
}
