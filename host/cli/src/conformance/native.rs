//! `omlet test --native`: a case's record evaluated by the native evaluator,
//! within the limits the wasm path has where the native evaluator allows
//! them: the input record's size (`EngineConfig::max_record_bytes`) and the
//! call deadline (`EngineConfig::call_deadline`, time in lookups not
//! counted). The output's size is bounded after the call
//! ([`MAX_OUTPUT_BYTES`](super::MAX_OUTPUT_BYTES)), as for the wasm path.
//!
//! The native evaluator has no memory bound of its own (the guest has its
//! instance's memory): a record that passes its deadline is reported as
//! failed and left to finish on its own thread, which nothing waits for.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use omlet::EngineConfig;
use omlet::record;
use omlet_lang::value::Field;
use omlet_lang::{Cell, Host, Program, QueryError};

use super::{Fields, NativeHost};

/// Evaluates `input` with model `model` of `program` on a thread of its
/// own; with `traced`, also the trace as text. `Err` (the outer one) for a
/// record over `config.max_record_bytes` or an evaluation past
/// `config.call_deadline`, each naming its limit.
pub async fn evaluate(
    config: &EngineConfig,
    program: Program,
    model: std::result::Result<usize, String>,
    input: Fields,
    host: NativeHost,
    traced: bool,
) -> std::result::Result<(std::result::Result<Fields, String>, Option<String>), String> {
    let size = record::fields_json(&input).len();
    if size > config.max_record_bytes {
        return Err(format!(
            "record bytes: the input record takes {size} bytes, more than {} (EngineConfig::max_record_bytes)",
            config.max_record_bytes
        ));
    }
    let waited = Arc::new(AtomicU64::new(0));
    let mut host = Timed { inner: host, waited: waited.clone() };
    let (tx, rx) = tokio::sync::oneshot::channel();
    // The values a record builds are bounded as the guest's instance memory
    // bounds them in wasm.
    let budget = config.max_memory;
    let work = move || {
        let model = match model {
            Ok(m) => m,
            Err(e) => return (Err(e), None),
        };
        let mut spare = omlet_lang::eval::Spare::new().with_value_budget(budget);
        let (out, text) = if traced {
            let (out, t) = omlet_lang::eval::explain_with(&program, model, input, &mut host, &mut spare);
            (out, Some(t.to_text()))
        } else {
            (omlet_lang::eval::evaluate_with(&program, model, input, &mut host, &mut spare), None)
        };
        (out.map(|r| r.into_iter().map(Field::into_owned).collect::<Fields>()).map_err(|e| e.to_string()), text)
    };
    // A thread of its own rather than the runtime's blocking pool: one past
    // its deadline is abandoned, and nothing (the runtime's shutdown
    // included) waits for it.
    std::thread::Builder::new()
        .name("omlet-native-case".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| format!("cannot start the native evaluation: {e}"))?;
    let start = Instant::now();
    let deadline = config.call_deadline;
    let mut rx = rx;
    // What the evaluation computed so far (its time in lookups left out):
    // past the deadline, the case fails, whether its result is in or not,
    // so that the outcome does not hang on which of the two came first.
    let left = || {
        let computed = start.elapsed().saturating_sub(Duration::from_nanos(waited.load(Ordering::Relaxed)));
        deadline.checked_sub(computed).filter(|d| !d.is_zero()).ok_or_else(|| {
            format!("call deadline: the native evaluation computed for more than {deadline:?} (EngineConfig::call_deadline)")
        })
    };
    loop {
        match tokio::time::timeout(left()?, &mut rx).await {
            Ok(Ok(done)) => return left().map(|_| done),
            Ok(Err(_)) => return Err("the native evaluation stopped without a result (it panicked)".into()),
            // Time spent in lookups is not counted: look again.
            Err(_) => continue,
        }
    }
}

/// A [`NativeHost`] that adds up the time its lookups take, which the
/// deadline leaves out (as the wasm path's does).
struct Timed {
    inner: NativeHost,
    waited: Arc<AtomicU64>,
}

impl Host for Timed {
    fn query(&mut self, statement: u32, params: &[Cell]) -> std::result::Result<Option<Vec<Cell>>, QueryError> {
        let start = Instant::now();
        let r = self.inner.query(statement, params);
        self.waited.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }
    fn columns(&mut self, statement: u32) -> std::result::Result<Vec<String>, QueryError> {
        self.inner.columns(statement)
    }
    fn now(&mut self) -> (i64, i32) {
        self.inner.now()
    }
    fn intranet_nets(&mut self) -> &[omlet_lang::intranet::Net] {
        self.inner.intranet_nets()
    }
}
