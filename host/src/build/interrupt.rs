//! The yield points of a core module: a guest that a host without cheap
//! interruption of its own can still stop.
//!
//! A host must be able to stop a guest that computes past its deadline.
//! wasmtime does it with epochs, a load and a compare at each loop header.
//! wazero (the Go host's engine) does it only with `WithCloseOnContextDone`,
//! which costs a goroutine a call and, at each loop header, a trip out of
//! the guest's code into Go: together more than half of a one-record call
//! on the Go host, and about 40% of the nginx rule's. The trip into Go is
//! not waste: machine code that never returns to Go cannot be preempted,
//! and a garbage collection waits for it, so a guest looping without one
//! would stop the whole process, the timer that should end it included.
//!
//! So `omlet build --target core` gives the module yield points of its own.
//! A mutable `i32` global, exported as [`BUDGET_EXPORT`], counts loop
//! headers down; at zero the guest calls the import `tick` of docs/abi.md,
//! where the host may end the call (the import traps) or answer the next
//! count. The guest so enters the host every so many loop iterations, not
//! at each one: a global read, a subtraction, a write and a branch a loop
//! iteration, and a host call every few thousand. It is the guarantee an
//! engine's own check gives (loop headers only; recursion ends at the stack
//! limit). A host that does not trust a module to count keeps its engine's
//! interruption.

use wasm_encoder::{CodeSection, Module, RawSection, SectionId};
use wasmparser::{Operator, Parser, Payload, TypeRef};

use omlet_wasm_passes::{Edit, edit_body, leb128, push_with_entry};

use crate::{Error, Result};

/// The import module of docs/abi.md, whose `tick` the yield points call.
const TICK_MODULE: &str = "omlet:core@1";

/// The export name of the budget global (docs/abi.md).
pub const BUDGET_EXPORT: &str = "omlet_tick_budget";

/// The budget a module starts with, before its host first answers `tick`.
const FIRST_BUDGET: u32 = 10_000;

/// `core` with its loop headers counted and `tick` called when the count
/// runs out.
pub fn add_yield_points(core: &[u8]) -> Result<Vec<u8>> {
    let bad = |e: wasmparser::BinaryReaderError| Error::load("guest module", e);
    let pass = |e: omlet_wasm_passes::PassError| Error::load("guest module", e);
    // Pass 1: the index the new global gets (after every imported and
    // defined one), and that the name is free.
    let mut globals = 0u32;
    let mut funcs = 0u32;
    let mut tick = None;
    let mut has_global_section = false;
    for payload in Parser::new(0).parse_all(core) {
        match payload.map_err(bad)? {
            Payload::ImportSection(r) => {
                for imports in r {
                    for import in imports.map_err(bad)? {
                        let (_, import) = import.map_err(bad)?;
                        match import.ty {
                            TypeRef::Global(_) => globals += 1,
                            TypeRef::Func(_) | TypeRef::FuncExact(_) => {
                                if import.module == TICK_MODULE && import.name == "tick" {
                                    tick = Some(funcs);
                                }
                                funcs += 1;
                            }
                            _ => {}
                        }
                    }
                }
            }
            Payload::GlobalSection(r) => {
                has_global_section = true;
                globals += r.count();
            }
            Payload::ExportSection(r) => {
                for e in r {
                    if e.map_err(bad)?.name == BUDGET_EXPORT {
                        return Err(Error::Internal(format!("the guest module exports `{BUDGET_EXPORT}` already")));
                    }
                }
            }
            _ => {}
        }
    }
    if !has_global_section {
        return Err(Error::Internal("the guest module has no global section".into()));
    }
    let tick = tick.ok_or_else(|| Error::Internal(format!("the guest module does not import {TICK_MODULE} tick")))?;
    let budget = globals;
    // budget -= 1; if budget == 0 { budget = tick() }
    let mut check = Vec::with_capacity(24);
    let op = |check: &mut Vec<u8>, code: u8, index: u32| {
        check.push(code);
        leb128(check, index);
    };
    op(&mut check, 0x23, budget); // global.get
    check.extend_from_slice(&[0x41, 0x01, 0x6b]); // i32.const 1, i32.sub
    op(&mut check, 0x24, budget); // global.set
    op(&mut check, 0x23, budget);
    check.extend_from_slice(&[0x45, 0x04, 0x40]); // i32.eqz, if (empty)
    op(&mut check, 0x10, tick); // call
    op(&mut check, 0x24, budget);
    check.push(0x0b); // end

    // Pass 2: copy, with the global, export and code sections rewritten.
    let mut out = Module::new();
    let mut code: Option<CodeSection> = None;
    for payload in Parser::new(0).parse_all(core) {
        let payload = payload.map_err(bad)?;
        match &payload {
            Payload::GlobalSection(r) => {
                // An i32, mutable, set to i32.const FIRST_BUDGET.
                let mut entry = vec![0x7f, 0x01, 0x41];
                sleb128(&mut entry, FIRST_BUDGET as i32);
                entry.push(0x0b);
                push_with_entry(&mut out, core, SectionId::Global, r, &entry).map_err(pass)?;
            }
            Payload::ExportSection(r) => {
                let mut entry = Vec::new();
                leb128(&mut entry, BUDGET_EXPORT.len() as u32);
                entry.extend_from_slice(BUDGET_EXPORT.as_bytes());
                entry.push(0x03); // a global
                leb128(&mut entry, budget);
                push_with_entry(&mut out, core, SectionId::Export, r, &entry).map_err(pass)?;
            }
            Payload::CodeSectionStart { .. } => code = Some(CodeSection::new()),
            Payload::CodeSectionEntry(body) => {
                let bytes = edit_body(core, body, |op| matches!(op, Operator::Loop { .. }).then_some(Edit::After(&check)))
                    .map_err(pass)?;
                code.as_mut().ok_or_else(|| Error::Internal("a function body outside the code section".into()))?.raw(&bytes);
            }
            other => {
                if let Some(section) = code.take() {
                    out.section(&section);
                }
                if let Some((id, range)) = other.as_section() {
                    out.section(&RawSection { id, data: &core[range] });
                }
            }
        }
    }
    if let Some(section) = code.take() {
        out.section(&section);
    }
    Ok(out.finish())
}

/// Appends `v` as a signed LEB128.
fn sleb128(out: &mut Vec<u8>, mut v: i32) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if (v == 0 && byte & 0x40 == 0) || (v == -1 && byte & 0x40 != 0) {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module that imports `tick` (and, before it, another function, so
    /// that tick's index is not 0), whose `spin(n)` counts n down to 0 in a
    /// loop and answers its global `g`, 7.
    fn spin_module() -> Vec<u8> {
        use wasm_encoder::{
            BlockType, CodeSection, ConstExpr, EntityType, ExportKind, ExportSection, Function, FunctionSection, GlobalSection,
            GlobalType, ImportSection, Instruction as I, TypeSection, ValType,
        };
        let mut m = Module::new();
        let mut types = TypeSection::new();
        types.ty().function([ValType::I32], [ValType::I32]);
        types.ty().function([], [ValType::I32]);
        m.section(&types);
        let mut imports = ImportSection::new();
        imports.import(TICK_MODULE, "now", EntityType::Function(0));
        imports.import(TICK_MODULE, "tick", EntityType::Function(1));
        m.section(&imports);
        let mut funcs = FunctionSection::new();
        funcs.function(0);
        m.section(&funcs);
        let mut globals = GlobalSection::new();
        globals.global(GlobalType { val_type: ValType::I32, mutable: true, shared: false }, &ConstExpr::i32_const(7));
        m.section(&globals);
        let mut exports = ExportSection::new();
        exports.export("spin", ExportKind::Func, 2).export("g", ExportKind::Global, 0);
        m.section(&exports);
        let mut f = Function::new([]);
        for i in [
            I::Loop(BlockType::Empty),
            I::LocalGet(0),
            I::I32Const(1),
            I::I32Sub,
            I::LocalSet(0),
            I::LocalGet(0),
            I::I32Const(0),
            I::I32Ne,
            I::BrIf(0),
            I::End,
            I::GlobalGet(0),
            I::End,
        ] {
            f.instruction(&i);
        }
        let mut code = CodeSection::new();
        code.function(&f);
        m.section(&code);
        m.finish()
    }

    fn exports(m: &[u8]) -> Vec<(String, wasmparser::ExternalKind, u32)> {
        let mut out = Vec::new();
        for p in Parser::new(0).parse_all(m) {
            if let Payload::ExportSection(r) = p.unwrap() {
                out.extend(r.into_iter().map(|e| e.unwrap()).map(|e| (e.name.to_owned(), e.kind, e.index)));
            }
        }
        out
    }

    #[test]
    fn the_module_stays_valid_and_exports_its_budget_after_the_others() {
        let m = add_yield_points(&spin_module()).unwrap();
        wasmparser::Validator::new().validate_all(&m).unwrap();
        let exports = exports(&m);
        assert_eq!(exports.last(), Some(&(BUDGET_EXPORT.to_owned(), wasmparser::ExternalKind::Global, 1)));
        assert_eq!(exports.len(), 3);
        assert!(add_yield_points(&m).is_err(), "a module gets its yield points once");
    }

    /// Runs spin(n) with a tick that answers `answer` and fails after
    /// `fail_after` calls: spin's answer, and how many times tick ran.
    fn spin(n: i32, answer: i32, fail_after: usize) -> (wasmtime::Result<i32>, usize) {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, add_yield_points(&spin_module()).unwrap()).unwrap();
        let mut store = wasmtime::Store::new(&engine, 0usize);
        let now = wasmtime::Func::wrap(&mut store, |x: i32| x);
        let tick = wasmtime::Func::wrap(&mut store, move |mut c: wasmtime::Caller<'_, usize>| {
            *c.data_mut() += 1;
            if *c.data() > fail_after {
                return Err(wasmtime::format_err!("past its deadline"));
            }
            Ok(answer)
        });
        let instance = wasmtime::Instance::new(&mut store, &module, &[now.into(), tick.into()]).unwrap();
        let f = instance.get_typed_func::<i32, i32>(&mut store, "spin").unwrap();
        let out = f.call(&mut store, n);
        (out, *store.data())
    }

    #[test]
    fn the_guest_calls_tick_once_a_budget_and_otherwise_runs_as_before() {
        // The first budget, then 100 a tick: a tick at the 10,000th loop
        // header, and at each 100th after it.
        assert_eq!(spin(10_500, 100, usize::MAX).0.unwrap(), 7);
        assert_eq!(spin(10_500, 100, usize::MAX).1, 6);
        assert_eq!(spin(10_499, 100, usize::MAX).1, 5);
        assert_eq!(spin(9_999, 100, usize::MAX).1, 0, "within the first budget, no tick");
    }

    #[test]
    fn a_tick_that_fails_ends_the_call() {
        let (out, ticks) = spin(0, 1000, 3); // 0: about 2^32 loop headers
        let err = out.unwrap_err();
        assert!(format!("{err:?}").contains("past its deadline"), "{err:?}");
        assert_eq!(ticks, 4);
    }

    #[test]
    fn the_core_abi_guest_takes_yield_points() {
        let guest = crate::guest::core_abi_module().unwrap();
        let m = add_yield_points(&guest).unwrap();
        wasmparser::Validator::new().validate_all(&m).unwrap();
        assert!(exports(&m).iter().any(|(name, ..)| name == BUDGET_EXPORT));
        let loops = |bytes: &[u8]| {
            let (mut loops, mut ticks) = (0, 0);
            for p in Parser::new(0).parse_all(bytes) {
                if let Payload::CodeSectionEntry(body) = p.unwrap() {
                    let mut ops = body.get_operators_reader().unwrap();
                    while !ops.eof() {
                        match ops.read().unwrap() {
                            Operator::Loop { .. } => loops += 1,
                            Operator::Call { .. } => ticks += 1,
                            _ => {}
                        }
                    }
                }
            }
            (loops, ticks)
        };
        let (before, calls_before) = loops(&guest);
        let (after, calls_after) = loops(&m);
        assert!(before > 100);
        assert_eq!(after, before);
        assert_eq!(calls_after, calls_before + before, "one call to tick a loop");
    }
}
