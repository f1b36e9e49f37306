//! The guest's short-copy lowering (`omlet_wasm_passes::copies`), run
//! where its crate cannot: in wasmtime, against `memory.copy` itself.

use omlet_wasm_passes::copies::lower_short_copies;
use wasm_encoder::{
    CodeSection, ExportKind, ExportSection, Function, FunctionSection, Instruction as I, MemorySection, MemoryType, Module,
    TypeSection, ValType,
};

/// A module whose exported `copy(dst, src, n)` is one `memory.copy`.
fn copying_module() -> Vec<u8> {
    let mut m = Module::new();
    let mut types = TypeSection::new();
    types.ty().function([ValType::I32; 3], []);
    m.section(&types);
    let mut funcs = FunctionSection::new();
    funcs.function(0);
    m.section(&funcs);
    let mut mem = MemorySection::new();
    mem.memory(MemoryType { minimum: 1, maximum: None, memory64: false, shared: false, page_size_log2: None });
    m.section(&mem);
    let mut exports = ExportSection::new();
    exports.export("copy", ExportKind::Func, 0).export("memory", ExportKind::Memory, 0);
    m.section(&exports);
    let mut f = Function::new([]);
    for i in [I::LocalGet(0), I::LocalGet(1), I::LocalGet(2), I::MemoryCopy { src_mem: 0, dst_mem: 0 }, I::End] {
        f.instruction(&i);
    }
    let mut code = CodeSection::new();
    code.function(&f);
    m.section(&code);
    m.finish()
}

#[test]
fn lowered_copies_move_the_bytes_memory_copy_moves_overlapping_or_not() {
    let lowered = lower_short_copies(&copying_module()).unwrap();
    wasmparser::Validator::new().validate_all(&lowered).unwrap();
    let engine = wasmtime::Engine::default();
    let module = wasmtime::Module::new(&engine, &lowered).unwrap();
    let mut store = wasmtime::Store::new(&engine, ());
    let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
    let copy = instance.get_typed_func::<(u32, u32, u32), ()>(&mut store, "copy").unwrap();
    let memory = instance.get_memory(&mut store, "memory").unwrap();
    let pattern: Vec<u8> = (0..200u8).collect();
    for n in 0..=70u32 {
        // Apart, and overlapping by every shift either way.
        for (src, dst) in [(0u32, 100u32), (10, 3), (3, 10), (10, 10), (10, 11), (11, 10), (20, 45), (45, 20)] {
            memory.write(&mut store, 0, &pattern).unwrap();
            copy.call(&mut store, (dst, src, n)).unwrap();
            let mut want = pattern.clone();
            want.copy_within(src as usize..(src + n) as usize, dst as usize);
            assert_eq!(&memory.data(&store)[..200], &want[..], "n {n}, src {src}, dst {dst}");
        }
    }
    // Out of bounds still traps, short or long.
    for n in [4, 100] {
        assert!(copy.call(&mut store, (65536 - 2, 0, n)).is_err(), "n {n}");
    }
}
