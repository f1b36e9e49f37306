//! The prebuilt guest core modules that every compiled rule starts from:
//! the component's (`host/guest/omlet_guest.wasm`, which `omlet build` wraps
//! into a component) and the core ABI's (`host/guest/omlet_guest_core.wasm`,
//! docs/abi.md, which `omlet build --target core` writes as it is). Both are
//! built from `guest/` by `scripts/build-guest.sh`.
//!
//! They are committed and embedded in the library, so that a host application builds with stable Rust alone. The
//! build script stamps them with a hash of the sources they were built from
//! (custom section `omlet-guest-source`); [`source_hash_of_tree`] computes the
//! same hash over a checkout, so a test can tell a stale guest.
//!
//! Built with the `test-guest` feature (test builds only),
//! `OMLET_GUEST=/path/to/omlet_guest.wasm` makes the library use another
//! build of the guest (and its core ABI module beside it, `…_core.wasm`), so
//! that the suite can run against a fresh build.
//! Without it the library reads no environment variable.

use std::borrow::Cow;
use std::path::Path;

use sha2::{Digest, Sha256};

static EMBEDDED: &[u8] = include_bytes!("../guest/omlet_guest.wasm");
static EMBEDDED_CORE: &[u8] = include_bytes!("../guest/omlet_guest_core.wasm");

/// Name of the custom section holding the source hash.
pub const SOURCE_SECTION: &str = "omlet-guest-source";

/// The guest core module in use: the embedded one (or, in a test build
/// with the `test-guest` feature, `$OMLET_GUEST` when it is set).
pub fn core_module() -> crate::Result<Cow<'static, [u8]>> {
    #[cfg(feature = "test-guest")]
    if let Some(p) = std::env::var_os("OMLET_GUEST").filter(|p| !p.is_empty()) {
        return std::fs::read(&p).map(Cow::Owned).map_err(|e| crate::Error::io(p, e));
    }
    Ok(Cow::Borrowed(EMBEDDED))
}

/// The guest behind the core ABI (docs/abi.md) in use: the embedded one
/// (or, in a test build with the `test-guest` feature, the `_core.wasm`
/// beside `$OMLET_GUEST` when that is set).
pub fn core_abi_module() -> crate::Result<Cow<'static, [u8]>> {
    #[cfg(feature = "test-guest")]
    if let Some(p) = std::env::var_os("OMLET_GUEST").filter(|p| !p.is_empty()) {
        let p = std::path::PathBuf::from(p);
        let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let core = p.with_file_name(format!("{stem}_core.wasm"));
        return std::fs::read(&core).map(Cow::Owned).map_err(|e| crate::Error::io(core, e));
    }
    Ok(Cow::Borrowed(EMBEDDED_CORE))
}

/// The embedded guest, whatever [`core_module`] gives.
pub fn embedded() -> &'static [u8] {
    EMBEDDED
}

/// The embedded core ABI guest, whatever [`core_abi_module`] gives.
pub fn embedded_core() -> &'static [u8] {
    EMBEDDED_CORE
}

/// A guest core module's digest, for the code cache's keys: XXH3-128 (the
/// cache's entries are trusted for who owns them, not for their names, see
/// `code_cache`), worked out once per process for the embedded guest.
pub fn digest(module: &[u8]) -> [u8; 16] {
    static EMBEDDED_DIGEST: std::sync::OnceLock<[u8; 16]> = std::sync::OnceLock::new();
    let of = |m: &[u8]| twox_hash::XxHash3_128::oneshot(m).to_le_bytes();
    if std::ptr::eq(module, EMBEDDED) {
        return *EMBEDDED_DIGEST.get_or_init(|| of(EMBEDDED));
    }
    of(module)
}

/// The source hash stamped into a guest module, if any.
pub fn stamped_hash(module: &[u8]) -> Option<String> {
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        if let Ok(wasmparser::Payload::CustomSection(c)) = payload
            && c.name() == SOURCE_SECTION
        {
            return std::str::from_utf8(c.data()).ok().map(str::to_string);
        }
    }
    None
}

/// The hash `scripts/guest_hash.py` computes: SHA-256 over the files under
/// `wit/` and `guest/` (but `tests/` folders, which do not go into the
/// guest) and the build script, sorted by path, each as
/// `path NUL length NUL bytes`.
pub fn source_hash_of_tree(root: &Path) -> std::io::Result<String> {
    let mut files = vec!["scripts/build-guest.sh".to_string()];
    for top in ["wit", "guest"] {
        collect(root, &root.join(top), &mut files)?;
    }
    files.sort();
    let mut h = Sha256::new();
    for rel in files {
        let data = std::fs::read(root.join(&rel))?;
        h.update(rel.as_bytes());
        h.update(b"\0");
        h.update(data.len().to_string().as_bytes());
        h.update(b"\0");
        h.update(&data);
    }
    Ok(hex::encode(h.finalize()))
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            if entry.file_name() != "target" && entry.file_name() != "tests" {
                collect(root, &path, out)?;
            }
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}
