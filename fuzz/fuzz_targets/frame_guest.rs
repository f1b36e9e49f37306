//! `frame_guest`: see `omlet_fuzz::lang::frame_guest` (fuzz/src/lang.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| omlet_fuzz::lang::frame_guest(data));
