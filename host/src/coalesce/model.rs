//! A model test of the gathering's phases: every interleaving of what an
//! opener, its thread's release and two callers can do, each run from the
//! start, checked for the promise each caller is made: exactly one answer
//! (its own record's result, or to evaluate alone), and never a wait that
//! nothing will end.
//!
//! The opener closes, then finishes with results, fails (finishes with
//! none), is dropped at any point, or, before it closes, stalls for good
//! (kept, never polled again, as a future nobody polls). The release fires once, at any point,
//! as tokio's deferred wake always does. A caller arrives, is polled only
//! when it was woken (a lost wake leaves it waiting), yields once when told
//! to, and may be cancelled at any point.

use super::tests::{Count, copy, rec, same};
use super::*;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    Arrive(usize),
    Poll(usize),
    Cancel(usize),
    Release,
    Close,
    Finish,
    Fail,
    Drop,
    Stall,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Opener {
    /// Gathering, not yet closed.
    Open,
    /// Closed with this many records.
    Closed(usize),
    Done,
    Stalled,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Joiner {
    Away,
    /// Waiting in the gathering at this index, polled once at least or not.
    Waiting {
        index: usize,
        polled: bool,
    },
    /// Told to yield, at this index: runs again at any time.
    Yielding(usize),
    /// Answered, cancelled, or never joined (evaluated elsewhere).
    Gone,
}

const CALLERS: usize = 2;

struct World<'c> {
    co: &'c Coalescer<u8>,
    opened: Option<Opened<'c, u8>>,
    opener: Opener,
    release: Option<Waker>,
    callers: [Joiner; CALLERS],
    futures: Vec<Option<Joined<u8>>>,
    wakes: Vec<Arc<Count>>,
    seen: [usize; CALLERS],
}

impl<'c> World<'c> {
    fn new(co: &'c Coalescer<u8>) -> World<'c> {
        let Arrival::Open(opened) = co.arrive(&0, same, copy, &rec(0), 1 << 20, || Some(0)) else {
            panic!("the first call opens")
        };
        let task = Waker::noop().clone();
        let release = Waker::from(Arc::new(Release { gathering: opened.gathering.clone(), task }));
        World {
            co,
            opened: Some(opened),
            opener: Opener::Open,
            release: Some(release),
            callers: [Joiner::Away; CALLERS],
            futures: (0..CALLERS).map(|_| None).collect(),
            wakes: (0..CALLERS).map(|_| Arc::new(Count(AtomicUsize::new(0)))).collect(),
            seen: [0; CALLERS],
        }
    }

    fn woken(&self, c: usize) -> bool {
        self.wakes[c].0.load(Ordering::Relaxed) > self.seen[c]
    }

    fn enabled(&self) -> Vec<Step> {
        let mut steps = Vec::new();
        for (c, caller) in self.callers.iter().enumerate() {
            match *caller {
                Joiner::Away => steps.push(Step::Arrive(c)),
                Joiner::Waiting { polled, .. } => {
                    if !polled || self.woken(c) {
                        steps.push(Step::Poll(c));
                    }
                    steps.push(Step::Cancel(c));
                }
                Joiner::Yielding(_) => steps.extend([Step::Poll(c), Step::Cancel(c)]),
                Joiner::Gone => {}
            }
        }
        if self.release.is_some() {
            steps.push(Step::Release);
        }
        match self.opener {
            Opener::Open => steps.extend([Step::Close, Step::Drop, Step::Stall]),
            // Between its close and its finish the opener makes its call
            // without an await (`evaluate_gathered`), so it cannot stall
            // there; it can only unwind (`Drop`). Callers polled on other
            // threads still interleave.
            Opener::Closed(_) => steps.extend([Step::Finish, Step::Fail, Step::Drop]),
            Opener::Done | Opener::Stalled => {}
        }
        steps
    }

    fn apply(&mut self, step: Step) {
        match step {
            Step::Arrive(c) => {
                let me = c as u64 + 1;
                self.callers[c] = match self.co.arrive(&0, same, copy, &rec(me as i64), 1 << 20, || Some(me)) {
                    Arrival::Joined(j) => {
                        let index = j.index as usize;
                        self.futures[c] = Some(j);
                        Joiner::Waiting { index, polled: false }
                    }
                    // Too late to join: the call goes elsewhere.
                    Arrival::Alone | Arrival::Open(_) => Joiner::Gone,
                };
            }
            Step::Poll(c) => self.poll(c),
            Step::Cancel(c) => {
                self.futures[c] = None;
                self.callers[c] = Joiner::Gone;
            }
            Step::Release => {
                if let Some(r) = self.release.take() {
                    r.wake();
                }
            }
            Step::Close => {
                let (frame, n, route) = self.opened.as_mut().unwrap().close();
                assert_eq!(route, Some(0), "the opener gets its route back");
                let joined = self.callers.iter().filter(|c| !matches!(c, Joiner::Away)).count();
                assert!(n <= 1 + joined, "{n} records from {joined} callers");
                assert_eq!(omlet_lang::frame::Reader::new(&frame).unwrap().records(), n);
                self.opener = Opener::Closed(n);
            }
            Step::Finish => {
                let Opener::Closed(n) = self.opener else { unreachable!() };
                let results = (0..n).map(|i| Ok(rec(100 + i as i64))).collect();
                self.opened.take().unwrap().finish(results);
                self.opener = Opener::Done;
            }
            Step::Fail => {
                // As `evaluate_gathered` does when the call cannot be made.
                let opened = self.opened.take().unwrap();
                opened.failed();
                drop(opened);
                self.opener = Opener::Done;
            }
            Step::Drop => {
                self.opened = None;
                self.opener = Opener::Done;
            }
            Step::Stall => self.opener = Opener::Stalled,
        }
    }

    fn poll(&mut self, c: usize) {
        self.seen[c] = self.wakes[c].0.load(Ordering::Relaxed);
        let index = match self.callers[c] {
            Joiner::Waiting { index, .. } => index,
            Joiner::Yielding(index) => {
                self.futures[c].as_mut().unwrap().yielded();
                index
            }
            _ => unreachable!(),
        };
        let waker = Waker::from(self.wakes[c].clone());
        let joined = self.futures[c].as_mut().unwrap();
        self.callers[c] = match Pin::new(joined).poll(&mut Context::from_waker(&waker)) {
            Poll::Pending => Joiner::Waiting { index, polled: true },
            Poll::Ready(Joining::Yield) => {
                assert!(!matches!(self.callers[c], Joiner::Yielding(_)), "caller {c} is told to yield twice");
                Joiner::Yielding(index)
            }
            Poll::Ready(Joining::Got(result)) => {
                let got = result.expect("every result is a record").to_json();
                assert_eq!(got, format!("{{\"n\":{}}}", 100 + index), "caller {c} gets its own record's result");
                Joiner::Gone
            }
            Poll::Ready(Joining::Alone) => Joiner::Gone,
        };
        if self.callers[c] == Joiner::Gone {
            self.futures[c] = None;
        }
    }
}

/// Runs `schedule` from the start, then each step it may take next. Where
/// nothing but a cancellation can happen, no caller may be left waiting:
/// a caller must never need another to be cancelled to get its answer.
fn explore(schedule: &mut Vec<Step>, ends: &mut usize) {
    let co = Coalescer::new();
    let mut world = World::new(&co);
    for &step in schedule.iter() {
        world.apply(step);
    }
    let next = world.enabled();
    if next.iter().all(|s| matches!(s, Step::Cancel(_))) {
        *ends += 1;
        assert!(world.callers.iter().all(|c| *c == Joiner::Gone), "a caller waits for good after {schedule:?}");
    }
    drop(world);
    for step in next {
        schedule.push(step);
        explore(schedule, ends);
        schedule.pop();
    }
}

#[test]
fn every_interleaving_answers_each_caller_once() {
    let mut ends = 0;
    explore(&mut Vec::new(), &mut ends);
    // So that a change which prunes the model shows here.
    assert!(ends > 10_000, "{ends} schedules");
}
