//! Hostile archives given to `POST /snapshots/import`: each refused with 400
//! `bad_archive` naming its entry, and nothing kept or written anywhere.

use super::runner_on;
use super::snapshots::import;
use super::tar::{Kind, Tar};
use crate::common::Runner;
use std::path::Path;

/// Imports `archive`, expects a refusal naming `entry`, and checks that nothing was
/// kept in the data folder.
async fn refused(runner: &Runner, data: &Path, what: &str, archive: Vec<u8>, entry: &str) {
    let (status, body) = import(runner, archive).await;
    assert_eq!(status, 400, "{what}: {body}");
    assert_eq!(body["error"]["code"], "bad_archive", "{what}: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(entry),
        "{what}: the message names {entry:?}: {message}"
    );
    for sub in ["snapshots", "incoming"] {
        let left = std::fs::read_dir(data.join(sub)).expect(sub).count();
        assert_eq!(left, 0, "{what}: nothing kept in {sub}");
    }
}

#[tokio::test]
async fn hostile_archives_are_refused_with_nothing_written_outside() {
    let data = tempfile::tempdir().expect("data folder");
    let runner = runner_on(
        data.path(),
        &[
            ("RUNNER_SNAPSHOT_MAX_ENTRIES", "100"),
            ("RUNNER_MAX_STORED_BYTES", "10000000"),
        ],
    );
    let outside = format!("/tmp/pwned-{}", std::process::id());
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        (
            "dot-dot",
            Tar::default()
                .file(&format!("home/../../../..{outside}"), b"x")
                .finish(),
            "..".into(),
        ),
        (
            "absolute",
            Tar::default().file(&outside, b"x").finish(),
            outside.clone(),
        ),
        (
            "outside home and tmp",
            Tar::default().file("etc/passwd", b"x").finish(),
            "etc/passwd".into(),
        ),
        (
            "through a symlink",
            Tar::default()
                .dir("home")
                .symlink("home/out", "/tmp")
                .file(&format!("home/out/pwned-{}", std::process::id()), b"x")
                .finish(),
            "home/out".into(),
        ),
        (
            "hard link out",
            Tar::default()
                .entry("home/passwd", Kind::HardLink, "/etc/passwd", 0, b"")
                .finish(),
            "home/passwd".into(),
        ),
        (
            "hard link in",
            Tar::default()
                .file("home/a", b"a")
                .entry("home/b", Kind::HardLink, "home/a", 0, b"")
                .finish(),
            "home/b".into(),
        ),
        (
            "device",
            Tar::default()
                .entry("home/null", Kind::CharDevice, "", 0, b"")
                .finish(),
            "home/null".into(),
        ),
        (
            "fifo",
            Tar::default()
                .entry("tmp/fifo", Kind::Fifo, "", 0, b"")
                .finish(),
            "tmp/fifo".into(),
        ),
        (
            "huge declared size",
            Tar::default()
                .entry("home/huge", Kind::File, "", 1 << 40, b"tiny")
                .finish(),
            "home/huge".into(),
        ),
        (
            "many tiny entries",
            (0..101)
                .fold(Tar::default().dir("home"), |tar, n| {
                    tar.file(&format!("home/f{n}"), b"")
                })
                .finish(),
            "home/f99".into(),
        ),
        (
            "truncated",
            Tar::default()
                .entry("home/cut", Kind::File, "", 4096, b"only this")
                .truncated(),
            "home/cut".into(),
        ),
    ];
    for (what, archive, entry) in cases {
        refused(&runner, data.path(), what, archive, &entry).await;
    }
    assert!(!Path::new(&outside).exists(), "nothing written outside");
    let stray = format!("/tmp/pwned-{}", std::process::id());
    assert!(!Path::new(&stray).exists());

    let (status, body) = import(&runner, b"not a tar archive at all".repeat(40)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "bad_archive");

    let fine = Tar::default()
        .dir("home")
        .file("home/ok.txt", b"fine\n")
        .symlink("home/to-etc", "/etc/passwd")
        .finish();
    let (status, body) = import(&runner, fine).await;
    assert_eq!(status, 201, "a sound archive is taken: {body}");
}
