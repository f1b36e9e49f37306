//! `jsonl_csv`: see `omlet_fuzz::host::jsonl_csv` (fuzz/src/host.rs). Needs the
//! `host` feature.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| omlet_fuzz::host::jsonl_csv(data));
