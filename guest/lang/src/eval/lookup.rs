//! Lookups: a statement's parameters and helpers bound, the host asked, its
//! row written to the targets, and the trace told.

use super::*;

impl<'a, 'h> Ctx<'a, 'h> {
    pub(super) fn param(&mut self, p: &'a Param) -> Cell {
        match p {
            Param::Access(a) => match self.access_value(a) {
                Some(v) => cell_of(&v),
                None => Cell::Null,
            },
            Param::Now(f) => {
                let t = self.local_now();
                match f {
                    NowFn::Time => cell_of(&Value::Time(t)),
                    NowFn::Date => Cell::Integer(time::date_digit(t)),
                    NowFn::Hour => Cell::Integer(time::hour_digit(t)),
                }
            }
            Param::Const(c) => cell_of(&const_value(c)),
            // Up to three arguments (every helper's) on the stack, not in a
            // vector of their own.
            Param::Helper(h, args) if args.len() <= 3 => {
                let mut cells = [Cell::Null, Cell::Null, Cell::Null];
                for (i, a) in args.iter().enumerate() {
                    cells[i] = self.helper_arg(*h, i, a);
                }
                pipes::helper(*h, &cells[..args.len()])
            }
            Param::Helper(h, args) => {
                let args: Vec<Cell> = args.iter().enumerate().map(|(i, a)| self.helper_arg(*h, i, a)).collect();
                pipes::helper(*h, &args)
            }
        }
    }

    /// Argument `i` of helper `h`. An IPv4 field that a helper reads as an
    /// address goes as its integer, which the helper takes as it is,
    /// instead of as text that it would parse back.
    pub(super) fn helper_arg(&mut self, h: Helper, i: usize, a: &'a Param) -> Cell {
        let address = matches!(h, Helper::Ip4Int | Helper::Ip4Between) || (h == Helper::Cidr4Contains && i == 0);
        match (address, a) {
            (true, Param::Access(acc)) => match self.access_value(acc) {
                Some(Value::Ip(IpAddr::V4(v4))) => Cell::Integer(i64::from(u32::from(v4))),
                Some(other) => cell_of(&other),
                None => Cell::Null,
            },
            _ => self.param(a),
        }
    }

    /// A SQL lookup statement (spec §8.11.3).
    pub(super) fn lookup(&mut self, targets: &'a [Target], l: &'a Lookup) {
        // Up to four parameters on the stack, not in a vector of their own.
        const ON_STACK: usize = 4;
        let mut stack = [Cell::Null, Cell::Null, Cell::Null, Cell::Null];
        let mut heap;
        let params: &mut [Cell] = if l.params.len() <= ON_STACK {
            &mut stack[..l.params.len()]
        } else {
            heap = alloc::vec![Cell::Null; l.params.len()];
            &mut heap
        };
        for (i, p) in l.params.iter().enumerate() {
            // A parameter that repeats an earlier one is that one's value
            // (a trace notes each read, so it evaluates them all).
            let earlier = l.repeats.get(i).map(|&j| j as usize).filter(|&j| j < i && self.trace.is_none());
            params[i] = match earlier {
                Some(j) => params[j].clone(),
                None => self.param(p),
            };
        }
        let params: &[Cell] = params;
        // Delta §13.5: when every parameter read from the record is null, the
        // query is not sent. Literals and built-ins are text of the
        // statement in the reference, not parameters, so they do not count.
        let mut read = l.params.iter().zip(params).filter(|(p, _)| matches!(p, Param::Access(_) | Param::Helper(..)));
        if read.clone().next().is_some() && read.all(|(_, c)| matches!(c, Cell::Null)) {
            self.note_lookup(
                targets,
                l,
                params,
                "not sent",
                Ok(None),
                "every parameter read from the record is null, so the lookup was not sent",
            );
            return;
        }
        let answer = self.host.query(l.statement, params);
        if self.trace.is_some() {
            let layer = self.host.last_layer();
            let shown = match &answer {
                Ok(row) => Ok(row.as_deref()),
                Err(e) => Err(e.message.as_str()),
            };
            let why = match &answer {
                Ok(None) => "the lookup found no row",
                Err(e) if e.fatal => "the lookup failed, and the host's policy fails the record",
                _ => "the lookup failed",
            };
            self.note_lookup(targets, l, params, layer, shown, why);
        }
        let row = match answer {
            Ok(Some(row)) => row,
            Ok(None) => return,
            Err(e) => {
                if e.fatal {
                    self.fatal = Some(EvalError::Lookup(e.message));
                }
                return;
            }
        };
        let stmt = &self.program.statements[l.statement as usize];
        let mut star_names: Option<Vec<String>> = None;
        for (i, (t, cell)) in targets.iter().zip(row).enumerate() {
            let name: Cow<'a, str> = if t.name == "_" {
                if stmt.columns.len() == 1 && stmt.columns[0] == "*" {
                    if star_names.is_none() {
                        star_names = Some(self.host.columns(l.statement).unwrap_or_default());
                    }
                    match star_names.as_ref().and_then(|n| n.get(i)) {
                        Some(n) => Cow::Owned(n.clone()),
                        None => Cow::Borrowed("_"),
                    }
                } else {
                    Cow::Borrowed(stmt.columns.get(i).map(String::as_str).unwrap_or("_"))
                }
            } else {
                Cow::Borrowed(t.name.as_str())
            };
            // Delta §4: a NULL column stores no field, typed target or not.
            let v = match cell {
                Cell::Null => {
                    self.note(|| Event::NotWritten { target: String::from(&*name), why: "the column is NULL".into() });
                    continue;
                }
                cell if self.trace.is_none() => {
                    let sym = if t.name == "_" { self.program.resolve(&name) } else { t.sym };
                    self.push_converted(Field { name, value: value_of_cell(cell), sym }, &t.ty);
                    continue;
                }
                cell => convert(value_of_cell(cell), &t.ty),
            };
            if matches!(v, Value::Null) {
                self.note(|| Event::NotWritten {
                    target: String::from(&*name),
                    why: alloc::format!("the column's value does not convert to {}", type_name(&t.ty)),
                });
                continue;
            }
            if self.trace.is_some() {
                let value = describe(&v);
                self.note(|| Event::Write { target: String::from(&*name), value });
            }
            let sym = if t.name == "_" { self.program.resolve(&name) } else { t.sym };
            self.push_dst(Field { name, value: v, sym });
        }
    }
}

impl<'a, 'h> Ctx<'a, 'h> {
    /// Notes a lookup: its parameters, who answered and what (`answer`:
    /// the row, no row, or the error), and, when it gave no row, `why` its
    /// targets got nothing.
    #[inline(never)]
    pub(super) fn note_lookup(
        &mut self,
        targets: &[Target],
        l: &Lookup,
        params: &[Cell],
        layer: &str,
        answer: Result<Option<&[Cell]>, &str>,
        why: &str,
    ) {
        let Some(t) = self.trace.as_deref_mut() else { return };
        let (row, error) = match answer {
            Ok(row) => (row.map(|r| r.iter().map(describe_cell).collect()), None),
            Err(e) => (None, Some(crate::trace::cut(e.into()))),
        };
        let empty = row.is_none();
        t.push(Event::Lookup {
            statement: l.statement,
            params: params.iter().map(describe_cell).collect(),
            layer: layer.into(),
            row,
            error,
            micros: None,
        });
        if empty {
            for target in targets {
                t.push(Event::NotWritten { target: target.name.clone(), why: why.into() });
            }
        }
    }
}
