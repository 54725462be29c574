//! `up`'s bearer token, kept across restarts: a client configured once keeps working.
//!
//! The token lives in `$XDG_STATE_HOME/sandbox-mcp/token` (or
//! `~/.local/state/sandbox-mcp/token`), a file only its owner may read (0600, in a 0700
//! folder). `up` reuses it at every start; `--new-token` replaces it; `MCP_AUTH_TOKEN`
//! overrides it (and is not saved). A token file that others may read is refused: the
//! runner's sandboxes are only as safe as the token that reaches them.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The shortest saved token taken as it is.
const MIN_LEN: usize = 32;

/// Where the token comes from this time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `MCP_AUTH_TOKEN` (or `--auth-token`) gave it.
    Given,
    /// The file held it from an earlier start.
    Saved(PathBuf),
    /// Made now, and saved there for the next start.
    New(PathBuf),
    /// Made now; there is no place to save it (no `$HOME` or `$XDG_STATE_HOME`).
    Unsaved,
}

/// Why the token file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenStoreError {
    /// Others may read the file.
    #[error(
        "{} may be read by other users: run `chmod 600` on it (or start with --new-token \
         to replace it)",
        .0.display()
    )]
    Exposed(PathBuf),
    /// The file holds no usable token.
    #[error(
        "{} holds no usable token (at least {MIN_LEN} characters, no spaces): start with \
         --new-token to replace it",
        .0.display()
    )]
    Unusable(PathBuf),
    /// Reading or writing failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
}

/// The token file's place for this user, if there is one.
pub fn default_path() -> Option<PathBuf> {
    Some(state_folder()?.join("token"))
}

/// This user's state folder of sandbox-mcp (`$XDG_STATE_HOME/sandbox-mcp`, or
/// `~/.local/state/sandbox-mcp`), if there is one.
pub fn state_folder() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| PathBuf::from(home).join(".local/state"))
        })?;
    Some(base.join("sandbox-mcp"))
}

/// The saved token at `path`, or a new one from `make` saved there (always a new one
/// with `rotate`).
pub fn load_or_make(
    path: Option<&Path>,
    rotate: bool,
    make: impl FnOnce() -> io::Result<String>,
) -> Result<(String, Origin), TokenStoreError> {
    let Some(path) = path else {
        let token =
            make().map_err(|source| io_error("making a token for", Path::new("-"), source))?;
        return Ok((token, Origin::Unsaved));
    };
    if !rotate {
        if let Some(token) = load(path)? {
            return Ok((token, Origin::Saved(path.to_owned())));
        }
    }
    let token = make().map_err(|source| io_error("making a token for", path, source))?;
    save(path, &token)?;
    Ok((token, Origin::New(path.to_owned())))
}

/// The token in the file, `None` when there is no file.
fn load(path: &Path) -> Result<Option<String>, TokenStoreError> {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io_error("reading", path, source)),
    };
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(TokenStoreError::Exposed(path.to_owned()));
    }
    let text = fs::read_to_string(path).map_err(|source| io_error("reading", path, source))?;
    let token = text.trim();
    if token.len() < MIN_LEN || token.contains(char::is_whitespace) {
        return Err(TokenStoreError::Unusable(path.to_owned()));
    }
    Ok(Some(token.to_owned()))
}

/// Writes the token to a new file beside `path` (0600) and renames it into place.
fn save(path: &Path, token: &str) -> Result<(), TokenStoreError> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|source| io_error("creating", dir, source))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|source| io_error("restricting", dir, source))?;
    }
    let partial = path.with_extension("new");
    let _ = fs::remove_file(&partial);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .map_err(|source| io_error("writing", &partial, source))?;
    file.write_all(format!("{token}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|source| io_error("writing", &partial, source))?;
    fs::rename(&partial, path).map_err(|source| io_error("saving", path, source))
}

fn io_error(action: &'static str, path: &Path, source: io::Error) -> TokenStoreError {
    TokenStoreError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("token-store-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn maker(n: u8) -> impl FnOnce() -> io::Result<String> {
        move || Ok(format!("{:064}", n))
    }

    #[test]
    fn a_made_token_is_saved_privately_and_reused_until_rotated() {
        let dir = temp("reuse");
        let path = dir.join("sandbox-mcp/token");
        let (first, origin) = load_or_make(Some(&path), false, maker(1)).unwrap();
        assert_eq!(origin, Origin::New(path.clone()));
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let folder = fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(folder, 0o700);
        let (again, origin) = load_or_make(Some(&path), false, maker(2)).unwrap();
        assert_eq!(
            (again.as_str(), origin),
            (first.as_str(), Origin::Saved(path.clone()))
        );
        let (rotated, _) = load_or_make(Some(&path), true, maker(3)).unwrap();
        assert_ne!(rotated, first);
        assert_eq!(load(&path).unwrap(), Some(rotated));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_others_can_read_or_a_short_token_is_refused() {
        let dir = temp("refuse");
        let path = dir.join("token");
        load_or_make(Some(&path), false, maker(1)).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = load_or_make(Some(&path), false, maker(2)).unwrap_err();
        assert!(err.to_string().contains("chmod 600"), "{err}");
        fs::write(&path, "short\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let err = load_or_make(Some(&path), false, maker(2)).unwrap_err();
        assert!(matches!(err, TokenStoreError::Unusable(_)), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }
}
