//! Compile diagnostics: a message, the byte span it points at, an optional
//! hint, and the line/column that a rule author reads.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

/// A byte range of the rule source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start: start as u32, end: end.max(start) as u32 }
    }
}

/// One compile error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub message: String,
    pub span: Span,
    pub hint: Option<String>,
    /// 1-based line and column (in characters) of `span.start`.
    pub line: u32,
    pub column: u32,
}

impl Diagnostic {
    pub fn new(message: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic { message: message.into(), span, hint: None, line: 0, column: 0 }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    /// Fills in `line` and `column` from the source.
    pub fn locate(&mut self, src: &str) {
        let (line, column) = line_col(src, self.span.start as usize);
        self.line = line;
        self.column = column;
    }

    /// `file:line:col: error: message`, the source line and a caret.
    pub fn render(&self, file: &str, src: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{file}:{}:{}: error: {}", self.line, self.column, self.message);
        if let Some(text) = src.lines().nth(self.line.saturating_sub(1) as usize) {
            // The line, its padding up to the column, and the caret's width.
            let (shown, pad, width): (String, String, usize) = if text.len() > MAX_SHOWN_LINE {
                // A very long line (a generated rule, a minified one): the
                // part around the error, not the line, which could be megabytes.
                let chars: Vec<char> = text.chars().collect();
                let col = (self.column as usize).saturating_sub(1).min(chars.len());
                let from = col.saturating_sub(EXCERPT);
                let to = (col + EXCERPT).min(chars.len());
                let window: String = chars[from..to].iter().collect();
                let lead = if from > 0 { "… " } else { "" };
                let tail = if to < chars.len() { " …" } else { "" };
                let width = (self.span.end.saturating_sub(self.span.start) as usize).clamp(1, to.saturating_sub(col).max(1));
                (alloc::format!("{lead}{window}{tail}"), " ".repeat(lead.chars().count() + (col - from)), width)
            } else {
                let width = text
                    .get((self.column as usize).saturating_sub(1)..)
                    .map(|_| {
                        let start = self.span.start as usize;
                        let end = (self.span.end as usize).min(start + text.len());
                        src.get(start..end).map(|s| s.chars().take_while(|c| *c != '\n').count()).unwrap_or(1)
                    })
                    .unwrap_or(1)
                    .max(1);
                let pad = text
                    .chars()
                    .take((self.column as usize).saturating_sub(1))
                    .map(|c| if c == '\t' { '\t' } else { ' ' })
                    .collect();
                (text.into(), pad, width)
            };
            let gutter = alloc::format!("{}", self.line);
            let _ = writeln!(out, "{:w$} |", "", w = gutter.len());
            let _ = writeln!(out, "{gutter} | {shown}");
            let _ = writeln!(out, "{:w$} | {pad}{}", "", "^".repeat(width), w = gutter.len());
        }
        if let Some(hint) = &self.hint {
            let _ = writeln!(out, "  = hint: {hint}");
        }
        out
    }
}

/// Source lines longer than this many bytes are shown as an excerpt.
const MAX_SHOWN_LINE: usize = 400;
/// Characters shown each side of the error in an excerpt.
const EXCERPT: usize = 60;

/// 1-based line and character column of a byte offset.
pub fn line_col(src: &str, offset: usize) -> (u32, u32) {
    let offset = offset.min(src.len());
    let before = &src[..floor_char(src, offset)];
    let line = before.matches('\n').count() as u32 + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = before[line_start..].chars().count() as u32 + 1;
    (line, column)
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Several diagnostics, rendered one after another.
pub fn render_all(diags: &[Diagnostic], file: &str, src: &str) -> String {
    let mut out = String::new();
    for d in diags {
        out.push_str(&d.render(file, src));
    }
    out
}

pub type Diagnostics = Vec<Diagnostic>;
