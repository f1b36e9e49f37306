//! Benchmarks live in benches/ (see issue 5).
