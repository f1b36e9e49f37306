//! Idle instances of one rule, kept per thread.

use std::sync::Mutex;

use thread_local::ThreadLocal;

/// The idle instances of one rule, of one kind (async or sync): the last
/// one each thread gave back, which that thread's next call takes under a
/// lock of its own (other threads only try it, when they find no instance
/// of theirs), and the rest in a list the threads share.
pub(super) struct Pool<T: Send> {
    hot: ThreadLocal<Mutex<Option<T>>>,
    shared: Mutex<Vec<T>>,
}

impl<T: Send> Pool<T> {
    pub(super) fn new(first: Option<T>) -> Pool<T> {
        Pool { hot: ThreadLocal::new(), shared: Mutex::new(first.into_iter().collect()) }
    }

    /// An idle instance: this thread's own, else any other, so that a new
    /// one is made only when none is idle (the pool grows to the calls in
    /// flight at once, not to the threads that ever called; a slot its owner
    /// holds at that moment is passed over, which can cost one instance
    /// more, within the engine's budget). With no own instance and none
    /// shared, this tries every thread's slot: a lock attempt per thread.
    pub(super) fn take(&self) -> Option<T> {
        if let Some(inst) = self.hot.get().and_then(|slot| slot.lock().ok()?.take()) {
            return Some(inst);
        }
        self.take_elsewhere()
    }

    /// One from the shared list, else another thread's own (unless that
    /// thread is taking it right now).
    pub(super) fn take_elsewhere(&self) -> Option<T> {
        if let Some(inst) = self.shared.lock().ok().and_then(|mut v| v.pop()) {
            return Some(inst);
        }
        self.hot.iter().find_map(|slot| slot.try_lock().ok()?.take())
    }

    /// Gives an instance back: as this thread's own if it has none.
    pub(super) fn put(&self, inst: T) {
        let inst = match self.hot.get_or_default().lock() {
            Ok(mut slot) if slot.is_none() => {
                *slot = Some(inst);
                return;
            }
            _ => inst,
        };
        if let Ok(mut v) = self.shared.lock() {
            v.push(inst);
        }
    }
}

/// An idle pool seen from the engine's budget: something to drop an instance from.
pub(super) trait Idle: Send + Sync {
    fn drop_one(&self) -> bool;
}

impl<T: Send> Idle for Pool<T> {
    fn drop_one(&self) -> bool {
        self.take_elsewhere().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread takes back the instance it gave back; a thread with none
    /// takes one from the shared list first, then another thread's, so that
    /// a new instance is made only when none is idle; the budget reaches
    /// every thread's.
    #[test]
    fn an_idle_pool_keeps_one_per_thread_and_lends_it_to_others() {
        let pool: Pool<u32> = Pool::new(Some(1));
        assert_eq!(pool.take(), Some(1), "the first instance is in the shared list");
        assert_eq!(pool.take(), None);
        pool.put(2);
        pool.put(3);
        assert_eq!(pool.take(), Some(2), "this thread's own comes first");
        pool.put(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                assert_eq!(pool.take(), Some(3), "another thread takes the shared one first");
                assert_eq!(pool.take(), Some(2), "then the other thread's own");
                assert_eq!(pool.take(), None);
                pool.put(4);
            });
        });
        assert_eq!(pool.take(), Some(4), "the other thread's own, lent back");
        pool.put(5);
        assert!(pool.drop_one(), "the budget reaches a thread's own");
        assert!(!pool.drop_one());
        assert_eq!(pool.take(), None);
    }
}
