//! One bounded reader for every file omlet reads whole: rule files, case
//! files, knowledge configs, `knowdb.toml`, `create.sql` and the rest.
//!
//! A length check on `metadata` is not a bound: `/dev/zero` reports 0 bytes
//! and never ends, a FIFO blocks its reader until somebody writes, and a file
//! can grow between the check and the read. So [`read_bytes`] opens without
//! blocking, refuses anything that is not a regular file (after the open, on
//! the file it holds, so a swap between check and open cannot slip past),
//! and reads at most one byte more than its limit. The error names the file,
//! the limit and where it is set.

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Limit, Result};

/// The default bound on a configuration-like file: a knowledge config,
/// `knowdb.toml`, a `create.sql`, a case file (1 MiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads the regular file at `path`, at most `max` bytes; `what` names the
/// kind of file for the error ("knowledge config", "case file").
///
/// Fails with [`Error::Io`] when the file cannot be opened or is not a
/// regular file (a FIFO, a device, a directory), and with
/// [`Error::Limit`] ([`Limit::FileBytes`]) when it holds more than `max`
/// bytes, whatever its metadata says.
pub fn read_bytes(path: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    read_from(open_regular(path)?, path, max, what)
}

/// [`read_text`] for a file already open, or a stream (standard input):
/// `name` names it in the errors.
pub fn read_text_from(source: impl Read, name: &Path, max: u64, what: &str) -> Result<String> {
    let bytes = read_from(source, name, max, what)?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        Error::io(name, std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not UTF-8 (byte {at})")))
    })
}

/// [`read_bytes`] for a text file: the bytes must be UTF-8.
pub fn read_text(path: &Path, max: u64, what: &str) -> Result<String> {
    read_text_from(open_regular(path)?, path, max, what)
}

/// At most `max` bytes of `source`, which `name` names in the errors.
fn read_from(source: impl Read, name: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    source.take(max.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| Error::io(name, e))?;
    if bytes.len() as u64 > max {
        let message = format!("{}: more than {max} bytes, the most a {what} may take", name.display());
        return Err(Error::limit(Limit::FileBytes, message));
    }
    Ok(bytes)
}

/// The folder of the file `path`, as the files it names are found from:
/// its parent, or `.` for a bare file name (whose parent is the empty path,
/// which names no folder).
pub fn folder(path: &Path) -> &Path {
    path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// The longest line a knowdb CSV file may hold (1 MiB): longer, and the
/// read fails naming the line, instead of gathering an endless line.
pub const MAX_CSV_LINE_BYTES: u64 = 1 << 20;

/// Opens the regular file at `path` for a streaming read (a knowdb's CSV
/// data), whose lines may each be at most [`MAX_CSV_LINE_BYTES`] long. The
/// file's size is bounded by the table's own limits; this bounds what one
/// record can gather.
pub fn open_lines(path: &Path) -> Result<impl Read> {
    Ok(LineBound { inner: open_regular(path)?, run: 0, line: 1, max: MAX_CSV_LINE_BYTES })
}

struct LineBound<R> {
    inner: R,
    /// Bytes since the last newline.
    run: u64,
    /// The line being read (1-based), for the error.
    line: u64,
    max: u64,
}

impl<R: Read> Read for LineBound<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        for &b in &buf[..n] {
            if b == b'\n' {
                self.run = 0;
                self.line += 1;
            } else {
                self.run += 1;
                if self.run > self.max {
                    let message =
                        format!("line {} is longer than {} bytes, the most a knowdb CSV line may take", self.line, self.max);
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, message));
                }
            }
        }
        Ok(n)
    }
}

fn open_regular(path: &Path) -> Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // A FIFO opened for reading would wait for a writer; without
        // blocking the open returns at once and the check below refuses it.
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        let kind = if meta.is_dir() { "a directory" } else { "not a regular file (a FIFO, socket or device)" };
        let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{kind}: omlet reads only regular files here"));
        return Err(Error::io(path, e));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_that_never_ends_is_refused_without_reading_it() {
        let e = read_bytes(Path::new("/dev/zero"), 1024, "knowledge config").unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn an_endless_csv_line_is_cut_off_naming_its_line() {
        let mut r = LineBound { inner: std::io::repeat(b'x'), run: 0, line: 1, max: 4096 };
        let mut sink = Vec::new();
        let e = (&mut r).take(1 << 20).read_to_end(&mut sink).unwrap_err();
        assert!(e.to_string().contains("line 1 is longer than 4096 bytes"), "{e}");
        let mut ok = LineBound { inner: &b"a,b\nc,d\n"[..], run: 0, line: 1, max: 3 };
        let mut s = String::new();
        ok.read_to_string(&mut s).unwrap();
        assert_eq!(s, "a,b\nc,d\n");
    }

    #[test]
    fn a_fifo_is_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("omlet-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("rule.oml");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_text(&fifo, 1024, "rule file").unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn a_file_over_the_limit_is_refused_naming_the_limit() {
        let dir = std::env::temp_dir().join(format!("omlet-big-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("knowdb.toml");
        std::fs::write(&p, vec![b'#'; 2049]).unwrap();
        let e = read_text(&p, 2048, "knowdb.toml").unwrap_err();
        let ok = read_text(&p, 2049, "knowdb.toml").map(|t| t.len());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(e, Error::Limit { limit: Limit::FileBytes, .. }), "{e}");
        assert!(e.to_string().contains("more than 2048 bytes"), "{e}");
        assert_eq!(ok.unwrap(), 2049);
    }
}
