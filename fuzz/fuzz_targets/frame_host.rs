//! `frame_host`: see `omlet_fuzz::host::frame_host` (fuzz/src/host.rs). Needs the
//! `host` feature.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| omlet_fuzz::host::frame_host(data));
