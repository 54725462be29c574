//! The files a job wrote under the home's `outputs/` folder, collected into its answer.
//!
//! Collected here, inside the sandbox, as the program's user, from the home folder's
//! descriptor, which the caller opens (`home.rs`): the folder is walked from descriptors
//! opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so no symlink the
//! program made is ever followed, and only regular files are read (judged by `fstat` on
//! the opened descriptor; never opened waiting). Bounded in depth, in entries looked at,
//! in files and in bytes ([`OutputCaps`]). In a session, a file counts when it is new or
//! changed since the previous job's answer (its size, change time or inode differ), so
//! each run hands back what it wrote.

use super::identity::as_program_user;
use nix::dir::{Dir, Type};
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, mkdirat, FileStat, Mode};
use sandbox_protocol::agent::{encode_bytes, OutputCaps};
use sandbox_protocol::api::OutputFile;
use sandbox_protocol::media::mime_type;
use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// The folder, below the home folder.
pub(crate) const FOLDER: &str = "outputs";
/// How deep the walk goes.
const DEPTH: usize = 8;
/// Bytes read from a file over the cap to tell its media type.
const HEAD: u64 = 512;
/// Entries looked at, at most, in one walk (files and folders).
const ENTRIES_MAX: usize = 10_000;

/// What a file looked like when it was last handed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: i64,
    ctime: (i64, i64),
    inode: u64,
}

impl Stamp {
    fn of(stat: &FileStat) -> Stamp {
        Stamp {
            size: stat.st_size,
            ctime: (stat.st_ctime, stat.st_ctime_nsec),
            inode: stat.st_ino,
        }
    }
}

/// The files already handed back in this sandbox (a session's earlier jobs).
#[derive(Debug, Default)]
pub struct Seen(HashMap<String, Stamp>);

/// Makes the outputs folder below `home` if it is missing, as the program user, so
/// that a program can write there without making it.
pub(crate) fn make_folder(home: BorrowedFd<'_>) {
    let _ = as_program_user(|| mkdirat(home, FOLDER, Mode::from_bits_truncate(0o777)));
}

/// The new or changed files of the outputs folder below `home` within `caps`, in path
/// order, and whether there were more than listed.
pub(crate) fn collect(
    home: BorrowedFd<'_>,
    caps: OutputCaps,
    seen: &mut Seen,
) -> (Vec<OutputFile>, bool) {
    let walked = as_program_user(|| {
        let mut walk = Walk {
            caps,
            seen,
            found: Vec::new(),
            carried: 0,
            entries: 0,
            truncated: false,
        };
        if let Ok(folder) = open_dir(home, FOLDER) {
            walk.folder(folder, "", 0);
        }
        (walk.found, walk.truncated)
    });
    let Ok((mut found, truncated)) = walked else {
        return (Vec::new(), false);
    };
    found.sort_by(|a, b| a.path.cmp(&b.path));
    (found, truncated)
}

/// One walk of the outputs folder.
struct Walk<'a> {
    caps: OutputCaps,
    seen: &'a mut Seen,
    found: Vec<OutputFile>,
    /// Bytes read so far: a file is read only while the total cap allows it, so the
    /// agent never holds more than that (the sandbox's memory limit holds the agent too).
    carried: u64,
    entries: usize,
    truncated: bool,
}

impl Walk<'_> {
    fn folder(&mut self, folder: OwnedFd, rel: &str, depth: usize) {
        let Ok(mut dir) = Dir::from_fd(folder) else {
            return;
        };
        let mut names: Vec<(String, Option<Type>)> = dir
            .iter()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_str().ok()?.to_owned();
                (name != "." && name != "..").then_some((name, e.file_type()))
            })
            .collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, kind) in names {
            self.entries += 1;
            if self.entries > ENTRIES_MAX || self.found.len() >= self.caps.max_files {
                self.truncated = true;
                return;
            }
            let path = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            match kind {
                Some(Type::Directory) if depth + 1 < DEPTH => {
                    if let Ok(sub) = open_dir(dir.as_fd(), &name) {
                        self.folder(sub, &path, depth + 1);
                    }
                }
                Some(Type::File) => self.file(&dir, &name, path),
                _ => {}
            }
        }
    }

    fn file(&mut self, dir: &Dir, name: &str, path: String) {
        let how = OpenHow::new()
            .flags(OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
        let Ok(fd) = openat2(dir.as_fd(), name, how) else {
            return;
        };
        let Ok(stat) = fstat(fd.as_fd()) else {
            return;
        };
        if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
            return;
        }
        let stamp = Stamp::of(&stat);
        if self.seen.0.get(&path) == Some(&stamp) {
            return;
        }
        self.seen.0.insert(path.clone(), stamp);
        let size = stat.st_size.max(0) as u64;
        let mut file = File::from(fd);
        let room = self
            .caps
            .file_cap
            .min(self.caps.total_cap.saturating_sub(self.carried));
        let bytes = (size <= room)
            .then(|| read_whole(&mut file, room))
            .flatten();
        let mime = match &bytes {
            Some(bytes) => mime_type(&path, bytes, true),
            None => mime_type(&path, &read_head(&mut file), false),
        };
        self.carried += bytes.as_ref().map_or(0, |b| b.len() as u64);
        self.found.push(OutputFile {
            path,
            size,
            mime_type: mime.to_owned(),
            data: bytes.map(|b| encode_bytes(&b)),
        });
    }
}

/// The whole file if it holds at most `cap` bytes.
fn read_whole(file: &mut File, cap: u64) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    file.take(cap + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= cap).then_some(bytes)
}

/// The first bytes of a file, to tell its media type.
fn read_head(file: &mut File) -> Vec<u8> {
    let mut head = Vec::new();
    let _ = file.take(HEAD).read_to_end(&mut head);
    head
}

/// Opens the folder `name` in `dir`, never through a symlink nor out of `dir`.
fn open_dir(dir: BorrowedFd<'_>, name: &str) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    openat2(dir, name, how)
}

#[cfg(test)]
mod tests;
