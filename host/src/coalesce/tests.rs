//! The gathering's own tests: who joins, who waits, and what a failed or
//! abandoned gathering leaves each caller.

use super::*;
use omlet_lang::frame::Reader;

pub(super) fn rec(n: i64) -> Record {
    Record::from_json(&format!("{{\"n\":{n}}}")).unwrap()
}

pub(super) fn same(a: &u8, b: &u8) -> bool {
    a == b
}

pub(super) fn copy(a: &u8) -> u8 {
    *a
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
    let Arrival::Open(mut opened) = co.arrive(&0, same, copy, &rec(0), MAX, next()) else { panic!("a gathering opens") };
    let joined: Vec<_> = (0..k)
        .map(|i| match co.arrive(&0, same, copy, &rec(i as i64 + 1), MAX, next()) {
            Arrival::Joined(j) => j,
            _ => panic!("record {i} joins"),
        })
        .collect();
    let (_, n, _) = opened.close();
    opened.finish(Vec::new());
    drop(joined);
    n
}

#[test]
fn callers_join_an_open_gathering_and_each_gets_its_own_result() {
    let co: Coalescer<u8> = Coalescer::new();
    let Arrival::Open(mut opened) = co.arrive(&0, same, copy, &rec(10), MAX, next()) else { panic!("the first caller opens") };
    let mut joined: Vec<_> = (11..14)
        .map(|n| match co.arrive(&0, same, copy, &rec(n), MAX, next()) {
            Arrival::Joined(j) => j,
            _ => panic!("a caller of the same thread joins"),
        })
        .collect();
    assert!(joined.iter_mut().all(|j| poll(j).is_pending()), "they wait for the call");
    let (frame, n, route) = opened.close();
    assert_eq!((n, route), (4, Some(0)), "four records, and the route made once, handed back");
    // The frame holds the opener's record, then the others in order.
    let reader = Reader::new(&frame).unwrap();
    assert_eq!(reader.records(), 4);
    assert!(matches!(co.arrive(&0, same, copy, &rec(99), MAX, next()), Arrival::Open(_)), "a closed gathering takes no more");
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

pub(super) struct Count(pub(super) AtomicUsize);

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
        let Arrival::Open(opened) = co.arrive(&0, same, copy, &rec(0), MAX, next()) else { panic!("opens") };
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut gathering = Box::pin(opened.gather());
        assert!(gathering.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
        let before = count.0.load(Ordering::Relaxed);
        let _one = co.arrive(&0, same, copy, &rec(1), MAX, next());
        assert_eq!(count.0.load(Ordering::Relaxed), before, "two of three: the opener waits");
        let _two = co.arrive(&0, same, copy, &rec(2), MAX, next());
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
            let Arrival::Open(mut opened) = co.arrive(&0, same, copy, &rec(0), MAX, next()) else { panic!("opens") };
            let count = Arc::new(Count(AtomicUsize::new(0)));
            let waker = Waker::from(count.clone());
            {
                let mut gathering = Box::pin(opened.gather());
                assert!(gathering.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
            }
            let before = count.0.load(Ordering::Relaxed);
            let _joined: Vec<_> = (1..3).map(|n| co.arrive(&0, same, copy, &rec(n), MAX, next())).collect();
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
#[allow(clippy::type_complexity, reason = "a test helper's tuple of what each test checks")]
fn released(co: &Coalescer<u8>) -> (Opened<'_, u8>, Vec<(Joined<u8>, Arc<Count>)>, Arc<Count>, Waker) {
    let Arrival::Open(opened) = co.arrive(&0, same, copy, &rec(0), MAX, next()) else { panic!("opens") };
    let mut joined: Vec<_> = (1..4)
        .map(|n| match co.arrive(&0, same, copy, &rec(n), MAX, next()) {
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
    let (_, n, _) = opened.close();
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
    let opened = co.arrive(&0, same, copy, &rec(0), MAX, next());
    let Arrival::Joined(mut j) = co.arrive(&0, same, copy, &rec(1), MAX, next()) else { panic!("joins") };
    assert!(poll(&mut j).is_pending());
    drop(opened);
    assert!(matches!(poll(&mut j), Poll::Ready(Joining::Alone)));
}

#[test]
fn a_caller_does_not_join_the_gathering_it_opened() {
    let co: Coalescer<u8> = Coalescer::new();
    let me = next();
    let Arrival::Open(_opened) = co.arrive(&0, same, copy, &rec(0), MAX, &me) else { panic!("opens") };
    let again = co.arrive(&0, same, copy, &rec(1), MAX, &me);
    assert!(!matches!(again, Arrival::Joined(_)), "it would wait for itself");
    assert!(matches!(co.arrive(&0, same, copy, &rec(2), MAX, next()), Arrival::Joined(_)), "another caller joins");
}

#[test]
fn only_the_same_route_joins() {
    let co: Coalescer<u8> = Coalescer::new();
    let Arrival::Open(_first) = co.arrive(&0, same, copy, &rec(0), MAX, next()) else { panic!("opens") };
    assert!(matches!(co.arrive(&1, same, copy, &rec(1), MAX, next()), Arrival::Open(_)), "another route opens its own");
}

#[test]
fn a_gathering_stops_at_its_record_and_byte_bounds() {
    let co: Coalescer<u8> = Coalescer::new();
    let Arrival::Open(mut opened) = co.arrive(&0, same, copy, &rec(0), MAX, next()) else { panic!("opens") };
    let mut joined = Vec::new();
    for i in 1..MAX_GATHER {
        let Arrival::Joined(j) = co.arrive(&0, same, copy, &rec(i as i64), MAX, next()) else { panic!("record {i} joins") };
        joined.push(j);
    }
    assert!(!matches!(co.arrive(&0, same, copy, &rec(0), MAX, next()), Arrival::Joined(_)), "full at {MAX_GATHER}");
    assert_eq!(opened.close().1, MAX_GATHER);

    // Each `{"n":…}` record takes 22 bytes of a frame, whose head takes 12.
    let co: Coalescer<u8> = Coalescer::new();
    let small = 12 + 2 * 22;
    let Arrival::Open(mut opened) = co.arrive(&0, same, copy, &rec(0), small, next()) else { panic!("opens") };
    let Arrival::Joined(_j) = co.arrive(&0, same, copy, &rec(1), small, next()) else { panic!("within the bound, joins") };
    assert!(
        !matches!(co.arrive(&0, same, copy, &rec(2), small, next()), Arrival::Joined(_)),
        "it would take the frame past {small} bytes"
    );
    let (frame, n, _) = opened.close();
    assert_eq!((frame.len(), n), (small, 2));
}

#[test]
fn a_thread_whose_gatherings_miss_opens_them_ever_more_rarely() {
    let co: Coalescer<u8> = Coalescer::new();
    // Alone, twice: misses; each makes the next wait twice as long.
    assert_eq!(gather(&co, 0), 1);
    assert!(matches!(co.arrive(&0, same, copy, &rec(0), MAX, next()), Arrival::Alone));
    assert_eq!(gather(&co, 0), 1);
    for _ in 0..2 {
        assert!(matches!(co.arrive(&0, same, copy, &rec(0), MAX, next()), Arrival::Alone));
    }
    assert_eq!(gather(&co, 0), 1);
    for _ in 0..4 {
        assert!(matches!(co.arrive(&0, same, copy, &rec(0), MAX, next()), Arrival::Alone));
    }
    // A pair is a hit: the next call opens a gathering again.
    assert_eq!(gather(&co, MIN_GATHERED - 1), MIN_GATHERED);
    assert!(matches!(co.arrive(&0, same, copy, &rec(0), MAX, next()), Arrival::Open(_)));
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
        match co.arrive(&0, same, copy, &rec(0), MAX, next()) {
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
