//! Connections for lookups: one round trip per query.
//!
//! sqlx's pool checks a connection with a ping when it hands it out (unless
//! told not to) and always when it takes it back, so a lookup through it costs
//! up to three round trips to the database, and the connection stays busy for
//! the last one. A lookup is a single read that can safely run again, so
//! lanes skip both checks: a connection is handed out as it is, and one that
//! fails with an I/O or protocol error (a restarted server, an idle timeout)
//! is dropped and the query runs once more on a new connection
//! ([`Lanes::run`]). A query that is cancelled mid-way (the query timeout)
//! drops its connection too, since its state is unknown.
//!
//! The providers keep a sqlx pool beside their lanes for everything else
//! (preparing at load, loading tables), where a round trip more does not
//! matter.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::{ConnectOptions, Connection};
use tokio::sync::Semaphore;

use super::{BoxFuture, ProviderError};

/// What runs on each new connection before its first query: the session
/// settings that keep lookups safe and bounded (the server-side statement
/// timeout; on MySQL, `NO_BACKSLASH_ESCAPES`; on PostgreSQL, standard
/// strings) and PostgreSQL's helper
/// functions. An error fails the connection: it is never used unguarded.
pub(crate) type Setup<C> = Arc<dyn for<'c> Fn(&'c mut C) -> BoxFuture<'c, Result<(), String>> + Send + Sync>;

/// Up to `size` connections of one kind, opened on first use and kept.
pub(crate) struct Lanes<C: Connection> {
    options: <C as Connection>::Options,
    idle: Mutex<Vec<C>>,
    permits: Semaphore,
    size: usize,
    connect_timeout: Duration,
    setup: Option<Setup<C>>,
}

impl<C: Connection> Lanes<C> {
    /// Lanes to the database `options` names; nothing is opened yet.
    pub(crate) fn new(
        options: <C as Connection>::Options,
        size: u32,
        connect_timeout: Duration,
        setup: Option<Setup<C>>,
    ) -> Self {
        Lanes {
            options,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(size.max(1) as usize),
            size: size.max(1) as usize,
            connect_timeout,
            setup,
        }
    }

    /// How many connections the lanes open at most.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Runs `query` on a connection of its own, and once more on a fresh
    /// connection if the first one turns out to be broken. Waiting for a free
    /// lane and opening a connection are bounded by the connect timeout.
    pub(crate) async fn run<T>(
        &self,
        query: impl for<'c> Fn(&'c mut C) -> BoxFuture<'c, Result<T, sqlx::Error>>,
    ) -> Result<T, ProviderError> {
        let _permit = tokio::time::timeout(self.connect_timeout, self.permits.acquire())
            .await
            .map_err(|_| ProviderError::Unavailable(format!("no free connection within {:?}", self.connect_timeout)))?
            .map_err(|e| ProviderError::Unavailable(e.to_string()))?;
        let mut retried = false;
        loop {
            let pooled = self.idle.lock().ok().and_then(|mut idle| idle.pop());
            let fresh = pooled.is_none();
            let mut conn = match pooled {
                Some(c) => c,
                None => self.connect().await?,
            };
            match query(&mut conn).await {
                Ok(v) => {
                    self.give_back(conn);
                    return Ok(v);
                }
                Err(e) if over_of(&e).is_some() => {
                    // A bound was crossed mid-answer: the connection may
                    // still have the rest of the rows to read, and a buffer
                    // grown for the big one. It goes; a new one is opened
                    // when needed.
                    drop(conn);
                    return Err(provider_error(e));
                }
                Err(e) if broken(&e) => {
                    // Dropping a connection closes its socket. The idle ones most likely
                    // went the same way (a restarted server), so they go too, and the
                    // second try opens a new one. A connection that was just opened
                    // gets no second chance: the database is down.
                    drop(conn);
                    if let Ok(mut idle) = self.idle.lock() {
                        idle.clear();
                    }
                    if fresh || retried {
                        return Err(ProviderError::Unavailable(e.to_string()));
                    }
                    retried = true;
                    tracing::debug!(error = %e, "dropping a broken connection and trying again");
                }
                Err(e) => {
                    self.give_back(conn);
                    return Err(provider_error(e));
                }
            }
        }
    }

    async fn connect(&self) -> Result<C, ProviderError> {
        let mut conn = tokio::time::timeout(self.connect_timeout, self.options.connect())
            .await
            .map_err(|_| ProviderError::Unavailable(format!("cannot connect within {:?}", self.connect_timeout)))?
            .map_err(|e| ProviderError::Unavailable(e.to_string()))?;
        if let Some(setup) = &self.setup {
            // A connection that cannot be readied is never used unguarded.
            setup(&mut conn).await.map_err(ProviderError::Unavailable)?;
        }
        Ok(conn)
    }

    fn give_back(&self, conn: C) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(conn);
        }
    }

    /// Closes the idle connections politely; lanes open new ones if used again.
    pub(crate) async fn close(&self) {
        let idle = self.idle.lock().map(|mut idle| std::mem::take(&mut *idle)).unwrap_or_default();
        for conn in idle {
            let _ = conn.close().await;
        }
    }
}

/// Whether an error says the connection is unusable (rather than the query
/// being wrong): such a connection is dropped and the query tried again.
/// Besides I/O and protocol failures, that is a server's own word that it
/// ended the session: SQLSTATE class 08 (connection exception, also MySQL's
/// "server shutdown in progress"), PostgreSQL's 57P01–57P03 (administrator
/// shutdown, crash shutdown, cannot connect now) and MariaDB's 70100
/// (connection killed).
fn broken(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::Tls(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| session_ended(&c)),
        _ => false,
    }
}

/// A bound crossed while a lookup read its answer ([`over`]), carried out
/// of a lane's query as a sqlx error.
#[derive(Debug)]
struct Over(ProviderError);

impl std::fmt::Display for Over {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.message())
    }
}

impl std::error::Error for Over {}

/// What a lane's query returns when it stops reading at a bound: [`Lanes::run`]
/// drops the connection (the rest of the answer is never read) and gives
/// [`ProviderError::Limit`].
pub(crate) fn over(limit: crate::Limit, what: impl std::fmt::Display) -> sqlx::Error {
    sqlx::Error::Decode(Box::new(Over(ProviderError::limit(limit, what))))
}

/// The crossed bound an error of [`over`] carries.
fn over_of(e: &sqlx::Error) -> Option<&ProviderError> {
    match e {
        sqlx::Error::Decode(b) => b.downcast_ref::<Over>().map(|o| &o.0),
        _ => None,
    }
}

/// A sqlx error as a [`ProviderError`]: a crossed bound ([`over`]) is
/// `Limit`; a broken connection, or no connection from a pool in time, is
/// `Unavailable`; anything else the database said about the statement or
/// its values is `Refused`.
pub(crate) fn provider_error(e: sqlx::Error) -> ProviderError {
    if let Some(limit) = over_of(&e) {
        return limit.clone();
    }
    if broken(&e) || matches!(e, sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed) {
        ProviderError::Unavailable(e.to_string())
    } else {
        ProviderError::Refused(e.to_string())
    }
}

fn session_ended(sqlstate: &str) -> bool {
    sqlstate.starts_with("08") || sqlstate.starts_with("57P") || sqlstate == "70100"
}

/// Lets a closure be read as `for<'c> Fn(&'c mut C) -> BoxFuture<'c, T>`,
/// which Rust does not infer by itself.
pub(crate) fn query<C, T, F>(f: F) -> F
where
    F: for<'c> Fn(&'c mut C) -> BoxFuture<'c, T>,
{
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_connection_failures_count_as_broken() {
        assert!(broken(&sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset))));
        assert!(broken(&sqlx::Error::Protocol("unexpected message".into())));
        assert!(!broken(&sqlx::Error::RowNotFound));
        assert!(!broken(&sqlx::Error::ColumnNotFound("x".into())));
        assert!(session_ended("57P01") && session_ended("08006") && session_ended("08S01") && session_ended("70100"));
        assert!(!session_ended("42P01") && !session_ended("23505") && !session_ended("57014"));
    }
}
