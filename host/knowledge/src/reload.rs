//! Reloads pushed by the database: every worker's caches see a change to
//! the knowledge tables within a second, without a restart.
//!
//! A cache lives in one process, so a change made in the shared database
//! must reach every process that caches it. Two ways, from the `[reload]`
//! table of the knowledge config:
//! - `channel` (PostgreSQL): the watcher `LISTEN`s on the channel, and every
//!   `NOTIFY` on it (from a trigger on the tables, or by hand) is a
//!   [`Knowledge::reload`]. docs/deployment.md shows the trigger.
//! - `poll_query` (any database; what MySQL and MariaDB, which have no
//!   LISTEN, use): the watcher reads the query's single value every
//!   `poll_ms`, and reloads when it changes. A trigger that bumps a version
//!   row keeps it cheap.
//!
//! And a third, for the knowdb's own files: with `knowdb = true`, the
//! watcher looks at the files under the knowdb's folder (and
//! `knowdb_roots`) every `poll_ms`; once a change has rested for one more
//! period, the knowdb is loaded again ([`Knowledge::reload_knowdb`]). A
//! knowdb that no longer loads is logged, naming the file, and the previous
//! knowledge stays in use.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::{BoundStatement, Knowledge};
use crate::{Error, Result};

/// The `[reload]` table of a knowledge config.
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReloadConfig {
    /// PostgreSQL: reload on every `NOTIFY` on this channel (default none).
    #[serde(default)]
    pub channel: Option<String>,
    /// Any database: reload when this query's single value changes (default
    /// none), read every `poll_ms`.
    #[serde(default)]
    pub poll_query: Option<String>,
    /// How often `poll_query` is read, and the knowdb's files looked at,
    /// in milliseconds (default 500).
    #[serde(default = "default_poll_ms")]
    pub poll_ms: u64,
    /// Load the knowdb again when one of its files changes (default false).
    #[serde(default)]
    pub knowdb: bool,
}

/// The most files the knowdb watcher looks at: past them, changes to the
/// others go unseen (and it says so once).
pub const MAX_WATCHED_FILES: usize = 10_000;

fn default_poll_ms() -> u64 {
    500
}

/// A running watcher; dropping it stops it.
pub struct Watcher {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts the watcher the knowledge's `[reload]` table asks for (`None`
/// when it asks for none). The first connection is made before it returns,
/// so a bad URL or channel fails here; later connection losses are retried
/// every second, with a reload after each reconnection (a notification may
/// have been missed while it was down).
pub async fn watch(knowledge: &Arc<Knowledge>) -> Result<Option<Watcher>> {
    let r = &knowledge.config().reload;
    let files = match r.knowdb {
        true => Some(watch_knowdb(knowledge)?),
        false => None,
    };
    let database = watch_database(knowledge).await?;
    let tasks: Vec<_> = files.into_iter().chain(database).collect();
    Ok((!tasks.is_empty()).then_some(Watcher { tasks }))
}

/// The task that loads the knowdb again when its files change.
fn watch_knowdb(knowledge: &Arc<Knowledge>) -> Result<tokio::task::JoinHandle<()>> {
    let config = knowledge.config();
    let path = knowledge.reloadable_knowdb().map_err(|e| Error::Knowledge(format!("[reload] knowdb = true: {e}")))?;
    let roots = watched_roots(&path, &config.knowdb_roots);
    let every = Duration::from_millis(config.reload.poll_ms.max(10));
    let weak = Arc::downgrade(knowledge);
    // What the files are now, before this returns: a change made after it
    // is seen.
    let loaded = fingerprint(&roots);
    Ok(on_settled_change(roots, loaded, every, fingerprint, move || {
        let weak = weak.clone();
        async move {
            let Some(knowledge) = weak.upgrade() else { return false };
            if let Err(e) = knowledge.reload_knowdb().await {
                tracing::warn!(
                    "knowledge reload: {} (the previous knowledge stays in use)",
                    super::config::redact(&e.to_string())
                );
            }
            true
        }
    }))
}

/// The folders the knowdb watcher looks at: the knowdb's own, resolved as
/// the loader resolves it (`knowdb.toml` alone is in `.`, not in the empty
/// path, which `read_dir` cannot read: a config given by a relative path
/// from its own folder watched nothing), and `knowdb_roots`.
fn watched_roots(knowdb: &std::path::Path, knowdb_roots: &[std::path::PathBuf]) -> Vec<std::path::PathBuf> {
    let mut roots = vec![crate::files::folder(knowdb).to_path_buf()];
    roots.extend(knowdb_roots.iter().cloned());
    roots
}

/// Watches `roots` every `every` with `look` (what it sees of them;
/// `loaded` is what it saw when they were last loaded), and calls `changed`
/// once a change has rested one period, so that files being written are not
/// read half-way and an editor's several writes make one call. The task
/// ends when `changed` gives false. The knowdb watcher and `--watch` of
/// rules (`stream::LiveRule`) both use it.
pub fn on_settled_change<T, F, Fut>(
    roots: Vec<std::path::PathBuf>,
    mut loaded: T,
    every: Duration,
    look: fn(&[std::path::PathBuf]) -> T,
    mut changed: F,
) -> tokio::task::JoinHandle<()>
where
    T: PartialEq + Clone + Default + Send + 'static,
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    tokio::spawn(async move {
        let mut seen = loaded.clone();
        let mut tick = tokio::time::interval(every.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now = {
                let roots = roots.clone();
                tokio::task::spawn_blocking(move || look(&roots)).await.unwrap_or_default()
            };
            let settled = now == seen && now != loaded;
            seen = now;
            if !settled {
                continue;
            }
            loaded = seen.clone();
            if !changed().await {
                return;
            }
        }
    })
}

/// What the files under `roots` are (path, size, modification time),
/// sorted; at most [`MAX_WATCHED_FILES`] of them.
pub fn fingerprint(roots: &[std::path::PathBuf]) -> Vec<(std::path::PathBuf, u64, Option<std::time::SystemTime>)> {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let mut out = Vec::new();
    let mut dirs: Vec<std::path::PathBuf> = roots.to_vec();
    'walk: while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            if out.len() >= MAX_WATCHED_FILES {
                if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(
                        "knowledge reload: more than {MAX_WATCHED_FILES} files under the knowdb's folders; changes to the others go unseen"
                    );
                }
                break 'walk;
            }
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                dirs.push(e.path());
            } else {
                out.push((e.path(), meta.len(), meta.modified().ok()));
            }
        }
    }
    out.sort();
    out
}

/// The task that follows the database's changes (`channel` or
/// `poll_query`), if the config asks for one.
async fn watch_database(knowledge: &Arc<Knowledge>) -> Result<Option<tokio::task::JoinHandle<()>>> {
    let config = knowledge.config().clone();
    let r = config.reload.clone();
    if r.channel.is_none() && r.poll_query.is_none() {
        return Ok(None);
    }
    if r.channel.is_some() && r.poll_query.is_some() {
        return Err(Error::Knowledge("[reload]: set channel or poll_query, not both".into()));
    }
    let weak = Arc::downgrade(knowledge);
    if let Some(channel) = r.channel {
        #[cfg(feature = "postgres")]
        {
            let url = config.url.clone();
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return Err(Error::Knowledge(
                    "[reload] channel needs PostgreSQL (LISTEN/NOTIFY); use poll_query on other databases".into(),
                ));
            }
            let mut listener = listen(&url, &channel).await?;
            let task = tokio::spawn(async move {
                loop {
                    let event = listener.try_recv().await;
                    let Some(knowledge) = weak.upgrade() else { return };
                    match event {
                        Ok(Some(_)) => reload(&knowledge).await,
                        // The connection was lost; the next try_recv reconnects.
                        Ok(None) => {
                            tracing::warn!("knowledge reload: LISTEN connection lost; reconnecting");
                            reload(&knowledge).await;
                        }
                        // Reconnecting failed. Listen again from scratch until it works,
                        // then reload: a notification may have been sent meanwhile.
                        Err(e) => {
                            tracing::warn!("knowledge reload: {}", super::config::redact(&e.to_string()));
                            drop(knowledge);
                            listener = loop {
                                tokio::time::sleep(Duration::from_secs(1)).await;
                                match listen(&url, &channel).await {
                                    Ok(l) => break l,
                                    Err(e) => tracing::warn!("knowledge reload: {e}"),
                                }
                            };
                            let Some(knowledge) = weak.upgrade() else { return };
                            reload(&knowledge).await;
                        }
                    }
                }
            });
            return Ok(Some(task));
        }
        #[cfg(not(feature = "postgres"))]
        {
            let _ = (channel, weak);
            return Err(Error::Knowledge("[reload] channel needs the `postgres` feature".into()));
        }
    }
    let query = r.poll_query.unwrap_or_default();
    let every = Duration::from_millis(r.poll_ms.max(10));
    // The query goes where a lookup of its table would (see `route`).
    let routed = knowledge.route(&query);
    let provider = knowledge.sources()[routed.source].provider.clone();
    let sql = provider.rewrite_sql(routed.sql).map_err(|e| Error::Knowledge(format!("[reload] poll_query `{query}`: {e}")))?;
    let stmt = BoundStatement {
        sql: sql.into(),
        order: Vec::new(),
        param_types: Vec::new(),
        columns: Vec::new(),
        stats: 0,
        source: routed.source,
        batch: None,
        memory: None,
        path: "sql".into(),
    };
    let mut last = provider
        .query_first(&stmt, Vec::new())
        .await
        .map_err(|e| Error::Knowledge(format!("[reload] poll_query `{query}` fails: {}", super::config::redact(e.message()))))?;
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now = match provider.query_first(&stmt, Vec::new()).await {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!("knowledge reload: poll_query fails: {}", super::config::redact(e.message()));
                    continue;
                }
            };
            let Some(knowledge) = weak.upgrade() else { return };
            if now != last {
                reload(&knowledge).await;
                last = now;
            }
        }
    });
    Ok(Some(task))
}

/// A reload: snapshot tables read again, then the caches dropped. A
/// snapshot that cannot be read keeps its previous rows (and says so).
async fn reload(knowledge: &Knowledge) {
    if let Err(e) = knowledge.reload_all().await {
        tracing::warn!("knowledge reload: {}", super::config::redact(&e.to_string()));
    }
}

#[cfg(feature = "postgres")]
async fn listen(url: &str, channel: &str) -> Result<sqlx::postgres::PgListener> {
    let fail = |e: sqlx::Error| Error::Knowledge(format!("[reload] LISTEN {channel}: {}", super::config::redact(&e.to_string())));
    let mut l = sqlx::postgres::PgListener::connect(url).await.map_err(fail)?;
    l.listen(channel).await.map_err(fail)?;
    Ok(l)
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    /// Trust round 3: `cd conf && omlet run --knowledge knowledge.toml`
    /// with `knowdb = "knowdb.toml"` made the knowdb's path a bare file
    /// name, whose parent is the empty path: the watcher read no folder and
    /// never fired. It now looks where the loader reads, `.`.
    #[test]
    fn a_knowdb_named_by_a_bare_file_name_is_watched_in_the_current_folder() {
        let roots = watched_roots(Path::new("knowdb.toml"), &[PathBuf::from("data")]);
        assert_eq!(roots, vec![PathBuf::from("."), PathBuf::from("data")]);
        // `cargo test` runs in the crate's folder: its manifest is seen.
        let seen = fingerprint(&roots[..1]);
        assert!(seen.iter().any(|(p, ..)| p.ends_with("Cargo.toml")), "{seen:?}");
        assert_eq!(watched_roots(Path::new("conf/knowdb.toml"), &[]), vec![PathBuf::from("conf")]);
    }
}
