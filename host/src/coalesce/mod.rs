//! Coalescing one-record calls: the tasks of one thread that call a rule
//! at about the same time have their records evaluated in one batch call.
//!
//! A fiber-less call holds its thread, so the tasks of one worker thread can
//! only call one after another. A caller that may have company opens a
//! gathering on its thread and yields once (`yield_now`: it runs again when
//! the thread has no other task ready, or sooner when as many records have
//! joined as the thread's last gathering held). The thread's other tasks
//! that call the rule meanwhile write their records into the gathering's
//! frame and wait; then the opener makes one batch call for all of them and
//! hands each its own result. There is no timer: a gathering holds what the
//! thread's ready tasks bring before it runs again.
//!
//! A caller never hands its record over by reference: joining writes it into
//! the frame at once, so a caller that is cancelled while it waits leaves
//! nothing behind, and an opener that is cancelled while it yields tells the
//! others to evaluate alone.
//!
//! A gathering's state is one [`Phase`], which moves only forward; who may
//! act in each phase is written beside it. Two guards own cancellation: an
//! [`Opened`] dropped before it finishes sends every caller that joined to
//! evaluate alone, and a [`Joined`] watcher dropped early hands its watch
//! to every caller. `model.rs` runs every interleaving of an opener, its
//! release and two callers, and checks that each caller gets one answer.
//!
//! This module holds the gatherings and their invariants; `runtime` makes
//! the calls.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use omlet_lang::frame::Writer;
use thread_local::ThreadLocal;

use crate::record::Record;
use crate::{Error, Result};

/// A rule's gatherings, one per thread that calls it.
pub(crate) struct Coalescer<R: Send> {
    threads: ThreadLocal<ThreadSlot<R>>,
    /// Records evaluated in another caller's call.
    pub(crate) coalesced: AtomicU64,
}

impl<R: Send> Coalescer<R> {
    pub(crate) fn new() -> Coalescer<R> {
        Coalescer { threads: ThreadLocal::new(), coalesced: AtomicU64::new(0) }
    }
}

/// Who calls: the runtime's task, as a key (`None`: no task, which is a
/// `block_on` future, one per thread, so the same caller as any other
/// `None` of the thread).
pub(crate) type Caller = Option<u64>;

/// The calling task as a [`Caller`].
pub(crate) fn current_caller() -> Caller {
    use std::hash::BuildHasher;
    tokio::task::try_id().map(|id| omlet_lang::fnv::FnvBuild.hash_one(id))
}

/// Most records one gathering holds.
pub(crate) const MAX_GATHER: usize = 256;

/// The records of one thread's callers that go in one batch call (see the
/// module's doc). A gathering that ends with fewer than [`MIN_GATHERED`]
/// records is a miss: its thread then makes some calls alone before it opens
/// the next, twice as many after each further miss, up to [`MAX_SKIP`]; so a
/// thread with one caller yields on one call in a few thousand.
pub(crate) struct Gathering<R> {
    state: Mutex<Gathered<R>>,
}

struct Gathered<R> {
    /// The route its records go on, taken by the opener when it closes.
    route: Option<R>,
    phase: Phase,
    frame: Writer,
    /// A waker slot for each record in `frame`, by index: the opener's, at
    /// 0, unused; then those of the callers that joined. Its length is the
    /// number of records.
    wakers: Vec<Option<Waker>>,
    /// How many records the thread's last gathering held: when as many
    /// have joined, the last to join wakes the opener (`opener`), which
    /// then need not wait until its thread runs out of ready tasks.
    expect: usize,
    opener: Option<Waker>,
    /// The opener (see [`Caller`]), which must not join its own gathering.
    caller: Caller,
    /// Who watches a released gathering for the callers that joined.
    watch: Watch,
}

/// Where a gathering stands. It moves only down this list, though it may
/// skip a phase: a gathering fills or not, is released or not, and an
/// opener that is dropped finishes it from any phase (with no results).
/// Each phase says who may act on it; `coalesce::model` checks every
/// interleaving of those acts.
enum Phase {
    /// Records may join (see [`Gathering::join`]).
    Open,
    /// It holds [`MAX_GATHER`] records, or the next would take it past the
    /// byte bound: nobody more joins, and the opener has been woken to close
    /// it.
    Full,
    /// The opener's thread ran out of ready tasks before the opener closed
    /// it (see [`Release`]): nobody more joins, and the watcher waits one
    /// more yield for the opener to close it.
    Released,
    /// A watcher found it released and, after that yield, still not closed:
    /// every caller that joined evaluates alone (the opener's future is kept
    /// but not polled). The opener may still close and finish it, for
    /// nobody.
    Abandoned,
    /// The opener took its frame and makes the call.
    Closed,
    /// Each record's result, by index, once the call is made; none at all
    /// when the call was not made or the opener was dropped: each caller
    /// then evaluates alone.
    Finished(Vec<Result<Record>>),
}

/// Who watches a released gathering (see [`Release`]).
#[derive(Clone, Copy, PartialEq)]
enum Watch {
    /// The first caller that joined (index 1) watches for the others.
    First,
    /// The first caller was dropped before the gathering closed: each
    /// caller watches for itself.
    Each,
}

impl<R> Gathered<R> {
    /// The wakers of the callers that joined, but that of caller `except`
    /// (the watcher that wakes the others, or the one that is gone), taken
    /// to be woken.
    fn joined_wakers(&mut self, except: usize) -> Vec<Waker> {
        let others = self.wakers.iter_mut().enumerate().skip(1).filter(|(i, _)| *i != except);
        others.filter_map(|(_, w)| w.take()).collect()
    }
}

/// One gathering in this many waits for its thread's ready tasks even when
/// it reaches the size of the last one: the early wake (see
/// [`Opened::gather`]) would otherwise keep gatherings from growing when
/// more tasks call than before.
pub(crate) const PROBE: u32 = 8;

/// Largest frame whose writer a thread keeps for its next gathering.
const KEEP_WRITER_BYTES: usize = 64 << 10;

/// Most calls a thread makes alone after a missed gathering.
pub(crate) const MAX_SKIP: u32 = 4096;

/// Fewest records a gathering must end with to count as a hit. A pair pays
/// since the last caller to join wakes the opener (see [`Opened::gather`]):
/// measured with `host/examples/profile_concurrent.rs`, two tasks per worker
/// thread went about 5% faster gathering in pairs than alone, where before
/// that wake they went 20% slower.
pub(crate) const MIN_GATHERED: usize = 2;

/// A thread's gathering on one rule, and when it may open the next.
pub(crate) struct ThreadSlot<R> {
    open: Mutex<Open<R>>,
    /// Whether `open` may hold an open gathering (so that a call that
    /// cannot join one need not lock it).
    live: AtomicBool,
    /// Calls to make alone before the next gathering.
    skip: AtomicU32,
    /// Gatherings in a row that nobody joined.
    misses: AtomicU32,
    /// How many records the last gathering held, if it was a hit (else 0).
    last: AtomicUsize,
    /// Gatherings opened, to make every [`PROBE`]th one without the early
    /// wake.
    opened: AtomicU32,
}

impl<R> ThreadSlot<R> {
    /// Whether this call is to go alone, counting it if so.
    fn skips(&self) -> bool {
        if self.skip.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.skip.fetch_sub(1, Ordering::Relaxed);
        true
    }
}

impl<R: Send> Default for ThreadSlot<R> {
    fn default() -> Self {
        ThreadSlot {
            open: Mutex::new(Open { gathering: None, spare: Writer::new() }),
            live: AtomicBool::new(false),
            skip: AtomicU32::new(0),
            misses: AtomicU32::new(0),
            last: AtomicUsize::new(0),
            opened: AtomicU32::new(0),
        }
    }
}

/// A thread's open gathering, and the writer the next one reuses (so that a
/// gathering allocates only the frame it sends).
struct Open<R> {
    gathering: Option<Arc<Gathering<R>>>,
    spare: Writer,
}

/// What a one-record caller does on its thread.
pub(crate) enum Arrival<'c, R: Send> {
    /// Evaluate alone.
    Alone,
    /// Yield once, then make the call for the gathering.
    Open(Opened<'c, R>),
    /// Wait for the result of the gathering it joined.
    Joined(Joined<R>),
}

impl<R: Send> Coalescer<R> {
    /// Where a one-record call on `route` goes on this thread (see
    /// [`Gathering`]). A record joins only a gathering on the same route
    /// (`same`), opened by another task, while it is open, holds fewer than
    /// [`MAX_GATHER`] records, and with the record still takes at most
    /// `max_bytes`. Only an opener makes its route's `R` (`make`): a caller
    /// that joins or goes alone compares its own.
    pub(crate) fn arrive<K: ?Sized>(
        &self,
        route: &K,
        same: fn(&R, &K) -> bool,
        make: fn(&K) -> R,
        record: &Record,
        max_bytes: usize,
        me: impl Fn() -> Caller,
    ) -> Arrival<'_, R> {
        let slot = self.threads.get_or_default();
        let live = slot.live.load(Ordering::Acquire);
        if !live && slot.skips() {
            return Arrival::Alone;
        }
        let mut open = lock(&slot.open);
        if let Some(g) = open.gathering.as_ref().filter(|_| live)
            && let Some(index) = g.join(route, same, record, max_bytes, &me)
        {
            return Arrival::Joined(Joined { gathering: g.clone(), index: index as u32, yielded: false, done: false });
        }
        if slot.skips() {
            return Arrival::Alone;
        }
        let mut frame = std::mem::take(&mut open.spare);
        record.write_frame(&mut frame);
        let g = Arc::new(Gathering {
            state: Mutex::new(Gathered {
                route: Some(make(route)),
                phase: Phase::Open,
                frame,
                wakers: vec![None],
                expect: if slot.opened.fetch_add(1, Ordering::Relaxed).is_multiple_of(PROBE) {
                    0
                } else {
                    slot.last.load(Ordering::Relaxed)
                },
                opener: None,
                caller: me(),
                watch: Watch::First,
            }),
        });
        open.gathering = Some(g.clone());
        slot.live.store(true, Ordering::Release);
        Arrival::Open(Opened { co: self, slot, gathering: g, n: 0, finished: false })
    }
}

/// A lock whose holder panicked is still used: every section below leaves
/// its state whole, and a caller must never wait on a lock nobody serves.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<R: Send> Gathering<R> {
    fn join<K: ?Sized>(
        &self,
        route: &K,
        same: fn(&R, &K) -> bool,
        record: &Record,
        max_bytes: usize,
        me: impl Fn() -> Caller,
    ) -> Option<usize> {
        let mut st = lock(&self.state);
        // A task that joined a gathering it opened would wait for itself.
        if !matches!(st.phase, Phase::Open) || !st.route.as_ref().is_some_and(|r| same(r, route)) || st.caller == me() {
            return None;
        }
        let mark = st.frame.mark();
        record.write_frame(&mut st.frame);
        let index = if st.frame.len() > max_bytes {
            // Full: this record goes alone.
            st.frame.truncate(mark);
            st.phase = Phase::Full;
            None
        } else {
            st.wakers.push(None);
            if st.wakers.len() >= MAX_GATHER {
                st.phase = Phase::Full;
            }
            Some(st.wakers.len() - 1)
        };
        // Full, or as large as the last: the opener need wait no more.
        let wake = !matches!(st.phase, Phase::Open) || st.wakers.len() == st.expect;
        let opener = if wake { st.opener.take() } else { None };
        drop(st);
        if let Some(o) = opener {
            o.wake();
        }
        index
    }

    /// Gives the results (none: each caller is to evaluate alone) and wakes
    /// the callers that joined.
    fn finish(&self, results: Vec<Result<Record>>) {
        let wakers = {
            let mut st = lock(&self.state);
            st.phase = Phase::Finished(results);
            st.opener = None;
            std::mem::take(&mut st.wakers)
        };
        for w in wakers.into_iter().flatten() {
            w.wake();
        }
    }
}

/// An opened gathering, held by its opener. Dropped unfinished (the opener
/// was cancelled, or the call was not made), it tells each caller that joined
/// to evaluate alone.
pub(crate) struct Opened<'c, R: Send> {
    co: &'c Coalescer<R>,
    slot: &'c ThreadSlot<R>,
    gathering: Arc<Gathering<R>>,
    /// Records it held when it closed.
    n: usize,
    finished: bool,
}

impl<R: Send> Opened<'_, R> {
    /// Closes the gathering to new records: its frame, how many records it
    /// holds, and its route (`None` only if closed twice). The thread that
    /// opened it learns whether anyone joined.
    pub(crate) fn close(&mut self) -> (Vec<u8>, usize, Option<R>) {
        let (frame, n, writer, route) = {
            let mut st = lock(&self.gathering.state);
            // An abandoned gathering stays so: its callers went alone.
            if !matches!(st.phase, Phase::Abandoned) {
                st.phase = Phase::Closed;
            }
            st.opener = None;
            let mut writer = std::mem::take(&mut st.frame);
            (writer.take_frame(), st.wakers.len(), writer, st.route.take())
        };
        self.n = n;
        self.release(Some(writer), frame.len());
        if n >= MIN_GATHERED {
            self.slot.misses.store(0, Ordering::Relaxed);
            self.slot.last.store(n, Ordering::Relaxed);
        } else {
            self.failed();
        }
        (frame, n, route)
    }

    /// Takes the gathering out of its thread's slot (unless a caller of that
    /// thread has opened another meanwhile), keeping a small writer for the
    /// next one: a writer keeps the buffers of its largest frame.
    fn release(&self, writer: Option<Writer>, frame_len: usize) {
        let mut open = lock(&self.slot.open);
        if open.gathering.as_ref().is_some_and(|g| Arc::ptr_eq(g, &self.gathering)) {
            open.gathering = None;
            self.slot.live.store(false, Ordering::Release);
        }
        if let Some(w) = writer.filter(|_| frame_len <= KEEP_WRITER_BYTES) {
            open.spare = w;
        }
    }

    /// Counts a miss for the thread: nobody joined, or the call could not be
    /// made (which the next gathering would likely repeat).
    pub(crate) fn failed(&self) {
        self.slot.last.store(0, Ordering::Relaxed);
        let misses = self.slot.misses.fetch_add(1, Ordering::Relaxed).min(16);
        self.slot.skip.store((1u32 << misses).min(MAX_SKIP), Ordering::Relaxed);
    }

    /// Waits for the thread's other callers to join: until the thread has
    /// no other task ready (`yield_now`), or until as many records have
    /// joined as the thread's last gathering held (except every [`PROBE`]th
    /// gathering, which finds out whether more would come), or until it is
    /// full.
    pub(crate) async fn gather(&self)
    where
        R: 'static,
    {
        let mut yielded = std::pin::pin!(tokio::task::yield_now());
        let mut first = true;
        std::future::poll_fn(|cx| {
            {
                let mut st = lock(&self.gathering.state);
                if matches!(st.phase, Phase::Open) {
                    st.opener = Some(cx.waker().clone());
                } else {
                    // Full or released while this caller was away: go on.
                    return Poll::Ready(());
                }
            }
            if std::mem::take(&mut first) {
                // The yield is deferred with a waker that also releases the
                // gathering (see `Release`).
                let release = Waker::from(Arc::new(Release { gathering: self.gathering.clone(), task: cx.waker().clone() }));
                return yielded.as_mut().poll(&mut Context::from_waker(&release));
            }
            yielded.as_mut().poll(cx)
        })
        .await;
    }

    /// Hands each joined caller its result: `results[i]` for the record at
    /// index `i` (the opener's own, at 0, is not used); a caller whose result
    /// is missing evaluates alone.
    pub(crate) fn finish(mut self, results: Vec<Result<Record>>) {
        self.finished = true;
        if !results.is_empty() && self.n > 1 {
            self.co.coalesced.fetch_add(self.n as u64 - 1, Ordering::Relaxed);
        }
        self.gathering.finish(results);
    }
}

impl<R: Send> Drop for Opened<'_, R> {
    fn drop(&mut self) {
        if !self.finished {
            self.gathering.finish(Vec::new());
            // Cancelled before it closed: nobody else would take it out.
            if self.n == 0 {
                self.release(None, 0);
            }
        }
    }
}

/// The waker an opener's yield is deferred with, woken when its thread has
/// run its ready tasks. Unless the opener closed the gathering meanwhile
/// (woken early), it marks the gathering released, wakes the opener's task,
/// then the first caller that joined, the watcher. A watcher that finds it
/// released and still not closed yields once more (by then the opener's
/// task, woken first, has run), and if it is still not closed, the opener's
/// future is kept but not polled: the watcher marks the gathering abandoned,
/// wakes the other callers, and they all evaluate alone, so that nobody
/// waits on a future nobody polls.
///
/// Only the watcher is woken, not every caller: each woken caller is polled
/// for nothing when the opener does close (the usual case), and waking them
/// all cost 10-30% of one-record calls at c = 16 to 64
/// (`profile_concurrent`). A watcher dropped before the gathering closes
/// hands the watch to every caller (see `Joined`'s drop).
struct Release<R> {
    gathering: Arc<Gathering<R>>,
    task: Waker,
}

impl<R: Send + 'static> std::task::Wake for Release<R> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let joined = {
            let mut st = lock(&self.gathering.state);
            if !matches!(st.phase, Phase::Open | Phase::Full) {
                // The opener went on without this wake: nothing to do.
                return;
            }
            st.phase = Phase::Released;
            match st.watch {
                Watch::Each => st.joined_wakers(1),
                Watch::First => st.wakers.get_mut(1).and_then(Option::take).into_iter().collect(),
            }
        };
        self.task.wake_by_ref();
        for w in joined {
            w.wake();
        }
    }
}

/// A caller waiting for the gathering it joined (see [`Joining`]).
pub(crate) struct Joined<R> {
    gathering: Arc<Gathering<R>>,
    index: u32,
    /// Whether it has yielded once since it found the gathering released.
    yielded: bool,
    /// Whether it has given its answer (a result, or to go alone).
    done: bool,
}

/// What a joined caller learns.
pub(crate) enum Joining {
    /// Its record's result.
    Got(Result<Record>),
    /// To evaluate its record alone.
    Alone,
    /// To yield once and then ask again: the gathering was released but not
    /// closed (see [`Release`]).
    Yield,
}

impl<R> Joined<R> {
    /// Notes that the caller yielded after [`Joining::Yield`].
    pub(crate) fn yielded(&mut self) {
        self.yielded = true;
    }
}

impl<R: Send> Future for Joined<R> {
    type Output = Joining;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Joining> {
        // Borrowed field by field (`Joined` is `Unpin`), so that `done` can be
        // set while the gathering's lock is held, without a clone of its `Arc`
        // on every poll.
        let Joined { gathering, index, yielded, done } = self.get_mut();
        let mut st = lock(&gathering.state);
        let index = *index as usize;
        match &mut st.phase {
            Phase::Finished(results) => {
                *done = true;
                // Each index is taken once: a caller's future ends with it.
                return Poll::Ready(match results.get_mut(index) {
                    Some(r) => Joining::Got(std::mem::replace(r, Err(Error::Internal(String::new())))),
                    None => Joining::Alone,
                });
            }
            Phase::Abandoned => {
                *done = true;
                return Poll::Ready(Joining::Alone);
            }
            Phase::Open | Phase::Full | Phase::Released | Phase::Closed => {}
        }
        match st.wakers.get_mut(index) {
            Some(w) => *w = Some(cx.waker().clone()),
            None => {
                *done = true;
                return Poll::Ready(Joining::Alone);
            }
        }
        if matches!(st.phase, Phase::Released) && (index == 1 || st.watch == Watch::Each) {
            if !*yielded {
                return Poll::Ready(Joining::Yield);
            }
            // The opener's task has run once since its thread ran out of
            // ready tasks, and did not close it: its future is not polled.
            st.phase = Phase::Abandoned;
            let others = st.joined_wakers(index);
            drop(st);
            for w in others {
                w.wake();
            }
            *done = true;
            return Poll::Ready(Joining::Alone);
        }
        Poll::Pending
    }
}

impl<R> Drop for Joined<R> {
    /// A watcher dropped before the gathering closed hands the watch to
    /// every caller: woken now if the gathering is released already, else
    /// by the release.
    fn drop(&mut self) {
        if self.done || self.index != 1 {
            return;
        }
        let others = {
            let mut st = lock(&self.gathering.state);
            if st.watch == Watch::Each || !matches!(st.phase, Phase::Open | Phase::Full | Phase::Released) {
                return;
            }
            st.watch = Watch::Each;
            if !matches!(st.phase, Phase::Released) {
                return;
            }
            st.joined_wakers(1)
        };
        for w in others {
            w.wake();
        }
    }
}

#[cfg(test)]
mod model;
#[cfg(test)]
mod tests;
