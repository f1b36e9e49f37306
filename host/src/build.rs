//! `omlet build`: OML source → self-contained WebAssembly component, with no
//! wasm toolchain.
//!
//! 1. The rule is compiled natively by `omlet-lang` into IR bytes.
//! 2. The IR is spliced into a copy of the prebuilt guest core module: the
//!    memory's minimum grows by enough pages to hold it, a new active data
//!    segment writes it at the old end of memory (below anything the
//!    allocator hands out, since dlmalloc grows memory past its current size),
//!    and the guest's IR slot (found by its magic tag in the data segments) is
//!    patched with the address and length.
//! 3. `wit-component` wraps the core module into a component, using the WIT
//!    world embedded in the module's `component-type` section.

use std::path::{Path, PathBuf};

use omlet_lang::ir::Program;
use sha2::{Digest, Sha256};
use wasm_encoder::{ConstExpr, DataCountSection, DataSection, MemorySection, MemoryType, Module, RawSection};
use wasmparser::{DataKind, Operator, Parser, Payload};

mod interrupt;
#[cfg(test)]
mod passes_tests;

pub use interrupt::BUDGET_EXPORT;

use crate::error::Limit;
use crate::{Error, Result};

/// The tag the guest's IR slot starts with (see `guest/component`).
const IR_SLOT_MAGIC: &[u8; 16] = b"OMLET-IR-SLOT-01";
const PAGE: u64 = 65536;

/// Default of [`BuildLimits::max_rule_file_bytes`].
pub const MAX_RULE_FILE_BYTES: u64 = 1 << 20;

/// Default of [`BuildLimits::max_ir_bytes`].
pub const MAX_IR_BYTES: usize = 4 << 20;

/// The limits of a build: the compiler's ([`omlet_lang::Limits`]: nesting
/// depth, file size, pattern length, copies, overlap work) and the build's
/// own. Past one, the build fails with a compile error at the place, or
/// with [`Error::Limit`] (`Limit::RuleBytes`). `EngineConfig::build` holds
/// the ones `Engine::load_path`/`load_source(s)` use.
#[derive(Debug, Clone, Copy)]
pub struct BuildLimits {
    /// The compiler's limits.
    pub compile: omlet_lang::Limits,
    /// Most bytes of one rule file read from disk (default 1 MiB): a bigger
    /// file is refused before it is read.
    pub max_rule_file_bytes: u64,
    /// Most bytes of a compiled rule set, its IR (default 4 MiB). The guest
    /// decodes the IR into its own memory on the first call, taking several
    /// times its size; past this, a build that "succeeds" could give a
    /// component that cannot load in the default 64 MiB instance, so the
    /// build refuses it instead. Raise it together with
    /// `EngineConfig::max_memory`.
    pub max_ir_bytes: usize,
}

impl Default for BuildLimits {
    fn default() -> Self {
        BuildLimits {
            compile: omlet_lang::Limits::default(),
            max_rule_file_bytes: MAX_RULE_FILE_BYTES,
            max_ir_bytes: MAX_IR_BYTES,
        }
    }
}

/// One rule source: its file name (for diagnostics) and text.
pub struct RuleSource {
    /// The file name diagnostics and the SQL allow-list use.
    pub file: String,
    /// The OML text.
    pub text: String,
}

impl RuleSource {
    /// Reads one rule file (at most [`MAX_RULE_FILE_BYTES`]).
    pub fn read(path: &Path) -> Result<RuleSource> {
        RuleSource::read_limited(path, MAX_RULE_FILE_BYTES)
    }

    /// Reads one rule file of at most `max` bytes.
    ///
    /// The file is read through [`omlet_knowledge::files`]: a FIFO, a
    /// device or a directory is refused, and so is a file that holds more
    /// than `max` bytes, whatever its metadata says.
    pub fn read_limited(path: &Path, max: u64) -> Result<RuleSource> {
        let len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
        if len > max {
            let message = format!("{}: {len} bytes, more than a rule file may take ({max})", path.display());
            return Err(Error::limit(Limit::RuleBytes, message));
        }
        let text = omlet_knowledge::files::read_text(path, max, "rule file")
            .map_err(|e| Error::bounded_read(e, |m| Error::limit(Limit::RuleBytes, m)))?;
        Ok(RuleSource { file: path.display().to_string(), text })
    }

    /// Reads one rule from `source` (standard input), at most `max` bytes.
    pub fn read_stream(source: impl std::io::Read, file: &str, max: u64) -> Result<RuleSource> {
        let text = omlet_knowledge::files::read_text_from(source, Path::new(file), max, "rule file")
            .map_err(|e| Error::bounded_read(e, |m| Error::limit(Limit::RuleBytes, m)))?;
        Ok(RuleSource { file: file.to_string(), text })
    }

    /// Reads rule files, and the `.oml` files under directories (see
    /// [`oml_files`]), as the sources of one rule set.
    pub fn collect(paths: &[PathBuf]) -> Result<Vec<RuleSource>> {
        RuleSource::collect_limited(paths, MAX_RULE_FILE_BYTES)
    }

    /// [`RuleSource::collect`], each file at most `max_file_bytes`.
    pub fn collect_limited(paths: &[PathBuf], max_file_bytes: u64) -> Result<Vec<RuleSource>> {
        let files = oml_files(paths)?;
        if files.is_empty() {
            let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            return Err(Error::Input { what: names.join(", "), message: "no .oml files found".into() });
        }
        files.iter().map(|f| RuleSource::read_limited(f, max_file_bytes)).collect()
    }
}

/// The `.oml` files named by `paths`: files as given, directories searched
/// recursively (skipping hidden directories, `target` and `node_modules`),
/// each directory's entries in name order.
pub fn oml_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    files_with_extension(paths, "oml")
}

/// [`oml_files`] for another extension (`omlet test` finds its `*.toml`
/// case files the same way).
pub fn files_with_extension(paths: &[PathBuf], ext: &str) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut seen = Seen::default();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| Error::io(p, e))?;
        if meta.is_dir() {
            walk(p, ext, &mut out, &mut seen, 0)?;
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// How deep a search for rule or case files goes below a folder it is given.
pub const MAX_WALK_DEPTH: usize = 32;

/// The folders a search entered, by their canonical paths: a link back up
/// the tree (`ln -s . loop`) is entered once, not forever.
#[derive(Default)]
struct Seen(std::collections::HashSet<PathBuf>);

impl Seen {
    /// Whether `dir` is entered for the first time.
    fn first(&mut self, dir: &Path) -> Result<bool> {
        Ok(self.0.insert(dir.canonicalize().map_err(|e| Error::io(dir, e))?))
    }
}

fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>, seen: &mut Seen, depth: usize) -> Result<()> {
    if !seen.first(dir)? {
        return Ok(());
    }
    if depth > MAX_WALK_DEPTH {
        return Err(Error::Input {
            what: dir.display().to_string(),
            message: format!(
                "folders nest deeper than {MAX_WALK_DEPTH} levels below the one given: name a folder nearer the files"
            ),
        });
    }
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut entries = Vec::new();
    for e in rd {
        entries.push(e.map_err(|e| Error::io(dir, e))?.path());
    }
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !(name.starts_with('.') || name == "target" || name == "node_modules") {
                walk(&path, ext, out, seen, depth + 1)?;
            }
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
    Ok(())
}

/// Most diagnostics rendered into [`Error::Compile`]'s text (all of them
/// stay in its `diagnostics`).
const MAX_RENDERED: usize = 50;

/// Compiles rule sources to a program, with rendered diagnostics on failure.
pub fn compile(sources: &[RuleSource]) -> Result<Program> {
    compile_with(sources, &BuildLimits::default())
}

/// [`compile`] under explicit limits.
pub fn compile_with(sources: &[RuleSource], limits: &BuildLimits) -> Result<Program> {
    let srcs: Vec<omlet_lang::Source<'_>> = sources.iter().map(|s| omlet_lang::Source { file: &s.file, text: &s.text }).collect();
    let mut program = omlet_lang::compile_with_limits(&srcs, crate::clock::now(), limits.compile).map_err(|errors| {
        // The rendering is bounded: the first errors, not thousands of them.
        let mut rendered = String::new();
        let (total, mut left) = (errors.iter().map(|fe| fe.diagnostics.len()).sum::<usize>(), MAX_RENDERED);
        for fe in &errors {
            let text = sources.iter().find(|s| s.file == fe.file).map(|s| s.text.as_str()).unwrap_or("");
            let shown = &fe.diagnostics[..fe.diagnostics.len().min(left)];
            left -= shown.len();
            rendered.push_str(&omlet_lang::diag::render_all(shown, &fe.file, text));
        }
        if total > MAX_RENDERED {
            rendered.push_str(&format!("… and {} more errors\n", total - MAX_RENDERED));
        }
        let diagnostics = errors
            .iter()
            .flat_map(|fe| {
                fe.diagnostics.iter().map(|d| crate::error::Diagnostic {
                    file: fe.file.clone(),
                    line: d.line,
                    column: d.column,
                    span: d.span.start as usize..d.span.end as usize,
                    message: d.message.clone(),
                    hint: d.hint.clone(),
                })
            })
            .collect();
        Error::Compile { diagnostics, rendered: rendered.trim_end().to_string() }
    })?;
    let mut h = Sha256::new();
    for s in sources {
        h.update(s.file.as_bytes());
        h.update(b"\0");
        h.update(s.text.as_bytes());
        h.update(b"\0");
    }
    program.source_hash = hex::encode(h.finalize());
    Ok(program)
}

/// Compiles rule sources into component bytes.
pub fn build_component(sources: &[RuleSource]) -> Result<Vec<u8>> {
    build_component_with(sources, &BuildLimits::default())
}

/// [`build_component`] under explicit limits.
pub fn build_component_with(sources: &[RuleSource], limits: &BuildLimits) -> Result<Vec<u8>> {
    let program = compile_with(sources, limits)?;
    component_with(&program, limits.max_ir_bytes)
}

/// Wraps a compiled program into a component.
pub fn component_for(program: &Program) -> Result<Vec<u8>> {
    component_with(program, MAX_IR_BYTES)
}

/// Wraps a compiled program of at most `max_ir_bytes` into a component.
fn component_with(program: &Program, max_ir_bytes: usize) -> Result<Vec<u8>> {
    component_of(&crate::guest::core_module()?, &program_bytes(program, max_ir_bytes)?)
}

/// The two kinds of artifact a rule set is built into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Target {
    /// A WebAssembly component whose contract is `wit/omlet.wit` (the
    /// default): for wasmtime, jco, and hosts with the component model.
    #[default]
    Component,
    /// A core module with the ABI of docs/abi.md: for hosts without the
    /// component model (wazero in Go, Chicory on the JVM).
    Core,
}

/// Compiles rule sources into an artifact of `target`, under `limits`.
pub fn build_artifact_with(sources: &[RuleSource], limits: &BuildLimits, target: Target) -> Result<Vec<u8>> {
    let program = compile_with(sources, limits)?;
    let ir = program_bytes(&program, limits.max_ir_bytes)?;
    match target {
        Target::Component => component_of(&crate::guest::core_module()?, &ir),
        Target::Core => splice_ir(&core_guest()?, &ir),
    }
}

/// Wraps a compiled program into a core ABI module (docs/abi.md).
pub fn core_artifact_for(program: &Program) -> Result<Vec<u8>> {
    splice_ir(&core_guest()?, &program_bytes(program, MAX_IR_BYTES)?)
}

/// The guest a core artifact carries: the core ABI guest with yield points
/// at its loop headers (`interrupt`), where hosts without cheap
/// interruption of their own (wazero) can stop it.
fn core_guest() -> Result<Vec<u8>> {
    interrupt::add_yield_points(&crate::guest::core_abi_module()?)
}

/// Whether `bytes` is a core WebAssembly module (`omlet build --target
/// core`) rather than a component: its header's version is 1.
pub fn is_core_module(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [1, 0, 0, 0]
}

/// The compiled rule (IR bytes) a core ABI module built by `omlet build
/// --target core` carries: [`Error::Load`] for a module that exports no
/// `omlet_abi_version`, and for one whose IR slot is empty or points outside
/// its data.
pub fn ir_of(module: &[u8]) -> Result<Vec<u8>> {
    let bad = |m: &str| Error::load("core module", anyhow::anyhow!("{m}"));
    let mut abi = false;
    let mut segments: Vec<(u64, &[u8])> = Vec::new();
    for payload in Parser::new(0).parse_all(module) {
        match payload.map_err(|e| Error::load("core module", e))? {
            Payload::ExportSection(r) => {
                for e in r {
                    abi |= e.map_err(|e| Error::load("core module", e))?.name == "omlet_abi_version";
                }
            }
            Payload::DataSection(r) => {
                for d in r {
                    let d = d.map_err(|e| Error::load("core module", e))?;
                    if let DataKind::Active { offset_expr, .. } = &d.kind
                        && let Ok(Operator::I32Const { value }) = offset_expr.get_operators_reader().read()
                    {
                        segments.push((u64::from(value as u32), d.data));
                    }
                }
            }
            _ => {}
        }
    }
    if !abi {
        return Err(bad("not an omlet core module: it exports no `omlet_abi_version` (docs/abi.md)"));
    }
    // The bytes at [at, at + n) of the memory image, when one segment holds them.
    let read = |at: u64, n: u64| {
        segments
            .iter()
            .find(|(a, d)| *a <= at && at + n <= a + d.len() as u64)
            .map(|(a, d)| &d[(at - a) as usize..][..n as usize])
    };
    let slot = segments
        .iter()
        .find_map(|(a, d)| find(d, IR_SLOT_MAGIC).map(|off| a + off as u64 + IR_SLOT_MAGIC.len() as u64))
        .ok_or_else(|| bad("the module has no IR slot"))?;
    let fields =
        read(slot, 8).ok_or_else(|| bad("the module carries no compiled rule: build it with `omlet build --target core`"))?;
    let word = |i: usize| u64::from(u32::from_le_bytes([fields[i], fields[i + 1], fields[i + 2], fields[i + 3]]));
    let (ptr, len) = (word(0), word(4));
    if len == 0 {
        return Err(bad("the module carries no compiled rule: build it with `omlet build --target core`"));
    }
    read(ptr, len).map(<[u8]>::to_vec).ok_or_else(|| bad("the module's IR slot points outside its data"))
}

/// A compiled program's bytes (the IR the guest reads), refused over
/// `max_ir_bytes`.
pub(crate) fn program_bytes(program: &Program, max_ir_bytes: usize) -> Result<Vec<u8>> {
    let ir = program.to_bytes();
    if ir.len() > max_ir_bytes {
        let message = format!("the compiled rule set takes {} bytes, more than {max_ir_bytes}", ir.len());
        return Err(Error::limit(Limit::RuleBytes, message));
    }
    Ok(ir)
}

/// The component of the guest core module `core` with the program `ir` in
/// it. (The code cache names entries after this function's source file:
/// see `code_cache::rule_key`.)
pub(crate) fn component_of(core: &[u8], ir: &[u8]) -> Result<Vec<u8>> {
    let spliced = splice_ir(core, ir)?;
    // Not validated here: the core module is the guest built with omlet and
    // the IR is data in it. wasmtime validates the component when it
    // compiles it (a compiled-code cache entry was compiled so), and
    // validating the guest's code at every load took a fifth of a cached
    // start (about 4 ms).
    wit_component::ComponentEncoder::default()
        .module(&spliced)
        .and_then(|e| e.validate(false).encode())
        .map_err(|e| Error::load("component encoding", e))
}

/// Returns a copy of `core` with `ir` placed in memory and the IR slot
/// pointing at it.
pub fn splice_ir(core: &[u8], ir: &[u8]) -> Result<Vec<u8>> {
    // Pass 1: the memory's current minimum, and the data segment holding the slot.
    let mut min_pages = None;
    let mut slot: Option<(usize, usize)> = None; // (segment index, offset of magic in it)
    let mut segment_addr = Vec::new();
    let mut segment_len = Vec::new();
    for payload in Parser::new(0).parse_all(core) {
        match payload.map_err(|e| Error::load("guest module", e))? {
            Payload::MemorySection(r) => {
                for m in r {
                    let m = m.map_err(|e| Error::load("guest module", e))?;
                    min_pages.get_or_insert(m.initial);
                }
            }
            Payload::DataSection(r) => {
                for (i, d) in r.into_iter().enumerate() {
                    let d = d.map_err(|e| Error::load("guest module", e))?;
                    let addr = match &d.kind {
                        DataKind::Active { offset_expr, .. } => {
                            match offset_expr.get_operators_reader().read().map_err(|e| Error::load("guest module", e))? {
                                Operator::I32Const { value } => Some(value as u32),
                                _ => None,
                            }
                        }
                        DataKind::Passive => None,
                    };
                    segment_addr.push(addr);
                    segment_len.push(d.data.len() as u64);
                    if let Some(at) = find(d.data, IR_SLOT_MAGIC) {
                        if slot.is_some() || find(&d.data[at + 1..], IR_SLOT_MAGIC).is_some() {
                            return Err(Error::Internal("the guest has more than one IR slot".into()));
                        }
                        slot = Some((i, at));
                    }
                }
            }
            _ => {}
        }
    }
    let min_pages = min_pages.ok_or_else(|| Error::Internal("the guest module has no memory".into()))?;
    let (slot_seg, slot_off) = slot.ok_or_else(|| Error::Internal("the guest module has no IR slot".into()))?;
    let Some(slot_addr) = segment_addr[slot_seg] else {
        return Err(Error::Internal("the IR slot is not in an active data segment".into()));
    };
    // The slot's two fields follow its magic. An optimizer that packs the
    // data (wasm-opt) ends the segment before them when they are zero, as
    // they are until spliced: they are written back below, and no other
    // segment may cover them (it would overwrite them at instantiation).
    let fields = u64::from(slot_addr) + (slot_off + IR_SLOT_MAGIC.len()) as u64;
    let covered =
        segment_addr.iter().zip(&segment_len).enumerate().any(|(i, (addr, len))| {
            i != slot_seg && addr.is_some_and(|a| u64::from(a) < fields + 8 && fields < u64::from(a) + len)
        });
    if covered {
        return Err(Error::Internal("another data segment covers the IR slot".into()));
    }
    let ir_addr = min_pages * PAGE;
    let new_min = min_pages + (ir.len() as u64).div_ceil(PAGE).max(1);
    if new_min * PAGE > u32::MAX as u64 {
        return Err(Error::limit(
            Limit::RuleBytes,
            format!("the compiled rule takes {} bytes, more than fit in the guest's memory", ir.len()),
        ));
    }

    // Pass 2: copy, with the memory, data count and data sections rewritten.
    let mut out = Module::new();
    for payload in Parser::new(0).parse_all(core) {
        let payload = payload.map_err(|e| Error::load("guest module", e))?;
        match &payload {
            Payload::MemorySection(r) => {
                let mut s = MemorySection::new();
                for m in r.clone() {
                    let m = m.map_err(|e| Error::load("guest module", e))?;
                    s.memory(MemoryType {
                        minimum: new_min,
                        maximum: m.maximum.map(|x| x.max(new_min)),
                        memory64: m.memory64,
                        shared: m.shared,
                        page_size_log2: m.page_size_log2,
                    });
                }
                out.section(&s);
            }
            Payload::DataCountSection { count, .. } => {
                out.section(&DataCountSection { count: count + 1 });
            }
            Payload::DataSection(r) => {
                let mut s = DataSection::new();
                for (i, d) in r.clone().into_iter().enumerate() {
                    let d = d.map_err(|e| Error::load("guest module", e))?;
                    if i == slot_seg {
                        let mut bytes = d.data.to_vec();
                        let at = slot_off + IR_SLOT_MAGIC.len();
                        // Fields cut off by an optimizer come back (see above).
                        if bytes.len() < at + 8 {
                            bytes.resize(at + 8, 0);
                        }
                        bytes[at..at + 4].copy_from_slice(&(ir_addr as u32).to_le_bytes());
                        bytes[at + 4..at + 8].copy_from_slice(&(ir.len() as u32).to_le_bytes());
                        let DataKind::Active { memory_index, .. } = d.kind else {
                            return Err(Error::Internal("the IR slot is not in an active data segment".into()));
                        };
                        let addr = segment_addr[i].unwrap_or(0);
                        s.active(memory_index, &ConstExpr::i32_const(addr as i32), bytes);
                    } else {
                        s.raw(&core[d.range.clone()]);
                    }
                }
                s.active(0, &ConstExpr::i32_const(ir_addr as u32 as i32), ir.iter().copied());
                out.section(&s);
            }
            other => {
                if let Some((id, range)) = other.as_section() {
                    out.section(&RawSection { id, data: &core[range] });
                }
            }
        }
    }
    Ok(out.finish())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_file_that_never_ends_is_refused() {
        let e = RuleSource::read(Path::new("/dev/zero")).err().expect("refused");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = RuleSource::read_stream(std::io::repeat(b' '), "<stdin>", 1024).err().expect("refused");
        assert!(matches!(e, Error::Limit { limit: Limit::RuleBytes, .. }), "{e}");
    }

    #[test]
    fn links_back_up_the_tree_are_searched_once() {
        let dir = std::env::temp_dir().join(format!("omlet-walk-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("rules")).unwrap();
        std::fs::write(dir.join("rules/a.oml"), "").unwrap();
        std::os::unix::fs::symlink(".", dir.join("rules/loop")).unwrap();
        std::os::unix::fs::symlink("..", dir.join("rules/up")).unwrap();
        let found = oml_files(&[dir.join("rules")]);
        std::fs::remove_dir_all(&dir).unwrap();
        let found = found.unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
    }

    /// A module of one page of memory whose data holds the IR slot's magic
    /// at 1024, followed by `fields` (none: the segment ends at the magic,
    /// as wasm-opt leaves it), and the further segments `more`.
    fn module(fields: &[u8], more: &[(u32, &[u8])]) -> Vec<u8> {
        let mut m = Module::new();
        let mut mem = MemorySection::new();
        mem.memory(MemoryType { minimum: 1, maximum: None, memory64: false, shared: false, page_size_log2: None });
        m.section(&mem);
        let mut data = DataSection::new();
        data.active(0, &ConstExpr::i32_const(1024), [&IR_SLOT_MAGIC[..], fields].concat());
        for (addr, bytes) in more {
            data.active(0, &ConstExpr::i32_const(*addr as i32), bytes.iter().copied());
        }
        m.section(&data);
        m.finish()
    }

    /// The slot's fields and the IR's segment, read back from a spliced module.
    fn slot_of(spliced: &[u8]) -> (u32, u32, Vec<u8>) {
        let mut segments = Vec::new();
        for payload in Parser::new(0).parse_all(spliced) {
            if let Payload::DataSection(r) = payload.unwrap() {
                segments = r.into_iter().map(|d| d.unwrap().data.to_vec()).collect();
            }
        }
        let slot = segments.iter().find(|d| d.starts_with(IR_SLOT_MAGIC)).unwrap();
        let word = |at: usize| u32::from_le_bytes(slot[at..at + 4].try_into().unwrap());
        (word(16), word(20), segments.last().unwrap().clone())
    }

    #[test]
    fn the_slot_is_filled_in_whether_its_fields_were_kept_or_packed_away() {
        let ir = b"the program";
        for fields in [&[0u8; 8][..], &[]] {
            let (ptr, len, placed) = slot_of(&splice_ir(&module(fields, &[]), ir).unwrap());
            assert_eq!((ptr, len), (65536, ir.len() as u32), "fields {fields:?}");
            assert_eq!(placed, ir);
        }
    }

    #[test]
    fn a_segment_over_the_slots_fields_is_refused() {
        let err = splice_ir(&module(&[], &[(1024 + 20, &[1, 2, 3, 4])]), b"ir").unwrap_err();
        assert!(err.to_string().contains("covers the IR slot"), "{err}");
        // Ones that end before the slot, or start after its fields, are not.
        assert!(splice_ir(&module(&[], &[(1000, &[1; 24]), (1024 + 24, &[1; 4])]), b"ir").is_ok());
    }
}
