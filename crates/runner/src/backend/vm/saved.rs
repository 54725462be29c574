//! A VM saved whole, as a folder of the runner's: the VMM's own state files (guest
//! memory and devices) and `vm.json`, the machine they were saved from, which a
//! restore must match: the VMM, the accelerator, the guest memory and the image's
//! files (a guest has its root file system's pages in its memory: it must find the
//! same file system under it). Every file is made by the runner, mode 0600; the VMM
//! only ever gets an open descriptor (QEMU) or its own copy (Firecracker).

use super::error::io_error;
use super::{VmError, VmImage};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// The description of the machine, in a saved folder.
pub(super) const MACHINE_FILE: &str = "vm.json";
/// The most bytes `vm.json` may have (it is a few hundred).
const MACHINE_MAX_BYTES: u64 = 64 * 1024;

/// What a saved VM was: a restore makes the same machine around its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Machine {
    /// `qemu` or `firecracker`.
    pub(super) vmm: String,
    /// `kvm` or `tcg`.
    pub(super) accel: String,
    /// Guest memory in MiB.
    pub(super) memory_mb: u64,
    /// The kernel, initramfs and root image, by identity.
    pub(super) image: [FileId; 3],
}

/// A file by path, size and modification time: an image's files are never rewritten
/// in place (a new build is a new folder), so these tell one image from another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct FileId {
    path: String,
    bytes: u64,
    mtime_ns: i128,
}

impl FileId {
    fn of(path: &Path) -> Result<FileId, VmError> {
        let meta = fs::metadata(path).map_err(io_error("reading", path))?;
        Ok(FileId {
            path: path.to_string_lossy().into_owned(),
            bytes: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        })
    }
}

impl Machine {
    /// The machine a VM of `vmm` with `accel` and `memory_mb` of the image is.
    pub(super) fn new(
        vmm: &str,
        accel: &str,
        memory_mb: u64,
        image: &VmImage,
    ) -> Result<Machine, VmError> {
        Ok(Machine {
            vmm: vmm.to_owned(),
            accel: accel.to_owned(),
            memory_mb,
            image: [
                FileId::of(&image.kernel)?,
                FileId::of(&image.initrd)?,
                FileId::of(&image.rootfs)?,
            ],
        })
    }

    /// Writes the description into the saved folder `dir`.
    pub(super) fn write(&self, dir: &Path) -> Result<(), VmError> {
        let path = dir.join(MACHINE_FILE);
        let text = serde_json::to_vec_pretty(self).map_err(|e| VmError::NotRestorable {
            dir: dir.to_owned(),
            why: format!("describing the machine: {e}"),
        })?;
        let mut file = create(&path)?;
        file.write_all(&text)
            .and_then(|()| file.sync_all())
            .map_err(io_error("writing", &path))
    }

    /// The description in the saved folder `dir`, if it is that of `current`, the
    /// machine a restore here would make.
    pub(super) fn check(dir: &Path, current: &Machine) -> Result<(), VmError> {
        let path = dir.join(MACHINE_FILE);
        let refuse = |why: String| VmError::NotRestorable {
            dir: dir.to_owned(),
            why,
        };
        let meta = fs::metadata(&path).map_err(|e| refuse(format!("{MACHINE_FILE}: {e}")))?;
        if meta.len() > MACHINE_MAX_BYTES {
            return Err(refuse(format!("{MACHINE_FILE} is {} bytes", meta.len())));
        }
        let text = fs::read(&path).map_err(|e| refuse(format!("{MACHINE_FILE}: {e}")))?;
        let saved: Machine =
            serde_json::from_slice(&text).map_err(|e| refuse(format!("{MACHINE_FILE}: {e}")))?;
        match saved.differs(current) {
            Some(what) => Err(refuse(format!(
                "it was saved from another machine than this runner makes ({what})"
            ))),
            None => Ok(()),
        }
    }

    /// What differs between a saved machine and `current`, if anything.
    fn differs(&self, current: &Machine) -> Option<String> {
        if self.vmm != current.vmm {
            return Some(format!("VMM {} here, {} saved", current.vmm, self.vmm));
        }
        if self.accel != current.accel {
            return Some(format!("{} here, {} saved", current.accel, self.accel));
        }
        if self.memory_mb != current.memory_mb {
            return Some(format!(
                "{} MiB of guest memory here, {} saved",
                current.memory_mb, self.memory_mb
            ));
        }
        (self.image != current.image).then(|| "another image".to_owned())
    }
}

/// Creates a file of the saved folder: new, the runner's, mode 0600.
pub(super) fn create(path: &Path) -> Result<fs::File, VmError> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_error("creating", path))
}

/// Opens a state file of the saved folder `dir` for reading.
pub(super) fn open(dir: &Path, name: &str) -> Result<fs::File, VmError> {
    let path = dir.join(name);
    fs::File::open(&path).map_err(|e| VmError::NotRestorable {
        dir: dir.to_owned(),
        why: format!("{name}: {e}"),
    })
}

/// The bytes the files `names` of `dir` hold together.
pub(super) fn bytes(dir: &Path, names: &[&str]) -> Result<u64, VmError> {
    names.iter().try_fold(0, |sum, name| {
        let path = dir.join(name);
        let meta = fs::metadata(&path).map_err(io_error("reading", &path))?;
        Ok(sum + meta.len())
    })
}

/// How many random bytes a restored VM's kernel gets.
const RESEED_BYTES: usize = 64;

/// The host's wall-clock time, for a restored guest whose clock stopped at the save.
pub(super) fn unix_time_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Random bytes from the host's kernel, for a restored guest's entropy pool.
pub(super) fn fresh_entropy() -> Result<Vec<u8>, VmError> {
    use std::io::Read;
    let path = Path::new("/dev/urandom");
    let mut bytes = vec![0u8; RESEED_BYTES];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(io_error("reading", path))?;
    Ok(bytes)
}

/// Removes what a save that failed wrote into `dir` (which the caller made empty).
pub(super) fn remove(dir: &Path, names: &[&str]) {
    for name in names.iter().chain(&[MACHINE_FILE]) {
        let _ = fs::remove_file(dir.join(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(dir: &Path, memory_mb: u64) -> Machine {
        let names = ["vmlinux", "initrd.img", "rootfs.ext4"];
        for name in names {
            if !dir.join(name).exists() {
                fs::write(dir.join(name), name).unwrap();
            }
        }
        let image = VmImage::open(dir).unwrap();
        Machine::new("qemu", "tcg", memory_mb, &image).unwrap()
    }

    #[test]
    fn a_saved_machine_restores_only_where_the_same_machine_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let current = machine(dir.path(), 400);
        let saved = dir.path().join("saved");
        fs::create_dir(&saved).unwrap();
        current.write(&saved).unwrap();
        let mode = fs::metadata(saved.join(MACHINE_FILE)).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600);
        Machine::check(&saved, &current).unwrap();

        let bigger = Machine {
            memory_mb: 800,
            ..current.clone()
        };
        let err = Machine::check(&saved, &bigger).unwrap_err().to_string();
        assert!(
            err.contains("800 MiB of guest memory here, 400 saved"),
            "{err}"
        );
        let kvm = Machine {
            accel: "kvm".into(),
            ..current.clone()
        };
        assert!(Machine::check(&saved, &kvm).is_err());
        // A rebuilt root image (same path, other contents) is another image.
        fs::write(dir.path().join("rootfs.ext4"), "rebuilt, longer").unwrap();
        let rebuilt = machine(dir.path(), 400);
        let err = Machine::check(&saved, &rebuilt).unwrap_err().to_string();
        assert!(err.contains("another image"), "{err}");
    }

    #[test]
    fn a_folder_without_a_description_or_with_a_huge_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let current = machine(dir.path(), 400);
        let err = Machine::check(dir.path(), &current)
            .unwrap_err()
            .to_string();
        assert!(err.contains(MACHINE_FILE), "{err}");
        fs::write(
            dir.path().join(MACHINE_FILE),
            vec![b' '; MACHINE_MAX_BYTES as usize + 1],
        )
        .unwrap();
        let err = Machine::check(dir.path(), &current)
            .unwrap_err()
            .to_string();
        assert!(err.contains("bytes"), "{err}");
    }
}
