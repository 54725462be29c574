//! What the path guards' tests (`files/`, `outputs/`) make in a temporary folder, as any
//! user can: a file of every kind, a device node where the user may make one, and a
//! symlink swapped for a folder while an operation runs.

use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// The folder `dir`, opened as a home folder is.
pub(crate) fn open(dir: &Path) -> OwnedFd {
    File::open(dir).expect("the folder opens").into()
}

/// Fills `dir` with one of each kind: a file `file` (5 bytes), a folder `dir` holding
/// `inner`, a symlink `link` to `/`, a FIFO `fifo` and a socket `sock` (bound while the
/// listener returned is kept).
pub(crate) fn every_kind(dir: &Path) -> UnixListener {
    std::fs::write(dir.join("file"), b"12345").unwrap();
    std::fs::create_dir(dir.join("dir")).unwrap();
    std::fs::write(dir.join("dir/inner"), b"1").unwrap();
    std::os::unix::fs::symlink("/", dir.join("link")).unwrap();
    nix::unistd::mkfifo(&dir.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
    UnixListener::bind(dir.join("sock")).unwrap()
}

/// Makes a character device at `path`: `/dev/null`'s numbers where the user may (root),
/// else a whiteout (0:0), which the kernel lets any user make where the file system
/// does. Where neither can be made, says so loudly and returns false: the caller skips
/// its device case.
pub(crate) fn device(path: &Path) -> bool {
    let mode = Mode::from_bits_truncate(0o666);
    let mut last = None;
    for (major, minor) in [(1, 3), (0, 0)] {
        match mknod(path, SFlag::S_IFCHR, mode, makedev(major, minor)) {
            Ok(()) => return true,
            Err(e) => last = Some(e),
        }
    }
    eprintln!(
        "SKIPPED: no device node can be made at {} by this user ({last:?}): \
         the device case of this test is not run",
        path.display()
    );
    false
}

/// Runs `f` while another thread exchanges `a` and `b` (`renameat2(RENAME_EXCHANGE)`)
/// over and over: what one of them names is then, at any moment, either's.
pub(crate) fn while_swapping<T>(a: &Path, b: &Path, f: impl FnOnce() -> T) -> T {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| swap_until(a, b, &stop));
        // Also when `f` panics: the scope waits for the swapper before it unwinds.
        let _stop = Stop(&stop);
        f()
    })
}

/// Stops the swapper when dropped.
struct Stop<'a>(&'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn swap_until(a: &Path, b: &Path, stop: &AtomicBool) {
    let c_path = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let (a, b) = (c_path(a), c_path(b));
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
