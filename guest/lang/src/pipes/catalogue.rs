//! The pipe function catalogue: one row per function, with its name, the
//! release that added it, an example, how its arguments are read and which
//! [`PipeFn`] it gives. The parser reads pipes through it, suggestions and
//! `omlet check --features` come from it, and a trace names a pipe by it.

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::ir::{Const, PathPart, PipeFn, UrlPart};
use crate::parse::{nearest, quoted, split_args};
use crate::time::TsUnit;
use crate::value;

/// A pipe function's error: the message and, when known, how to fix it.
pub(crate) type FnError = (String, Option<Cow<'static, str>>);

pub(crate) fn plain(msg: String) -> FnError {
    (msg, None)
}

/// A pipe function as the catalogue holds it: the one place where it is
/// named (VRL's one-function-per-file, as one row per function). The parser
/// reads a pipe by its row, suggestions come from the names, `omlet check
/// --features` from `since`, and a trace names a [`PipeFn`] by the first row
/// whose `is` claims it.
pub(crate) struct Pipe {
    /// As a rule writes it.
    pub(crate) name: &'static str,
    /// The reference's release that added it, or [`crate::features::OMLET_ONLY`];
    /// `None` when v1.17.4 had it.
    pub(crate) since: Option<&'static str>,
    /// A use of it, as a rule writes it: shown with a did-you-mean, and
    /// parsed by a test, which checks that its row names what it gives.
    pub(crate) example: &'static str,
    /// Its arguments read: `(name, the text between its parentheses, trimmed)`.
    parse: fn(&str, Option<&str>) -> Result<PipeFn, FnError>,
    /// Whether a parsed pipe is this function.
    is: fn(&PipeFn) -> bool,
}

use crate::features::OMLET_ONLY;

/// The row of a pipe function that takes no arguments: its name is its
/// example, and it gives one variant of [`PipeFn`].
macro_rules! plain {
    ($name:literal, $since:expr, $variant:ident) => {
        Pipe {
            name: $name,
            since: $since,
            example: $name,
            parse: |n, a| no_args(n, a, PipeFn::$variant),
            is: |f| matches!(f, PipeFn::$variant),
        }
    };
}

/// Every pipe function (spec §9; delta §5 to §9), in the order the
/// catalogue hint lists them.
pub(crate) static PIPES: &[Pipe] = &[
    plain!("base64_encode", None, Base64Encode),
    Pipe {
        name: "base64_decode",
        since: None,
        example: "base64_decode(Gbk)",
        parse: base64_decode,
        is: |f| matches!(f, PipeFn::Base64Decode | PipeFn::Base64DecodeAs(_)),
    },
    plain!("html_escape", None, HtmlEscape),
    plain!("html_unescape", None, HtmlUnescape),
    plain!("json_escape", None, JsonEscape),
    plain!("json_unescape", None, JsonUnescape),
    plain!("str_escape", None, StrEscape),
    Pipe {
        name: "Time::to_ts",
        since: None,
        example: "Time::to_ts(0)",
        parse: time_ts,
        is: |f| matches!(f, PipeFn::ToTs { unit: TsUnit::Seconds, .. } | PipeFn::ToTsNoop),
    },
    Pipe {
        name: "Time::to_ts_ms",
        since: None,
        example: "Time::to_ts_ms",
        parse: time_ts,
        is: |f| matches!(f, PipeFn::ToTs { unit: TsUnit::Millis, .. }),
    },
    Pipe {
        name: "Time::to_ts_us",
        since: None,
        example: "Time::to_ts_us(-5)",
        parse: time_ts,
        is: |f| matches!(f, PipeFn::ToTs { unit: TsUnit::Micros, .. }),
    },
    // Gives what `Time::to_ts*` gives: a trace names it by those rows.
    Pipe { name: "Time::to_ts_zone", since: None, example: "Time::to_ts_zone(8, ms)", parse: time_ts_zone, is: |_| false },
    Pipe {
        name: "Time::from_ts",
        since: Some("1.25.4"),
        example: "Time::from_ts",
        parse: time_ts,
        is: |f| matches!(f, PipeFn::FromTs { unit: TsUnit::Seconds, .. }),
    },
    Pipe {
        name: "Time::from_ts_ms",
        since: Some("1.25.4"),
        example: "Time::from_ts_ms(0)",
        parse: time_ts,
        is: |f| matches!(f, PipeFn::FromTs { unit: TsUnit::Millis, .. }),
    },
    Pipe {
        name: "Time::from_ts_us",
        since: Some("1.25.4"),
        example: "Time::from_ts_us",
        parse: time_ts,
        is: |f| matches!(f, PipeFn::FromTs { unit: TsUnit::Micros, .. }),
    },
    Pipe {
        name: "Time::parse",
        since: Some(OMLET_ONLY),
        example: "Time::parse('rfc3339', 0)",
        parse: time_parse,
        is: |f| matches!(f, PipeFn::TimeParse { .. }),
    },
    Pipe {
        name: "on_fail",
        since: Some("1.25.1"),
        example: "on_fail('none')",
        parse: on_fail,
        is: |f| matches!(f, PipeFn::OnFail(_)),
    },
    plain!("intranet_ip", Some("1.25.2"), IntranetIp),
    plain!("lower", Some(OMLET_ONLY), Lower),
    plain!("upper", Some(OMLET_ONLY), Upper),
    Pipe { name: "split", since: Some(OMLET_ONLY), example: "split(',')", parse: split, is: |f| matches!(f, PipeFn::Split(_)) },
    Pipe {
        name: "substr",
        since: Some(OMLET_ONLY),
        example: "substr(-3, 2)",
        parse: substr,
        is: |f| matches!(f, PipeFn::Substr { .. }),
    },
    Pipe { name: "nth", since: None, example: "nth(0)", parse: nth, is: |f| matches!(f, PipeFn::Nth(_)) },
    Pipe { name: "get", since: None, example: "get(a/b)", parse: get, is: |f| matches!(f, PipeFn::Get(_)) },
    Pipe { name: "path", since: None, example: "path(name)", parse: path, is: |f| matches!(f, PipeFn::Path(_)) },
    Pipe { name: "url", since: None, example: "url(domain)", parse: url, is: |f| matches!(f, PipeFn::Url(_)) },
    plain!("ip4_to_int", None, Ip4ToInt),
    plain!("ip_to_biguint", Some("1.25.0"), IpToBigUint),
    plain!("to_json", None, ToJson),
    plain!("to_str", None, ToStr),
    plain!("skip_empty", None, SkipEmpty),
    Pipe {
        name: "starts_with",
        since: None,
        example: "starts_with('GET')",
        parse: starts_with,
        is: |f| matches!(f, PipeFn::StartsWith(_)),
    },
    Pipe { name: "map_to", since: None, example: "map_to(2.5)", parse: map_to, is: |f| matches!(f, PipeFn::MapTo(_)) },
];

/// Why a name is refused, given the name.
type Refusal = fn(&str) -> FnError;

/// Names a rule may write that are no pipe function of omlet's, and why.
static REFUSED: &[(&[&str], Refusal)] = &[
    (&["extract_main_word", "extract_subject_object"], |name| {
        (
            format!("`{name}` is not supported: an EXTENDED NLP pipe that the spec leaves unspecified"),
            Some(Cow::Borrowed(
                "omlet has no NLP pipes; extract the words in the pipeline before the rule, or with match and regex_match",
            )),
        )
    }),
    (&["intranet_replace"], |_| {
        (
            "`intranet_replace` is not supported: its arguments and behaviour are not verified (OML 1.25 delta §9.5)".into(),
            Some(Cow::Borrowed("classify the address with intranet_ip and choose the value with match")),
        )
    }),
    (&["str_unescape", "sxf_get", "digit_range", "regex_match", "ends_with"], |name| {
        plain(format!("`{name}` is not a pipe function"))
    }),
];

/// The catalogue's row for a parsed pipe (see [`Pipe::is`]).
pub(crate) fn row_of(f: &PipeFn) -> Option<&'static Pipe> {
    PIPES.iter().find(|p| (p.is)(f))
}

pub(crate) fn pipe_fn(name: &str, args: Option<&str>) -> Result<PipeFn, FnError> {
    let arg = args.map(str::trim);
    if let Some(p) = PIPES.iter().find(|p| p.name == name) {
        return (p.parse)(name, arg);
    }
    if let Some((_, refuse)) = REFUSED.iter().find(|(names, _)| names.contains(&name)) {
        return Err(refuse(name));
    }
    let catalogue = Some(Cow::Owned(pipe_catalogue()));
    let names: Vec<&str> = PIPES.iter().map(|p| p.name).collect();
    let near = nearest(name, &names).and_then(|near| PIPES.iter().find(|p| p.name == near));
    Err(match near {
        Some(p) if p.example == p.name => (format!("unknown pipe function `{name}`: did you mean `{}`?", p.name), catalogue),
        Some(p) => (format!("unknown pipe function `{name}`: did you mean `{}`, as in `{}`?", p.name, p.example), catalogue),
        None => (format!("unknown pipe function `{name}`"), catalogue),
    })
}

fn no_args(name: &str, arg: Option<&str>, f: PipeFn) -> Result<PipeFn, FnError> {
    match arg {
        None => Ok(f),
        Some(_) => Err(plain(format!("`{name}` takes no arguments; write it without parentheses"))),
    }
}

fn base64_decode(_: &str, arg: Option<&str>) -> Result<PipeFn, FnError> {
    Ok(match arg {
        None | Some("") | Some("Utf8") => PipeFn::Base64Decode,
        Some(enc) => match crate::charset::Charset::by_name(enc) {
            Some(c) => PipeFn::Base64DecodeAs(c),
            None => {
                return Err(plain(format!(
                    "unknown base64_decode encoding `{enc}`: the encodings are {}",
                    crate::charset::Charset::NAMES
                )));
            }
        },
    })
}

/// `Time::to_ts*` and `Time::from_ts*`: the unit from the name's end.
fn time_ts(name: &str, arg: Option<&str>) -> Result<PipeFn, FnError> {
    let unit = match name.rsplit('_').next() {
        Some("ms") => TsUnit::Millis,
        Some("us") => TsUnit::Micros,
        _ => TsUnit::Seconds,
    };
    // Delta §6: the zone is optional, 8 when left out.
    let zone_hours = match arg {
        None => 8,
        Some(a) => zone(name, a)?,
    };
    Ok(if name.starts_with("Time::from") { PipeFn::FromTs { zone_hours, unit } } else { PipeFn::ToTs { zone_hours, unit } })
}

fn time_ts_zone(name: &str, arg: Option<&str>) -> Result<PipeFn, FnError> {
    let a = arg.unwrap_or("");
    let mut parts = a.split(',').map(str::trim);
    let (z, u) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if parts.next().is_some() || u.is_empty() {
        return Err((
            format!("bad arguments for Time::to_ts_zone: `{a}`"),
            Some(Cow::Borrowed("write Time::to_ts_zone(8, s): an hour offset (no `+`) and s, ms or us")),
        ));
    }
    let zone_hours = zone(name, z)?;
    let unit = match u {
        "s" | "ss" => TsUnit::Seconds,
        "ms" => TsUnit::Millis,
        "us" => TsUnit::Micros,
        _ => return Err((format!("unknown time unit `{u}`"), Some(Cow::Borrowed("units are s, ms and us")))),
    };
    Ok(PipeFn::ToTs { zone_hours, unit })
}

fn on_fail(_: &str, arg: Option<&str>) -> Result<PipeFn, FnError> {
    match arg.and_then(quoted) {
        Some(text) => Ok(PipeFn::OnFail(text)),
        None => Err((
            "on_fail takes one quoted text".to_string(),
            Some(Cow::Borrowed("write on_fail('none'): the text that replaces an ignore or null value")),
        )),
    }
}

fn split(_: &str, arg: Option<&str>) -> Result<PipeFn, FnError> {
    match arg.and_then(quoted).filter(|s| !s.is_empty()) {
        Some(sep) => Ok(PipeFn::Split(sep)),
        None => {
            Err(("split takes one quoted, non-empty separator".into(), Some(Cow::Borrowed("write split(',') or split(' | ')"))))
        }
    }
}

fn substr(_: &str, arg: Option<&str>) -> Result<PipeFn, FnError> {
    let a = arg.unwrap_or("");
    let hint = || {
        Some(Cow::Borrowed(
            "write substr(start) or substr(start, length): characters from 0; a negative start counts from the end",
        ))
    };
    let args = split_args(a);
    let start = args.first().and_then(|s| value::parse_digit(s));
    let len = args.get(1).map(|s| value::parse_digit(s).and_then(|n| u64::try_from(n).ok()));
    match (start, len, args.len()) {
        (Some(start), None, 1) => Ok(PipeFn::Substr { start, len: None }),
        (Some(start), Some(Some(n)), 2) => Ok(PipeFn::Substr { start, len: Some(n) }),
        _ => Err((format!("bad arguments for substr: `{a}`"), hint())),
    }
}

fn time_parse(name: &str, arg: Option<&str>) -> Result<PipeFn, FnError> {
    let a = arg.unwrap_or("");
    let args = split_args(a);
    let hint = || {
        Some(Cow::Borrowed(
            "write Time::parse('%d/%b/%Y:%H:%M:%S %z'), Time::parse('rfc3339'), Time::parse('epoch_ms'), with an optional zone: Time::parse('rfc3339', 0)",
        ))
    };
    let Some(fmt) = args.first().and_then(|f| quoted(f)) else {
        return Err((format!("Time::parse needs a quoted format, not `{a}`"), hint()));
    };
    let format = crate::timefmt::compile(&fmt).map_err(|e| (e.to_string(), hint()))?;
    let zone_hours = match args.get(1) {
        None => 8,
        Some(z) => zone(name, z)?,
    };
    if args.len() > 2 {
        return Err((format!("Time::parse takes a format and an optional zone, not `{a}`"), hint()));
    }
    Ok(PipeFn::TimeParse { format, zone_hours })
}

fn nth(_: &str, arg: Option<&str>) -> Result<PipeFn, FnError> {
    let a = arg.unwrap_or("");
    if a.is_empty() || !a.bytes().all(|c| c.is_ascii_digit()) {
        return Err((format!("bad index for nth: `{a}`"), Some(Cow::Borrowed("nth takes a non-negative index: nth(0)"))));
    }
    Ok(PipeFn::Nth(a.parse().unwrap_or(u64::MAX)))
}

fn get(_: &str, arg: Option<&str>) -> Result<PipeFn, FnError> {
    let a = arg.unwrap_or("");
    if a.is_empty() || !a.chars().all(|c| c.is_alphanumeric() || "_/-.".contains(c)) {
        return Err(plain(format!("bad path for get: `{a}`")));
    }
    Ok(PipeFn::Get(a.split('/').filter(|s| !s.is_empty()).map(String::from).collect()))
}

fn path(_: &str, arg: Option<&str>) -> Result<PipeFn, FnError> {
    Ok(PipeFn::Path(match arg {
        None | Some("") => None,
        Some("name") => Some(PathPart::Name),
        Some("path") => Some(PathPart::Path),
        Some(o) => return Err((format!("unknown path part `{o}`"), Some(Cow::Borrowed("path(name) or path(path)")))),
    }))
}

fn url(_: &str, arg: Option<&str>) -> Result<PipeFn, FnError> {
    Ok(PipeFn::Url(match arg {
        None | Some("") => None,
        Some("domain") => Some(UrlPart::Domain),
        Some("host") => Some(UrlPart::Host),
        Some("uri") => Some(UrlPart::Uri),
        Some("path") => Some(UrlPart::Path),
        Some("params") => Some(UrlPart::Params),
        Some(o) => {
            return Err((
                format!("unknown url part `{o}`"),
                Some(Cow::Borrowed("url parts are domain, host, uri, path and params")),
            ));
        }
    }))
}

fn starts_with(_: &str, arg: Option<&str>) -> Result<PipeFn, FnError> {
    quoted(arg.unwrap_or(""))
        .map(PipeFn::StartsWith)
        .ok_or_else(|| (String::from("starts_with needs a quoted string"), Some(Cow::Borrowed("write starts_with('prefix')"))))
}

fn map_to(_: &str, arg: Option<&str>) -> Result<PipeFn, FnError> {
    let a = arg.unwrap_or("");
    let c = if let Some(s) = quoted(a) {
        Const::Chars(s)
    } else if a == "true" || a == "false" {
        Const::Bool(a == "true")
    } else if let Some(d) = value::parse_digit(a) {
        Const::Digit(d)
    } else if let Some(f) = value::parse_float(a).filter(|_| a.bytes().any(|c| c.is_ascii_digit())) {
        Const::Float(f)
    } else {
        return Err((
            format!("map_to needs a quoted string, number or boolean, not `{a}`"),
            Some(Cow::Borrowed("write map_to('text'), map_to(1), map_to(2.5) or map_to(true)")),
        ));
    };
    Ok(PipeFn::MapTo(c))
}

/// The hint of an unknown pipe function: every name of [`PIPES`].
pub(crate) fn pipe_catalogue() -> String {
    let names: Vec<&str> = PIPES.iter().map(|p| p.name).collect();
    let (last, rest) = names.split_last().unwrap_or((&"", &[]));
    format!("the pipe functions are {} and {last} (docs/language.md §7)", rest.join(", "))
}

/// A zone argument of the `Time::` functions (delta §6.1): whole hours east
/// of UTC, `-23` to `23`, an optional `-` (blanks may follow it), no `+`.
pub(crate) fn zone(name: &str, arg: &str) -> Result<i64, FnError> {
    let t = arg.trim();
    let (negative, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest.trim_start()),
        None => (false, t),
    };
    let hint = || Some(Cow::Borrowed("a zone is whole hours east of UTC, from -23 to 23, written without `+`: Time::from_ts(8)"));
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err((format!("bad zone `{t}` for {name}"), hint()));
    }
    match digits.parse::<i32>() {
        Ok(h) if h <= 23 => Ok(if negative { -i64::from(h) } else { i64::from(h) }),
        _ => Err((format!("zone `{t}` of {name} is out of range"), hint())),
    }
}

#[cfg(test)]
mod catalogue_tests {
    use super::*;

    #[test]
    fn each_row_parses_its_example_and_names_what_it_gives() {
        for (i, row) in PIPES.iter().enumerate() {
            assert!(PIPES[..i].iter().all(|p| p.name != row.name), "{} is named twice", row.name);
            let (name, args) = match row.example.split_once('(') {
                Some((n, a)) => (n, Some(a.strip_suffix(')').expect("an example's arguments close"))),
                None => (row.example, None),
            };
            assert_eq!(name, row.name, "the example of {} uses it", row.name);
            let f = pipe_fn(name, args).unwrap_or_else(|e| panic!("{}: {e:?}", row.example));
            let named = row_of(&f).map(|p| p.name);
            // `Time::to_ts_zone` gives what a `Time::to_ts*` row names.
            if row.name == "Time::to_ts_zone" {
                assert_eq!(named, Some("Time::to_ts_ms"));
            } else {
                assert_eq!(named, Some(row.name), "{} gives {f:?}", row.example);
            }
            let src = format!("name : t\n---\nx = pipe read(a) | {} ;\n", row.example);
            let (rule, diags) = crate::parse::parse(&src);
            assert!(rule.is_some() && diags.is_empty(), "{}: {diags:?}", row.example);
        }
    }

    #[test]
    fn a_misspelt_pipe_is_told_the_nearest_with_its_example() {
        let (msg, hint) = pipe_fn("substrr", Some("1")).unwrap_err();
        assert_eq!(msg, "unknown pipe function `substrr`: did you mean `substr`, as in `substr(-3, 2)`?");
        assert!(hint.is_some_and(|h| h.contains("skip_empty, starts_with and map_to")));
        assert!(pipe_fn("intranet_replace", None).unwrap_err().0.contains("not supported"));
    }
}
