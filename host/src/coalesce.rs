//! Coalescing one-record calls: while a rule's calls are in flight on every
//! lane, the records that other tasks submit wait in a queue, and the next
//! lane to finish takes them all as one batch call. Each caller still gets
//! its own record's result.
//!
//! There is no timer: a batch holds what piled up while the lanes were busy,
//! and a lane that starts while other callers are inside `evaluate` lets
//! them run first (one `yield_now`), so that the callers of its own thread
//! can join it. A caller whose queued record is dropped (its lane was
//! cancelled, or failed without an instance) evaluates it alone.
//!
//! This module holds the queue and its invariants; `runtime` makes the calls.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::oneshot;

use crate::Result;
use crate::record::Record;

/// A record waiting for a lane, with the route it is evaluated on.
pub(crate) struct Waiter<R> {
    pub(crate) route: R,
    pub(crate) record: Record,
    pub(crate) reply: oneshot::Sender<Reply<R>>,
}

/// What a waiting caller is told.
pub(crate) enum Reply<R> {
    /// Its record's result.
    Done(Result<Record>),
    /// To run a lane of its own (counted for it already), on its own record
    /// and these: a lane that found more than its share hands the rest on,
    /// so that every lane computes.
    Lead(Vec<Waiter<R>>),
}

impl<R> Waiter<R> {
    pub(crate) fn done(self, co: &Coalescer<R>, result: Result<Record>) {
        co.coalesced.fetch_add(1, Ordering::Relaxed);
        // A caller that went away no longer wants its result.
        let _ = self.reply.send(Reply::Done(result));
    }
}

pub(crate) struct Coalescer<R> {
    /// Most calls in flight at once; more callers wait.
    lanes: usize,
    state: Mutex<State<R>>,
    /// Callers inside `evaluate` (running, waiting, or deciding).
    active: AtomicUsize,
    /// Records evaluated in another caller's call.
    pub(crate) coalesced: AtomicU64,
}

struct State<R> {
    running: usize,
    waiting: Vec<Waiter<R>>,
}

/// What a caller does: run a lane, or wait for one to evaluate its record.
pub(crate) enum Entry<'c, R> {
    Run(Lane<'c, R>),
    Wait(oneshot::Receiver<Reply<R>>),
}

impl<R> Coalescer<R> {
    pub(crate) fn new(lanes: usize) -> Coalescer<R> {
        Coalescer {
            lanes: lanes.max(1),
            state: Mutex::new(State { running: 0, waiting: Vec::new() }),
            active: AtomicUsize::new(0),
            coalesced: AtomicU64::new(0),
        }
    }

    /// Counts a caller in until the guard drops.
    pub(crate) fn arrive(&self) -> Active<'_, R> {
        self.active.fetch_add(1, Ordering::Relaxed);
        Active(self)
    }

    /// Whether more callers are inside `evaluate` than there are lanes:
    /// only then can a record wait for a lane. (A fiber-less call holds its
    /// thread, so callers pile up only when more threads call than there
    /// are lanes.)
    pub(crate) fn busy(&self) -> bool {
        self.active.load(Ordering::Relaxed) > self.lanes
    }

    /// A lane when one is free; otherwise the record joins the queue (a
    /// copy of it: the caller's borrow cannot outlive a cancelled call).
    pub(crate) fn enter(&self, route: impl FnOnce() -> R, record: &Record) -> Entry<'_, R> {
        let Ok(mut st) = self.state.lock() else {
            // A poisoned queue: nobody drains it; run alone, uncounted.
            return Entry::Run(Lane { co: self, counted: false });
        };
        if st.running < self.lanes {
            st.running += 1;
            return Entry::Run(Lane { co: self, counted: true });
        }
        let (reply, rx) = oneshot::channel();
        st.waiting.push(Waiter { route: route(), record: record.clone(), reply });
        Entry::Wait(rx)
    }
}

/// A caller inside `evaluate`; counted out on drop.
pub(crate) struct Active<'c, R>(&'c Coalescer<R>);

impl<R> Drop for Active<'_, R> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A running lane. It must drain the queue before it ends ([`Lane::take`]
/// until `None`); if it is dropped early (its caller was cancelled), the
/// last lane to go drops the queued records, whose callers then evaluate
/// them alone, so that nobody waits for a lane that will never come.
pub(crate) struct Lane<'c, R> {
    co: &'c Coalescer<R>,
    counted: bool,
}

impl<R> Lane<'_, R> {
    /// The lane of a caller told to [`Reply::Lead`] (counted when it was told).
    pub(crate) fn adopt(co: &Coalescer<R>) -> Lane<'_, R> {
        Lane { co, counted: true }
    }

    /// This lane's share of what is queued now (perhaps nothing); the lane
    /// goes on. While lanes are free, each further share goes to one of its
    /// waiters, told to lead a lane of its own.
    pub(crate) fn take_now(&mut self) -> Vec<Waiter<R>> {
        let Ok(mut st) = self.co.state.lock() else { return Vec::new() };
        if !self.counted {
            return Vec::new();
        }
        self.share(&mut st)
    }

    /// The queued records: this lane takes them, except that while lanes
    /// are free, a share of them goes to a new leader for each free lane.
    fn share(&self, st: &mut State<R>) -> Vec<Waiter<R>> {
        let mut mine = std::mem::take(&mut st.waiting);
        let free = self.co.lanes.saturating_sub(st.running);
        let share = (mine.len() + 1).div_ceil(free + 1).max(2);
        while st.running < self.co.lanes && mine.len() > share {
            let mut theirs = mine.split_off(mine.len() - share);
            let Some(leader) = theirs.pop() else { break };
            st.running += 1;
            if let Err(Reply::Lead(back)) = leader.reply.send(Reply::Lead(theirs)) {
                // The leader went away: its share stays here.
                st.running -= 1;
                mine.extend(back);
            }
        }
        mine
    }

    /// Everything queued, or `None` when the queue is empty, in which case
    /// the lane has ended (in the same critical section, so a record queued
    /// after this sees the lane gone and runs one itself).
    pub(crate) fn take(&mut self) -> Option<Vec<Waiter<R>>> {
        if !self.counted {
            return None;
        }
        let Ok(mut st) = self.co.state.lock() else { return None };
        if st.waiting.is_empty() {
            st.running -= 1;
            self.counted = false;
            return None;
        }
        Some(self.share(&mut st))
    }
}

impl<R> Drop for Lane<'_, R> {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let orphans = match self.co.state.lock() {
            Ok(mut st) => {
                st.running -= 1;
                if st.running == 0 { std::mem::take(&mut st.waiting) } else { Vec::new() }
            }
            Err(_) => Vec::new(),
        };
        // Dropping the senders wakes their callers, who evaluate alone.
        drop(orphans);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(n: i64) -> Record {
        Record::from_json(&format!("{{\"n\":{n}}}")).unwrap()
    }

    #[test]
    fn callers_past_the_lanes_wait_and_a_lane_takes_them_all() {
        let co: Coalescer<()> = Coalescer::new(1);
        let Entry::Run(mut lane) = co.enter(|| (), &rec(0)) else { panic!("the first caller runs") };
        let Entry::Wait(mut rx1) = co.enter(|| (), &rec(1)) else { panic!("the lane is busy") };
        let Entry::Wait(_rx2) = co.enter(|| (), &rec(2)) else { panic!("the lane is busy") };
        let batch = lane.take().expect("two waiting");
        assert_eq!(batch.iter().map(|w| w.record.to_json()).collect::<Vec<_>>(), [r#"{"n":1}"#, r#"{"n":2}"#]);
        for (i, w) in batch.into_iter().enumerate() {
            w.done(&co, Ok(rec(10 + i as i64)));
        }
        let Ok(Reply::Done(Ok(r))) = rx1.try_recv() else { panic!("a result") };
        assert_eq!(r.to_json(), r#"{"n":10}"#);
        assert!(lane.take().is_none(), "an empty queue ends the lane");
        assert!(matches!(co.enter(|| (), &rec(3)), Entry::Run(_)), "the lane is free again");
    }

    #[test]
    fn a_dropped_last_lane_releases_its_waiters() {
        let co: Coalescer<()> = Coalescer::new(1);
        let lane = co.enter(|| (), &rec(0));
        let Entry::Wait(mut rx) = co.enter(|| (), &rec(1)) else { panic!("the lane is busy") };
        drop(lane);
        assert!(matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Closed)), "the waiter is told to run alone");
        assert!(matches!(co.enter(|| (), &rec(2)), Entry::Run(_)));
    }

    #[test]
    fn a_dropped_lane_leaves_the_queue_to_the_other_lanes() {
        let co: Coalescer<()> = Coalescer::new(2);
        let a = co.enter(|| (), &rec(0));
        let Entry::Run(mut b) = co.enter(|| (), &rec(1)) else { panic!("two lanes") };
        let Entry::Wait(mut rx) = co.enter(|| (), &rec(2)) else { panic!("both lanes busy") };
        drop(a);
        assert!(matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty)), "still queued for lane b");
        assert_eq!(b.take().map(|w| w.len()), Some(1));
    }

    #[test]
    fn a_lane_hands_a_share_to_a_waiter_while_lanes_are_free() {
        let co: Coalescer<()> = Coalescer::new(2);
        let Entry::Run(mut a) = co.enter(|| (), &rec(0)) else { panic!("a lane") };
        let Entry::Run(b) = co.enter(|| (), &rec(1)) else { panic!("a second lane") };
        let mut rxs: Vec<_> = (2..10)
            .map(|n| match co.enter(|| (), &rec(n)) {
                Entry::Wait(rx) => rx,
                Entry::Run(_) => panic!("both lanes busy"),
            })
            .collect();
        drop(b);
        // One lane running, one free, eight waiting: nine records over two
        // lanes; the last waiter leads the last five.
        let mine = a.take_now();
        assert_eq!(mine.len(), 3);
        let Ok(Reply::Lead(theirs)) = rxs.pop().unwrap().try_recv() else { panic!("the last waiter leads") };
        assert_eq!(theirs.len(), 4);
        assert!(rxs.iter_mut().all(|rx| rx.try_recv().is_err()), "the others still wait");
        let mut led = Lane::adopt(&co);
        assert!(led.take().is_none());
    }
}
