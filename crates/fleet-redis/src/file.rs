//! The one reader of a file fleet is given (SPEC §7 S10): the page's token, the configuration,
//! a password, a certificate, a key or a CA bundle, each read to a bound stated for its kind and
//! refused past it, never read whole. A path is the operator's to give, and one that names
//! `/dev/zero`, a FIFO that never ends or a log that grew to gigabytes by mistake must cost
//! fleet the bound, not its memory: `--ui-token-file /dev/zero` once grew `fleet serve` to 24 GB.
//!
//! It lives in the transport crate because that is the lowest crate of the workspace that may do
//! I/O (the core crate holds none, SPEC §1.1), and the Redis CA file is read here too: every
//! reader of a given file, this crate's and the product's, is this one function.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A kind of file fleet reads, and the most of it fleet takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The most bytes read; one more is refused.
    pub bytes: u64,
    /// What such a file is, in words.
    pub what: &'static str,
    /// What to do about a file past the bound, in words.
    pub fix: &'static str,
}

/// A file of one secret: the page's token, a Redis or BMC password. Its first line is the
/// secret (a token at most 4 096 characters, SPEC §4.13 L9; a password far less), so 64 KiB is
/// room for any such file and still nothing to hold.
pub const SECRET: Limit = Limit {
    bytes: 64 << 10,
    what: "a token or password file",
    fix: "give the file that holds the secret alone, on its first line",
};

/// A PEM file: a certificate chain, a private key or a CA bundle. The whole bundle of a
/// Debian system's CAs (some 140 certificates) is about 220 kB, so 1 MiB holds any bundle a
/// deployment means to trust.
pub const PEM: Limit = Limit {
    bytes: 1 << 20,
    what: "a PEM file (a certificate chain, a key or a CA bundle)",
    fix: "give the certificates or the key meant, in PEM",
};

/// The configuration file. Its largest is 100 000 slots (SPEC §4.1), and a slot with every field
/// it may carry (its own names, driver and power figures) is under 400 bytes in flow form, so
/// such a file is under 40 MiB; 64 MiB holds it with room, and is still a bound on the memory a
/// wrong path can cost.
pub const CONFIG: Limit = Limit {
    bytes: 64 << 20,
    what: "a configuration file",
    fix: "check that it is the configuration meant: fleet's largest, 100 000 slots, is under \
          40 MiB",
};

/// A file fleet could not take: unreadable, or past its kind's bound.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be opened or read: the caller names it, with the flag or field that
    /// gave it.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{} holds {limit}: {}", path.display(), limit.fix)]
    TooLarge { path: PathBuf, limit: Limit },
}

impl ReadError {
    /// Whether the file was refused for its size (bad input, never a failure of the world).
    pub fn is_too_large(&self) -> bool {
        matches!(self, ReadError::TooLarge { .. })
    }
}

/// Reads the file at `path`: its bytes, at most `limit.bytes` of them. A file of more is refused,
/// having read one byte past the bound and no more (`Read::take`), whatever the file is.
pub fn read(path: &Path, limit: Limit) -> Result<Vec<u8>, ReadError> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(limit.bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit.bytes {
        return Err(ReadError::TooLarge {
            path: path.to_owned(),
            limit,
        });
    }
    Ok(bytes)
}

/// The bound in words, as a refusal says it: `more than 1 MiB, the most fleet reads of a PEM
/// file (…)`.
impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "more than {}, the most fleet reads of {}",
            Bytes(self.bytes),
            self.what
        )
    }
}

/// A bound in words: `64 KiB`, `1 MiB`.
struct Bytes(u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            n if n >= 1 << 20 && n % (1 << 20) == 0 => write!(f, "{} MiB", n >> 20),
            n if n >= 1 << 10 && n % (1 << 10) == 0 => write!(f, "{} KiB", n >> 10),
            n => write!(f, "{n} bytes"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Limit = Limit {
        bytes: 16,
        what: "a test file",
        fix: "write less",
    };

    fn file(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().expect("a temp file");
        std::io::Write::write_all(&mut f, bytes).expect("written");
        f
    }

    #[test]
    fn a_file_at_its_limit_is_read_whole() {
        let f = file(&[b'x'; 16]);
        assert_eq!(read(f.path(), SMALL).unwrap(), vec![b'x'; 16]);
        assert_eq!(read(file(b"").path(), SMALL).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn a_file_one_byte_past_its_limit_is_refused_naming_it_its_limit_and_the_fix() {
        let f = file(&[b'x'; 17]);
        let e = read(f.path(), SMALL).unwrap_err();
        assert!(e.is_too_large());
        assert_eq!(
            e.to_string(),
            format!(
                "{} holds more than 16 bytes, the most fleet reads of a test file: write less",
                f.path().display()
            )
        );
    }

    // The bound holds for a file without end: one byte past it is read, and no more.
    #[test]
    fn a_file_without_end_costs_the_limit_and_is_refused() {
        let e = read(Path::new("/dev/zero"), SECRET).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/zero holds more than 64 KiB, the most fleet reads of a token or password file: \
             give the file that holds the secret alone, on its first line"
        );
    }

    #[test]
    fn a_missing_file_is_the_io_error_itself() {
        let e = read(Path::new("/nonexistent/fleet/file"), PEM).unwrap_err();
        assert!(
            matches!(&e, ReadError::Io(io) if io.kind() == std::io::ErrorKind::NotFound),
            "{e:?}"
        );
        assert!(!e.is_too_large());
    }

    #[test]
    fn the_limits_read_as_people_write_them() {
        assert_eq!(Bytes(SECRET.bytes).to_string(), "64 KiB");
        assert_eq!(Bytes(PEM.bytes).to_string(), "1 MiB");
        assert_eq!(Bytes(CONFIG.bytes).to_string(), "64 MiB");
        assert_eq!(Bytes(17).to_string(), "17 bytes");
    }
}
