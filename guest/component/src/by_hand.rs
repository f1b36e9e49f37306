//! examples/nginx/nginx.oml written by hand, over the evaluator's own
//! fields, values, pipes and lookup host: a measuring instrument, not part
//! of any shipped guest (only the off-by-default `by-hand-nginx` feature
//! compiles it).
//!
//! Why: what the evaluator's walk costs in wasm, as opposed to the work a
//! rule asks for, is the bound on any change to the evaluator. The records
//! come in and leave as frames exactly as with the evaluator, so the
//! difference between the two guests is the walk alone. Build and compare
//! (the output must be byte for byte the evaluator's):
//!
//!     OMLET_GUEST_FEATURES=by-hand-nginx scripts/build-guest.sh /tmp/byhand.wasm
//!     OMLET_GUEST=/tmp/byhand.wasm cargo run --release -p omlet-benches --example profile_nginx wasm 51200 5
//!
//! It answers the example's rule only: whatever rule is loaded, every
//! record is evaluated as nginx.oml would. docs/decisions/0027-evaluator.md
//! says what the comparison is for.
use alloc::borrow::Cow;
use alloc::vec::Vec;
use omlet_lang::eval::{Cell, Host};
use omlet_lang::ir::{PathPart, PipeFn, UrlPart};
use omlet_lang::value::{self, Field, Kind, Type, Value};

/// `take(name)`: the first field of that name, removed.
fn take<'a>(src: &mut [Option<Field<'a>>], name: &str) -> Option<Field<'a>> {
    for f in src.iter_mut() {
        if f.as_ref().is_some_and(|f| f.name == name) {
            return f.take();
        }
    }
    None
}

/// `read(name)`: the first field of that name.
fn read<'a, 'b>(src: &'b [Option<Field<'a>>], name: &str) -> Option<&'b Field<'a>> {
    src.iter().flatten().find(|f| f.name == name)
}

static NAME: PipeFn = PipeFn::Path(Some(PathPart::Name));
static HOST: PipeFn = PipeFn::Url(Some(UrlPart::Host));

/// The rule's statements in order, each as the evaluator would run it
/// (the lookup through the same host, so the same guest cache); the
/// output in `out`.
pub fn nginx<'a>(input: Vec<Field<'a>>, host: &mut dyn Host, out: &mut Vec<Field<'a>>) {
    let mut src: Vec<Option<Field<'a>>> = input.into_iter().map(Some).collect();
    let ip = take(&mut src, "client_ip")
        .filter(|f| !f.value.is_empty())
        .or_else(|| take(&mut src, "remote_addr"))
        .map(|f| value::convert(f.value, &Type::Kind(Kind::Ip)));
    if let Some(v) = &ip {
        out.push(Field::new("client_ip", v.clone()));
    }
    let status = take(&mut src, "status").map(|f| value::convert(f.value, &Type::Kind(Kind::Digit)));
    if let Some(v) = &status {
        out.push(Field::new("status", v.clone()));
    }
    let bytes = take(&mut src, "body_bytes_sent").map(|f| f.value).unwrap_or(Value::Digit(0));
    let bytes = value::convert(bytes, &Type::Kind(Kind::Digit));
    out.push(Field::new("bytes", bytes.clone()));
    let rt = take(&mut src, "request_time").map(|f| f.value).unwrap_or(Value::Float(0.0));
    let rt = value::convert(rt, &Type::Kind(Kind::Float));
    out.push(Field::new("req_time", rt.clone()));
    let method = take(&mut src, "method").map(|f| f.value);
    if let Some(v) = &method {
        out.push(Field::new("method", v.clone()));
    }
    let uri = take(&mut src, "request_uri").map(|f| f.value);
    if let Some(v) = &uri {
        out.push(Field::new("uri", v.clone()));
        out.push(Field::new("file", omlet_lang::pipes::apply(&NAME, v.clone())));
    }
    if let Some(f) = read(&src, "http_referer") {
        out.push(Field::new("referer_host", omlet_lang::pipes::apply(&HOST, f.value.clone())));
    }
    let class = match status {
        Some(Value::Digit(100..=199)) => "info",
        Some(Value::Digit(200..=299)) => "success",
        Some(Value::Digit(300..=399)) => "redirect",
        Some(Value::Digit(400..=499)) => "client_error",
        Some(Value::Digit(500..=599)) => "server_error",
        _ => "unknown",
    };
    out.push(Field::new("status_class", Value::Chars(Cow::Borrowed(class))));
    out.push(Field::new("slow", Value::Bool(matches!(rt, Value::Float(x) if x > 1.0))));
    let bot = match read(&src, "user_agent").map(|f| &f.value) {
        Some(Value::Chars(s)) => s.contains("bot") || s.contains("Bot") || s.contains("spider"),
        _ => false,
    };
    out.push(Field::new("is_bot", Value::Bool(bot)));
    if let Some(Value::Ip(core::net::IpAddr::V4(a))) = &ip {
        let n = Cell::Integer(u32::from(*a) as i64);
        if let Ok(Some(row)) = host.query(0, &[n.clone(), n]) {
            let mut row = row.into_iter();
            for name in ["zone", "owner"] {
                if let Some(Cell::Text(t)) = row.next() {
                    out.push(Field::new(name, Value::Chars(Cow::Owned(t))));
                }
            }
        }
    }
    let mut req = Vec::with_capacity(3);
    req.push(Field::new("bytes", bytes.clone()));
    if let Some(v) = &method {
        req.push(Field::new("method", v.clone()));
    }
    if let Some(v) = &uri {
        req.push(Field::new("uri", v.clone()));
    }
    out.push(Field::new("request", Value::Obj(alloc::boxed::Box::new(req))));
    let mut s = alloc::string::String::with_capacity(64);
    if let Some(v) = &method {
        v.write_raw(&mut s);
    }
    s.push(' ');
    if let Some(v) = &uri {
        v.write_raw(&mut s);
    }
    s.push_str(" -> ");
    if let Some(v) = &status {
        v.write_raw(&mut s);
    }
    out.push(Field::new("summary", Value::Chars(Cow::Owned(s))));
    if take(&mut src, "message").is_some() {
        out.push(Field::new("__raw", Value::Ignore));
    }
    out.extend(src.into_iter().flatten());
}
