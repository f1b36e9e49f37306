//! Profiling aid: the guest's batch loop (frame in, evaluate, frame out), natively,
//! on examples/nginx's rule and three of its records, every lookup answered with the
//! same row. `benches/examples/profile_nginx.rs` runs the whole host; this one builds
//! in seconds from the language crate alone, for `perf record` of the evaluator.
//! Usage (from the repository's root): prof_nginx [RECORDS]
use omlet_lang::cell::Cell;
use omlet_lang::eval::{Host, QueryError, Spare};
use omlet_lang::frame::{Reader, Writer};
use omlet_lang::value::{Field, Value};

struct Zone;
impl Host for Zone {
    fn query(&mut self, _: u32, _: &[Cell]) -> Result<Option<Vec<Cell>>, QueryError> {
        Ok(Some(vec![Cell::Text("dmz".into()), Cell::Text("ops".into())]))
    }
    fn columns(&mut self, _: u32) -> Result<Vec<String>, QueryError> {
        Ok(vec!["zone".into(), "owner".into()])
    }
    fn now(&mut self) -> (i64, i32) {
        (0, 0)
    }
}

fn rec(pairs: &[(&'static str, &'static str)]) -> Vec<Field<'static>> {
    pairs.iter().map(|(k, v)| Field::new(*k, Value::Chars((*v).into()))).collect()
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let text = std::fs::read_to_string("examples/nginx/nginx.oml").unwrap();
    let program = omlet_lang::compile(&[omlet_lang::Source { file: "nginx.oml", text: &text }], (0, 0)).unwrap();
    let records = [
        rec(&[
            ("remote_addr", "10.0.0.7"),
            ("status", "200"),
            ("body_bytes_sent", "5120"),
            ("request_time", "0.012"),
            ("method", "GET"),
            ("request_uri", "/static/app.js"),
            ("http_referer", "https://shop.example.com:8443/cart"),
            ("user_agent", "Mozilla/5.0"),
            ("message", "10.0.0.7 - - GET /static/app.js 200"),
        ]),
        rec(&[
            ("client_ip", "10.0.1.20"),
            ("status", "404"),
            ("method", "GET"),
            ("request_uri", "/missing.html"),
            ("user_agent", "Googlebot/2.1"),
            ("message", "raw"),
        ]),
        rec(&[
            ("client_ip", "203.0.113.9"),
            ("status", "503"),
            ("body_bytes_sent", "0"),
            ("request_time", "2.5"),
            ("method", "POST"),
            ("request_uri", "/api/upload"),
            ("user_agent", "python-requests/2.31"),
        ]),
    ];
    let mut w = Writer::new();
    for i in 0..256 {
        w.record(&records[i % 3]);
    }
    let frame = w.take_frame();
    let (mut spare, mut out_w, mut host) = (Spare::new(), Writer::new(), Zone);
    let t = std::time::Instant::now();
    let mut bytes = 0;
    for _ in 0..n / 256 {
        let mut reader = Reader::new(&frame).unwrap();
        for index in 0..reader.records() {
            let fields = reader.size(index).and_then(|s| reader.fields_in(s, spare.fields())).unwrap();
            let out = omlet_lang::eval::evaluate_with(&program, 0, fields, &mut host, &mut spare).unwrap();
            out_w.record(&out);
            spare.give_back(out);
        }
        bytes += out_w.take_frame().len();
    }
    let d = t.elapsed();
    println!("{n} records in {d:?}: {:.3} us/record ({bytes} bytes out)", d.as_secs_f64() * 1e6 / n as f64);
}
