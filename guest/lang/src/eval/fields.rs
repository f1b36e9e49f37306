//! Finding fields: `read` and `take` of one name through the per-record
//! table of positions or the index, and batch statements (`pattern* = take()`).

use super::*;

impl<'a, 'h> Ctx<'a, 'h> {
    /// Finds `a`'s key for `read` or `take`. Both look at the first field
    /// of that name in dst, then at the first one left in src. `read`
    /// returns the first it finds. `take` (delta §3) removes both, and
    /// returns dst's, or else src's. Names the program knows compare by
    /// slot. (An `option:` name goes to [`Self::find_slow`] directly.)
    ///
    /// `a.fresh` says that no field of that name can be in dst yet
    /// ([`crate::ir::Access::fresh`]): dst is not searched.
    ///
    /// It takes the access whole: simpler for its callers (measured, no
    /// faster or slower than its parts). Its read with [`Positions`] is
    /// [`Self::peek`]'s walk again, kept apart: a version where `peek`
    /// served both (and the lookup's and helpers' cells shared one layout)
    /// measured 1.5–2 % slower on the nginx rule (5 of 6 alternated pairs).
    #[inline]
    pub(super) fn find(&mut self, a: &Access) -> Option<Field<'a>> {
        // The common case, small enough to inline into its callers: a name
        // the program knows in a record too small for the index. The same
        // rules as below, without the index's branches (`fresh` applied in
        // `find_slow` alone instead: 1.5 % slower on the nginx rule, in 4 of
        // 4 alternated pairs of profile_nginx).
        let (take, sym) = (a.take, a.key_sym);
        if sym != NO_SYM && self.at.valid {
            let in_dst = if a.fresh { NONE } else { self.at.of(&self.at.dst, sym) };
            let in_src = self.at.of(&self.at.src, sym);
            if !take {
                return match (self.dst.get(in_dst as usize), self.src.get(in_src as usize)) {
                    (Some(f), _) => Some(f.clone()),
                    (None, Some(f)) => f.clone(),
                    (None, None) => None,
                };
            }
            let from_src = self.src.get_mut(in_src as usize).and_then(Option::take);
            return if (in_dst as usize) < self.dst.len() { Some(self.take_dst(in_dst as usize)) } else { from_src };
        }
        if sym != NO_SYM && self.index.is_none() && self.src.len() + self.dst.len() <= INDEX_FROM {
            let in_dst = if a.fresh { None } else { self.dst.iter().position(|f| f.sym == sym) };
            if !take {
                return match in_dst {
                    Some(i) => Some(self.dst[i].clone()),
                    None => self.src.iter().flatten().find(|f| f.sym == sym).cloned(),
                };
            }
            let from_src = self.src.iter_mut().find(|f| matches!(f, Some(f) if f.sym == sym)).and_then(Option::take);
            return match in_dst {
                Some(i) => Some(self.take_dst(i)),
                None => from_src,
            };
        }
        self.find_slow(take, &a.key, sym, false)
    }

    /// [`Self::find`] in general: with the index, names without a slot, and
    /// `option:` names (`skip_empty`: an empty field is neither returned
    /// nor removed).
    #[inline(never)]
    pub(super) fn find_slow(&mut self, take: bool, name: &str, sym: u32, skip_empty: bool) -> Option<Field<'a>> {
        self.ensure_index();
        let hit = |f: &Field<'_>| if sym != NO_SYM { f.sym == sym } else { f.name == name };
        // With an index, the slot's row; names without a slot are scanned.
        let slot = match &self.index {
            Some(ix) if sym != NO_SYM && (sym as usize) < ix.dst_first.len() => Some(sym as usize),
            _ => None,
        };
        let in_dst = match (slot, &self.index) {
            (Some(s), Some(ix)) => Some(ix.dst_first[s] as usize).filter(|&i| i < self.dst.len()),
            _ => self.dst.iter().position(hit),
        }
        .filter(|&i| !(skip_empty && self.dst[i].value.is_empty()));
        if !take && let Some(i) = in_dst {
            return Some(self.dst[i].clone());
        }
        let in_src = match (slot, &mut self.index) {
            (Some(s), Some(ix)) => {
                let mut i = ix.src_head[s];
                while i != NONE && self.src[i as usize].is_none() {
                    i = ix.src_next[i as usize];
                }
                ix.src_head[s] = i;
                (i != NONE).then_some(i as usize)
            }
            _ => self.src.iter().position(|f| matches!(f, Some(f) if hit(f))),
        }
        .filter(|&i| !(skip_empty && self.src[i].as_ref().is_some_and(|f| f.value.is_empty())));
        if !take {
            return self.src[in_src?].clone();
        }
        let from_src = in_src.and_then(|i| self.src[i].take());
        match in_dst {
            Some(i) => {
                // Positions after `i` move down: the index is rebuilt when
                // next needed. Taking from the output is rare (a rule moving
                // its own field), so the O(fields) rebuild is too.
                self.index = None;
                Some(self.take_dst(i))
            }
            None => from_src,
        }
    }

    /// `read(…)` / `take(…)` with options and default (spec §8.3).
    pub(super) fn access(&mut self, a: &'a Access) -> Option<Field<'a>> {
        if self.trace.is_some() {
            return self.access_traced(a);
        }
        if let Some(f) = self.find(a) {
            return Some(f);
        }
        for (i, opt) in a.options.iter().enumerate() {
            let sym = a.option_syms.get(i).copied().unwrap_or(NO_SYM);
            if let Some(f) = self.find_slow(a.take, opt, sym, true) {
                return Some(f);
            }
        }
        let d = a.default.as_ref()?;
        let v = self.expr(d, &a.key)?;
        Some(Field::new(a.key.as_str(), v))
    }

    /// [`Self::access`], noting where the field came from.
    #[inline(never)]
    pub(super) fn access_traced(&mut self, a: &'a Access) -> Option<Field<'a>> {
        let read = |key: &str, from: &str, value: Option<&Value<'_>>| Event::Read {
            key: key.into(),
            take: a.take,
            from: from.into(),
            value: value.map(describe),
        };
        let in_output = |ctx: &Self, key: &str| ctx.dst.iter().any(|f| f.name == key);
        let out = in_output(self, &a.key);
        if let Some(f) = self.find(a) {
            self.note(|| read(&a.key, if out { "output" } else { "input" }, Some(&f.value)));
            if a.take
                && let Some(t) = self.trace.as_deref_mut()
            {
                t.took(&a.key);
            }
            return Some(f);
        }
        for (i, opt) in a.options.iter().enumerate() {
            let sym = a.option_syms.get(i).copied().unwrap_or(NO_SYM);
            if let Some(f) = self.find_slow(a.take, opt, sym, true) {
                self.note(|| read(&a.key, &alloc::format!("option {opt}"), Some(&f.value)));
                if a.take
                    && let Some(t) = self.trace.as_deref_mut()
                {
                    t.took(opt);
                }
                return Some(f);
            }
        }
        let absent = self.trace.as_deref().map(|t| t.absent(&a.key)).unwrap_or_default();
        let Some(d) = a.default.as_ref() else {
            self.note(|| read(&a.key, &absent, None));
            return None;
        };
        let v = self.expr(d, &a.key);
        let from = if absent == "absent" { String::from("default") } else { alloc::format!("default, the field being {absent}") };
        self.note(|| read(&a.key, &from, v.as_ref()));
        Some(Field::new(a.key.as_str(), v?))
    }

    // ----- statements ----------------------------------------------------------

    /// `pattern* = read()/take()` (spec §8.8): moves matching fields to dst,
    /// but not over a field of the same name already there.
    pub(super) fn batch(&mut self, pattern: &str, ty: &Type) {
        self.ensure_index();
        let before = self.dst.len();
        let every = pattern == "*";
        for i in 0..self.src.len() {
            let Some(f) = &self.src[i] else { continue };
            if !every && !wildcard(pattern, f.name.trim()) {
                continue;
            }
            if let Type::Kind(k) = ty
                && f.value.kind() != *k
            {
                continue;
            }
            let in_dst = match &self.index {
                _ if f.sym != NO_SYM && self.at.valid => self.at.of(&self.at.dst, f.sym) != NONE,
                // Every slot is in the table once the index exists.
                Some(ix) if f.sym != NO_SYM => ix.dst_first[f.sym as usize] != NONE,
                Some(ix) => ix.dst_names.contains(&f.name),
                // A name without a slot matches only a name without one.
                None if f.sym == NO_SYM && self.dst_unnamed == 0 => false,
                None => self.dst.iter().any(|d| d.same_name(f)),
            };
            if in_dst {
                continue;
            }
            if let Some(f) = self.src[i].take() {
                self.push_dst(f);
            }
        }
        let moved = self.dst.len() - before;
        let fields = if moved == 1 { "field" } else { "fields" };
        self.note(|| Event::Write { target: pattern.into(), value: alloc::format!("{moved} {fields} moved") });
    }
}

impl<'a> Index<'a> {
    /// Records that `dst[at]` is `f`.
    pub(super) fn note_dst(&mut self, f: &Field<'a>, at: usize) {
        if f.sym == NO_SYM {
            self.dst_names.insert(f.name.clone());
        } else if let Some(first) = self.dst_first.get_mut(f.sym as usize)
            && *first == NONE
        {
            *first = at as u32;
        }
    }
}
