//! `Spare::give_back` forgets the output fields (and object or array
//! members) that own nothing, instead of dropping them: this counts the
//! test thread's live allocations to show that everything a field owns is
//! still freed, at any depth. A forgotten field that owned memory would
//! leave the count above where it started.

use std::alloc::{GlobalAlloc, Layout, System};
use std::borrow::Cow;
use std::cell::Cell;

use omlet_lang::eval::Spare;
use omlet_lang::value::{Field, Value};

struct Counting;

thread_local! {
    /// Blocks allocated and not yet freed by this thread.
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn count(by: isize) {
    // `try_with`: the counter may be gone while the thread ends.
    let _ = LIVE.try_with(|n| n.set(n.get() + by));
}

// SAFETY: every call goes to `System` unchanged; only a counter is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(1);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-1);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn live() -> isize {
    LIVE.with(Cell::get)
}

fn owned(s: &str) -> Value<'static> {
    Value::Chars(Cow::Owned(s.to_string()))
}

/// Output `i` of five whose fields own nothing, own memory, or hold
/// objects and arrays of both kinds of members, nested.
fn output(i: usize) -> Vec<Field<'static>> {
    let mixed = || {
        Value::Obj(Box::new(vec![
            Field::new("a", Value::Digit(1)),
            Field::new("b", owned("y")),
            Field::new(String::from("c"), Value::Null),
            Field::new("d", Value::Array(Box::new(vec![Field::new("0", owned("z")), Field::new("1", Value::Bool(true))]))),
            Field::new("e", Value::Chars(Cow::Borrowed("plain"))),
        ]))
    };
    match i {
        0 => vec![Field::new("a", Value::Digit(1)), Field::new("b", Value::Chars(Cow::Borrowed("x")))],
        1 => vec![Field::new("a", owned("x")), Field::new(String::from("b"), Value::Float(1.5))],
        2 => vec![Field::new("request", mixed()), Field::new("status", Value::Digit(200))],
        3 => vec![Field::new("list", Value::Array(Box::new(vec![Field::new("0", mixed()), Field::new("1", Value::Digit(2))])))],
        _ => vec![Field::new("empty", Value::Obj(Box::default())), Field::new("big", Value::BigInt(Cow::Owned("1".repeat(30))))],
    }
}

#[test]
fn everything_an_output_owns_is_freed() {
    for i in 0..5 {
        let before = live();
        let mut spare = Spare::new();
        let mut fields = spare.fields();
        fields.extend(output(i));
        assert!(live() > before, "output {i}: the counter sees the allocations");
        spare.give_back(fields);
        drop(spare);
        assert_eq!(live(), before, "output {i}: blocks left after give_back");
    }
}
