//! Naive date-times as nanoseconds since 1970-01-01 00:00:00, with the
//! civil-calendar arithmetic OML needs (no time-zone database: zones are
//! fixed offsets given by the rule or the host).

use alloc::string::String;
use core::fmt::Write;

pub const NANOS_PER_SEC: i64 = 1_000_000_000;
const SECS_PER_DAY: i64 = 86_400;

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (inverse of [`days_from_civil`]).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

/// Broken-down parts of a naive time.
pub struct Parts {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanos: u32,
}

pub fn parts(t: i64) -> Parts {
    let secs = t.div_euclid(NANOS_PER_SEC);
    let nanos = t.rem_euclid(NANOS_PER_SEC) as u32;
    let days = secs.div_euclid(SECS_PER_DAY);
    let sod = secs.rem_euclid(SECS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    Parts { year, month, day, hour: (sod / 3600) as u32, minute: (sod / 60 % 60) as u32, second: (sod % 60) as u32, nanos }
}

pub fn from_parts(p: &Parts) -> Option<i64> {
    if !(1..=12).contains(&p.month)
        || p.day == 0
        || p.day > days_in_month(p.year, p.month)
        || p.hour > 23
        || p.minute > 59
        || p.second > 60
        || p.nanos >= 1_000_000_000
    {
        return None;
    }
    let days = days_from_civil(p.year, p.month, p.day);
    let secs = days.checked_mul(SECS_PER_DAY)?.checked_add(p.hour as i64 * 3600 + p.minute as i64 * 60 + p.second as i64)?;
    secs.checked_mul(NANOS_PER_SEC)?.checked_add(p.nanos as i64)
}

/// `YYYY-MM-DD HH:MM:SS[.fraction]`, the fraction in 3, 6 or 9 digits as needed.
pub fn write_time(t: i64, out: &mut String) {
    let p = parts(t);
    let _ = write!(out, "{:04}-{:02}-{:02} {:02}:{:02}:{:02}", p.year, p.month, p.day, p.hour, p.minute, p.second);
    if p.nanos != 0 {
        if p.nanos.is_multiple_of(1_000_000) {
            let _ = write!(out, ".{:03}", p.nanos / 1_000_000);
        } else if p.nanos.is_multiple_of(1_000) {
            let _ = write!(out, ".{:06}", p.nanos / 1_000);
        } else {
            let _ = write!(out, ".{:09}", p.nanos);
        }
    }
}

struct Cursor<'s> {
    s: &'s [u8],
    i: usize,
}

impl Cursor<'_> {
    fn number(&mut self, max_digits: usize) -> Option<u64> {
        let start = self.i;
        let mut v: u64 = 0;
        while self.i < self.s.len() && self.s[self.i].is_ascii_digit() && self.i - start < max_digits {
            v = v * 10 + (self.s[self.i] - b'0') as u64;
            self.i += 1;
        }
        (self.i > start).then_some(v)
    }
    fn eat(&mut self, set: &[u8]) -> bool {
        if self.i < self.s.len() && set.contains(&self.s[self.i]) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn done(&self) -> bool {
        self.i >= self.s.len()
    }
}

/// Parses a time literal or a time text (spec §8.2.1): `Y-M-D H:M:S` with one
/// or more digits per component, `-` or `/` in the date, `T` or a space
/// between date and time, an optional `.fraction`, and an optional zone
/// (`Z` or `±HH[:MM]`) that is ignored: the value is naive.
pub fn parse_time(text: &str) -> Option<i64> {
    parse_time_offset(text).map(|(t, _)| t)
}

/// [`parse_time`], with the zone it names as seconds east of UTC (`Z` is 0),
/// or `None` when it names none.
pub fn parse_time_offset(text: &str) -> Option<(i64, Option<i64>)> {
    let mut c = Cursor { s: text.trim().as_bytes(), i: 0 };
    let year = c.number(6)? as i64;
    if !c.eat(b"-/") {
        return None;
    }
    let month = c.number(2)? as u32;
    if !c.eat(b"-/") {
        return None;
    }
    let day = c.number(2)? as u32;
    if !c.eat(b" Tt") {
        return None;
    }
    while c.eat(b" ") {}
    let hour = c.number(2)? as u32;
    if !c.eat(b":") {
        return None;
    }
    let minute = c.number(2)? as u32;
    if !c.eat(b":") {
        return None;
    }
    let second = c.number(2)? as u32;
    let mut nanos = 0u32;
    if c.eat(b".,") {
        let start = c.i;
        let frac = c.number(9)?;
        let digits = c.i - start;
        nanos = (frac * 10u64.pow((9 - digits) as u32)) as u32;
        while c.i < c.s.len() && c.s[c.i].is_ascii_digit() {
            c.i += 1;
        }
    }
    while c.eat(b" ") {}
    let mut offset = None;
    if !c.done() {
        if c.eat(b"Zz") {
            offset = Some(0);
        } else if c.i < c.s.len() && (c.s[c.i] == b'+' || c.s[c.i] == b'-') {
            let sign = if c.s[c.i] == b'-' { -1 } else { 1 };
            c.i += 1;
            let h = c.number(2)? as i64;
            c.eat(b":");
            let m = c.number(2).unwrap_or(0) as i64;
            if h > 23 || m > 59 {
                return None;
            }
            offset = Some(sign * (h * 3600 + m * 60));
        } else {
            return None;
        }
    }
    if !c.done() {
        return None;
    }
    Some((from_parts(&Parts { year, month, day, hour, minute, second, nanos })?, offset))
}

/// Unit of `Time::to_ts*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TsUnit {
    Seconds,
    Millis,
    Micros,
}

/// Epoch value of a naive time read as UTC+`zone_hours`.
pub fn to_timestamp(t: i64, zone_hours: i64, unit: TsUnit) -> i64 {
    let utc = t - zone_hours * 3600 * NANOS_PER_SEC;
    match unit {
        TsUnit::Seconds => utc.div_euclid(NANOS_PER_SEC),
        TsUnit::Millis => utc.div_euclid(1_000_000),
        TsUnit::Micros => utc.div_euclid(1_000),
    }
}

/// The naive time at UTC+`zone_hours` of an epoch value in `unit`, or
/// `None` when it falls outside the years a time value holds (1677–2262).
pub fn from_timestamp(value: i64, zone_hours: i64, unit: TsUnit) -> Option<i64> {
    let per = match unit {
        TsUnit::Seconds => NANOS_PER_SEC,
        TsUnit::Millis => 1_000_000,
        TsUnit::Micros => 1_000,
    };
    value.checked_mul(per)?.checked_add(zone_hours.checked_mul(3600 * NANOS_PER_SEC)?)
}

/// Local naive time from the host clock.
pub fn local(unix_nanos: i64, offset_secs: i32) -> i64 {
    unix_nanos + offset_secs as i64 * NANOS_PER_SEC
}

/// `YYYYMMDD` of a naive time.
pub fn date_digit(t: i64) -> i64 {
    let p = parts(t);
    p.year * 10_000 + p.month as i64 * 100 + p.day as i64
}

/// `YYYYMMDDHH` of a naive time.
pub fn hour_digit(t: i64) -> i64 {
    date_digit(t) * 100 + parts(t).hour as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_examples() {
        let t = parse_time("2000-10-10 0:0:0").unwrap();
        assert_eq!(to_timestamp(t, 8, TsUnit::Seconds), 971_107_200);
        let t = parse_time("2024-01-15 14:30:00").unwrap();
        assert_eq!(to_timestamp(t, 0, TsUnit::Millis), 1_705_329_000_000);
        assert_eq!(to_timestamp(t, 8, TsUnit::Seconds), 1_705_300_200);
        let mut s = String::new();
        write_time(parse_time("2020/1/2 3:04:05.5").unwrap(), &mut s);
        assert_eq!(s, "2020-01-02 03:04:05.500");
        assert!(parse_time("2020-02-30 00:00:00").is_none());
        assert!(parse_time("yesterday").is_none());
        for days in [-800_000i64, -1, 0, 59, 10_000, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(date_digit(parse_time("1999-12-31 23:59:59").unwrap()), 19_991_231);
    }
}
