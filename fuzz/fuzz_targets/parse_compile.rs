//! `parse_compile`: see `omlet_fuzz::lang::parse_compile` (fuzz/src/lang.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| omlet_fuzz::lang::parse_compile(data));
