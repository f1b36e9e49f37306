//! Pipes: `pipe src | f | g(args)`, each function read through the catalogue
//! (`crate::pipes::catalogue`).

use super::*;
use crate::pipes::catalogue::pipe_fn;

impl<'s> Parser<'s> {
    pub(super) fn pipe_tail(&mut self, source: Expr, start: usize) -> PResult<Expr> {
        let (mut fns, mut fn_spans) = (Vec::new(), Vec::new());
        while self.eat(b'|') {
            let (f, span) = self.pipe_fn()?;
            fns.push(f);
            fn_spans.push(span);
        }
        if fns.is_empty() {
            let span = self.here();
            return self.err("expected `|` and a pipe function", span);
        }
        self.done(SyntaxKind::Pipe, start);
        Ok(Expr::Pipe { source: Box::new(source), fns, span: Span::new(start, self.pos), fn_spans })
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

    /// One pipe function, and where it is written.
    pub(super) fn pipe_fn(&mut self) -> PResult<(PipeFn, Span)> {
        let (name, args, span) = self.call_head();
        match pipe_fn(&name, args.as_ref().map(|(a, _)| a.as_str())) {
            Ok(f) => {
                self.done(SyntaxKind::PipeFn, span.start as usize);
                Ok((f, span))
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
