use super::listing::{list, DEPTH};
use super::{get, put};
use nix::sys::stat::Mode;
use sandbox_protocol::agent::{decode_bytes, encode_bytes, AgentMessage, FileFailure, FileKind};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn open(dir: &Path) -> OwnedFd {
    File::open(dir).expect("the folder opens").into()
}

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

/// A folder holding one of each kind: a file, a folder with a file, a symlink to `/`,
/// a FIFO and a socket (the listener is kept so that the socket stays bound).
fn every_kind(dir: &Path) -> std::os::unix::net::UnixListener {
    std::fs::write(dir.join("file"), b"12345").unwrap();
    std::fs::create_dir(dir.join("dir")).unwrap();
    std::fs::write(dir.join("dir/inner"), b"1").unwrap();
    std::os::unix::fs::symlink("/", dir.join("link")).unwrap();
    nix::unistd::mkfifo(&dir.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
    std::os::unix::net::UnixListener::bind(dir.join("sock")).unwrap()
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

/// Swaps `a` and `b` (a folder and a symlink) in `dir` until `stop`.
fn swap_until(dir: &Path, stop: &AtomicBool) {
    let a = std::ffi::CString::new(dir.join("d").into_os_string().into_encoded_bytes()).unwrap();
    let b = std::ffi::CString::new(dir.join("l").into_os_string().into_encoded_bytes()).unwrap();
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: both paths are live NUL-terminated strings; renameat2 only reads them.
        unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                libc::RENAME_EXCHANGE,
            );
        }
    }
}

#[test]
fn a_folder_swapped_for_a_symlink_during_the_walk_is_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("d/inside"), b"").unwrap();
    std::os::unix::fs::symlink("/", dir.path().join("l")).unwrap();
    let home = open(dir.path());
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (path, stop) = (dir.path().to_owned(), stop.clone());
        std::thread::spawn(move || swap_until(&path, &stop))
    };
    let allowed = ["d", "l", "d/inside", "l/inside"];
    let mut kinds = std::collections::HashSet::new();
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
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(kinds.contains(&FileKind::Symlink) && kinds.contains(&FileKind::Dir));
}
