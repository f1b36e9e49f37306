//! What the benches measure omlet against, on the same records:
//!
//! - **VRL**, Vector's record-transformation language (the `vrl` crate), an
//!   interpreter with a stdlib of parsing functions: what a Rust program
//!   choosing an engine to embed would weigh omlet against;
//! - **hand-written Rust** over omlet's public `Record` API: the floor of
//!   the real rule's cost, with no interpreter and no boundary.
//!
//! Each computes what `V = read(id) ;` and examples/nginx/nginx.oml compute.
//! The zone lookup, which omlet makes in SQL against the knowdb table (and
//! then answers from its caches), is an in-memory range table here: a VRL
//! function of our own (VRL's enrichment tables live in Vector, not in the
//! `vrl` crate, and match exact keys only), and a binary search by hand.
//! `tests/peers.rs` checks that all three give omlet's output.

use std::net::Ipv4Addr;
use std::sync::Arc;

use omlet::{Record, Value as OmletValue};
use vrl::compiler::runtime::Runtime;
use vrl::compiler::{Program, TargetValue, TimeZone};
use vrl::prelude::*;
use vrl::value::{ObjectMap, Secrets};

/// `V = read(id) ;`
pub const VRL_PURE: &str = r#". = {"V": .id}"#;

/// examples/nginx/nginx.oml, statement by statement. Fields the rule takes
/// are deleted from the input as they are read, and what is left is merged
/// in at the end (the rule's `* = take()`).
pub const VRL_NGINX: &str = r#"
rest = .
ip = if exists(rest.client_ip) { del(rest.client_ip) } else { del(rest.remote_addr) }
ip = string!(ip)
status = to_int!(del(rest.status))
b = del(rest.body_bytes_sent)
bytes = if b == null { 0 } else { to_int!(b) }
t = del(rest.request_time)
req_time = if t == null { 0.0 } else { to_float!(t) }
method = string!(del(rest.method))
uri = string!(del(rest.request_uri))
out = {"client_ip": ip, "status": status, "bytes": bytes, "req_time": req_time, "method": method, "uri": uri}
name, err = parse_regex(uri, r'(?P<name>[^/]+)/*$')
if err == null { out.file = name.name } else { out.file = uri }
if exists(rest.http_referer) {
    u, err = parse_url(string!(rest.http_referer))
    if err == null {
        host = string!(u.host)
        if u.port != null { host = host + ":" + to_string!(u.port) }
        out.referer_host = host
    } else {
        out.referer_host = rest.http_referer
    }
}
out.status_class = if status >= 100 && status <= 199 { "info" } else if status >= 200 && status <= 299 { "success" } else if status >= 300 && status <= 399 { "redirect" } else if status >= 400 && status <= 499 { "client_error" } else if status >= 500 && status <= 599 { "server_error" } else { "unknown" }
out.slow = req_time > 1.0
ua = rest.user_agent
out.is_bot = if ua == null { false } else { s = string!(ua); contains(s, "bot") || contains(s, "Bot") || contains(s, "spider") }
z = ip_zone!(ip)
if z != null { out.zone = z.zone; out.owner = z.owner }
out.request = {"method": method, "uri": uri, "bytes": bytes}
out.summary = method + " " + uri + " -> " + to_string(status)
del(rest.message)
. = merge(out, rest)
"#;

/// The example's `ip_zone` table: address ranges as 32-bit integers, with
/// their zone and owner, sorted by the range's start.
#[derive(Debug)]
pub struct Zones(Vec<(u32, u32, String, String)>);

impl Zones {
    /// examples/nginx/knowdb/ip_zone.csv.
    pub fn example() -> Zones {
        let csv = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/nginx/knowdb/ip_zone.csv"))
            .expect("the nginx example's zone table");
        let mut rows: Vec<(u32, u32, String, String)> = csv
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let c: Vec<&str> = l.split(',').collect();
                (c[1].parse().unwrap(), c[2].parse().unwrap(), c[3].to_string(), c[4].to_string())
            })
            .collect();
        rows.sort_by_key(|r| r.0);
        Zones(rows)
    }

    /// The zone and owner of the range holding `ip`.
    pub fn find(&self, ip: u32) -> Option<(&str, &str)> {
        let i = self.0.partition_point(|r| r.0 <= ip).checked_sub(1)?;
        let (_, hi, zone, owner) = &self.0[i];
        (ip <= *hi).then_some((zone.as_str(), owner.as_str()))
    }
}

/// A compiled VRL program and the runtime that runs it, event after event.
pub struct Vrl {
    program: Program,
    runtime: Runtime,
    tz: TimeZone,
}

impl Vrl {
    /// Compiles `source` with VRL's stdlib and `ip_zone` over `zones`.
    pub fn compile(source: &str, zones: Arc<Zones>) -> Result<Vrl, String> {
        let mut fns = vrl::stdlib::all();
        fns.push(Box::new(IpZone { zones }));
        let compiled =
            vrl::compiler::compile(source, &fns).map_err(|d| vrl::diagnostic::Formatter::new(source, d).to_string())?;
        let tz = TimeZone::parse("UTC").ok_or("no UTC time zone")?;
        Ok(Vrl { program: compiled.program, runtime: Runtime::default(), tz })
    }

    /// Runs the program on `event`; the event as the program left it.
    pub fn run(&mut self, event: Value) -> Result<Value, String> {
        let mut target = TargetValue { value: event, metadata: Value::Object(ObjectMap::new()), secrets: Secrets::default() };
        let result = self.runtime.resolve(&mut target, &self.program, &self.tz);
        self.runtime.clear();
        result.map(|_| target.value).map_err(|e| e.to_string())
    }
}

/// A record as a VRL event (through JSON; done before the clock starts).
pub fn to_vrl(r: &Record) -> Value {
    Value::from(r.to_json_value())
}

/// A VRL event as JSON, to compare with omlet's output.
pub fn vrl_json(v: Value) -> serde_json::Value {
    v.try_into().expect("a VRL event that JSON can hold")
}

/// `ip_zone(ip)`: the `{zone, owner}` of the range holding the IPv4 address
/// `ip`, or null.
#[derive(Debug, Clone)]
struct IpZone {
    zones: Arc<Zones>,
}

impl Function for IpZone {
    fn identifier(&self) -> &'static str {
        "ip_zone"
    }

    fn usage(&self) -> &'static str {
        "The zone and owner of an IPv4 address, from an in-memory range table."
    }

    fn category(&self) -> &'static str {
        "Enrich"
    }

    fn return_kind(&self) -> u16 {
        kind::OBJECT | kind::NULL
    }

    fn examples(&self) -> &'static [Example] {
        &[]
    }

    fn parameters(&self) -> &'static [Parameter] {
        const PARAMETERS: &[Parameter] = &[Parameter::required("value", kind::BYTES, "An IPv4 address.")];
        PARAMETERS
    }

    fn compile(&self, _state: &TypeState, _ctx: &mut FunctionCompileContext, arguments: ArgumentList) -> Compiled {
        Ok(IpZoneFn { value: arguments.required("value"), zones: self.zones.clone() }.as_expr())
    }
}

#[derive(Debug, Clone)]
struct IpZoneFn {
    value: Box<dyn Expression>,
    zones: Arc<Zones>,
}

impl FunctionExpression for IpZoneFn {
    fn resolve(&self, ctx: &mut Context) -> Resolved {
        let value = self.value.resolve(ctx)?;
        let ip: Ipv4Addr = value.try_bytes_utf8_lossy()?.parse().map_err(|e| format!("not an IPv4 address: {e}"))?;
        Ok(match self.zones.find(u32::from(ip)) {
            Some((zone, owner)) => {
                let mut row = ObjectMap::new();
                row.insert("zone".into(), Value::from(zone));
                row.insert("owner".into(), Value::from(owner));
                Value::Object(row)
            }
            None => Value::Null,
        })
    }

    fn type_def(&self, _: &TypeState) -> TypeDef {
        TypeDef::object(Collection::any()).or_null().fallible()
    }
}

/// `V = read(id) ;` by hand.
pub fn pure_by_hand(r: &Record) -> Record {
    let mut out = Record::new();
    if let Some(v) = r.get("id") {
        out.insert("V", v);
    }
    out
}

/// examples/nginx/nginx.oml by hand, over omlet's public `Record` API.
pub fn nginx_by_hand(input: &Record, zones: &Zones) -> Record {
    let mut rest = input.clone();
    let text = |v: Option<OmletValue>| v.map(value_text);
    let mut out = Record::new();
    let ip = text(rest.remove("client_ip").or_else(|| rest.remove("remote_addr")));
    let ip: Option<Ipv4Addr> = ip.as_deref().and_then(|s| s.parse().ok());
    if let Some(ip) = ip {
        out.insert("client_ip", OmletValue::Ip(ip.into()));
    }
    let status: Option<i64> = text(rest.remove("status")).and_then(|s| s.parse().ok());
    if let Some(s) = status {
        out.insert("status", s);
    }
    let bytes: i64 = text(rest.remove("body_bytes_sent")).and_then(|s| s.parse().ok()).unwrap_or(0);
    out.insert("bytes", bytes);
    let req_time: f64 = text(rest.remove("request_time")).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    out.insert("req_time", req_time);
    let method = text(rest.remove("method"));
    if let Some(m) = &method {
        out.insert("method", m.clone());
    }
    let uri = text(rest.remove("request_uri"));
    if let Some(u) = &uri {
        out.insert("uri", u.clone());
        let trimmed = u.trim_end_matches('/');
        let name = if trimmed.is_empty() { u.as_str() } else { trimmed.rsplit('/').next().unwrap_or(trimmed) };
        out.insert("file", name);
    }
    if let Some(referer) = text(rest.get("http_referer")) {
        out.insert("referer_host", url_host(&referer).unwrap_or(&referer).to_string());
    }
    let class = match status {
        Some(100..=199) => "info",
        Some(200..=299) => "success",
        Some(300..=399) => "redirect",
        Some(400..=499) => "client_error",
        Some(500..=599) => "server_error",
        _ => "unknown",
    };
    out.insert("status_class", class);
    out.insert("slow", req_time > 1.0);
    let bot = text(rest.get("user_agent")).is_some_and(|ua| ua.contains("bot") || ua.contains("Bot") || ua.contains("spider"));
    out.insert("is_bot", bot);
    if let Some((zone, owner)) = ip.and_then(|ip| zones.find(u32::from(ip))) {
        out.insert("zone", zone);
        out.insert("owner", owner);
    }
    let mut request = std::collections::BTreeMap::new();
    if let Some(m) = &method {
        request.insert("method".to_string(), OmletValue::Chars(m.clone()));
    }
    if let Some(u) = &uri {
        request.insert("uri".to_string(), OmletValue::Chars(u.clone()));
    }
    request.insert("bytes".to_string(), OmletValue::Digit(bytes));
    out.insert("request", OmletValue::Object(request));
    let status_text = status.map(|s| s.to_string()).unwrap_or_default();
    out.insert("summary", format!("{} {} -> {status_text}", method.as_deref().unwrap_or(""), uri.as_deref().unwrap_or("")));
    rest.remove("message");
    for (name, value) in rest.iter() {
        out.insert(name, value);
    }
    out
}

/// A value's text (the example's fields are text, or numbers in JSON).
fn value_text(v: OmletValue) -> String {
    match v {
        OmletValue::Chars(s) => s,
        OmletValue::Digit(i) => i.to_string(),
        OmletValue::Float(f) => f.to_string(),
        OmletValue::Bool(b) => b.to_string(),
        OmletValue::Ip(ip) => ip.to_string(),
        other => format!("{other:?}"),
    }
}

/// `host[:port]` of an absolute URL.
fn url_host(url: &str) -> Option<&str> {
    let after = &url[url.find("://")? + 3..];
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let authority = &after[..end];
    Some(authority.rsplit_once('@').map_or(authority, |(_, h)| h))
}
