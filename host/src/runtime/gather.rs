//! Coalescing as a layer in front of [`invoke`](super::invoke): a
//! one-record call that may have company joins or opens a gathering on its
//! thread (see `crate::coalesce`), and an opener evaluates every record
//! gathered in one batch call.

use std::future::Future;
use std::pin::Pin;

use super::output::decode_batch_output;
use super::rule::Rule;
use super::{Route, same_route, wit_route};
use crate::coalesce::{Arrival, Coalescer, Joined, Joining, Opened, current_caller};
use crate::record::Record;
use crate::{Error, Result};

use super::bindings::exports::omlet::rule::evaluator as ev;

impl Rule {
    /// Where a one-record call goes on its thread (see `coalesce`), as a
    /// small value: the future of `evaluate` keeps it across its awaits. A
    /// caller that joins or goes alone compares its route with the
    /// gathering's without converting it; an opener's call, the larger and
    /// rarer path, is boxed, with the route converted once for it.
    pub(super) fn step<'a>(&'a self, co: &'a Coalescer<ev::Route>, route: Route<'a>, record: &'a Record) -> Step<'a> {
        let max = self.inner.engine.config.max_record_bytes;
        match co.arrive(&route, same_route, |r| wit_route(*r), record, max, current_caller) {
            Arrival::Alone => Step::Alone,
            Arrival::Joined(joined) => Step::Joined(joined),
            Arrival::Open(opened) => Step::Open(Box::pin(self.evaluate_gathered(opened, route, record))),
        }
    }

    /// The call of a gathering this caller opened on its thread (see
    /// `coalesce::Gathering`): it yields once, so that the thread's other
    /// callers can join, then evaluates every record in one fiber-less batch
    /// call. When that call cannot be made (no sync instance, a lookup that
    /// misses the caches, a trap or a limit), each caller evaluates its
    /// record alone, so that only a record that fails alone fails. (The
    /// gathering's frame is within the record limit: a record that would
    /// take it past does not join.)
    pub(super) async fn evaluate_gathered(
        &self,
        mut opened: Opened<'_, ev::Route>,
        route: Route<'_>,
        record: &Record,
    ) -> Result<Record> {
        opened.gather().await;
        // The route the gathering was opened with: converted once per call.
        let (frame, n, wit) = opened.close();
        let wit = wit.unwrap_or_else(|| wit_route(route));
        if n < 2 {
            drop(opened);
            return self.evaluate_alone(wit, record).await;
        }
        let out = match self.call_sync(|calls, store, generation| calls.batch(store, generation, &wit, &frame)) {
            Some(Ok(out)) => Some(out),
            Some(Err(e)) => {
                tracing::debug!("omlet: a gathered batch of {n} failed ({e}); its callers evaluate alone");
                None
            }
            None => None,
        };
        // Each caller's error names its own record, as if it had been alone.
        let results = out.and_then(|out| decode_batch_output(n, out, |_| 0).ok());
        let Some(mut results) = results else {
            // The next gatherings of this thread would likely fail the same way.
            opened.failed();
            drop(opened);
            return self.evaluate_alone(wit, record).await;
        };
        let own = match results.first_mut() {
            Some(r) => std::mem::replace(r, Err(Error::Internal(String::new()))),
            None => Err(Error::Internal("a gathered batch gave no result".into())),
        };
        opened.finish(results);
        own
    }
}

/// The result of the gathering a caller joined, or `None` to evaluate alone.
pub(super) async fn wait_joined(mut joined: Joined<ev::Route>) -> Option<Result<Record>> {
    loop {
        match (&mut joined).await {
            Joining::Got(result) => return Some(result),
            Joining::Alone => return None,
            Joining::Yield => {
                tokio::task::yield_now().await;
                joined.yielded();
            }
        }
    }
}

/// What a coalescing one-record call does (see [`Rule::step`]).
pub(super) enum Step<'a> {
    Alone,
    Joined(Joined<ev::Route>),
    Open(Pin<Box<dyn Future<Output = Result<Record>> + Send + 'a>>),
}
