//! The outputs' guards and caps, on a temporary folder standing for the home folder:
//! run as any user (no program user is set, so the walk runs with the test's own ids).

use super::{collect, make_folder, Seen, DEPTH, ENTRIES_MAX, FOLDER};
use crate::agent::fixtures::{device, every_kind, open, while_swapping};
use sandbox_protocol::agent::{decode_bytes, OutputCaps};
use sandbox_protocol::api::OutputFile;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

const ROOMY: OutputCaps = OutputCaps {
    file_cap: 1 << 20,
    total_cap: 1 << 20,
    max_files: 1000,
};

/// A home folder with its outputs folder made, as a run finds it.
fn made_home() -> (tempfile::TempDir, OwnedFd, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let home = open(dir.path());
    make_folder(home.as_fd());
    let outputs = dir.path().join(FOLDER);
    (dir, home, outputs)
}

/// Each file collected: its path and its bytes, if carried.
fn carried(files: &[OutputFile]) -> Vec<(&str, Option<Vec<u8>>)> {
    files
        .iter()
        .map(|f| {
            let bytes = f.data.as_deref().map(|d| decode_bytes(d).unwrap());
            (f.path.as_str(), bytes)
        })
        .collect()
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn new_and_changed_files_are_handed_back_in_path_order_once() {
    let (_dir, home, outputs) = made_home();
    assert!(outputs.is_dir(), "the folder is made");
    make_folder(home.as_fd()); // a second run finds it made
    write(&outputs.join("b.txt"), b"bee");
    write(&outputs.join("a/c.txt"), b"sea");
    let mut seen = Seen::default();
    let (files, truncated) = collect(home.as_fd(), ROOMY, &mut seen);
    assert_eq!(
        carried(&files),
        [
            ("a/c.txt", Some(b"sea".to_vec())),
            ("b.txt", Some(b"bee".to_vec()))
        ]
    );
    assert_eq!(files[1].mime_type, "text/plain");
    assert!(!truncated);
    assert_eq!(collect(home.as_fd(), ROOMY, &mut seen), (Vec::new(), false));
    write(&outputs.join("b.txt"), b"bumblebee");
    let (files, _) = collect(home.as_fd(), ROOMY, &mut seen);
    assert_eq!(carried(&files), [("b.txt", Some(b"bumblebee".to_vec()))]);
}

#[test]
fn only_regular_files_are_collected_and_no_symlink_is_followed() {
    let (_dir, home, outputs) = made_home();
    let outside = tempfile::tempdir().unwrap();
    write(&outside.path().join("secret"), b"secret");
    let _socket = every_kind(&outputs);
    std::os::unix::fs::symlink(outside.path().join("secret"), outputs.join("to_file")).unwrap();
    std::os::unix::fs::symlink(outside.path(), outputs.join("to_folder")).unwrap();
    let devices = device(&outputs.join("dev"));
    // A FIFO with both ends open: an open that waited, or a read, would go through.
    let _held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(outputs.join("fifo"))
        .unwrap();
    let (files, truncated) = collect(home.as_fd(), ROOMY, &mut Seen::default());
    assert_eq!(
        carried(&files),
        [
            ("dir/inner", Some(b"1".to_vec())),
            ("file", Some(b"12345".to_vec()))
        ],
        "devices made: {devices}"
    );
    assert!(!truncated);
}

#[test]
fn an_outputs_folder_that_is_a_symlink_is_not_walked() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write(&outside.path().join("secret"), b"secret");
    std::os::unix::fs::symlink(outside.path(), dir.path().join(FOLDER)).unwrap();
    let home = open(dir.path());
    make_folder(home.as_fd());
    assert_eq!(
        collect(home.as_fd(), ROOMY, &mut Seen::default()),
        (Vec::new(), false)
    );
    assert!(!outside.path().join(FOLDER).exists());
}

#[test]
fn a_folder_swapped_for_a_symlink_during_the_walk_is_never_followed() {
    let (_dir, home, outputs) = made_home();
    let outside = tempfile::tempdir().unwrap();
    write(&outside.path().join("f"), b"secret");
    let (d, l) = (outputs.join("d"), outputs.join("l"));
    write(&d.join("f"), b"inside");
    std::os::unix::fs::symlink(outside.path(), &l).unwrap();
    let mut found = 0;
    while_swapping(&d, &l, || {
        for _ in 0..10_000 {
            let (files, _) = collect(home.as_fd(), ROOMY, &mut Seen::default());
            for (path, bytes) in carried(&files) {
                assert_eq!(bytes.as_deref(), Some(&b"inside"[..]), "{path}");
                found += 1;
            }
        }
    });
    assert!(found > 0, "the walk never found the folder");
}

#[test]
fn a_file_over_its_cap_or_past_the_total_is_listed_without_its_bytes() {
    let (_dir, home, outputs) = made_home();
    let png = b"\x89PNG\r\n\x1a\n and more than the cap";
    write(&outputs.join("a.png"), png);
    write(&outputs.join("b.txt"), b"12345678");
    write(&outputs.join("c.txt"), b"12345678");
    let caps = OutputCaps {
        file_cap: 10,
        total_cap: 12,
        max_files: 10,
    };
    let (files, truncated) = collect(home.as_fd(), caps, &mut Seen::default());
    assert_eq!(
        carried(&files),
        [
            ("a.png", None),
            ("b.txt", Some(b"12345678".to_vec())),
            ("c.txt", None)
        ]
    );
    assert_eq!(files[0].mime_type, "image/png", "told from its first bytes");
    assert_eq!((files[0].size, files[2].size), (png.len() as u64, 8));
    assert!(!truncated, "every file is listed");
}

#[test]
fn the_walk_is_bounded_in_files_entries_and_depth() {
    let (_dir, home, outputs) = made_home();
    for i in 0..5 {
        write(&outputs.join(format!("f{i}")), b"");
    }
    let few = OutputCaps {
        max_files: 3,
        ..ROOMY
    };
    let (files, truncated) = collect(home.as_fd(), few, &mut Seen::default());
    let paths: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!((paths, truncated), (vec!["f0", "f1", "f2"], true));

    // Files DEPTH - 1 folders down are collected; those below are not.
    let (_dir2, home2, outputs2) = made_home();
    let deepest = (1..DEPTH).fold(outputs2, |p, i| p.join(format!("d{i}")));
    write(&deepest.join("kept"), b"");
    write(&deepest.join("d8/left"), b"");
    let (files, truncated) = collect(home2.as_fd(), ROOMY, &mut Seen::default());
    let paths: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["d1/d2/d3/d4/d5/d6/d7/kept"]);
    assert!(!truncated);

    let (_dir3, home3, outputs3) = made_home();
    for i in 0..=ENTRIES_MAX {
        std::fs::File::create(outputs3.join(format!("e{i:05}"))).unwrap();
    }
    let many = OutputCaps {
        max_files: 2 * ENTRIES_MAX,
        ..ROOMY
    };
    let (files, truncated) = collect(home3.as_fd(), many, &mut Seen::default());
    assert_eq!((files.len(), truncated), (ENTRIES_MAX, true));
}
