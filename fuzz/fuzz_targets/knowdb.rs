//! `knowdb`: see `omlet_fuzz::host::knowdb` (fuzz/src/host.rs). Needs the
//! `host` feature.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| omlet_fuzz::host::knowdb(data));
