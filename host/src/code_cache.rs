//! Compiled guest code kept on disk between runs.
//!
//! Why: every load of a rule compiles its component with Cranelift, about
//! half a second of the guest's 1 MiB of code on a 2-core machine, before
//! the first record. `omlet run` over 200,000 records spent 0.55 s of its
//! 1.26 s there, and `omlet test` pays it for each rule. Reading the
//! machine code of an earlier compilation back takes a few milliseconds.
//!
//! What it replaces: `Component::from_binary` on every load; a miss still
//! does exactly that, and then writes the result here.
//!
//! Cost: per load, reading the entry into memory (a few MiB: wasmtime then
//! copies it into its own executable memory) and a checksum over it (XXH3 at
//! memory speed), and for a component given as bytes one SHA-256 over them
//! (about 0.5 ms a MiB) (a rule set compiled from its sources is named by its
//! program instead, [`CodeCache::rule`]); on disk the compiled code of each
//! distinct rule set (about 3 to 6 MiB), at most [`MAX_BYTES`] in all: past
//! it the least recently used entries are removed.
//!
//! Trust: a cached entry is machine code that the process will run, so it
//! is used only from a folder owned by the user and writable by nobody
//! else, and only from a file (not a link) owned by the user and writable by
//! nobody else. Its key (the entry's name) covers the component (its bytes,
//! or the guest, the program and the code that joins them) and the engine's
//! identity (wasmtime's compatibility hash: its version, the target, and
//! every engine setting that changes code), so a new omlet, a new guest or
//! another engine configuration never reads an old entry.
//!
//! The entry carries that key too, and the engine's identity, in its header
//! (`HEADER`), and is used only when both equal the ones being looked up
//! and the checksum of its code matches: an entry renamed to another rule's
//! name, or copied over another's file, is never run as that rule. This
//! binding guards against mix-ups (a rename, a copy, a volume shared by
//! several hosts or versions); it is no defence against someone who can
//! write to the folder, who can write an entry with any key and checksum:
//! that is what the owner and mode checks are for. (A keyed MAC would not
//! change that: its key would have to sit where the same user can read it.)
//!
//! An entry is read into memory, at most [`MAX_ENTRY_BYTES`], and wasmtime
//! copies the code from there into memory of its own; the file is never
//! mapped, so a file truncated or overwritten after the load cannot reach a
//! running rule (a mapped file cut short is a SIGBUS, one overwritten
//! changes the code and data under the rule). When in doubt (an unreadable
//! or oversized file, another key, a wrong checksum, code wasmtime
//! refuses), the component is compiled again and the entry rewritten.

use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::{Error, Result};

/// Most bytes the cache folder's entries may take together (512 MiB).
pub const MAX_BYTES: u64 = 512 << 20;

/// What an entry starts with: the format's name.
const MAGIC: &[u8; 16] = b"omlet-code-v3\0\0\0";

/// The bytes before the code: [`MAGIC`], the entry's key ([`key`] or
/// [`rule_key`]), the engine's identity ([`engine_id`]), the code's length
/// (u64, little-endian) and its [`checksum`]. wasmtime's serialized code
/// follows.
const HEADER: usize = MAGIC.len() + 32 + 32 + 8 + 16;

/// The largest entry read (256 MiB; the guest's code takes 3 to 6 MiB): a
/// larger file is not read, and compiled code that large is not written.
pub const MAX_ENTRY_BYTES: u64 = 256 << 20;

/// An entry's checksum: XXH3-128 of its code. It finds a damaged or cut
/// entry; it is no defence against a forged one, and need not be, since an
/// entry is read only from files that the user alone can write (a wrong key
/// is found by comparing the key in the header). SHA-256
/// took about 1.4 ms a load over the nginx rule's 3.4 MiB of code, XXH3
/// about a tenth of that.
fn checksum(code: &[u8]) -> [u8; 16] {
    twox_hash::XxHash3_128::oneshot(code).to_le_bytes()
}

/// What a rule set's key ([`rule_key`]) starts with, so that it never
/// equals a component's.
const RULE_MAGIC: &[u8; 16] = b"omlet-rule-v1\0\0\0";

/// A folder of compiled components.
#[derive(Debug, Clone)]
pub struct CodeCache {
    dir: PathBuf,
    max_bytes: u64,
}

/// The folder omlet uses when the embedder names none: `.cache/omlet/code`
/// in the effective user's home folder, as the system's user database gives
/// it; `None` when it gives none. No environment variable is read: a host
/// that honours `XDG_CACHE_HOME`, or a variable of its own, sets
/// [`EngineConfig::code_cache`](crate::EngineConfig::code_cache) itself, as
/// the CLI does with `OMLET_CODE_CACHE`.
pub fn default_dir() -> Option<PathBuf> {
    user_home().map(|h| h.join(".cache/omlet/code"))
}

/// The effective user's home folder from the user database (`getpwuid_r`).
#[cfg(unix)]
fn user_home() -> Option<PathBuf> {
    use std::ffi::{CStr, OsStr};
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: `passwd` is a plain C struct of integers and pointers, for
        // which all zeroes (null pointers) is a valid value.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `pwd` and `found` are valid for writes, and `buf` for
        // `buf.len()` bytes; the call writes the entry's strings into `buf`
        // and nowhere else. geteuid has no preconditions and cannot fail.
        let rc = unsafe { libc::getpwuid_r(libc::geteuid(), &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || found.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        // SAFETY: on success `pw_dir` points to a NUL-terminated string in
        // `buf`, which is alive and unchanged here.
        let dir = unsafe { CStr::from_ptr(pwd.pw_dir) };
        let dir = PathBuf::from(OsStr::from_bytes(dir.to_bytes()));
        return dir.is_absolute().then_some(dir);
    }
}

#[cfg(not(unix))]
fn user_home() -> Option<PathBuf> {
    None
}

impl CodeCache {
    /// A cache in `dir` (made, with mode 0700, at the first entry written).
    pub fn new(dir: impl Into<PathBuf>) -> CodeCache {
        CodeCache { dir: dir.into(), max_bytes: MAX_BYTES }
    }

    /// The same, holding at most `max_bytes` of entries.
    pub fn with_max_bytes(mut self, max_bytes: u64) -> CodeCache {
        self.max_bytes = max_bytes;
        self
    }

    /// Its folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The compiled `component`: read from the cache when a trusted entry
    /// holds it, else compiled and written there. A cache that cannot be
    /// used (a folder that is not the user's, a full disk) is passed by,
    /// with a debug-level log: the load never fails because of the cache.
    pub fn component(&self, engine: &Engine, component: &[u8]) -> Result<(Component, Outcome)> {
        let id = engine_id(engine);
        self.entry(engine, &id, &key(&id, component), || Ok(std::borrow::Cow::Borrowed(component)))
    }

    /// The compiled component of the rule set whose compiled program is `ir`
    /// (`Program::to_bytes`), on the guest core module `guest`: read from
    /// the cache when a trusted entry holds it, else `build` makes the
    /// component, which is compiled and written there.
    ///
    /// Why: the component is a function of the guest, the program and the
    /// code that splices one into the other (`crate::build`), so its entry
    /// can be found from those alone. A start that finds it skips building
    /// the component (splicing the program into a copy of the guest and
    /// encoding it with `wit-component`) and hashing its 1 MiB, a third of
    /// an `omlet run` start (docs/decisions/0029-code-cache.md).
    pub fn rule(
        &self,
        engine: &Engine,
        guest: &[u8],
        ir: &[u8],
        build: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<(Component, Outcome)> {
        let id = engine_id(engine);
        self.entry(engine, &id, &rule_key(&id, guest, ir), || build().map(std::borrow::Cow::Owned))
    }

    /// The entry for `key` on the engine `id`, or else the component `make`
    /// gives, compiled and written under `key`.
    fn entry<'c>(
        &self,
        engine: &Engine,
        id: &Digest32,
        key: &Digest32,
        make: impl FnOnce() -> Result<std::borrow::Cow<'c, [u8]>>,
    ) -> Result<(Component, Outcome)> {
        let path = self.dir.join(format!("{}.cwasm", hex::encode(key)));
        let trusted = trusted_dir(&self.dir);
        if trusted && let Some(c) = self.read(engine, &path, id, key) {
            return Ok((c, Outcome::Hit));
        }
        let compiled = Component::from_binary(engine, &make()?).map_err(|e| Error::load("component", e))?;
        let outcome = match self.write(&compiled, &path, id, key) {
            Ok(()) => Outcome::Written,
            Err(e) => {
                tracing::debug!(target: "omlet::code_cache", "{}: not written: {e}", path.display());
                Outcome::Unused
            }
        };
        Ok((compiled, outcome))
    }

    /// The entry at `path`, if it is there, trusted, written for `key` on
    /// the engine `id`, whole, and loads.
    ///
    /// The file is read into memory, not mapped: wasmtime copies the code
    /// into memory of its own, and nothing of the file is used after this
    /// returns, so a file cut short or written over later cannot reach the
    /// rule (a mapping of it would: a SIGBUS, or other code under a running
    /// rule). The read and the copy cost about 2 ms of a 12 ms start.
    fn read(&self, engine: &Engine, path: &Path, id: &Digest32, key: &Digest32) -> Option<Component> {
        let (file, len) = open_trusted(path)?;
        let bytes = match read_capped(&file, len, MAX_ENTRY_BYTES) {
            Some(b) => b,
            None => {
                tracing::debug!(target: "omlet::code_cache", "{}: unreadable or over {MAX_ENTRY_BYTES} bytes; compiling again", path.display());
                return None;
            }
        };
        let code = match check(&bytes, id, key) {
            Ok(code) => code,
            Err(why) => {
                tracing::debug!(target: "omlet::code_cache", "{}: {why}; compiling again", path.display());
                return None;
            }
        };
        // SAFETY: `code` is what `Component::serialize` wrote (see `write`)
        // for this key, on an engine of this identity (both checked in its
        // header), whole (its checksum was just checked), in a file and a
        // folder that only this user can write; wasmtime checks again that it
        // was made by a compatible engine. It is memory of ours, which nobody
        // else changes, and wasmtime copies it before returning.
        match unsafe { Component::deserialize(engine, code) } {
            Ok(c) => {
                // Marks it used, for the eviction of the least recently used.
                let _ = file.set_modified(std::time::SystemTime::now());
                Some(c)
            }
            Err(e) => {
                tracing::debug!(target: "omlet::code_cache", "{}: refused ({e}); compiling again", path.display());
                None
            }
        }
    }

    /// Writes `compiled` to `path`, whole or not at all (a file of its own,
    /// renamed into place), then keeps the folder under its size.
    fn write(&self, compiled: &Component, path: &Path, id: &Digest32, key: &Digest32) -> std::io::Result<()> {
        make_private_dir(&self.dir)?;
        if !trusted_dir(&self.dir) {
            return Err(std::io::Error::other("the folder is not the user's alone"));
        }
        let code = compiled.serialize().map_err(std::io::Error::other)?;
        if (HEADER + code.len()) as u64 > MAX_ENTRY_BYTES {
            return Err(std::io::Error::other("the compiled code is over the largest entry"));
        }
        let tmp = self.dir.join(format!(
            ".{}.{}.tmp",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
        ));
        let mut options = std::fs::File::options();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let written = (|| {
            let mut f = options.open(&tmp)?;
            f.write_all(&header(id, key, &code))?;
            f.write_all(&code)?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written?;
        self.evict();
        Ok(())
    }

    /// Removes the least recently used entries until the rest take at most
    /// `max_bytes` (the newest always stays).
    fn evict(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        let mut all: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        all.sort_by_key(|e| std::cmp::Reverse(e.0));
        let mut kept = 0u64;
        for (i, (_, len, path)) in all.into_iter().enumerate() {
            kept = kept.saturating_add(len);
            if i > 0 && kept > self.max_bytes {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// Where a load's code came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Read from the cache.
    Hit,
    /// Compiled, and written to the cache.
    Written,
    /// Compiled; the cache could not be used.
    Unused,
}

/// SHA-256 as a [`Hasher`], for wasmtime's compatibility hash.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// A SHA-256 digest: an entry's key, an engine's identity.
type Digest32 = [u8; 32];

/// The engine's identity: SHA-256 over wasmtime's compatibility hash (its
/// version, the target and every setting that changes code).
fn engine_id(engine: &Engine) -> Digest32 {
    let mut h = ShaHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    h.0.finalize().into()
}

/// The key of a component's entry: SHA-256 over the format, the engine's
/// identity and the component.
fn key(id: &Digest32, component: &[u8]) -> Digest32 {
    let mut h = Sha256::new();
    h.update(MAGIC);
    h.update(id);
    h.update((component.len() as u64).to_le_bytes());
    h.update(component);
    h.finalize().into()
}

/// The key of a rule set's entry ([`CodeCache::rule`]): SHA-256 over the
/// formats (of the key and of the entry), the engine's identity, what makes
/// the component out of the guest and the program (this crate's version,
/// the source of `crate::build`, which splices and encodes, and the manifest
/// that pins `wit-component`), the guest's digest and the program. Any
/// change to the splicing code, even a comment, names new entries: the cost
/// is one compilation, where a missed change would run a stale component.
fn rule_key(id: &Digest32, guest: &[u8], ir: &[u8]) -> Digest32 {
    let mut h = Sha256::new();
    h.update(RULE_MAGIC);
    h.update(MAGIC);
    h.update(id);
    for part in [env!("CARGO_PKG_VERSION").as_bytes(), include_bytes!("build.rs"), include_bytes!("../Cargo.toml")] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.update(crate::guest::digest(guest));
    h.update((ir.len() as u64).to_le_bytes());
    h.update(ir);
    h.finalize().into()
}

/// The header of the entry of `code` ([`HEADER`]).
fn header(id: &Digest32, key: &Digest32, code: &[u8]) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(key);
    h.extend_from_slice(id);
    h.extend_from_slice(&(code.len() as u64).to_le_bytes());
    h.extend_from_slice(&checksum(code));
    h
}

/// The code of the entry `bytes`, if it is one of this format written for
/// `key` on the engine `id`, and whole; else why not.
fn check<'b>(bytes: &'b [u8], id: &Digest32, key: &Digest32) -> std::result::Result<&'b [u8], &'static str> {
    let (head, code) = bytes.split_at_checked(HEADER).ok_or("shorter than its header")?;
    let (magic, rest) = head.split_at(MAGIC.len());
    let (its_key, rest) = rest.split_at(32);
    let (its_id, rest) = rest.split_at(32);
    let (len, digest) = rest.split_at(8);
    if magic != MAGIC.as_slice() {
        return Err("not an entry of this format");
    }
    if its_key != key.as_slice() {
        return Err("written for another component (a renamed or copied entry)");
    }
    if its_id != id.as_slice() {
        return Err("written by another engine");
    }
    if u64::from_le_bytes(len.try_into().unwrap_or_default()) != code.len() as u64 || checksum(code) != digest {
        return Err("its checksum does not match");
    }
    Ok(code)
}

/// The file's bytes, if it reads whole and holds at most `cap` of them
/// (`len`, its length when opened, sizes the buffer; a file that grows past
/// `cap` meanwhile is refused all the same).
fn read_capped(file: &std::fs::File, len: u64, cap: u64) -> Option<Vec<u8>> {
    if len > cap {
        return None;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).ok()?);
    file.take(cap + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= cap).then_some(bytes)
}

/// Makes `dir` and its missing parents, the last with mode 0700.
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// Whether `dir` is a folder (not a symbolic link) that is the user's
/// alone ([`owned_alone`]).
fn trusted_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && owned_alone(&m))
}

/// An entry opened for reading, and its length, if it is a plain file (a
/// link is not followed) that is the user's alone, checked on the open file.
fn open_trusted(path: &Path) -> Option<(std::fs::File, u64)> {
    let mut options = std::fs::File::options();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NOFOLLOW);
    let file = options.open(path).ok()?;
    let m = file.metadata().ok()?;
    (m.is_file() && owned_alone(&m)).then_some((file, m.len()))
}

/// Owned by the effective user, and writable by no one else. Off Unix,
/// always.
fn owned_alone(m: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        m.uid() == me && m.mode() & 0o022 == 0
    }
    #[cfg(not(unix))]
    {
        let _ = m;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest component: its preamble alone.
    const EMPTY: &[u8] = &[0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

    fn engine() -> Engine {
        let mut c = wasmtime::Config::new();
        c.wasm_component_model(true);
        Engine::new(&c).unwrap()
    }

    fn entries(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
        v.sort();
        v
    }

    /// The default folder comes from the user database, not from `$HOME`:
    /// the user running the tests has an entry with an absolute home.
    #[cfg(unix)]
    #[test]
    fn the_default_folder_is_under_the_users_home_from_the_user_database() {
        let dir = default_dir().expect("the test user has a home folder in the user database");
        assert!(dir.is_absolute() && dir.ends_with(".cache/omlet/code"), "{}", dir.display());
        assert_eq!(Some(dir.as_path()), user_home().map(|h| h.join(".cache/omlet/code")).as_deref());
    }

    #[test]
    fn a_second_load_reads_what_the_first_wrote() {
        let t = tempfile::tempdir().unwrap();
        let cache = CodeCache::new(t.path().join("code"));
        let e = engine();
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Written);
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Hit);
        let files = entries(cache.dir());
        assert_eq!(files.len(), 1, "{files:?}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(cache.dir()).unwrap().permissions().mode() & 0o777, 0o700);
            assert_eq!(std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777, 0o600);
        }
    }

    #[test]
    fn a_damaged_entry_is_compiled_again_and_rewritten() {
        let t = tempfile::tempdir().unwrap();
        let cache = CodeCache::new(t.path());
        let e = engine();
        cache.component(&e, EMPTY).unwrap();
        let file = entries(t.path()).remove(0);
        let whole = std::fs::read(&file).unwrap();
        // A byte of the format's name, of the key, of the engine's identity,
        // of the length, of the checksum, of the code, its last.
        for at in [0, MAGIC.len(), MAGIC.len() + 32, HEADER - 24, HEADER - 1, whole.len() / 3, whole.len() - 1] {
            let mut bytes = whole.clone();
            bytes[at] ^= 1;
            std::fs::write(&file, &bytes).unwrap();
            assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Written, "byte {at} of {}", whole.len());
            assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Hit);
        }
        std::fs::write(&file, b"short").unwrap();
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Written);
        std::fs::write(&file, &whole[..whole.len() - 1]).unwrap();
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Written, "cut by a byte");
        let mut longer = whole.clone();
        longer.push(0);
        std::fs::write(&file, &longer).unwrap();
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Written, "a byte more");
    }

    /// An entry carries the key it was written for: moved to another key's
    /// name, whole and with its checksum right, it is not used for that key.
    #[test]
    fn an_entry_under_another_keys_name_is_not_used() {
        let t = tempfile::tempdir().unwrap();
        let cache = CodeCache::new(t.path());
        let e = engine();
        let ok = || Ok(EMPTY.to_vec());
        cache.rule(&e, b"guest", b"one", ok).unwrap();
        let one = entries(t.path()).remove(0);
        cache.rule(&e, b"guest", b"two", ok).unwrap();
        let two = entries(t.path()).into_iter().find(|p| *p != one).unwrap();
        std::fs::rename(&one, &two).unwrap();
        let built = std::cell::Cell::new(false);
        let (_, outcome) = cache
            .rule(&e, b"guest", b"two", || {
                built.set(true);
                ok()
            })
            .unwrap();
        assert_eq!(outcome, Outcome::Written);
        assert!(built.get(), "the component was built again, not taken from the other entry");
        assert_eq!(cache.rule(&e, b"guest", b"two", ok).unwrap().1, Outcome::Hit);
        // The same for a component given as bytes, and between the two kinds.
        let id = engine_id(&e);
        let bytes_entry = t.path().join(format!("{}.cwasm", hex::encode(key(&id, EMPTY))));
        std::fs::copy(&two, &bytes_entry).unwrap();
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Written);
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Hit);
    }

    /// An entry over [`MAX_ENTRY_BYTES`] is not read (nor mapped).
    #[test]
    fn an_entry_over_the_largest_size_is_not_read() {
        let t = tempfile::tempdir().unwrap();
        let cache = CodeCache::new(t.path());
        let e = engine();
        cache.component(&e, EMPTY).unwrap();
        let file = entries(t.path()).remove(0);
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.set_len(MAX_ENTRY_BYTES + 1).unwrap();
        assert_eq!(read_capped(&f, MAX_ENTRY_BYTES + 1, MAX_ENTRY_BYTES), None);
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Written);
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Hit);
        // A file that grows past the bound after it was opened.
        let f = std::fs::File::open(&file).unwrap();
        assert_eq!(read_capped(&f, 0, 16).map(|b| b.len()), None);
        assert!(read_capped(&f, 0, MAX_ENTRY_BYTES).is_some());
    }

    #[cfg(unix)]
    #[test]
    fn a_folder_others_may_write_is_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let cache = CodeCache::new(t.path());
        let e = engine();
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Unused);
        assert!(entries(t.path()).is_empty());
        // Nor a file others may write, in a folder of the user's alone.
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Written);
        let file = entries(t.path()).remove(0);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Written, "not read: written again");
        // Nor a link, even to a file of the user's alone.
        let file = entries(t.path()).remove(0);
        let elsewhere = t.path().join("elsewhere");
        std::fs::rename(&file, &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Written, "not followed: written again");
        assert!(std::fs::symlink_metadata(&file).unwrap().is_file(), "the link was replaced");
    }

    /// A rule set's entry is found by the guest and the program alone: the
    /// component is built only when the entry is missing, and another guest
    /// or another program names another entry.
    #[test]
    fn a_rule_sets_entry_is_found_without_building_its_component() {
        let t = tempfile::tempdir().unwrap();
        let cache = CodeCache::new(t.path());
        let e = engine();
        let built = std::cell::Cell::new(0);
        let build = || {
            built.set(built.get() + 1);
            Ok(EMPTY.to_vec())
        };
        assert_eq!(cache.rule(&e, b"guest", b"ir", build).unwrap().1, Outcome::Written);
        assert_eq!(cache.rule(&e, b"guest", b"ir", build).unwrap().1, Outcome::Hit);
        assert_eq!(built.get(), 1, "a hit builds nothing");
        assert_eq!(cache.rule(&e, b"guest 2", b"ir", build).unwrap().1, Outcome::Written);
        assert_eq!(cache.rule(&e, b"guest", b"ir 2", build).unwrap().1, Outcome::Written);
        // Nor does a rule set's key meet the key of its component's bytes.
        assert_eq!(cache.component(&e, EMPTY).unwrap().1, Outcome::Written);
        assert_eq!(entries(t.path()).len(), 4);
    }

    #[test]
    fn other_engine_settings_use_other_entries() {
        let t = tempfile::tempdir().unwrap();
        let cache = CodeCache::new(t.path());
        cache.component(&engine(), EMPTY).unwrap();
        let mut c = wasmtime::Config::new();
        c.wasm_component_model(true).consume_fuel(true);
        let fueled = Engine::new(&c).unwrap();
        assert_eq!(cache.component(&fueled, EMPTY).unwrap().1, Outcome::Written);
        assert_eq!(entries(t.path()).len(), 2);
    }

    #[test]
    fn the_folder_keeps_under_its_size() {
        let t = tempfile::tempdir().unwrap();
        let e = engine();
        let one = {
            let c = CodeCache::new(t.path());
            c.component(&e, EMPTY).unwrap();
            std::fs::metadata(entries(t.path()).remove(0)).unwrap().len()
        };
        let cache = CodeCache::new(t.path()).with_max_bytes(one * 5 / 2);
        let mut fuel = wasmtime::Config::new();
        fuel.wasm_component_model(true).consume_fuel(true);
        let mut epoch = wasmtime::Config::new();
        epoch.wasm_component_model(true).epoch_interruption(true);
        for c in [fuel, epoch] {
            std::thread::sleep(std::time::Duration::from_millis(20));
            cache.component(&Engine::new(&c).unwrap(), EMPTY).unwrap();
        }
        assert_eq!(entries(t.path()).len(), 2, "the oldest of three went");
    }
}
