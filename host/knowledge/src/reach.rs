//! Why a database server cannot be reached, said before anything waits on it.
//!
//! Why: sqlx's pool retries a failed connection until its acquire timeout,
//! then reports only "pool timed out while waiting for an open connection",
//! with no server and no cause, after the whole timeout even when the port
//! refused at once. What it replaces: that message, for the first connection
//! of a server provider. What it costs: one connection of its own at start,
//! closed before the pool opens its own.

use sqlx::Connection;

use crate::{Error, Result};

/// `host:port` of a server URL (`scheme://user:secret@host:port/db?…`), with
/// the port the driver takes when the URL names none; "the local socket"
/// when it names no host. Never the user or the secret: as
/// [`crate::config::redact`] takes it, a secret may hold any character
/// unencoded (`/`, `#`, `?`, `@`), so the user and secret run to the last
/// `@` of the URL.
pub(crate) fn server_of(url: &str, default_port: u16) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let after_user = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let host_port = after_user.split(['/', '?', '#']).next().unwrap_or("");
    if host_port.is_empty() {
        return "the local socket".into();
    }
    // `[v6]:port`, `[v6]`, `host:port` or `host`.
    let has_port = match host_port.rfind(']') {
        Some(end) => host_port[end..].contains(':'),
        None => host_port.contains(':'),
    };
    if has_port { host_port.to_string() } else { format!("{host_port}:{default_port}") }
}

/// Opens one connection to the server and closes it again: `Ok` when it
/// could be opened within `timeout`, else an [`Error::Knowledge`] that names
/// the server and the cause (refused, no answer, TLS, authentication, what
/// the server said), with secrets redacted.
pub(crate) async fn first_connection<C: Connection>(
    kind: &str,
    server: &str,
    options: &C::Options,
    timeout: std::time::Duration,
) -> Result<()> {
    let cause = match tokio::time::timeout(timeout, C::connect_with(options)).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            return Ok(());
        }
        Ok(Err(e)) => cause(&e),
        Err(_) => format!("no answer within {} ms (connect_timeout_ms)", timeout.as_millis()),
    };
    Err(Error::Knowledge(format!("{kind}: cannot connect to {server}: {}", crate::config::redact(&cause))))
}

/// What went wrong, in a user's words first, then the driver's.
fn cause(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Io(io) => match io.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused (nothing listens on that port)".into(),
            std::io::ErrorKind::TimedOut => "the connection timed out".into(),
            _ => format!("network error: {io}"),
        },
        sqlx::Error::Tls(t) => format!("TLS failed: {t}"),
        // SQLSTATE class 28: invalid authorization (a wrong password, an unknown user).
        sqlx::Error::Database(d) if d.code().is_some_and(|c| c.starts_with("28")) => {
            format!("authentication failed: {}", d.message())
        }
        sqlx::Error::Database(d) => format!("the server refused: {}", d.message()),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::server_of;

    /// The server of a URL, never its user or secret.
    #[test]
    fn a_urls_server_is_its_host_and_port_only() {
        assert_eq!(server_of("postgres://bob:s3cret@db.example:6432/x?sslmode=require", 5432), "db.example:6432");
        assert_eq!(server_of("postgres://bob:s3cret@db.example/x", 5432), "db.example:5432");
        assert_eq!(server_of("mysql://u@[::1]:3307/x", 3306), "[::1]:3307");
        assert_eq!(server_of("mysql://u@[::1]/x", 3306), "[::1]:3306");
        assert_eq!(server_of("postgres://a:b@c@host:1/x", 5432), "host:1");
        assert_eq!(server_of("postgres:///x?host=/run/postgresql", 5432), "the local socket");
        // A secret with `/`, `#`, `?` or `@` in it, unencoded: none of it shows.
        assert_eq!(server_of("postgres://bob:pa/ss#w?o@rd@db.example:6432/x", 5432), "db.example:6432");
        assert_eq!(server_of("mysql://bob:s/3@db.example/x", 3306), "db.example:3306");
    }
}
