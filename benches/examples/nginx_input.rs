//! Writes the benches' nginx input, so that `omlet run` can be timed on
//! the same records as the `run/nginx` cell:
//!
//! ```text
//! cargo run --release -p omlet-benches --example nginx_input -- /tmp/access.jsonl 1000000
//! time target/release/omlet run examples/nginx/nginx.oml --knowdb examples/nginx/knowdb/knowdb.toml \
//!     -i /tmp/access.jsonl -o /dev/null
//! ```

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "access.jsonl".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    if let Err(e) = omlet_benches::nginx_jsonl(std::path::Path::new(&path), n) {
        eprintln!("{path}: {e}");
        std::process::exit(1);
    }
}
