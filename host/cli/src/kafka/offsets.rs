//! Which input offsets may be committed: the places of records in flight,
//! per partition, and the consumer's rebalance callbacks.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::statistics::Statistics;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{Notify, Semaphore};

use omlet::Error;

use super::options::KafkaStats;

/// Offsets read, acknowledged and committed, per input partition.
#[derive(Default)]
pub(super) struct Tracker {
    pub(super) parts: HashMap<i32, Part>,
    pub(super) epochs: u64,
}

/// One assigned partition. A new assignment is a new epoch: what is still
/// in flight from an older one no longer counts towards commits.
pub(super) struct Part {
    pub(super) epoch: u64,
    /// Offsets read and not yet known done, in order, with "acknowledged".
    pub(super) pending: VecDeque<(i64, bool)>,
    /// The next offset to commit: every offset below it is done.
    pub(super) done_to: Option<i64>,
    pub(super) committed: Option<i64>,
    /// Records done since the last commit: their places are given back when
    /// it is made.
    pub(super) uncommitted: usize,
}

impl Tracker {
    pub(super) fn assign(&mut self, partition: i32) {
        self.epochs += 1;
        let epoch = self.epochs;
        self.parts.entry(partition).or_insert(Part {
            epoch,
            pending: VecDeque::new(),
            done_to: None,
            committed: None,
            uncommitted: 0,
        });
    }

    /// Forgets a partition: the offset to commit for it (every done record,
    /// committed before or not: an earlier commit may have failed), and the
    /// places to give back now.
    pub(super) fn revoke(&mut self, partition: i32) -> (Option<i64>, usize) {
        let Some(part) = self.parts.remove(&partition) else { return (None, 0) };
        (part.done_to, part.uncommitted + part.pending.iter().filter(|p| p.1).count())
    }

    /// Notes a record read; returns its epoch, the places to give back now,
    /// and whether it is the first record of its epoch (where reading
    /// resumed: the committed offset).
    /// An offset that does not follow the last one read (the consumer's
    /// position was reset) starts a new epoch: the older records then count
    /// for nothing, as after a revoke.
    pub(super) fn register(&mut self, partition: i32, offset: i64) -> (u64, usize, bool) {
        let mut release = 0;
        let behind = self
            .parts
            .get(&partition)
            .is_some_and(|p| p.pending.back().map(|b| offset <= b.0).unwrap_or(false) || p.done_to.is_some_and(|d| offset < d));
        if behind {
            release = self.revoke(partition).1;
        }
        if !self.parts.contains_key(&partition) {
            self.assign(partition);
        }
        let Some(part) = self.parts.get_mut(&partition) else { return (0, release, false) };
        let first = part.pending.is_empty() && part.done_to.is_none();
        part.pending.push_back((offset, false));
        (part.epoch, release, first)
    }

    /// Whether records of `epoch` still count for `partition`.
    pub(super) fn current(&self, partition: i32, epoch: u64) -> bool {
        self.parts.get(&partition).is_some_and(|p| p.epoch == epoch)
    }

    /// Every done offset, committed before or not (for the last, synchronous commit).
    pub(super) fn all_done(&self) -> Vec<(i32, i64)> {
        self.parts.iter().filter_map(|(&p, part)| part.done_to.map(|d| (p, d))).collect()
    }

    /// Marks one offset acknowledged; returns the places to give back now
    /// (1 for a record of a partition no longer held, else 0).
    pub(super) fn ack(&mut self, partition: i32, epoch: u64, offset: i64) -> usize {
        let Some(part) = self.parts.get_mut(&partition).filter(|p| p.epoch == epoch) else { return 1 };
        if let Ok(i) = part.pending.binary_search_by_key(&offset, |p| p.0) {
            part.pending[i].1 = true;
        }
        while let Some(&(o, true)) = part.pending.front() {
            part.pending.pop_front();
            part.done_to = Some(o + 1);
            part.uncommitted += 1;
        }
        0
    }

    /// What to commit now: each partition's offset, the places its commit
    /// gives back once the broker has it, and the partition's epoch.
    pub(super) fn take_commits(&mut self) -> Vec<Commit> {
        let mut list = Vec::new();
        for (&p, part) in self.parts.iter_mut() {
            if let Some(d) = part.done_to
                && Some(d) > part.committed
            {
                part.committed = Some(d);
                list.push(Commit { partition: p, offset: d, places: std::mem::take(&mut part.uncommitted), epoch: part.epoch });
            }
        }
        list
    }

    /// A commit that failed: it is made again with the next one, and its
    /// places wait for that. Returns the places to give back now: all of them
    /// when the partition is no longer held in the commit's epoch.
    pub(super) fn give_back(&mut self, c: &Commit) -> usize {
        match self.parts.get_mut(&c.partition).filter(|part| part.epoch == c.epoch) {
            Some(part) => {
                if part.committed == Some(c.offset) {
                    part.committed = None;
                }
                part.uncommitted += c.places;
                0
            }
            None => c.places,
        }
    }

    pub(super) fn pending(&self) -> usize {
        self.parts.values().map(|p| p.pending.len()).sum()
    }
}

/// The longest a revoke waits for the commit on its way.
pub(super) const REVOKE_WAIT: Duration = Duration::from_secs(2);

/// One partition's share of a commit.
pub(super) struct Commit {
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) places: usize,
    pub(super) epoch: u64,
}

/// What the worker's parts share: the consumer's callbacks, the delivery
/// tasks and the main loop.
pub(super) struct Shared {
    pub(super) topic: String,
    pub(super) tracker: Mutex<Tracker>,
    pub(super) permits: Arc<Semaphore>,
    pub(super) stats: Arc<KafkaStats>,
    /// The first delivery that failed for good: the run stops on it.
    pub(super) failure: Mutex<Option<Error>>,
    /// Woken when acknowledgements arrive.
    pub(super) acked: Notify,
    /// Records read without a place, while the partitions were paused
    /// (fetched before the pause: a partition assigned meanwhile is paused at once).
    pub(super) overdraft: std::sync::atomic::AtomicUsize,
    /// This worker's name on its outputs (`omlet-worker`), so that its
    /// duplicate count leaves out what it wrote itself.
    pub(super) worker: String,
    /// A commit is on its way to the broker (one at a time, so that they
    /// arrive in order), and whether another was asked for meanwhile.
    pub(super) committing: std::sync::atomic::AtomicBool,
    pub(super) commit_wanted: std::sync::atomic::AtomicBool,
    /// The worker holds its partitions paused (waiting for room). A
    /// partition assigned meanwhile is paused or resumed to match: librdkafka
    /// keeps a partition's pause through its revoke and a later assign, so a
    /// partition paused when it left would come back paused for good.
    pub(super) paused: std::sync::atomic::AtomicBool,
}

impl Shared {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Tracker> {
        self.tracker.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives places back; records read without one (while paused) are paid first.
    pub(super) fn release(&self, n: usize) {
        if n > 0 {
            let mut owed = 0;
            let _ = self.overdraft.fetch_update(Ordering::AcqRel, Ordering::Acquire, |o| {
                owed = o.min(n);
                Some(o - owed)
            });
            self.permits.add_permits(n - owed);
            self.stats.in_flight.fetch_sub(n as u64, Ordering::Relaxed);
        }
    }

    pub(super) fn fail(&self, e: Error) {
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(e);
        }
        self.acked.notify_one();
    }

    pub(super) fn failed(&self) -> bool {
        self.failure.lock().map(|f| f.is_some()).unwrap_or(true)
    }
}

/// The consumer's callbacks: rebalances and statistics.
pub(super) struct Callbacks(pub(super) Arc<Shared>);

impl ClientContext for Callbacks {
    fn stats(&self, statistics: Statistics) {
        let Some(t) = statistics.topics.get(&self.0.topic) else { return };
        // librdkafka gives -1 for the lag from the committed offset until
        // this consumer has one of its own (a partition assigned late, with
        // nothing new on it yet): the lag from the stored offset stands in
        // then, and a partition with neither is left out, not shown as 0.
        let mut lag: Vec<(i32, i64)> = t
            .partitions
            .values()
            .filter(|p| p.partition >= 0)
            .filter_map(|p| {
                let lag = if p.consumer_lag >= 0 { p.consumer_lag } else { p.consumer_lag_stored };
                (lag >= 0).then_some((p.partition, lag))
            })
            .collect();
        lag.sort();
        if let Ok(mut l) = self.0.stats.lag.lock() {
            *l = lag;
        }
    }
}

impl ConsumerContext for Callbacks {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else { return };
        self.0.stats.rebalances.fetch_add(1, Ordering::Relaxed);
        // A commit on its way with older offsets of these partitions would
        // otherwise reach the broker after this one and undo it. It needs
        // nothing from this thread to finish; the wait is bounded all the
        // same, in case librdkafka holds it back until the rebalance is over
        // (past the bound an older offset may win: more repeats, no loss).
        let waited = Instant::now();
        while self.0.committing.load(Ordering::Acquire) && waited.elapsed() < REVOKE_WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (mut list, mut release) = (TopicPartitionList::new(), 0);
        {
            let mut t = self.0.lock();
            for e in tpl.elements().iter().filter(|e| e.topic() == self.0.topic) {
                let (commit, r) = t.revoke(e.partition());
                release += r;
                if let Some(o) = commit {
                    let _ = list.add_partition_offset(&self.0.topic, e.partition(), Offset::Offset(o));
                }
            }
            self.0.stats.partitions.store(t.parts.len() as u64, Ordering::Relaxed);
        }
        // What was done of the partitions is committed before another worker takes them.
        if list.count() > 0
            && let Err(e) = consumer.commit(&list, CommitMode::Sync)
        {
            tracing::warn!("commit on revoke failed (the next owner repeats those records): {e}");
        }
        self.0.release(release);
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Assign(tpl) = rebalance else { return };
        self.0.stats.rebalances.fetch_add(1, Ordering::Relaxed);
        // The new partitions take the worker's pause, whatever they had when
        // this worker last held them (see `Shared::paused`).
        let pause = self.0.paused.load(Ordering::Acquire);
        if tpl.count() > 0
            && let Err(e) = if pause { consumer.pause(tpl) } else { consumer.resume(tpl) }
        {
            tracing::warn!("kafka: cannot {} the assigned partitions: {e}", if pause { "pause" } else { "resume" });
        }
        let parts: Vec<i32> = tpl.elements().iter().filter(|e| e.topic() == self.0.topic).map(|e| e.partition()).collect();
        {
            let mut t = self.0.lock();
            for &p in &parts {
                t.assign(p);
            }
            self.0.stats.partitions.store(t.parts.len() as u64, Ordering::Relaxed);
        }
    }
}

/// Commits what is done and gives its places back.
pub(super) fn commit(consumer: &Arc<StreamConsumer<Callbacks>>, shared: &Arc<Shared>) {
    // A record keeps its place until the broker has its offset, not merely
    // until the commit is sent: a worker killed in between repeats those
    // records too, and the places are what bounds the repeats. So the commit
    // is a synchronous one on a blocking thread, one at a time (one asked for
    // meanwhile is made when it returns), and the places go back then.
    if shared.committing.swap(true, Ordering::AcqRel) {
        // Made when the one on its way returns (it wakes the main loop).
        shared.commit_wanted.store(true, Ordering::Release);
        return;
    }
    shared.commit_wanted.store(false, Ordering::Release);
    let list = shared.lock().take_commits();
    if list.is_empty() {
        shared.committing.store(false, Ordering::Release);
        return;
    }
    let (consumer, shared) = (consumer.clone(), shared.clone());
    tokio::task::spawn_blocking(move || {
        let mut tpl = TopicPartitionList::new();
        for c in &list {
            let _ = tpl.add_partition_offset(&shared.topic, c.partition, Offset::Offset(c.offset));
        }
        let release = match consumer.commit(&tpl, CommitMode::Sync) {
            Ok(()) => {
                shared.stats.commits.fetch_add(1, Ordering::Relaxed);
                list.iter().map(|c| c.places).sum()
            }
            // Sent again with the next commit (commits are cumulative).
            Err(e) => {
                tracing::warn!("offset commit failed: {e}");
                let mut t = shared.lock();
                list.iter().map(|c| t.give_back(c)).sum()
            }
        };
        shared.release(release);
        shared.committing.store(false, Ordering::Release);
        // The main loop may be waiting for places, or for this commit to end.
        shared.acked.notify_one();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit list as (partition, offset, places).
    fn commits(list: &[Commit]) -> Vec<(i32, i64, usize)> {
        list.iter().map(|c| (c.partition, c.offset, c.places)).collect()
    }

    #[test]
    fn offsets_commit_only_past_a_contiguous_acknowledged_run() {
        let mut t = Tracker::default();
        t.assign(0);
        let (e, _, first) = t.register(0, 10);
        assert!(first);
        t.register(0, 11);
        t.register(0, 13);
        // 11 and 13 acknowledged, 10 not: nothing to commit.
        assert_eq!(t.ack(0, e, 11), 0);
        assert_eq!(t.ack(0, e, 13), 0);
        assert!(t.take_commits().is_empty());
        // 10 acknowledged: everything up to 13 is done.
        t.ack(0, e, 10);
        assert_eq!(commits(&t.take_commits()), [(0, 14, 3)]);
        assert_eq!(t.pending(), 0);
        assert!(t.take_commits().is_empty());
    }

    #[test]
    fn an_offset_that_goes_back_starts_a_new_epoch() {
        let mut t = Tracker::default();
        t.assign(1);
        let (e1, _, _) = t.register(1, 5);
        t.register(1, 6);
        t.ack(1, e1, 5);
        // The position was reset to 3: offset 5 was acknowledged, so its place comes back.
        let (e2, release, _) = t.register(1, 3);
        assert_ne!(e1, e2);
        assert_eq!(release, 1);
        // The old epoch's 6 counts for nothing; the new run commits from its own offsets.
        assert_eq!(t.ack(1, e1, 6), 1);
        t.ack(1, e2, 3);
        assert_eq!(commits(&t.take_commits()), [(1, 4, 1)]);
    }

    #[test]
    fn a_failed_commit_is_sent_again() {
        let mut t = Tracker::default();
        t.assign(0);
        let (e, _, _) = t.register(0, 0);
        t.ack(0, e, 0);
        let c = t.take_commits();
        assert_eq!(commits(&c), [(0, 1, 1)]);
        // The failed commit's place waits for the next commit, which carries it.
        assert_eq!(t.give_back(&c[0]), 0);
        let again = t.take_commits();
        assert_eq!(commits(&again), [(0, 1, 1)]);
        assert_eq!(t.all_done(), [(0, 1)]);
        // Revoked while that commit was on its way: the revoke gives back none
        // of its places (they are the commit's) and, when it fails, the commit
        // gives them back at once.
        assert_eq!(t.revoke(0), (Some(1), 0));
        assert_eq!(t.give_back(&again[0]), 1);
        // Revoked and assigned again: the new epoch does not take the old places.
        t.assign(0);
        let (e2, _, _) = t.register(0, 1);
        t.ack(0, e2, 1);
        let newer = t.take_commits();
        assert_eq!(commits(&newer), [(0, 2, 1)]);
        t.revoke(0);
        t.assign(0);
        assert_eq!(t.give_back(&newer[0]), 1);
    }

    #[test]
    fn a_revoked_partition_commits_what_was_done_and_ignores_late_acknowledgements() {
        let mut t = Tracker::default();
        t.assign(3);
        let (old, _, _) = t.register(3, 0);
        t.register(3, 1);
        t.register(3, 2);
        t.ack(3, old, 0);
        t.ack(3, old, 2);
        // Offset 0 is done (commit 1); 0 and 2 give their places back.
        assert_eq!(t.revoke(3), (Some(1), 2));
        t.assign(3);
        let (new, _, first) = t.register(3, 1);
        assert!(first);
        assert_ne!(old, new);
        // A late acknowledgement of the old epoch gives its place back and counts for nothing.
        assert_eq!(t.ack(3, old, 1), 1);
        assert!(t.take_commits().is_empty());
        t.ack(3, new, 1);
        assert_eq!(commits(&t.take_commits()), [(3, 2, 1)]);
    }
}
