//! An ordinary user's `sandbox-mcp stdio --embedded` on a host with cgroup v2, for real.
//!
//! This host's cgroups are v1, where only root can limit sandboxes, so the test boots a
//! guest of our own whose kernel has cgroup v2 (QEMU, TCG), and runs the checks there:
//!
//! - the VM image's kernel, initramfs and root image (`sandbox-runner image build`, the
//!   cache the vm tests use), with a second archive appended to the initramfs that
//!   replaces its `/init` by `guest/init.sh` (static busybox): it loads the modules,
//!   makes the root image writable with an overlay and switches to it;
//! - a second disk with this build's `sandbox-mcp`, the uidmap helpers (setuid root)
//!   with their libraries, and `guest/check.sh` and `guest/check.py`;
//! - check.sh makes the user alice with subordinate ids, delegates a cgroup to her as
//!   systemd does (`chown` of the folder, `cgroup.procs`, `cgroup.subtree_control`,
//!   `cgroup.threads`), and runs check.py as alice there, then in a cgroup that is not
//!   hers. Each check prints `ROOTLESS-CHECK <name> ok|FAIL <why>` on the console.

mod common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Every check check.py makes; each must say ok.
const CHECKS: [&str; 11] = [
    "delegated-hello",
    "delegated-tools-say-limits",
    "delegated-runner-in-leaf",
    "delegated-sandbox-cgroups",
    "delegated-memory-limit",
    "delegated-subordinate-ids",
    "delegated-sandbox-cannot-leave-its-cgroup",
    "delegated-cleanup",
    "plain-refuses-with-the-ways-out",
    "plain-opt-out-runs",
    "plain-opt-out-says-so",
];
/// The whole boot and every check, under TCG.
const GUEST_LIMIT: Duration = Duration::from_secs(480);
/// The static busybox of Debian's busybox-static package.
const BUSYBOX: &str = "/bin/busybox";

#[test]
fn an_ordinary_user_in_a_delegated_cgroup_v2_gets_sandboxes_with_their_limits() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test builds disk images with setuid files and must run as root (the README's \
         test command does)"
    );
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rootless-guest");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).unwrap();
    let image = image();
    let initrd = work.join("initrd.img");
    write_initrd(&image.join("initrd.img"), &initrd);
    let extra = work.join("extra.ext4");
    make_extra_disk(&work.join("extra"), &extra);
    let console = work.join("console.log");
    let mut guest = Guest::boot(&image, &initrd, &extra, &console);
    let finished = guest.wait_for("ROOTLESS-DONE", GUEST_LIMIT);
    drop(guest);
    let log = fs::read_to_string(&console).unwrap_or_default();
    for line in log.lines().filter(|l| l.starts_with("ROOTLESS-")) {
        println!("{line}");
    }
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("ROOTLESS-CHECK") && !l.ends_with(" ok"))
        .collect();
    let missing: Vec<&str> = CHECKS
        .iter()
        .filter(|name| !log.contains(&format!("ROOTLESS-CHECK {name} ok")))
        .copied()
        .collect();
    assert!(
        finished && failed.is_empty() && missing.is_empty(),
        "finished: {finished}; failed: {failed:#?}; missing: {missing:?}; console:\n{log}"
    );
}

/// The VM image folder, built or found in the cache the vm tests share.
fn image() -> PathBuf {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vm-images");
    let out = Command::new(common::runner_bin())
        .args(["image", "build", "--out"])
        .arg(&cache)
        .output()
        .expect("ran sandbox-runner image build");
    assert!(
        out.status.success(),
        "image build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cache.join("current")
}

/// The image's initramfs, then an archive whose `/init` and busybox replace its init.
fn write_initrd(original: &Path, to: &Path) {
    let mut bytes = fs::read(original).expect("the image's initramfs");
    // The kernel skips zeros between concatenated archives.
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    let busybox = fs::read(BUSYBOX).unwrap_or_else(|e| {
        panic!("{BUSYBOX}: {e} (install Debian's busybox-static; the README's test command does)")
    });
    let mut cpio = Newc::default();
    cpio.entry("bin", 0o040755, &[]);
    cpio.entry("bin/busybox", 0o100755, &busybox);
    cpio.entry("init", 0o100755, &fs::read(guest_file("init.sh")).unwrap());
    bytes.extend(cpio.finish());
    fs::write(to, bytes).unwrap();
}

fn guest_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/guest")
        .join(name)
}

/// A newc cpio archive (the initramfs format), written in memory.
#[derive(Default)]
struct Newc {
    out: Vec<u8>,
    inode: u32,
}

impl Newc {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.inode += 1;
        let fields = [
            self.inode,
            mode,
            0,
            0,
            1,
            0,
            data.len() as u32,
            0,
            0,
            0,
            0,
            name.len() as u32 + 1,
            0,
        ];
        self.out.extend_from_slice(b"070701");
        for field in fields {
            self.out
                .extend_from_slice(format!("{field:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        self.out.resize(self.out.len().next_multiple_of(4), 0);
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.out
    }
}

/// The second disk: sandbox-mcp and the checks at its top (mounted on /opt/t), and
/// under `root/` what init.sh copies into the guest's root: the uidmap helpers and the
/// libraries they load.
fn make_extra_disk(stage: &Path, image: &Path) {
    fs::create_dir_all(stage).unwrap();
    fs::copy(env!("CARGO_BIN_EXE_sandbox-mcp"), stage.join("sandbox-mcp")).unwrap();
    for name in ["check.sh", "check.py"] {
        fs::copy(guest_file(name), stage.join(name)).unwrap();
    }
    for helper in ["/usr/bin/newuidmap", "/usr/bin/newgidmap"] {
        let helper = Path::new(helper);
        assert!(
            helper.exists(),
            "{} is missing (Debian's uidmap; the README's test command installs it)",
            helper.display()
        );
        copy_into(stage, helper, Some(0o4755));
        for library in libraries_of(helper) {
            copy_into(stage, &library, None);
        }
    }
    let bytes: u64 = walk_size(stage);
    let mib = (bytes / (1 << 20)) * 5 / 4 + 32;
    let status = Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4", "-L", "extra", "-d"])
        .arg(stage)
        .arg(image)
        .arg(format!("{mib}M"))
        .status()
        .expect("ran mke2fs");
    assert!(status.success(), "mke2fs failed");
}

/// Copies `file` below `stage/root`, in its real folder under its own name (a
/// library's soname), with `mode` if given.
fn copy_into(stage: &Path, file: &Path, mode: Option<u32>) {
    use std::os::unix::fs::PermissionsExt;
    let real = fs::canonicalize(file).unwrap();
    let folder = real.parent().unwrap().strip_prefix("/").unwrap();
    let to = stage
        .join("root")
        .join(folder)
        .join(file.file_name().unwrap());
    fs::create_dir_all(to.parent().unwrap()).unwrap();
    fs::copy(&real, &to).unwrap();
    if let Some(mode) = mode {
        fs::set_permissions(&to, fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// The shared libraries `elf` loads, as `ldd` resolves them here.
fn libraries_of(elf: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(elf).output().expect("ran ldd");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split("=>").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter(|path| path.starts_with('/'))
        .map(PathBuf::from)
        .collect()
}

fn walk_size(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                walk_size(&entry.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

/// The guest's QEMU, killed when dropped.
struct Guest {
    qemu: Child,
    console: PathBuf,
}

impl Guest {
    fn boot(image: &Path, initrd: &Path, extra: &Path, console: &Path) -> Guest {
        let drive = |id: &str, file: &Path, readonly: bool| {
            format!(
                "id={id},file={},format=raw,if=none,readonly={}",
                file.display(),
                if readonly { "on" } else { "off" }
            )
        };
        let qemu = Command::new("qemu-system-x86_64")
            .args(["-M", "microvm,x-option-roms=off,rtc=on"])
            .args([
                "-accel",
                "tcg,tb-size=64",
                "-cpu",
                "max",
                "-m",
                "1536M",
                "-smp",
                "1",
            ])
            .args([
                "-nodefaults",
                "-no-user-config",
                "-display",
                "none",
                "-no-reboot",
            ])
            .args(["-nic", "none"])
            .arg("-serial")
            .arg(format!("file:{}", console.display()))
            .arg("-kernel")
            .arg(image.join("vmlinux"))
            .arg("-initrd")
            .arg(initrd)
            .arg("-append")
            .arg(format!(
                "console=ttyS0 panic=-1 rdinit=/init {}",
                sandbox_runner::backend::vm::qemu::tsc_cmdline()
            ))
            .arg("-drive")
            .arg(drive("root", &image.join("rootfs.ext4"), true))
            .args(["-device", "virtio-blk-device,drive=root"])
            .arg("-drive")
            .arg(drive("extra", extra, true))
            .args(["-device", "virtio-blk-device,drive=extra"])
            .args(["-device", "virtio-rng-device"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("started qemu-system-x86_64");
        Guest {
            qemu,
            console: console.to_owned(),
        }
    }

    /// Waits until the console has `line`, QEMU ends, or `limit` passes; true if the
    /// line came.
    fn wait_for(&mut self, line: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let log = fs::read_to_string(&self.console).unwrap_or_default();
            if log.lines().any(|l| l.trim() == line) {
                return true;
            }
            if let Ok(Some(_)) = self.qemu.try_wait() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let _ = std::io::stderr().write_all(b"the guest did not finish in time\n");
        false
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.qemu.kill();
        let _ = self.qemu.wait();
    }
}
