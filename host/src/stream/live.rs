//! A rule replaced while records flow: `omlet run --watch` and the Kafka
//! worker load a changed rule set and swap it in between batches
//!.
//!
//! Why: a worker of a consumer group runs for weeks; stopping it to load a
//! corrected rule set costs a rebalance of the group and a gap in the
//! output. With [`LiveRule`], each batch takes the rule that is current when
//! it starts, so a swap needs no pause, and a batch in flight finishes on
//! the rule it began with.
//!
//! What it replaces: the `Rule` the streaming loops held for the whole run.
//!
//! Cost: one atomic load and an `Arc` clone per batch (256 records by
//! default); the watcher looks at the rule's files every period (sizes and
//! times, at most 10,000 files) and compiles only after a change has rested
//! one period. A rule set that fails to compile or load keeps the old one
//! running, and the failure is reported.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::runtime::{Engine, LoadOptions, Rule};
use crate::{Error, Result};

/// The rule the next batch evaluates with, replaceable at any time.
#[derive(Clone)]
pub struct LiveRule {
    current: Arc<arc_swap::ArcSwap<Rule>>,
    reloads: Arc<[AtomicU64; 2]>,
}

impl From<Rule> for LiveRule {
    fn from(rule: Rule) -> LiveRule {
        LiveRule::new(rule)
    }
}

impl LiveRule {
    /// A live rule starting as `rule`.
    pub fn new(rule: Rule) -> LiveRule {
        LiveRule {
            current: Arc::new(arc_swap::ArcSwap::from_pointee(rule)),
            reloads: Arc::new([AtomicU64::new(0), AtomicU64::new(0)]),
        }
    }

    /// The rule now.
    pub fn current(&self) -> Rule {
        Rule::clone(&self.current.load())
    }

    /// Makes `rule` the one the next batches take.
    pub fn swap(&self, rule: Rule) {
        self.current.store(Arc::new(rule));
    }

    /// Reloads so far: (loaded and swapped in, failed and kept the old one).
    pub fn reloads(&self) -> (u64, u64) {
        (self.reloads[0].load(Ordering::Relaxed), self.reloads[1].load(Ordering::Relaxed))
    }

    /// Loads `path` again with `engine` and `options` whenever its files
    /// change (looked at every `every`; a change is loaded once it has
    /// rested one period), and swaps the new rule in once `vet` accepts it:
    /// `vet` makes the checks the program made on the first rule at its
    /// start (a rule with lookups and no knowledge, a model it lacks), so
    /// that no reload swaps in a rule a start would refuse. A rule `vet`
    /// refuses keeps the old one running, as a rule that fails to load
    /// does. `told` hears each reload's outcome. The task ends when the
    /// returned handle is dropped.
    pub fn watch(
        &self,
        engine: Engine,
        path: PathBuf,
        options: LoadOptions,
        every: Duration,
        vet: impl Fn(&Rule) -> Result<()> + Send + Sync + 'static,
        told: impl Fn(std::result::Result<(), &Error>) + Send + Sync + 'static,
    ) -> Result<Watching> {
        let roots = vec![path.clone()];
        let loaded = fingerprint(&roots);
        if loaded.is_empty() {
            return Err(Error::Config(format!("--watch: {} has no files to watch", path.display())));
        }
        let live = self.clone();
        let told = Arc::new(told);
        let vet = Arc::new(vet);
        let task = crate::knowledge::reload::on_settled_change(roots, loaded, every, fingerprint, move || {
            let (live, engine, path, options, told) = (live.clone(), engine.clone(), path.clone(), options.clone(), told.clone());
            let vet = vet.clone();
            async move {
                match engine.load_path(&path, &options).await.and_then(|rule| vet(&rule).map(|()| rule)) {
                    Ok(rule) => {
                        live.swap(rule);
                        live.reloads[0].fetch_add(1, Ordering::Relaxed);
                        told(Ok(()));
                    }
                    Err(e) => {
                        live.reloads[1].fetch_add(1, Ordering::Relaxed);
                        told(Err(&e));
                    }
                }
                true
            }
        });
        Ok(Watching { task })
    }
}

/// What the files under `roots` (a rule file, or a folder of them) are:
/// the knowledge watcher's fingerprint (path, size, time), and for each
/// file of at most 1 MiB a hash of its bytes too, so that an edit that keeps
/// the size within a file system's time resolution is still seen.
fn fingerprint(roots: &[PathBuf]) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>, u64)> {
    use std::hash::{Hash, Hasher};
    let (files, dirs): (Vec<&PathBuf>, Vec<&PathBuf>) = roots.iter().partition(|p| p.is_file());
    let mut seen = crate::knowledge::reload::fingerprint(&dirs.into_iter().cloned().collect::<Vec<_>>());
    for f in files {
        if let Ok(m) = std::fs::metadata(f) {
            seen.push((f.clone(), m.len(), m.modified().ok()));
        }
    }
    let mut out: Vec<_> = seen
        .into_iter()
        .map(|(path, len, time)| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            // Through the bounded reader: a FIFO put in a rule's place is
            // not waited on, which held the watcher (and the run) forever.
            if len <= 1 << 20
                && let Ok(bytes) = crate::knowledge::files::read_bytes(&path, 1 << 20, "rule file")
            {
                bytes.hash(&mut h);
            }
            (path, len, time, h.finish())
        })
        .collect();
    out.sort();
    out
}

/// A running rule watcher; dropping it stops it.
pub struct Watching {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.task.abort();
    }
}
