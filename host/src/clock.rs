//! The host clock for `Now::*`: UTC time plus the local offset.

/// Unix nanoseconds (UTC) and the local UTC offset in seconds.
///
/// The offset is the host's local zone (chrono reads the system's zone
/// database), or `OMLET_UTC_OFFSET` seconds when that variable is set.
pub fn now() -> (i64, i32) {
    let now = chrono::Utc::now();
    let nanos = now.timestamp_nanos_opt().unwrap_or(0);
    let offset = match std::env::var("OMLET_UTC_OFFSET").ok().and_then(|v| v.parse().ok()) {
        Some(o) => o,
        None => chrono::Local::now().offset().local_minus_utc(),
    };
    (nanos, offset)
}
