//! Short copies in the guest's own code, not through the engine.
//!
//! The guest is built with wasm's bulk memory, so LLVM writes every copy of
//! a length it does not know (`copy_from_slice`, a `Vec` growing, a string
//! pushed) as `memory.copy`. wasmtime compiles `memory.copy` into a call out
//! of the guest's code to a host function that checks the bounds and calls
//! libc's `memmove`: right for kilobytes, but most of the guest's copies
//! are a field name or a short value, where the trip costs more than the
//! copy. On the pure rule's one-record call the trip and `memmove` were
//! about 15% of the whole call.
//!
//! [`lower_short_copies`] adds one function to the module, `copy(dst, src,
//! n)`, and makes every `memory.copy` a call of it. It copies up to 32 bytes
//! with loads and stores (all loads before the first store, so overlapping
//! ranges copy as `memory.copy` copies them) and hands longer ones to
//! `memory.copy`. A copy out of bounds still traps, as `memory.copy` would
//! (a short one may have stored part of its bytes first; a trap ends the
//! instance either way).

use wasm_encoder::{CodeSection, Module, RawSection, SectionId};
use wasmparser::{Operator, Parser, Payload, TypeRef};

use crate::{Edit, PassError, edit_body, leb128, push_with_entry};

type Result<T> = std::result::Result<T, PassError>;

/// Copies longer than this go to `memory.copy`.
const SHORT: i32 = 32;

/// `core` with every `memory.copy` of memory 0 a call of a function that
/// copies short lengths itself.
pub fn lower_short_copies(core: &[u8]) -> Result<Vec<u8>> {
    // Pass 1: the counts the new type and function get their indices from.
    let (mut types, mut imported_funcs, mut funcs) = (0u32, 0u32, 0u32);
    for payload in Parser::new(0).parse_all(core) {
        match payload? {
            Payload::TypeSection(r) => {
                for group in r {
                    types += group?.types().len() as u32;
                }
            }
            Payload::ImportSection(r) => {
                for imports in r {
                    for import in imports? {
                        if matches!(import?.1.ty, TypeRef::Func(_) | TypeRef::FuncExact(_)) {
                            imported_funcs += 1;
                        }
                    }
                }
            }
            Payload::FunctionSection(r) => funcs = r.count(),
            _ => {}
        }
    }
    let copy_type = types;
    let copy_func = imported_funcs + funcs;
    let mut call = vec![0x10];
    leb128(&mut call, copy_func);

    let mut out = Module::new();
    let mut code: Option<CodeSection> = None;
    for payload in Parser::new(0).parse_all(core) {
        let payload = payload?;
        match &payload {
            Payload::TypeSection(r) => {
                // (i32, i32, i32) -> (), in a rec group of its own.
                push_with_entry(&mut out, core, SectionId::Type, r, &[0x60, 0x03, 0x7f, 0x7f, 0x7f, 0x00])?;
            }
            Payload::FunctionSection(r) => {
                let mut entry = Vec::new();
                leb128(&mut entry, copy_type);
                push_with_entry(&mut out, core, SectionId::Function, r, &entry)?;
            }
            Payload::CodeSectionStart { .. } => code = Some(CodeSection::new()),
            Payload::CodeSectionEntry(body) => {
                let bytes = edit_body(core, body, |op| {
                    matches!(op, Operator::MemoryCopy { dst_mem: 0, src_mem: 0 }).then_some(Edit::Replace(&call))
                })?;
                code.as_mut().ok_or_else(|| PassError("a function body outside the code section".into()))?.raw(&bytes);
            }
            other => {
                if let Some(mut section) = code.take() {
                    section.raw(&copy_body());
                    out.section(&section);
                }
                if let Some((id, range)) = other.as_section() {
                    out.section(&RawSection { id, data: &core[range] });
                }
            }
        }
    }
    if let Some(mut section) = code.take() {
        section.raw(&copy_body());
        out.section(&section);
    }
    Ok(out.finish())
}

/// The body of `copy(dst, src, n)`.
fn copy_body() -> Vec<u8> {
    use wasm_encoder::{BlockType, Function, Instruction as I, MemArg, ValType};
    let (dst, src, n) = (0, 1, 2);
    // Locals: the loaded values.
    let (a, b, c, d) = (3, 4, 5, 6);
    let mut f = Function::new([(4, ValType::I64)]);
    let arg = |offset: u64, align: u32| MemArg { offset, align, memory_index: 0 };
    let mut ins = |i: I<'_>| {
        f.instruction(&i);
    };
    // if n > SHORT { memory.copy; return }
    for i in [
        I::LocalGet(n),
        I::I32Const(SHORT),
        I::I32GtU,
        I::If(BlockType::Empty),
        I::LocalGet(dst),
        I::LocalGet(src),
        I::LocalGet(n),
        I::MemoryCopy { src_mem: 0, dst_mem: 0 },
        I::Return,
        I::End,
    ] {
        ins(i);
    }
    // Lengths 17..=32: four 8-byte words, at 0, 8, n-16 and n-8.
    // Lengths 8..=16: two, at 0 and n-8. 4..=7: two 4-byte words; 2..=3: two
    // 2-byte ones; 1: a byte. Every word is loaded before any is stored.
    let at_end = |back: i32| [I::LocalGet(src), I::LocalGet(n), I::I32Add, I::I32Const(-back), I::I32Add];
    let dst_end = |back: i32| [I::LocalGet(dst), I::LocalGet(n), I::I32Add, I::I32Const(-back), I::I32Add];
    // n > 16
    ins(I::LocalGet(n));
    ins(I::I32Const(16));
    ins(I::I32GtU);
    ins(I::If(BlockType::Empty));
    ins(I::LocalGet(src));
    ins(I::I64Load(arg(0, 0)));
    ins(I::LocalSet(a));
    ins(I::LocalGet(src));
    ins(I::I64Load(arg(8, 0)));
    ins(I::LocalSet(b));
    at_end(16).into_iter().for_each(&mut ins);
    ins(I::I64Load(arg(0, 0)));
    ins(I::LocalSet(c));
    at_end(8).into_iter().for_each(&mut ins);
    ins(I::I64Load(arg(0, 0)));
    ins(I::LocalSet(d));
    ins(I::LocalGet(dst));
    ins(I::LocalGet(a));
    ins(I::I64Store(arg(0, 0)));
    ins(I::LocalGet(dst));
    ins(I::LocalGet(b));
    ins(I::I64Store(arg(8, 0)));
    dst_end(16).into_iter().for_each(&mut ins);
    ins(I::LocalGet(c));
    ins(I::I64Store(arg(0, 0)));
    dst_end(8).into_iter().for_each(&mut ins);
    ins(I::LocalGet(d));
    ins(I::I64Store(arg(0, 0)));
    ins(I::Return);
    ins(I::End);
    // Two words of `width` bytes, at 0 and n - width, when n >= width.
    for (width, load, store) in [
        (8, I::I64Load(arg(0, 0)), I::I64Store(arg(0, 0))),
        (4, I::I64Load32U(arg(0, 0)), I::I64Store32(arg(0, 0))),
        (2, I::I64Load16U(arg(0, 0)), I::I64Store16(arg(0, 0))),
    ] {
        ins(I::LocalGet(n));
        ins(I::I32Const(width));
        ins(I::I32GeU);
        ins(I::If(BlockType::Empty));
        ins(I::LocalGet(src));
        ins(load.clone());
        ins(I::LocalSet(a));
        at_end(width).into_iter().for_each(&mut ins);
        ins(load);
        ins(I::LocalSet(b));
        ins(I::LocalGet(dst));
        ins(I::LocalGet(a));
        ins(store.clone());
        dst_end(width).into_iter().for_each(&mut ins);
        ins(I::LocalGet(b));
        ins(store);
        ins(I::Return);
        ins(I::End);
    }
    // n == 1
    ins(I::LocalGet(n));
    ins(I::If(BlockType::Empty));
    ins(I::LocalGet(dst));
    ins(I::LocalGet(src));
    ins(I::I32Load8U(arg(0, 0)));
    ins(I::I32Store8(arg(0, 0)));
    ins(I::End);
    ins(I::End);
    let mut body = Vec::new();
    wasm_encoder::Encode::encode(&f, &mut body);
    // `raw` takes the body without its length prefix.
    let (_, n) = leb_len(&body);
    body.split_off(n)
}

/// A LEB128 u32 at the start of `b`: its value and length.
fn leb_len(b: &[u8]) -> (u32, usize) {
    let mut v = 0u32;
    for (i, byte) in b.iter().enumerate().take(5) {
        v |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return (v, i + 1);
        }
    }
    (v, 0)
}
