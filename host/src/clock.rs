//! The host clock for `Now::*`: UTC time plus the local offset.

use std::sync::atomic::{AtomicI64, Ordering};

/// The offset set by [`set_utc_offset`], or [`UNSET`].
static OFFSET: AtomicI64 = AtomicI64::new(UNSET);

/// No offset set: the system's zone is used.
const UNSET: i64 = i64::MIN;

/// Unix nanoseconds (UTC) and the local UTC offset in seconds.
///
/// The offset is the one given to [`set_utc_offset`], else the host's local
/// zone (chrono reads the system's zone database).
pub fn now() -> (i64, i32) {
    let now = chrono::Utc::now();
    let nanos = now.timestamp_nanos_opt().unwrap_or(0);
    let offset = match OFFSET.load(Ordering::Relaxed) {
        UNSET => chrono::Local::now().offset().local_minus_utc(),
        o => o as i32,
    };
    (nanos, offset)
}

/// Makes `Now::*` (and the build's clock, for static blocks) use `seconds`
/// east of UTC in this process, instead of the system's zone; `None` goes
/// back to the system's zone. The CLI sets it from `OMLET_UTC_OFFSET`.
pub fn set_utc_offset(seconds: Option<i32>) {
    OFFSET.store(seconds.map_or(UNSET, i64::from), Ordering::Relaxed);
}
