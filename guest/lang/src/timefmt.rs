//! `Time::parse(format[, zone])`: text to a time value, beyond the reference
//! (docs/language.md §7.3, docs/decisions/0043-text-functions-time-parse-and-fail.md).
//!
//! A format is read once, at compile time, into [`TimeFormat`]; an unknown
//! directive is a compile error. Parsing is a single pass over the text with
//! no backtracking, so its cost is linear in the text. No crate does this in
//! a `no_std` guest without pulling in a calendar library several times the
//! size of this file: the calendar arithmetic is [`crate::time`]'s.
//!
//! Time values are naive (spec §4.1). Text that names its zone (an offset,
//! `Z`, `UTC`, or an epoch number) is an instant: it becomes the wall-clock
//! time at UTC+`zone` (8 by default, like every `Time::` function), so that
//! `Time::to_ts` with the same zone gives the instant back. Text without a
//! zone is taken as the wall-clock time it shows.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

use crate::time::{self, NANOS_PER_SEC, Parts, TsUnit};

/// A compiled format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum TimeFormat {
    /// `'rfc3339'` (or `'iso8601'`): `YYYY-MM-DD[T ]HH:MM:SS[.frac][Z|±HH:MM]`,
    /// also with `/` in the date.
    Rfc3339,
    /// `'epoch'`, `'epoch_ms'`, `'epoch_us'`: a number of units since
    /// 1970-01-01 UTC (seconds may have a fraction).
    Epoch(TsUnit),
    /// A strftime pattern.
    Pattern(Vec<Item>),
}

/// One piece of a strftime pattern.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Item {
    /// Text that must be there as written.
    Lit(String),
    /// Blanks in the format: any run of blanks in the text, none included.
    Blank,
    /// `%Y`: up to 4 digits.
    Year,
    /// `%y`: 2 digits, 1969–2068 as POSIX says.
    Year2,
    /// `%m`
    Month,
    /// `%b`, `%h`, `%B`: an English month name or its first three letters.
    MonthName,
    /// `%d`, `%e` (blanks before it are skipped).
    Day,
    /// `%j`
    DayOfYear,
    /// `%H`
    Hour,
    /// `%I`
    Hour12,
    /// `%p`: AM or PM.
    AmPm,
    /// `%M`
    Minute,
    /// `%S`
    Second,
    /// `%f`: 1 to 9 digits of a second's fraction.
    Fraction,
    /// `%z`: `Z`, `±HH`, `±HHMM` or `±HH:MM`.
    Offset,
    /// `%Z`: `UTC`, `GMT` or `Z`.
    ZoneName,
    /// `%a`, `%A`: a weekday name, read and not checked.
    Weekday,
    /// `%s`: epoch seconds.
    Epoch,
}

const MONTHS: [&str; 12] =
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"];
const WEEKDAYS: [&str; 7] = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"];

/// What is wrong with a time format ([`compile`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeFormatError {
    /// The format ends in a `%` with no directive after it.
    LonePercent,
    /// `%` followed by a letter that is no directive.
    UnknownDirective(char),
    /// Neither a year nor epoch seconds: omlet does not guess the year.
    NoYear,
    /// `%I` without `%p`, or `%p` without `%I`.
    HalfTwelveHourClock,
}

impl core::fmt::Display for TimeFormatError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            TimeFormatError::LonePercent => f.write_str("the format ends in a lone `%`; write `%%` for a percent sign"),
            TimeFormatError::UnknownDirective(c) => write!(
                f,
                "unknown directive `%{c}` in a time format: the directives are %Y %y %m %b %B %h %d %e %j %H %I %p \
                 %M %S %f %z %Z %a %A %s %T %R %F %D and %%"
            ),
            TimeFormatError::NoYear => {
                f.write_str("a time format needs the year (%Y, %y or %F) or epoch seconds (%s): omlet does not guess it")
            }
            TimeFormatError::HalfTwelveHourClock => f.write_str("%I and %p go together: a 12-hour clock needs AM or PM"),
        }
    }
}

impl core::error::Error for TimeFormatError {}

/// Reads a format, or says what is wrong with it.
pub fn compile(format: &str) -> Result<TimeFormat, TimeFormatError> {
    match format.trim().to_ascii_lowercase().as_str() {
        "rfc3339" | "iso8601" => return Ok(TimeFormat::Rfc3339),
        "epoch" => return Ok(TimeFormat::Epoch(TsUnit::Seconds)),
        "epoch_ms" => return Ok(TimeFormat::Epoch(TsUnit::Millis)),
        "epoch_us" => return Ok(TimeFormat::Epoch(TsUnit::Micros)),
        _ => {}
    }
    let mut items = Vec::new();
    let mut lit = String::new();
    let mut chars = format.chars();
    let flush = |lit: &mut String, items: &mut Vec<Item>| {
        if !lit.is_empty() {
            items.push(Item::Lit(core::mem::take(lit)));
        }
    };
    while let Some(c) = chars.next() {
        if c.is_whitespace() {
            flush(&mut lit, &mut items);
            if items.last() != Some(&Item::Blank) {
                items.push(Item::Blank);
            }
            continue;
        }
        if c != '%' {
            lit.push(c);
            continue;
        }
        let d = chars.next().ok_or(TimeFormatError::LonePercent)?;
        if d == '%' {
            lit.push('%');
            continue;
        }
        flush(&mut lit, &mut items);
        let lit = |s: &str| Item::Lit(s.to_string());
        match d {
            'Y' => items.push(Item::Year),
            'y' => items.push(Item::Year2),
            'm' => items.push(Item::Month),
            'b' | 'h' | 'B' => items.push(Item::MonthName),
            'd' | 'e' => items.push(Item::Day),
            'j' => items.push(Item::DayOfYear),
            'H' => items.push(Item::Hour),
            'I' => items.push(Item::Hour12),
            'p' => items.push(Item::AmPm),
            'M' => items.push(Item::Minute),
            'S' => items.push(Item::Second),
            'f' => items.push(Item::Fraction),
            'z' => items.push(Item::Offset),
            'Z' => items.push(Item::ZoneName),
            'a' | 'A' => items.push(Item::Weekday),
            's' => items.push(Item::Epoch),
            'T' => items.extend([Item::Hour, lit(":"), Item::Minute, lit(":"), Item::Second]),
            'R' => items.extend([Item::Hour, lit(":"), Item::Minute]),
            'F' => items.extend([Item::Year, lit("-"), Item::Month, lit("-"), Item::Day]),
            'D' => items.extend([Item::Month, lit("/"), Item::Day, lit("/"), Item::Year2]),
            other => return Err(TimeFormatError::UnknownDirective(other)),
        }
    }
    flush(&mut lit, &mut items);
    let has = |i: &Item| items.contains(i);
    if !(has(&Item::Epoch) || has(&Item::Year) || has(&Item::Year2)) {
        return Err(TimeFormatError::NoYear);
    }
    if has(&Item::Hour12) != has(&Item::AmPm) {
        return Err(TimeFormatError::HalfTwelveHourClock);
    }
    Ok(TimeFormat::Pattern(items))
}

/// The time `text` shows, at UTC+`zone_hours` when the text names its zone;
/// `None` when it does not match the format or names no valid time.
pub fn parse(format: &TimeFormat, text: &str, zone_hours: i64) -> Option<i64> {
    let zone = zone_hours.checked_mul(3600 * NANOS_PER_SEC)?;
    let text = text.trim();
    match format {
        TimeFormat::Rfc3339 => {
            let (t, offset) = time::parse_time_offset(text)?;
            match offset {
                Some(o) => t.checked_sub(o.checked_mul(NANOS_PER_SEC)?)?.checked_add(zone),
                None => Some(t),
            }
        }
        TimeFormat::Epoch(unit) => epoch(text, *unit)?.checked_add(zone),
        TimeFormat::Pattern(items) => pattern(items, text, zone),
    }
}

/// Nanoseconds since the epoch of a decimal number of `unit`s (a fraction
/// only for seconds).
pub fn epoch(text: &str, unit: TsUnit) -> Option<i64> {
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) if unit == TsUnit::Seconds && !f.is_empty() && f.len() <= 9 && f.bytes().all(|c| c.is_ascii_digit()) => {
            (i, Some(f))
        }
        Some(_) => return None,
        None => (text, None),
    };
    let digits = int.strip_prefix('-').or_else(|| int.strip_prefix('+')).unwrap_or(int);
    if digits.is_empty() || digits.len() > 19 || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let n: i64 = int.parse().ok()?;
    let per = match unit {
        TsUnit::Seconds => NANOS_PER_SEC,
        TsUnit::Millis => 1_000_000,
        TsUnit::Micros => 1_000,
    };
    let mut t = n.checked_mul(per)?;
    if let Some(f) = frac {
        let nanos: i64 = f.parse::<i64>().ok()? * 10i64.pow(9 - f.len() as u32);
        t = if int.starts_with('-') { t.checked_sub(nanos)? } else { t.checked_add(nanos)? };
    }
    Some(t)
}

struct Text<'t> {
    s: &'t [u8],
    i: usize,
}

impl Text<'_> {
    fn digits(&mut self, min: usize, max: usize) -> Option<u32> {
        let start = self.i;
        let mut v: u32 = 0;
        while self.i < self.s.len() && self.i - start < max && self.s[self.i].is_ascii_digit() {
            v = v.saturating_mul(10).saturating_add(u32::from(self.s[self.i] - b'0'));
            self.i += 1;
        }
        (self.i - start >= min).then_some(v)
    }

    fn blanks(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    /// The longest of `names` (or of their first three letters) at the
    /// cursor, ignoring case: its index.
    fn name(&mut self, names: &[&str]) -> Option<usize> {
        let rest = &self.s[self.i..];
        let starts = |n: &[u8]| rest.len() >= n.len() && rest[..n.len()].eq_ignore_ascii_case(n);
        for (k, n) in names.iter().enumerate() {
            let n = n.as_bytes();
            if starts(n) {
                self.i += n.len();
                return Some(k);
            }
        }
        for (k, n) in names.iter().enumerate() {
            if n.len() > 3 && starts(&n.as_bytes()[..3]) {
                self.i += 3;
                return Some(k);
            }
        }
        None
    }

    fn sign(&mut self) -> Option<i64> {
        match self.s.get(self.i) {
            Some(b'+') => {
                self.i += 1;
                Some(1)
            }
            Some(b'-') => {
                self.i += 1;
                Some(-1)
            }
            _ => None,
        }
    }
}

fn pattern(items: &[Item], text: &str, zone: i64) -> Option<i64> {
    let mut t = Text { s: text.as_bytes(), i: 0 };
    let mut p = Parts { year: 1970, month: 1, day: 1, hour: 0, minute: 0, second: 0, nanos: 0 };
    let (mut day_of_year, mut pm, mut offset, mut epoch) = (None, None, None, None);
    for item in items {
        match item {
            Item::Lit(l) => {
                let l = l.as_bytes();
                if !t.s[t.i..].starts_with(l) {
                    return None;
                }
                t.i += l.len();
            }
            Item::Blank => t.blanks(),
            Item::Year => {
                let sign = t.sign().unwrap_or(1);
                p.year = sign * i64::from(t.digits(1, 4)?);
            }
            Item::Year2 => {
                let y = i64::from(t.digits(2, 2)?);
                p.year = if y < 69 { 2000 + y } else { 1900 + y };
            }
            Item::Month => p.month = t.digits(1, 2)?,
            Item::MonthName => p.month = t.name(&MONTHS)? as u32 + 1,
            Item::Day => {
                t.blanks();
                p.day = t.digits(1, 2)?;
            }
            Item::DayOfYear => day_of_year = Some(t.digits(1, 3)?),
            Item::Hour => p.hour = t.digits(1, 2)?,
            Item::Hour12 => {
                let h = t.digits(1, 2)?;
                if !(1..=12).contains(&h) {
                    return None;
                }
                p.hour = h % 12;
            }
            Item::AmPm => pm = Some(t.name(&["am", "pm"])? == 1),
            Item::Minute => p.minute = t.digits(2, 2)?,
            Item::Second => p.second = t.digits(2, 2)?,
            Item::Fraction => {
                let start = t.i;
                let f = t.digits(1, 9)?;
                p.nanos = f * 10u32.pow(9 - (t.i - start) as u32);
                // Digits past nanoseconds are read and dropped.
                t.digits(0, usize::MAX);
            }
            Item::Offset => {
                if t.name(&["z"]).is_some() {
                    offset = Some(0);
                } else {
                    let sign = t.sign()?;
                    let h = i64::from(t.digits(2, 2)?);
                    if t.s.get(t.i) == Some(&b':') {
                        t.i += 1;
                    }
                    let m = i64::from(t.digits(0, 2).unwrap_or(0));
                    if h > 23 || m > 59 {
                        return None;
                    }
                    offset = Some(sign * (h * 3600 + m * 60));
                }
            }
            Item::ZoneName => {
                t.name(&["utc", "gmt", "z"])?;
                offset = Some(0);
            }
            Item::Weekday => {
                t.name(&WEEKDAYS)?;
            }
            Item::Epoch => {
                let start = t.i;
                t.sign();
                let digits = t.i;
                while t.i < t.s.len() && t.s[t.i].is_ascii_digit() {
                    t.i += 1;
                }
                if t.i == digits {
                    return None;
                }
                epoch = Some(text[start..t.i].trim_start_matches('+').parse::<i64>().ok()?);
            }
        }
    }
    if t.i != t.s.len() {
        return None;
    }
    if let Some(pm) = pm {
        p.hour += if pm { 12 } else { 0 };
    }
    if let Some(secs) = epoch {
        return secs.checked_mul(NANOS_PER_SEC)?.checked_add(i64::from(p.nanos))?.checked_add(zone);
    }
    if let Some(doy) = day_of_year {
        let days = time::days_from_civil(p.year, 1, 1) + i64::from(doy) - 1;
        if doy == 0 || time::civil_from_days(days).0 != p.year {
            return None;
        }
        let (_, m, d) = time::civil_from_days(days);
        (p.month, p.day) = (m, d);
    }
    let naive = time::from_parts(&p)?;
    match offset {
        Some(o) => naive.checked_sub(o * NANOS_PER_SEC)?.checked_add(zone),
        None => Some(naive),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(t: Option<i64>) -> String {
        let mut s = String::new();
        match t {
            Some(t) => time::write_time(t, &mut s),
            None => s.push_str("none"),
        }
        s
    }

    fn at(format: &str, text: &str, zone: i64) -> String {
        show(parse(&compile(format).unwrap(), text, zone))
    }

    #[test]
    fn strftime_patterns() {
        assert_eq!(at("%d/%b/%Y:%H:%M:%S %z", "10/Oct/2000:13:55:36 -0700", 0), "2000-10-10 20:55:36");
        assert_eq!(at("%d/%b/%Y:%H:%M:%S %z", "10/Oct/2000:13:55:36 -0700", 8), "2000-10-11 04:55:36");
        assert_eq!(at("%Y-%m-%d %H:%M:%S", "2026-03-01 07:08:09", 8), "2026-03-01 07:08:09", "no zone: as written");
        assert_eq!(at("%F %T.%f", "2026-03-01 07:08:09.25", 0), "2026-03-01 07:08:09.250");
        assert_eq!(at("%b %e %H:%M:%S %Y", "Mar  5 01:02:03 2026", 0), "2026-03-05 01:02:03");
        assert_eq!(at("%A, %B %d, %Y %I:%M %p", "Thursday, November 26, 2026 12:30 am", 0), "2026-11-26 00:30:00");
        assert_eq!(at("%m/%d/%y %I:%M:%S %p", "11/26/26 01:30:00 PM", 0), "2026-11-26 13:30:00");
        assert_eq!(at("%Y%m%d%H%M%S", "20260102030405", 0), "2026-01-02 03:04:05");
        assert_eq!(at("%Y %j", "2024 366", 0), "2024-12-31 00:00:00");
        assert_eq!(at("%Y %j", "2023 366", 0), "none");
        assert_eq!(at("%s", "1700000000", 0), "2023-11-14 22:13:20");
        assert_eq!(at("%Y-%m-%dT%H:%M:%S%Z", "2026-01-01T00:00:00UTC", 1), "2026-01-01 01:00:00");
        assert_eq!(at("%Y-%m-%d", "2026-02-30", 0), "none");
        assert_eq!(at("%Y-%m-%d", "2026-02-03 extra", 0), "none");
        assert_eq!(at("%Y-%m-%d %H:%M", "2026-02-03 24:00", 0), "none");
        assert_eq!(at("%d/%b/%Y", "10/Foo/2000", 0), "none");
        assert_eq!(at("100%% %Y", "100% 2000", 0), "2000-01-01 00:00:00");
    }

    #[test]
    fn named_formats() {
        assert_eq!(at("rfc3339", "2026-01-01T10:00:00+01:00", 0), "2026-01-01 09:00:00");
        assert_eq!(at("RFC3339", "2026-01-01T10:00:00.5Z", 8), "2026-01-01 18:00:00.500");
        assert_eq!(at("iso8601", "2026-01-01 10:00:00", 8), "2026-01-01 10:00:00");
        assert_eq!(at("epoch", "1700000000.5", 0), "2023-11-14 22:13:20.500");
        assert_eq!(at("epoch", "-1", 0), "1969-12-31 23:59:59");
        assert_eq!(at("epoch_ms", "1700000000123", 0), "2023-11-14 22:13:20.123");
        assert_eq!(at("epoch_us", "1700000000123456", 0), "2023-11-14 22:13:20.123456");
        assert_eq!(at("epoch_ms", "1700000000123.5", 0), "none");
        assert_eq!(at("epoch", "99999999999999999999", 0), "none");
        assert_eq!(at("epoch", "12ab", 0), "none");
    }

    #[test]
    fn bad_formats_are_refused() {
        assert_eq!(compile("%Q").unwrap_err(), TimeFormatError::UnknownDirective('Q'));
        assert!(compile("%Q").unwrap_err().to_string().contains("%Q"));
        assert_eq!(compile("%H:%M").unwrap_err(), TimeFormatError::NoYear);
        assert!(compile("%H:%M").unwrap_err().to_string().contains("year"));
        assert_eq!(compile("%Y %I:%M").unwrap_err(), TimeFormatError::HalfTwelveHourClock);
        assert!(compile("%Y %I:%M").unwrap_err().to_string().contains("%p"));
        assert_eq!(compile("%Y %").unwrap_err(), TimeFormatError::LonePercent);
        assert!(compile("%Y %").unwrap_err().to_string().contains("lone"));
    }
}
