//! The floor of a component call on this machine: what wasmtime itself costs
//! for a call, before omlet does anything. A tiny component, written here in
//! WAT, exports `empty: func()` and `echo: func(x: list<u8>) -> list<u8>`
//! (the shape of omlet's `evaluate`: a frame in, a frame out, through the
//! guest's `realloc`). It runs on the wasmtime engine of an omlet
//! [`Engine`](omlet::Engine), so with the same configuration (pooling
//! allocator, epoch checks), fiber-less (`call`) or on a fiber
//! (`call_async`), as omlet's two paths make their calls.

use wasmtime::component::{Component, Func, Linker, TypedFunc};
use wasmtime::{Store, UpdateDeadline};

/// The component: one page of memory; `realloc` hands out the same address
/// every time (one list is alive at a time, and it fits), and `echo` gives
/// its argument back where it lies.
const WAT: &str = r#"
(component
  (core module $m
    (memory (export "memory") 1)
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) i32.const 1024)
    (func (export "empty"))
    (func (export "echo") (param i32 i32) (result i32)
      (i32.store (i32.const 8) (local.get 0))
      (i32.store (i32.const 12) (local.get 1))
      i32.const 8))
  (core instance $i (instantiate $m))
  (type $bytes (list u8))
  (func (export "empty") (canon lift (core func $i "empty")))
  (func (export "echo") (param "x" $bytes) (result $bytes)
    (canon lift (core func $i "echo") (memory (core memory $i "memory")) (realloc (core func $i "realloc"))))
)
"#;

/// An instance of the floor component, ready to call.
pub struct Floor {
    store: Store<()>,
    empty: TypedFunc<(), ()>,
    echo: Func,
}

/// Longest list `echo` takes: the page, less what lies below the list.
pub const MAX_ECHO: usize = 65536 - 1024;

impl Floor {
    /// Instantiates the component on `engine`'s wasmtime engine, fiber-less
    /// (`async_instance` false) or on a fiber.
    pub async fn new(engine: &omlet::Engine, async_instance: bool) -> wasmtime::Result<Floor> {
        let wt = engine.wasmtime();
        let component = Component::new(wt, WAT)?;
        let mut store = Store::new(wt, ());
        // As omlet's stores: the epoch is checked on guest calls, and a tick
        // lets the call go on.
        store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Continue(1)));
        store.set_epoch_deadline(1);
        let linker = Linker::new(wt);
        let instance = if async_instance {
            linker.instantiate_async(&mut store, &component).await?
        } else {
            linker.instantiate(&mut store, &component)?
        };
        let empty = instance.get_typed_func::<(), ()>(&mut store, "empty")?;
        // Checked once with owned types, which lower as the borrowed ones `echo` passes.
        let echo = *instance.get_typed_func::<(Vec<u8>,), (Vec<u8>,)>(&mut store, "echo")?.func();
        Ok(Floor { store, empty, echo })
    }

    /// An empty call, fiber-less.
    pub fn empty(&mut self) -> wasmtime::Result<()> {
        self.empty.call(&mut self.store, ())
    }

    /// An empty call, on a fiber.
    pub async fn empty_async(&mut self) -> wasmtime::Result<()> {
        self.empty.call_async(&mut self.store, ()).await
    }

    /// `bytes` into the guest and back out, fiber-less.
    pub fn echo(&mut self, bytes: &[u8]) -> wasmtime::Result<Vec<u8>> {
        // SAFETY: `new` checked the function as `(list<u8>) -> list<u8>`, which
        // a borrowed slice lowers as exactly as a `Vec<u8>`.
        let f = unsafe { TypedFunc::<(&[u8],), (Vec<u8>,)>::new_unchecked(self.echo) };
        Ok(f.call(&mut self.store, (bytes,))?.0)
    }

    /// `bytes` into the guest and back out, on a fiber.
    pub async fn echo_async(&mut self, bytes: &[u8]) -> wasmtime::Result<Vec<u8>> {
        // SAFETY: as in `echo`.
        let f = unsafe { TypedFunc::<(&[u8],), (Vec<u8>,)>::new_unchecked(self.echo) };
        Ok(f.call_async(&mut self.store, (bytes,)).await?.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_component_calls_and_echoes_on_both_paths() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let engine = omlet::Engine::new().unwrap();
        rt.block_on(async {
            let frame: Vec<u8> = (0..200u8).collect();
            let mut sync = Floor::new(&engine, false).await.unwrap();
            for _ in 0..3 {
                sync.empty().unwrap();
                assert_eq!(sync.echo(&frame).unwrap(), frame);
            }
            let mut fiber = Floor::new(&engine, true).await.unwrap();
            for _ in 0..3 {
                fiber.empty_async().await.unwrap();
                assert_eq!(fiber.echo_async(&frame).await.unwrap(), frame);
            }
            assert!(sync.echo(&vec![1u8; MAX_ECHO + 1]).is_err(), "a list past the page cannot be placed");
        });
    }
}
