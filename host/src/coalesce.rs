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
    route: R,
    /// Whether records may still join.
    open: bool,
    frame: Writer,
    /// Each record's result once the call is made (none at all: the call
    /// was not made, and each caller evaluates alone).
    results: Option<Vec<Result<Record>>>,
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
    /// Whether the opener has closed it (or it was finished without).
    closed: bool,
    /// Whether the opener's thread ran out of ready tasks before the opener
    /// closed it (see [`Release`]).
    released: bool,
    /// The first caller that joined (index 1), which watches a released
    /// gathering for the others, was dropped before it closed: each caller
    /// then watches for itself.
    watcher_gone: bool,
    /// A watcher found the gathering released and, after one more yield,
    /// still not closed: every caller that joined evaluates alone.
    abandoned: bool,
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

impl<R: Clone + Send> Coalescer<R> {
    /// Where a one-record call on `route` goes on this thread (see
    /// [`Gathering`]). A record joins only a gathering on the same route,
    /// opened by another task, while it is open, holds fewer than
    /// [`MAX_GATHER`] records, and with the record still takes at most
    /// `max_bytes`.
    pub(crate) fn arrive(
        &self,
        route: &R,
        same: fn(&R, &R) -> bool,
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
        frame.record(record.fields());
        let g = Arc::new(Gathering {
            state: Mutex::new(Gathered {
                route: route.clone(),
                open: true,
                frame,
                results: None,
                wakers: vec![None],
                expect: if slot.opened.fetch_add(1, Ordering::Relaxed).is_multiple_of(PROBE) {
                    0
                } else {
                    slot.last.load(Ordering::Relaxed)
                },
                opener: None,
                caller: me(),
                closed: false,
                released: false,
                watcher_gone: false,
                abandoned: false,
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
    fn join(
        &self,
        route: &R,
        same: fn(&R, &R) -> bool,
        record: &Record,
        max_bytes: usize,
        me: impl Fn() -> Caller,
    ) -> Option<usize> {
        let mut st = lock(&self.state);
        // A task that joined a gathering it opened would wait for itself.
        if !st.open || st.released || !same(&st.route, route) || st.caller == me() {
            return None;
        }
        let mark = st.frame.mark();
        st.frame.record(record.fields());
        let index = if st.frame.len() > max_bytes {
            // Full: this record goes alone.
            st.frame.truncate(mark);
            st.open = false;
            None
        } else {
            st.wakers.push(None);
            if st.wakers.len() >= MAX_GATHER {
                st.open = false;
            }
            Some(st.wakers.len() - 1)
        };
        // Full, or as large as the last: the opener need wait no more.
        let opener = if !st.open || st.wakers.len() == st.expect { st.opener.take() } else { None };
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
            st.open = false;
            st.closed = true;
            st.opener = None;
            st.results = Some(results);
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
    /// Closes the gathering to new records: its frame and how many records
    /// it holds. The thread that opened it learns whether anyone joined.
    pub(crate) fn close(&mut self) -> (Vec<u8>, usize) {
        let (frame, n, writer) = {
            let mut st = lock(&self.gathering.state);
            st.open = false;
            st.closed = true;
            st.opener = None;
            let mut writer = std::mem::take(&mut st.frame);
            (writer.take_frame(), st.wakers.len(), writer)
        };
        self.n = n;
        self.release(Some(writer), frame.len());
        if n >= MIN_GATHERED {
            self.slot.misses.store(0, Ordering::Relaxed);
            self.slot.last.store(n, Ordering::Relaxed);
        } else {
            self.failed();
        }
        (frame, n)
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
                if st.open {
                    st.opener = Some(cx.waker().clone());
                } else {
                    // Closed to joins while this caller was away: go on.
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
            if st.closed {
                // The opener went on without this wake: nothing to do.
                return;
            }
            st.released = true;
            if st.watcher_gone { st.joined_wakers(1) } else { st.wakers.get_mut(1).and_then(Option::take).into_iter().collect() }
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
        if let Some(results) = st.results.as_mut() {
            *done = true;
            // Each index is taken once: a caller's future ends with it.
            return Poll::Ready(match results.get_mut(index) {
                Some(r) => Joining::Got(std::mem::replace(r, Err(Error::Internal(String::new())))),
                None => Joining::Alone,
            });
        }
        if st.abandoned {
            *done = true;
            return Poll::Ready(Joining::Alone);
        }
        match st.wakers.get_mut(index) {
            Some(w) => *w = Some(cx.waker().clone()),
            None => {
                *done = true;
                return Poll::Ready(Joining::Alone);
            }
        }
        if st.released && !st.closed && (index == 1 || st.watcher_gone) {
            if !*yielded {
                return Poll::Ready(Joining::Yield);
            }
            // The opener's task has run once since its thread ran out of
            // ready tasks, and did not close it: its future is not polled.
            st.abandoned = true;
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
            if st.closed || st.abandoned || st.watcher_gone {
                return;
            }
            st.watcher_gone = true;
            if !st.released {
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
mod tests {
    use super::*;
    use omlet_lang::frame::Reader;

    fn rec(n: i64) -> Record {
        Record::from_json(&format!("{{\"n\":{n}}}")).unwrap()
    }

    fn same(a: &u8, b: &u8) -> bool {
        a == b
    }

    const MAX: usize = 1 << 20;

    /// A caller of its own for each call, as tasks would be.
    fn next() -> impl Fn() -> Caller {
        static N: AtomicU64 = AtomicU64::new(1);
        let me = N.fetch_add(1, Ordering::Relaxed);
        move || Some(me)
    }

    fn poll<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
    }

    /// Opens a gathering on this thread that `k` more records join, closes it
    /// and finishes it with no results: the number of records it held.
    fn gather(co: &Coalescer<u8>, k: usize) -> usize {
        let Arrival::Open(mut opened) = co.arrive(&0, same, &rec(0), MAX, next()) else { panic!("a gathering opens") };
        let joined: Vec<_> = (0..k)
            .map(|i| match co.arrive(&0, same, &rec(i as i64 + 1), MAX, next()) {
                Arrival::Joined(j) => j,
                _ => panic!("record {i} joins"),
            })
            .collect();
        let (_, n) = opened.close();
        opened.finish(Vec::new());
        drop(joined);
        n
    }

    #[test]
    fn callers_join_an_open_gathering_and_each_gets_its_own_result() {
        let co: Coalescer<u8> = Coalescer::new();
        let Arrival::Open(mut opened) = co.arrive(&0, same, &rec(10), MAX, next()) else { panic!("the first caller opens") };
        let mut joined: Vec<_> = (11..14)
            .map(|n| match co.arrive(&0, same, &rec(n), MAX, next()) {
                Arrival::Joined(j) => j,
                _ => panic!("a caller of the same thread joins"),
            })
            .collect();
        assert!(joined.iter_mut().all(|j| poll(j).is_pending()), "they wait for the call");
        let (frame, n) = opened.close();
        assert_eq!(n, 4);
        // The frame holds the opener's record, then the others in order.
        let reader = Reader::new(&frame).unwrap();
        assert_eq!(reader.records(), 4);
        assert!(matches!(co.arrive(&0, same, &rec(99), MAX, next()), Arrival::Open(_)), "a closed gathering takes no more");
        let results = (0..4).map(|i| if i == 2 { Err(Error::Internal("two".into())) } else { Ok(rec(100 + i)) }).collect();
        opened.finish(results);
        let got: Vec<_> = joined.iter_mut().map(poll).collect();
        assert!(matches!(&got[0], Poll::Ready(Joining::Got(Ok(r))) if r.to_json() == r#"{"n":101}"#));
        assert!(matches!(&got[1], Poll::Ready(Joining::Got(Err(Error::Internal(m)))) if m == "two"));
        assert!(matches!(&got[2], Poll::Ready(Joining::Got(Ok(r))) if r.to_json() == r#"{"n":103}"#));
        assert_eq!(co.coalesced.load(Ordering::Relaxed), 3);
    }

    fn in_runtime(f: impl FnOnce()) {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async { f() });
    }

    struct Count(AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn the_caller_that_completes_the_last_gatherings_count_wakes_the_opener() {
        // In a runtime, as the opener's yield is deferred there (outside one it
        // would wake at once).
        in_runtime(|| {
            let co: Coalescer<u8> = Coalescer::new();
            assert_eq!(gather(&co, 2), 3, "a hit of three");
            let Arrival::Open(opened) = co.arrive(&0, same, &rec(0), MAX, next()) else { panic!("opens") };
            let count = Arc::new(Count(AtomicUsize::new(0)));
            let waker = Waker::from(count.clone());
            let mut gathering = Box::pin(opened.gather());
            assert!(gathering.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
            let before = count.0.load(Ordering::Relaxed);
            let _one = co.arrive(&0, same, &rec(1), MAX, next());
            assert_eq!(count.0.load(Ordering::Relaxed), before, "two of three: the opener waits");
            let _two = co.arrive(&0, same, &rec(2), MAX, next());
            assert_eq!(count.0.load(Ordering::Relaxed), before + 1, "three of three: the opener is woken");
        });
    }

    #[test]
    fn every_probeth_gathering_waits_for_its_thread_to_find_out_whether_more_come() {
        // In a runtime, as the opener's yield is deferred there (outside one it
        // would wake at once).
        in_runtime(|| {
            let co: Coalescer<u8> = Coalescer::new();
            for i in 0..2 * PROBE {
                let Arrival::Open(mut opened) = co.arrive(&0, same, &rec(0), MAX, next()) else { panic!("opens") };
                let count = Arc::new(Count(AtomicUsize::new(0)));
                let waker = Waker::from(count.clone());
                {
                    let mut gathering = Box::pin(opened.gather());
                    assert!(gathering.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
                }
                let before = count.0.load(Ordering::Relaxed);
                let _joined: Vec<_> = (1..3).map(|n| co.arrive(&0, same, &rec(n), MAX, next())).collect();
                let woken = count.0.load(Ordering::Relaxed) > before;
                // The first has no last size to reach; after it, all but every PROBEth.
                assert_eq!(woken, !i.is_multiple_of(PROBE), "gathering {i}");
                opened.close();
                opened.finish(Vec::new());
            }
        });
    }

    /// An opened gathering that three callers joined, each polled once with
    /// a waker that counts its wakes; and its release, woken as the opener's
    /// thread would wake it (the opener's task counted too).
    #[allow(clippy::type_complexity)]
    fn released(co: &Coalescer<u8>) -> (Opened<'_, u8>, Vec<(Joined<u8>, Arc<Count>)>, Arc<Count>, Waker) {
        let Arrival::Open(opened) = co.arrive(&0, same, &rec(0), MAX, next()) else { panic!("opens") };
        let mut joined: Vec<_> = (1..4)
            .map(|n| match co.arrive(&0, same, &rec(n), MAX, next()) {
                Arrival::Joined(j) => (j, Arc::new(Count(AtomicUsize::new(0)))),
                _ => panic!("joins"),
            })
            .collect();
        for (j, c) in &mut joined {
            assert!(poll_with(j, c).is_pending());
        }
        let task = Arc::new(Count(AtomicUsize::new(0)));
        let release = Waker::from(Arc::new(Release { gathering: opened.gathering.clone(), task: Waker::from(task.clone()) }));
        (opened, joined, task, release)
    }

    fn poll_with(j: &mut Joined<u8>, c: &Arc<Count>) -> Poll<Joining> {
        Pin::new(j).poll(&mut Context::from_waker(&Waker::from(c.clone())))
    }

    fn wakes(c: &Arc<Count>) -> usize {
        c.0.load(Ordering::Relaxed)
    }

    #[test]
    fn a_release_wakes_the_opener_and_one_watcher_who_sends_the_others_alone() {
        let co: Coalescer<u8> = Coalescer::new();
        let (_opened, mut joined, task, release) = released(&co);
        release.wake_by_ref();
        assert_eq!(wakes(&task), 1, "the opener's task is woken");
        let woken: Vec<usize> = joined.iter().map(|(_, c)| wakes(c)).collect();
        assert_eq!(woken, [1, 0, 0], "of the callers, only the watcher");
        let (w, wc) = &mut joined[0];
        assert!(matches!(poll_with(w, wc), Poll::Ready(Joining::Yield)), "the watcher yields once");
        w.yielded();
        let (other, oc) = &mut joined[1];
        assert!(poll_with(other, oc).is_pending(), "the others wait for the watcher");
        // The opener was kept but not polled: still not closed.
        let (w, wc) = &mut joined[0];
        assert!(matches!(poll_with(w, wc), Poll::Ready(Joining::Alone)));
        for (j, c) in &mut joined[1..] {
            assert_eq!(wakes(c), 1, "the watcher wakes the others");
            assert!(matches!(poll_with(j, c), Poll::Ready(Joining::Alone)));
        }
    }

    #[test]
    fn a_released_gathering_that_closes_answers_everyone() {
        let co: Coalescer<u8> = Coalescer::new();
        let (mut opened, mut joined, _task, release) = released(&co);
        release.wake_by_ref();
        let (w, wc) = &mut joined[0];
        assert!(matches!(poll_with(w, wc), Poll::Ready(Joining::Yield)));
        w.yielded();
        // The opener's task runs, as it was woken first.
        let (_, n) = opened.close();
        assert_eq!(n, 4);
        opened.finish((0..4).map(|i| Ok(rec(100 + i))).collect());
        for (i, (j, c)) in joined.iter_mut().enumerate() {
            let want = format!("{{\"n\":{}}}", 101 + i);
            assert!(matches!(poll_with(j, c), Poll::Ready(Joining::Got(Ok(r))) if r.to_json() == want), "caller {i}");
        }
    }

    #[test]
    fn a_dropped_watcher_hands_the_watch_to_every_caller() {
        // Dropped before the release, the release wakes every caller; dropped
        // after it, the watcher wakes them itself.
        for released_first in [false, true] {
            let co: Coalescer<u8> = Coalescer::new();
            let (_opened, mut joined, _task, release) = released(&co);
            if released_first {
                release.wake_by_ref();
            }
            drop(joined.remove(0));
            if !released_first {
                release.wake_by_ref();
            }
            assert!(joined.iter().all(|(_, c)| wakes(c) == 1), "each is woken to watch for itself ({released_first})");
            let (j, c) = &mut joined[0];
            assert!(matches!(poll_with(j, c), Poll::Ready(Joining::Yield)));
            j.yielded();
            assert!(matches!(poll_with(j, c), Poll::Ready(Joining::Alone)));
            // The first to find the opener still away sends the rest alone.
            let (j, c) = &mut joined[1];
            assert!(matches!(poll_with(j, c), Poll::Ready(Joining::Alone)));
        }
    }

    #[test]
    fn a_dropped_opener_sends_its_callers_to_evaluate_alone() {
        let co: Coalescer<u8> = Coalescer::new();
        let opened = co.arrive(&0, same, &rec(0), MAX, next());
        let Arrival::Joined(mut j) = co.arrive(&0, same, &rec(1), MAX, next()) else { panic!("joins") };
        assert!(poll(&mut j).is_pending());
        drop(opened);
        assert!(matches!(poll(&mut j), Poll::Ready(Joining::Alone)));
    }

    #[test]
    fn a_caller_does_not_join_the_gathering_it_opened() {
        let co: Coalescer<u8> = Coalescer::new();
        let me = next();
        let Arrival::Open(_opened) = co.arrive(&0, same, &rec(0), MAX, &me) else { panic!("opens") };
        let again = co.arrive(&0, same, &rec(1), MAX, &me);
        assert!(!matches!(again, Arrival::Joined(_)), "it would wait for itself");
        assert!(matches!(co.arrive(&0, same, &rec(2), MAX, next()), Arrival::Joined(_)), "another caller joins");
    }

    #[test]
    fn only_the_same_route_joins() {
        let co: Coalescer<u8> = Coalescer::new();
        let Arrival::Open(_first) = co.arrive(&0, same, &rec(0), MAX, next()) else { panic!("opens") };
        assert!(matches!(co.arrive(&1, same, &rec(1), MAX, next()), Arrival::Open(_)), "another route opens its own");
    }

    #[test]
    fn a_gathering_stops_at_its_record_and_byte_bounds() {
        let co: Coalescer<u8> = Coalescer::new();
        let Arrival::Open(mut opened) = co.arrive(&0, same, &rec(0), MAX, next()) else { panic!("opens") };
        let mut joined = Vec::new();
        for i in 1..MAX_GATHER {
            let Arrival::Joined(j) = co.arrive(&0, same, &rec(i as i64), MAX, next()) else { panic!("record {i} joins") };
            joined.push(j);
        }
        assert!(!matches!(co.arrive(&0, same, &rec(0), MAX, next()), Arrival::Joined(_)), "full at {MAX_GATHER}");
        assert_eq!(opened.close().1, MAX_GATHER);

        // Each `{"n":…}` record takes 22 bytes of a frame, whose head takes 12.
        let co: Coalescer<u8> = Coalescer::new();
        let small = 12 + 2 * 22;
        let Arrival::Open(mut opened) = co.arrive(&0, same, &rec(0), small, next()) else { panic!("opens") };
        let Arrival::Joined(_j) = co.arrive(&0, same, &rec(1), small, next()) else { panic!("within the bound, joins") };
        assert!(
            !matches!(co.arrive(&0, same, &rec(2), small, next()), Arrival::Joined(_)),
            "it would take the frame past {small} bytes"
        );
        let (frame, n) = opened.close();
        assert_eq!((frame.len(), n), (small, 2));
    }

    #[test]
    fn a_thread_whose_gatherings_miss_opens_them_ever_more_rarely() {
        let co: Coalescer<u8> = Coalescer::new();
        // Alone, twice: misses; each makes the next wait twice as long.
        assert_eq!(gather(&co, 0), 1);
        assert!(matches!(co.arrive(&0, same, &rec(0), MAX, next()), Arrival::Alone));
        assert_eq!(gather(&co, 0), 1);
        for _ in 0..2 {
            assert!(matches!(co.arrive(&0, same, &rec(0), MAX, next()), Arrival::Alone));
        }
        assert_eq!(gather(&co, 0), 1);
        for _ in 0..4 {
            assert!(matches!(co.arrive(&0, same, &rec(0), MAX, next()), Arrival::Alone));
        }
        // A pair is a hit: the next call opens a gathering again.
        assert_eq!(gather(&co, MIN_GATHERED - 1), MIN_GATHERED);
        assert!(matches!(co.arrive(&0, same, &rec(0), MAX, next()), Arrival::Open(_)));
        // The wait is bounded.
        let co: Coalescer<u8> = Coalescer::new();
        let waits: Vec<u32> = (0..20).map(|_| calls_alone_before_a_lone_gathering(&co)).collect();
        assert_eq!(&waits[..4], [0, 1, 2, 4]);
        assert_eq!(waits[19], MAX_SKIP);
    }

    /// Calls alone until one opens a gathering, which nobody joins: how
    /// many calls went alone.
    fn calls_alone_before_a_lone_gathering(co: &Coalescer<u8>) -> u32 {
        let mut alone = 0;
        loop {
            match co.arrive(&0, same, &rec(0), MAX, next()) {
                Arrival::Alone => alone += 1,
                Arrival::Open(mut opened) => {
                    opened.close();
                    opened.finish(Vec::new());
                    return alone;
                }
                Arrival::Joined(_) => panic!("no gathering is open"),
            }
        }
    }
}
