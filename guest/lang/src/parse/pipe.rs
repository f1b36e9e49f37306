//! Pipes: `pipe src | f | g(args)` and the pipe function catalogue.

use super::*;

impl<'s> Parser<'s> {
    pub(super) fn pipe_tail(&mut self, source: Expr, start: usize) -> PResult<Expr> {
        let mut fns = Vec::new();
        while self.eat(b'|') {
            fns.push(self.pipe_fn()?);
        }
        if fns.is_empty() {
            let span = self.here();
            return self.err("expected `|` and a pipe function", span);
        }
        self.done(SyntaxKind::Pipe, start);
        Ok(Expr::Pipe { source: Box::new(source), fns, span: Span::new(start, self.pos) })
    }

    /// Reads `name` and, if present, the raw text of `(args)`.
    pub(super) fn call_head(&mut self) -> (String, Option<(String, Span)>, Span) {
        self.ws();
        let start = self.pos;
        let name = self.take_while(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':').to_string();
        let mut args = None;
        if self.peek_after_ws() == b'(' {
            self.ws();
            self.bump();
            let a_start = self.pos;
            self.pos = closing_paren(self.src, self.pos, true).unwrap_or(self.src.len());
            let text = self.src[a_start..self.pos.min(self.src.len())].to_string();
            let span = Span::new(a_start, self.pos);
            if !self.at_end() {
                self.bump();
            }
            args = Some((text, span));
        }
        (name, args, Span::new(start, self.pos))
    }

    pub(super) fn pipe_fn(&mut self) -> PResult<PipeFn> {
        let (name, args, span) = self.call_head();
        match pipe_fn(&name, args.as_ref().map(|(a, _)| a.as_str())) {
            Ok(f) => {
                self.done(SyntaxKind::PipeFn, span.start as usize);
                Ok(f)
            }
            Err((msg, hint)) => {
                let mut d = Diagnostic::new(msg, span);
                if let Some(h) = hint {
                    d = d.with_hint(h);
                }
                self.diags.push(d);
                Err(())
            }
        }
    }
}

/// A pipe function's error: the message and, when known, how to fix it.
pub(super) type FnError = (String, Option<Cow<'static, str>>);

pub(super) fn plain(msg: String) -> FnError {
    (msg, None)
}

pub(super) fn pipe_fn(name: &str, args: Option<&str>) -> Result<PipeFn, FnError> {
    let arg = args.map(str::trim);
    let no_args = |f: PipeFn| -> Result<PipeFn, FnError> {
        match arg {
            None => Ok(f),
            Some(_) => Err(plain(format!("`{name}` takes no arguments; write it without parentheses"))),
        }
    };
    Ok(match name {
        "base64_encode" => no_args(PipeFn::Base64Encode)?,
        "base64_decode" => match arg {
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
        },
        "html_escape" => no_args(PipeFn::HtmlEscape)?,
        "html_unescape" => no_args(PipeFn::HtmlUnescape)?,
        "json_escape" => no_args(PipeFn::JsonEscape)?,
        "json_unescape" => no_args(PipeFn::JsonUnescape)?,
        "str_escape" => no_args(PipeFn::StrEscape)?,
        "Time::to_ts" | "Time::to_ts_ms" | "Time::to_ts_us" | "Time::from_ts" | "Time::from_ts_ms" | "Time::from_ts_us" => {
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
            if name.starts_with("Time::from") { PipeFn::FromTs { zone_hours, unit } } else { PipeFn::ToTs { zone_hours, unit } }
        }
        "Time::to_ts_zone" => {
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
            PipeFn::ToTs { zone_hours, unit }
        }
        "on_fail" => match arg.and_then(quoted) {
            Some(text) => PipeFn::OnFail(text),
            None => {
                return Err((
                    "on_fail takes one quoted text".to_string(),
                    Some(Cow::Borrowed("write on_fail('none'): the text that replaces an ignore or null value")),
                ));
            }
        },
        "intranet_ip" => no_args(PipeFn::IntranetIp)?,
        "intranet_replace" => {
            return Err((
                "`intranet_replace` is not supported: its arguments and behaviour are not verified (OML 1.25 delta §9.5)".into(),
                Some(Cow::Borrowed("classify the address with intranet_ip and choose the value with match")),
            ));
        }
        "lower" => no_args(PipeFn::Lower)?,
        "upper" => no_args(PipeFn::Upper)?,
        "split" => match arg.and_then(quoted).filter(|s| !s.is_empty()) {
            Some(sep) => PipeFn::Split(sep),
            None => {
                return Err((
                    "split takes one quoted, non-empty separator".into(),
                    Some(Cow::Borrowed("write split(',') or split(' | ')")),
                ));
            }
        },
        "substr" => {
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
                (Some(start), None, 1) => PipeFn::Substr { start, len: None },
                (Some(start), Some(Some(n)), 2) => PipeFn::Substr { start, len: Some(n) },
                _ => return Err((format!("bad arguments for substr: `{a}`"), hint())),
            }
        }
        "Time::parse" => {
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
            let format = crate::timefmt::compile(&fmt).map_err(|m| (m, hint()))?;
            let zone_hours = match args.get(1) {
                None => 8,
                Some(z) => zone(name, z)?,
            };
            if args.len() > 2 {
                return Err((format!("Time::parse takes a format and an optional zone, not `{a}`"), hint()));
            }
            PipeFn::TimeParse { format, zone_hours }
        }
        "nth" => {
            let a = arg.unwrap_or("");
            if a.is_empty() || !a.bytes().all(|c| c.is_ascii_digit()) {
                return Err((format!("bad index for nth: `{a}`"), Some(Cow::Borrowed("nth takes a non-negative index: nth(0)"))));
            }
            PipeFn::Nth(a.parse().unwrap_or(u64::MAX))
        }
        "get" => {
            let a = arg.unwrap_or("");
            if a.is_empty() || !a.chars().all(|c| c.is_alphanumeric() || "_/-.".contains(c)) {
                return Err(plain(format!("bad path for get: `{a}`")));
            }
            PipeFn::Get(a.split('/').filter(|s| !s.is_empty()).map(String::from).collect())
        }
        "path" => PipeFn::Path(match arg {
            None | Some("") => None,
            Some("name") => Some(PathPart::Name),
            Some("path") => Some(PathPart::Path),
            Some(o) => return Err((format!("unknown path part `{o}`"), Some(Cow::Borrowed("path(name) or path(path)")))),
        }),
        "url" => PipeFn::Url(match arg {
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
        }),
        "ip4_to_int" => no_args(PipeFn::Ip4ToInt)?,
        "ip_to_biguint" => no_args(PipeFn::IpToBigUint)?,
        "to_json" => no_args(PipeFn::ToJson)?,
        "to_str" => no_args(PipeFn::ToStr)?,
        "skip_empty" => no_args(PipeFn::SkipEmpty)?,
        "starts_with" => PipeFn::StartsWith(quoted(arg.unwrap_or("")).ok_or_else(|| {
            (String::from("starts_with needs a quoted string"), Some(Cow::Borrowed("write starts_with('prefix')")))
        })?),
        "map_to" => {
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
            PipeFn::MapTo(c)
        }
        "extract_main_word" | "extract_subject_object" => {
            return Err((
                format!("`{name}` is not supported: an EXTENDED NLP pipe that the spec leaves unspecified"),
                Some(Cow::Borrowed(
                    "omlet has no NLP pipes; extract the words in the pipeline before the rule, or with match and regex_match",
                )),
            ));
        }
        "str_unescape" | "sxf_get" | "digit_range" | "regex_match" | "ends_with" => {
            return Err(plain(format!("`{name}` is not a pipe function")));
        }
        _ => {
            let catalogue = Some(Cow::Owned(pipe_catalogue()));
            return Err(match nearest(name, PIPE_FNS) {
                Some(near) => (format!("unknown pipe function `{name}`: did you mean `{near}`?"), catalogue),
                None => (format!("unknown pipe function `{name}`"), catalogue),
            });
        }
    })
}

/// The pipe functions (spec §9), for suggestions.
pub(super) const PIPE_FNS: &[&str] = &[
    "base64_encode",
    "base64_decode",
    "html_escape",
    "html_unescape",
    "json_escape",
    "json_unescape",
    "str_escape",
    "Time::to_ts",
    "Time::to_ts_ms",
    "Time::to_ts_us",
    "Time::to_ts_zone",
    "Time::from_ts",
    "Time::from_ts_ms",
    "Time::from_ts_us",
    "Time::parse",
    "on_fail",
    "intranet_ip",
    "lower",
    "upper",
    "split",
    "substr",
    "nth",
    "get",
    "path",
    "url",
    "ip4_to_int",
    "ip_to_biguint",
    "to_json",
    "to_str",
    "skip_empty",
    "starts_with",
    "map_to",
];

/// The hint of an unknown pipe function: every name of [`PIPE_FNS`].
pub(super) fn pipe_catalogue() -> String {
    let (last, rest) = PIPE_FNS.split_last().unwrap_or((&"", &[]));
    format!("the pipe functions are {} and {last} (docs/language.md §7)", rest.join(", "))
}

/// A zone argument of the `Time::` functions (delta §6.1): whole hours east
/// of UTC, `-23` to `23`, an optional `-` (blanks may follow it), no `+`.
pub(super) fn zone(name: &str, arg: &str) -> Result<i64, FnError> {
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
