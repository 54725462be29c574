//! The template's copy of `/etc` folders ([`EtcTree`]) against a hostile `/etc`: a FIFO
//! (which must not hang the walk), a socket and a device (left out), a symlink out of
//! the tree (copied as a link, never followed), a tree deeper than the walk goes, a file
//! larger than the copy's tmpfs (a clear error, soon), and a folder swapped for a
//! symlink and a file for a FIFO while the walk runs (nothing outside the named folder
//! is ever copied, and the walk never waits).
//!
//! Each test runs on a thread of its own that takes a mount namespace of its own
//! (`unshare(CLONE_NEWNS)` is per thread), makes every mount there private and mounts a
//! tmpfs on `/etc`: the host's `/etc` is never touched. Root only, as the jail is.

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::stat::{mknod, Mode, SFlag};
use nix::unistd::mkfifo;
use sandbox_jail::rootfs::EtcTree;
use std::fs;
use std::os::unix::fs::{symlink, FileTypeExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long any one test's work may take before it counts as hung.
const HUNG: Duration = Duration::from_secs(60);
/// How long the walk races a swapper.
const RACE_FOR: Duration = Duration::from_secs(3);
/// The copy's tmpfs holds 64 MiB: a file above it cannot be copied.
const TOO_BIG: usize = 80 << 20;

/// Runs `work` on a thread of its own, in a mount namespace of that thread's own with
/// a fresh tmpfs on `/etc`, and returns its result, or fails if it takes over [`HUNG`].
fn in_fake_etc<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the jail's tests make mounts and must run as root (the README's test command does)"
    );
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        unshare(CloneFlags::CLONE_NEWNS).expect("a mount namespace of this thread's own");
        let private = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
        mount(None::<&str>, "/", None::<&str>, private, None::<&str>)
            .expect("making every mount private (nothing may reach the host)");
        mount(
            Some("tmpfs"),
            "/etc",
            Some("tmpfs"),
            MsFlags::empty(),
            Some("size=256m,mode=0755"),
        )
        .expect("a tmpfs on /etc");
        let _ = sender.send(work());
    });
    receiver
        .recv_timeout(HUNG)
        .expect("the work hung (or its thread panicked)")
}

/// Every path below `root` (not following links), relative to it.
fn listing(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).expect("listing").flatten() {
            let path = entry.path();
            if entry.file_type().expect("a type").is_dir() {
                pending.push(path.clone());
            }
            found.push(path.strip_prefix(root).expect("below").to_owned());
        }
    }
    found.sort();
    found
}

#[test]
fn a_hostile_folder_is_copied_without_hanging_following_or_descending_for_ever() {
    let (copied, link, deepest) = in_fake_etc(|| {
        let tree = Path::new("/etc/hostile");
        fs::create_dir_all(tree).unwrap();
        fs::write(tree.join("conf"), "kept\n").unwrap();
        mkfifo(&tree.join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(tree.join("sock")).unwrap();
        mknod(
            &tree.join("null"),
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        fs::create_dir_all("/etc/outside").unwrap();
        fs::write("/etc/outside/secret", "not below the folder named\n").unwrap();
        symlink("/etc/outside", tree.join("escape")).unwrap();
        let mut deep = tree.join("deep");
        for _ in 0..40 {
            deep = deep.join("d");
        }
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join("bottom"), "too deep\n").unwrap();

        let at = Path::new("/etc/.copy");
        let copy = EtcTree::make(at, &[tree.to_owned()]).expect("the copy");
        let root = copy.dir().join("hostile");
        let link = fs::read_link(root.join("escape")).unwrap();
        let deepest = listing(&root.join("deep"))
            .iter()
            .map(|p| p.components().count())
            .max()
            .unwrap_or(0);
        (listing(&root), link, deepest)
    });
    let top: Vec<&Path> = copied
        .iter()
        .map(PathBuf::as_path)
        .filter(|p| p.components().count() == 1)
        .collect();
    assert_eq!(
        top,
        [Path::new("conf"), Path::new("deep"), Path::new("escape")],
        "FIFOs, sockets and devices are left out: {copied:?}"
    );
    assert_eq!(link, Path::new("/etc/outside"), "the link is copied as one");
    assert!(
        !copied
            .iter()
            .any(|p| p.ends_with("secret") || p.ends_with("bottom")),
        "what the link names, or a tree past the depth bound, was copied: {copied:?}"
    );
    assert!(
        (1..=16).contains(&deepest),
        "the copy goes {deepest} folders deep below deep/"
    );
}

#[test]
fn a_file_larger_than_the_copy_s_room_is_a_clear_error() {
    let (result, took) = in_fake_etc(|| {
        fs::create_dir_all("/etc/big").unwrap();
        fs::write("/etc/big/blob", vec![7u8; TOO_BIG]).unwrap();
        let started = Instant::now();
        let result = EtcTree::make(Path::new("/etc/.copy"), &[PathBuf::from("/etc/big")])
            .map(|_| ())
            .map_err(|e| e.to_string());
        (result, started.elapsed())
    });
    let error = result.expect_err("an 80 MiB file fits a 64 MiB copy");
    assert!(
        error.contains("No space left") || error.contains("ENOSPC"),
        "{error}"
    );
    assert!(took < Duration::from_secs(30), "the copy took {took:?}");
}

#[test]
fn a_folder_swapped_for_a_link_or_a_file_for_a_fifo_during_the_walk_is_harmless() {
    let copies = in_fake_etc(|| {
        let tree = Path::new("/etc/race");
        fs::create_dir_all(tree.join("sub")).unwrap();
        for i in 0..50 {
            fs::write(tree.join("sub").join(format!("inner{i}")), "ok\n").unwrap();
        }
        fs::write(tree.join("conf"), "a file, now and then a FIFO\n").unwrap();
        fs::create_dir_all("/etc/outside").unwrap();
        for i in 0..50 {
            fs::write(format!("/etc/outside/secret{i}"), "outside\n").unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        // On this thread's namespace: a thread started here shares it.
        let swapper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (sub, aside) = (tree.join("sub"), tree.join("aside"));
                let (conf, kept) = (tree.join("conf"), tree.join("conf.kept"));
                let fifo = Mode::from_bits_truncate(0o644);
                while !stop.load(Ordering::Relaxed) {
                    let _ = fs::rename(&sub, &aside);
                    let _ = symlink("/etc/outside", &sub);
                    let _ = fs::remove_file(&sub);
                    let _ = fs::rename(&aside, &sub);
                    let _ = fs::rename(&conf, &kept);
                    let _ = mkfifo(&conf, fifo);
                    let _ = fs::remove_file(&conf);
                    let _ = fs::rename(&kept, &conf);
                }
            })
        };
        // Rounds for a few seconds: a swap lands between the walk's look at `sub` or
        // `conf` and its opening of it in some of them (a walk that followed the link
        // would copy the secrets then, seen with O_NOFOLLOW taken out; one that opened
        // the FIFO without O_NONBLOCK would wait for a writer for ever).
        let (mut copies, mut leaked) = (0, Vec::new());
        let until = Instant::now() + RACE_FOR;
        while Instant::now() < until && leaked.is_empty() {
            let at = Path::new("/etc/.copy");
            if let Ok(copy) = EtcTree::make(at, &[tree.to_owned()]) {
                copies += 1;
                leaked = listing(copy.dir())
                    .into_iter()
                    .filter(|p| p.to_string_lossy().contains("secret"))
                    .collect();
            }
            nix::mount::umount(at).expect("unmounting the copy");
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        (copies, leaked)
    });
    let (copies, leaked) = copies;
    assert!(copies > 0, "no copy was made in {RACE_FOR:?}");
    assert!(
        leaked.is_empty(),
        "copied from outside the folder: {leaked:?}"
    );
}

#[test]
fn the_fake_etc_is_this_test_s_own() {
    // What the tests above build is in their namespaces only.
    in_fake_etc(|| fs::write("/etc/only-in-a-test", "x").unwrap());
    assert!(!Path::new("/etc/only-in-a-test").exists());
    assert!(fs::symlink_metadata("/etc/passwd").is_ok_and(|m| !m.file_type().is_fifo()));
}
