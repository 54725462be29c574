//! The path guards of a session's file operations, on a temporary folder standing for
//! the home folder: run as any user (no program user is set, so every operation runs
//! with the test's own ids).

use super::listing::{list, DEPTH};
use super::{get, put, serve};
use crate::agent::fixtures::{device, every_kind, open, while_swapping};
use nix::sys::stat::Mode;
use sandbox_protocol::agent::{
    decode_bytes, encode_bytes, AgentMessage, FileFailure, FileKind, FileRequest,
};
use std::os::fd::{AsFd, OwnedFd};

fn listing(home: &OwnedFd, limit: usize, max_bytes: usize) -> (Vec<(String, FileKind)>, bool) {
    match list(home.as_fd(), limit, max_bytes) {
        AgentMessage::Files { files, truncated } => (
            files.into_iter().map(|f| (f.path, f.kind)).collect(),
            truncated,
        ),
        other => panic!("{other:?}"),
    }
}

fn refusal(outcome: super::Outcome) -> FileFailure {
    match outcome {
        Err((reason, _)) => reason,
        Ok(answer) => panic!("refused, got {answer:?}"),
    }
}

/// The bytes `get` hands out, or why it refused.
fn read(home: &OwnedFd, path: &str) -> Result<Vec<u8>, FileFailure> {
    match get(home.as_fd(), path, 1 << 20) {
        Ok(AgentMessage::File { data }) => Ok(decode_bytes(&data).unwrap()),
        Ok(other) => panic!("{other:?}"),
        Err((reason, _)) => Err(reason),
    }
}

/// Why a read and a write of `path` were refused (each must be).
fn refusals(home: &OwnedFd, path: &str) -> [FileFailure; 2] {
    let read = read(home, path).expect_err("the read is refused");
    let write = refusal(put(home.as_fd(), path, &encode_bytes(b"written")));
    [read, write]
}

#[test]
fn every_kind_is_listed_as_itself_and_no_symlink_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let _socket = every_kind(dir.path());
    let (files, truncated) = listing(&open(dir.path()), 100, 1 << 20);
    assert_eq!(
        files,
        [
            ("dir".to_owned(), FileKind::Dir),
            ("dir/inner".to_owned(), FileKind::File),
            ("fifo".to_owned(), FileKind::Fifo),
            ("file".to_owned(), FileKind::File),
            ("link".to_owned(), FileKind::Symlink),
            ("sock".to_owned(), FileKind::Socket),
        ]
    );
    assert!(!truncated);
}

#[test]
fn only_regular_files_are_read_or_written_and_nothing_waits() {
    let dir = tempfile::tempdir().unwrap();
    let _socket = every_kind(dir.path());
    nix::unistd::mkfifo(&dir.path().join("held"), Mode::from_bits_truncate(0o600)).unwrap();
    // Both ends of `held` open: a blocking open or write would go through.
    let held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.path().join("held"))
        .unwrap();
    let home = open(dir.path());
    let data = encode_bytes(b"written");
    for name in ["fifo", "held", "sock", "dir"] {
        assert_eq!(
            refusal(get(home.as_fd(), name, 100)),
            FileFailure::NotAFile,
            "{name}"
        );
        let put = put(home.as_fd(), name, &data);
        assert_eq!(refusal(put), FileFailure::NotAFile, "{name}");
    }
    let mut buf = [0u8; 16];
    nix::fcntl::fcntl(
        &held,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .unwrap();
    assert_eq!(
        nix::unistd::read(&held, &mut buf),
        Err(nix::errno::Errno::EAGAIN),
        "nothing went into the FIFO"
    );
    // Symlinks are not followed, last or not, even to a folder within.
    std::os::unix::fs::symlink("dir", dir.path().join("in")).unwrap();
    for path in ["link", "link/etc/passwd", "in/inner"] {
        assert_eq!(
            refusal(get(home.as_fd(), path, 100)),
            FileFailure::BadPath,
            "{path}"
        );
    }
    assert_eq!(
        refusal(put(home.as_fd(), "in/new", &data)),
        FileFailure::BadPath
    );
    assert!(!dir.path().join("dir/new").exists());
    assert_eq!(
        refusal(put(home.as_fd(), "fifo/x", &data)),
        FileFailure::BadPath
    );
}

#[test]
fn a_device_is_neither_read_nor_written_and_is_listed_as_one() {
    let dir = tempfile::tempdir().unwrap();
    if !device(&dir.path().join("dev")) {
        return;
    }
    let home = open(dir.path());
    assert_eq!(refusals(&home, "dev"), [FileFailure::NotAFile; 2]);
    assert_eq!(
        listing(&home, 10, 1 << 20),
        (vec![("dev".to_owned(), FileKind::Device)], false)
    );
}

#[test]
fn a_path_out_of_the_home_folder_by_its_words_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    let home_dir = outside.path().join("home");
    std::fs::create_dir_all(home_dir.join("a")).unwrap();
    std::fs::write(outside.path().join("secret"), b"secret").unwrap();
    let home = open(&home_dir);
    let data = encode_bytes(b"written");
    let secret = outside.path().join("secret").display().to_string();
    let paths = [
        "../secret",
        "a/../../secret",
        "a/..",
        "..",
        secret.as_str(),
        "/etc/passwd",
        "",
        ".",
        "./",
    ];
    for path in paths {
        assert_eq!(refusals(&home, path), [FileFailure::BadPath; 2], "{path:?}");
    }
    assert_eq!(
        std::fs::read(outside.path().join("secret")).unwrap(),
        b"secret"
    );
    // Through the whole operation, as the runner asks for it.
    let request = FileRequest::Get {
        path: "../secret".into(),
        cap: 100,
    };
    match serve(home.as_fd(), &request) {
        AgentMessage::FileFailed { reason, .. } => assert_eq!(reason, FileFailure::BadPath),
        other => panic!("{other:?}"),
    }
    // `.` components are no way out, and lead where they say.
    put(home.as_fd(), "./a/./b", &data).unwrap();
    assert_eq!(read(&home, "a/b"), Ok(b"written".to_vec()));
}

#[test]
fn a_symlink_to_a_file_or_folder_outside_is_neither_read_nor_written() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"secret").unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("file")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("folder")).unwrap();
    let home = open(dir.path());
    for path in ["file", "folder/secret", "folder/new"] {
        assert_eq!(refusals(&home, path), [FileFailure::BadPath; 2], "{path}");
    }
    assert_eq!(
        std::fs::read(outside.path().join("secret")).unwrap(),
        b"secret"
    );
    assert!(!outside.path().join("new").exists());
}

#[test]
fn a_symlink_swapped_in_while_files_are_read_and_written_is_never_followed() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("f"), b"secret").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (d, l) = (dir.path().join("d"), dir.path().join("l"));
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("f"), b"inside").unwrap();
    std::os::unix::fs::symlink(outside.path(), &l).unwrap();
    let (f, s) = (dir.path().join("f"), dir.path().join("s"));
    std::fs::write(&f, b"inside").unwrap();
    std::os::unix::fs::symlink(outside.path().join("f"), &s).unwrap();
    let home = open(dir.path());
    let data = encode_bytes(b"inside");
    let mut read_inside = 0;
    while_swapping(&d, &l, || {
        while_swapping(&f, &s, || {
            for _ in 0..2000 {
                for path in ["d/f", "f"] {
                    match read(&home, path) {
                        Ok(bytes) => {
                            assert_eq!(bytes, b"inside", "{path} read through a symlink");
                            read_inside += 1;
                        }
                        Err(reason) => assert!(
                            matches!(reason, FileFailure::BadPath | FileFailure::NotFound),
                            "{path}: {reason:?}"
                        ),
                    }
                    let _ = put(home.as_fd(), path, &data);
                }
            }
        })
    });
    assert_eq!(std::fs::read(outside.path().join("f")).unwrap(), b"secret");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    assert!(read_inside > 0, "no read got through at all");
}

#[test]
fn a_file_is_written_whole_and_read_back_within_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let home = open(dir.path());
    put(home.as_fd(), "a/b/c.txt", &encode_bytes(b"a longer text")).unwrap();
    put(home.as_fd(), "a/b/c.txt", &encode_bytes(b"short")).unwrap();
    match get(home.as_fd(), "a/b/c.txt", 5).unwrap() {
        AgentMessage::File { data } => assert_eq!(decode_bytes(&data).unwrap(), b"short"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        refusal(get(home.as_fd(), "a/b/c.txt", 4)),
        FileFailure::TooLarge
    );
    assert_eq!(
        refusal(get(home.as_fd(), "a/none", 4)),
        FileFailure::NotFound
    );
    assert_eq!(
        refusal(put(home.as_fd(), "bad", "not base64!")),
        FileFailure::Io
    );
    assert!(!dir.path().join("bad").exists());
}

#[test]
fn listings_are_bounded_in_entries_bytes_and_depth() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..100 {
        std::fs::write(dir.path().join(format!("f{i:03}")), b"").unwrap();
    }
    let home = open(dir.path());
    assert!(!listing(&home, 100, 1 << 20).1, "exactly the limit");
    let (files, truncated) = listing(&home, 10, 1 << 20);
    assert_eq!((files.len(), truncated), (10, true));
    assert_eq!(files[9].0, "f009", "in path order");
    let (files, truncated) = listing(&home, 100, 500);
    let bytes: usize = files
        .iter()
        .map(|(path, kind)| {
            let entry = sandbox_protocol::agent::FileEntry {
                path: path.clone(),
                size: 0,
                kind: *kind,
            };
            serde_json::to_vec(&entry).unwrap().len() + 1
        })
        .sum();
    assert!(truncated && bytes <= 500 && bytes > 400, "{bytes} bytes");

    let deep = tempfile::tempdir().unwrap();
    let bottom = (0..DEPTH + 5).fold(deep.path().to_owned(), |p, _| p.join("n"));
    std::fs::create_dir_all(&bottom).unwrap();
    let (files, truncated) = listing(&open(deep.path()), 100, 1 << 20);
    assert_eq!((files.len(), truncated), (DEPTH, true));
    let shallow = (0..DEPTH).fold(deep.path().to_owned(), |p, _| p.join("n"));
    std::fs::remove_dir_all(shallow.join("n")).unwrap();
    assert_eq!(listing(&open(deep.path()), 100, 1 << 20), (files, false));
}

#[test]
fn a_folder_swapped_for_a_symlink_during_the_walk_is_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let (d, l) = (dir.path().join("d"), dir.path().join("l"));
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("inside"), b"").unwrap();
    std::os::unix::fs::symlink("/", &l).unwrap();
    let home = open(dir.path());
    let allowed = ["d", "l", "d/inside", "l/inside"];
    let mut kinds = std::collections::HashSet::new();
    while_swapping(&d, &l, || {
        for _ in 0..5000 {
            let (files, _) = listing(&home, 100, 1 << 20);
            for (path, kind) in files {
                assert!(
                    allowed.contains(&path.as_str()),
                    "followed a symlink: {path}"
                );
                kinds.insert(kind);
            }
        }
    });
    assert!(kinds.contains(&FileKind::Symlink) && kinds.contains(&FileKind::Dir));
}
