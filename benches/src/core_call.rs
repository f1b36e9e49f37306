//! A one-record call through the core ABI (docs/abi.md), as a host with no
//! record code of its own makes it: a frame already encoded is written into
//! the guest's input buffer, `omlet_evaluate` runs, and the output frame is
//! copied out. It runs on the wasmtime engine of an omlet
//! [`Engine`](omlet::Engine) (same configuration, fiber-less), so that it
//! stands beside `floor.rs`'s component calls and omlet's own
//! `wasm_single`: what the call mechanism costs, apart from the host's path.
//! Lookups answer "unavailable"; the rules it measures make none.

use wasmtime::{Caller, Extern, Instance, Linker, Memory, Module, Store, TypedFunc, UpdateDeadline};

/// An instance of a core ABI module, ready to call.
pub struct CoreCall {
    store: Store<()>,
    memory: Memory,
    evaluate: TypedFunc<(u64, u32, u32, u32), ()>,
    input: TypedFunc<u32, u32>,
    /// The input buffer's address and capacity, asked for once per size.
    buffer: (u32, u32),
    ret: u32,
}

fn unavailable(mut c: Caller<'_, ()>, buf: u32, cap: u32) -> u32 {
    let answer = [2u8, 1, 0, 0, 0, 0, 0];
    if cap as usize >= answer.len()
        && let Some(Extern::Memory(m)) = c.get_export("memory")
    {
        let _ = m.write(&mut c, buf as usize, &answer);
    }
    answer.len() as u32
}

impl CoreCall {
    /// Instantiates `module` (from `omlet build --target core`) on
    /// `engine`'s wasmtime engine.
    pub fn new(engine: &omlet::Engine, module: &[u8]) -> wasmtime::Result<CoreCall> {
        let wt = engine.wasmtime();
        let module = Module::new(wt, module)?;
        let mut linker = Linker::<()>::new(wt);
        linker.func_wrap("omlet:core@1", "query", |c: Caller<'_, ()>, _: u32, _: u32, _: u32, buf: u32, cap: u32| {
            unavailable(c, buf, cap)
        })?;
        linker.func_wrap("omlet:core@1", "columns", |c: Caller<'_, ()>, _: u32, buf: u32, cap: u32| unavailable(c, buf, cap))?;
        linker.func_wrap("omlet:core@1", "intranet_nets", |_: Caller<'_, ()>, _: u32, _: u32| 0u32)?;
        linker.func_wrap("omlet:core@1", "take", |_: Caller<'_, ()>, _: u32, _: u32| {})?;
        linker.func_wrap("omlet:core@1", "now", |_: Caller<'_, ()>, _: u32| {})?;
        linker.func_wrap("omlet:core@1", "tick", |_: Caller<'_, ()>| i32::MAX as u32)?;
        let mut store = Store::new(wt, ());
        store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Continue(1)));
        store.set_epoch_deadline(1);
        let instance: Instance = linker.instantiate(&mut store, &module)?;
        let memory = instance.get_memory(&mut store, "memory").ok_or_else(|| wasmtime::format_err!("no memory"))?;
        let evaluate = instance.get_typed_func(&mut store, "omlet_evaluate")?;
        let input = instance.get_typed_func(&mut store, "omlet_input")?;
        let ret = instance.get_typed_func::<(), u32>(&mut store, "omlet_return_area")?.call(&mut store, ())?;
        Ok(CoreCall { store, memory, evaluate, input, buffer: (0, 0), ret })
    }

    /// Evaluates the one record of `frame` on the only model, writing the
    /// output frame into `out`: the call's status (0 when it gave one).
    pub fn evaluate(&mut self, frame: &[u8], out: &mut Vec<u8>) -> wasmtime::Result<u32> {
        let n = frame.len() as u32;
        if n > self.buffer.1 {
            self.buffer = (self.input.call(&mut self.store, n)?, n.next_power_of_two());
        }
        self.memory.write(&mut self.store, self.buffer.0 as usize, frame)?;
        self.evaluate.call(&mut self.store, (1, 0, 0, n))?;
        let data = self.memory.data(&self.store);
        let at = self.ret as usize;
        let word = |i: usize| u32::from_le_bytes([data[at + i], data[at + i + 1], data[at + i + 2], data[at + i + 3]]);
        let (status, ptr, len) = (word(0), word(4) as usize, word(8) as usize);
        out.clear();
        out.extend_from_slice(&data[ptr..ptr + len]);
        Ok(status)
    }
}
