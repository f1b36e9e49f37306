//! Bounds on what one rule file may ask of the compiler.
//!
//! Rules come from people, and sometimes from generators or attackers: each
//! limit turns an input that would exhaust the stack, memory or time of
//! `omlet build` (or of the guest running the result) into a compile error
//! with a position. The defaults are far above what real rules use.

/// Compile limits; [`Limits::default`] is what [`crate::compile()`] uses.
///
/// Change a field of the default to tighten or relax one limit:
///
/// ```
/// let mut limits = omlet_lang::Limits::default();
/// limits.max_depth = 16;
/// let src = "name : t\n---\nx = object { a = object { b = chars(1) } } ;\n";
/// let program = omlet_lang::compile_with_limits(&[omlet_lang::Source { file: "t.oml", text: src }], (0, 0), limits);
/// assert!(program.is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// How deeply expressions may nest: objects in objects, match arms and
    /// default bodies holding further expressions, SQL groups, `not` and
    /// function calls. Also the deepest value a static symbol may hold.
    ///
    /// Default 64. The parser, the checker and the evaluator recurse once
    /// (or a few times) per level, so this bounds their stack: at 64 levels
    /// the deepest rule compiles and evaluates in well under 1 MiB of stack
    /// even in an unoptimised build (the guest's wasm stack is 1 MiB, a
    /// native main thread's 8 MiB), while hand-written rules nest a handful
    /// of levels. 64 levels of objects plus a 64-deep static value also stay
    /// within the 128 levels a record frame carries ([`crate::frame::MAX_DEPTH`]).
    pub max_depth: u32,
    /// The longest `rule :` pattern, in bytes. Default 1024: rule paths are
    /// short, and the overlap check between two models' patterns costs
    /// time and memory proportional to the product of their lengths (about
    /// one million steps and 128 KiB at the limit).
    pub max_pattern_bytes: usize,
    /// The largest rule file, in bytes. Default 1 MiB, some hundred times
    /// the largest real rules; the compiler's work is close to linear in the
    /// source, and this keeps what is not (pairwise checks, copies) small.
    pub max_source_bytes: usize,
    /// How much a file may copy while it is lowered, in bytes of rule text:
    /// an object member with several names (`a, b = …`) gets its own copy
    /// of the expression per name, a static symbol's value is copied where
    /// it is used, and an implicit key (`x = read()`) copies the target's
    /// name. Nested, such copies multiply (two names per level double the
    /// program at each level). Default 4 MiB, four times the largest source.
    pub max_expansion_bytes: usize,
    /// How much work the overlap check of a whole rule set may do: the sum,
    /// over every pair of patterns of two enabled models that it compares,
    /// of `(len_a + 1) * (len_b + 1)` (the cells of that pair's table, see
    /// [`crate::route::overlap`]). Unlike the other limits this one applies
    /// to the set, not to one file: the number of pairs grows with the
    /// square of the number of patterns, and two 1 MiB files of 1 KiB
    /// patterns would otherwise take hours. Past it the set fails to
    /// compile, at the pattern where the budget runs out.
    ///
    /// Default 2^26 (about 67 million cells): measured at 2–4 seconds in an
    /// unoptimised build and 0.1–0.5 seconds in an optimised one, whatever
    /// the pattern lengths. That is some 64 pairs of 1 KiB patterns, or
    /// 70 000 pairs of 30-byte patterns (about 370 such patterns spread over
    /// models that all meet each other).
    pub max_overlap_work: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 64,
            max_pattern_bytes: 1024,
            max_source_bytes: 1 << 20,
            max_expansion_bytes: 4 << 20,
            max_overlap_work: 1 << 26,
        }
    }
}
