//! The shared peer secret: read from its file (its size, length and mode checked), made
//! for `dev`, never shown. May import `security::hex`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::security::hex::hex_encode;

/// A shorter secret is refused: 32 bytes is HMAC-SHA256's own key strength.
pub const PEER_SECRET_BYTES_MIN: usize = 32;
/// Bound on the secret file: anything larger is not a secret file.
pub const PEER_SECRET_FILE_BYTES_MAX: u64 = 4096;
/// Random bytes in a generated secret (written as hex, so twice as many characters).
pub const PEER_SECRET_GENERATED_BYTES: usize = 32;

// ---- the secret -----------------------------------------------------------------------

#[derive(Debug, thiserror::Error)]
pub enum PeerSecretError {
    #[error("reading the peer secret file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the peer secret file {path} is larger than {PEER_SECRET_FILE_BYTES_MAX} bytes")]
    TooLarge { path: PathBuf },
    #[error(
        "the peer secret in {path} is {len} bytes after trimming; at least \
         {PEER_SECRET_BYTES_MIN} are required (e.g. `openssl rand -hex 32 > FILE`)"
    )]
    TooShort { path: PathBuf, len: usize },
    #[error(
        "the peer secret file {path} is readable by every user (mode {mode:o}); \
         run `chmod 600 {path}`"
    )]
    WorldReadable { path: PathBuf, mode: u32 },
}

/// The shared peer secret. Its bytes never appear in `Debug` output or logs.
#[derive(Clone)]
pub struct PeerSecret(Arc<[u8]>);

impl fmt::Debug for PeerSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PeerSecret({} bytes, redacted)", self.0.len())
    }
}

impl PeerSecret {
    /// Reads `--peer-secret-file`: the file's bytes with surrounding whitespace trimmed
    /// (a trailing newline from `echo` is not part of the secret). A world-readable file
    /// is refused; a group-readable one is accepted with a warning.
    pub fn read_file(path: &Path) -> Result<PeerSecret, PeerSecretError> {
        let io = |source| PeerSecretError::Io {
            path: path.to_owned(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if meta.len() > PEER_SECRET_FILE_BYTES_MAX {
            return Err(PeerSecretError::TooLarge {
                path: path.to_owned(),
            });
        }
        check_secret_mode(path, &meta)?;
        let raw = std::fs::read(path).map_err(io)?;
        let trimmed = raw.trim_ascii();
        if trimmed.len() < PEER_SECRET_BYTES_MIN {
            return Err(PeerSecretError::TooShort {
                path: path.to_owned(),
                len: trimmed.len(),
            });
        }
        Ok(PeerSecret(trimmed.into()))
    }

    /// A fresh random secret, as the hex text a secret file holds.
    pub fn generate_text() -> String {
        let bytes: [u8; PEER_SECRET_GENERATED_BYTES] = rand::random();
        hex_encode(&bytes)
    }

    /// Writes a fresh random secret to a new file at `path`, mode 0600, and returns it
    /// (`leasehold dev` and the test fixtures).
    pub fn write_new_file(path: &Path) -> Result<PeerSecret, PeerSecretError> {
        use std::io::Write;
        let io = |source| PeerSecretError::Io {
            path: path.to_owned(),
            source,
        };
        let mut f = new_private_file(path).map_err(io)?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        // The new file's directory entry is durable only once its directory is synced.
        f.write_all(Self::generate_text().as_bytes())
            .and_then(|()| f.sync_all())
            .and_then(|()| std::fs::File::open(dir)?.sync_all())
            .map_err(io)?;
        Self::read_file(path)
    }

    /// The key's bytes: for the header's MAC only.
    pub(super) fn key(&self) -> &[u8] {
        &self.0
    }

    #[cfg(test)]
    pub(super) fn from_bytes(b: &[u8]) -> PeerSecret {
        PeerSecret(b.into())
    }
}

#[cfg(unix)]
pub(super) fn new_private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
pub(super) fn new_private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

#[cfg(unix)]
fn check_secret_mode(path: &Path, meta: &std::fs::Metadata) -> Result<(), PeerSecretError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o007 != 0 {
        return Err(PeerSecretError::WorldReadable {
            path: path.to_owned(),
            mode,
        });
    }
    if mode & 0o070 != 0 {
        tracing::warn!(path = %path.display(), mode = format!("{mode:o}"),
            "the peer secret file is readable by its group; chmod 600 is safer");
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_secret_mode(_: &Path, _: &std::fs::Metadata) -> Result<(), PeerSecretError> {
    Ok(())
}
