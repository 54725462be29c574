//! Session archives packed and unpacked on temporary folders standing for the home
//! folder and `/tmp`, over an in-memory channel: run as any user (no program user is
//! set, so every operation runs with the test's own ids).

use super::{pack, unpack};
use crate::agent::fixtures::{open, while_swapping};
use crate::agent::AgentError;
use nix::sys::stat::Mode;
use sandbox_archive::{each_entry, ArchiveError, Entry, Kind, Limits};
use sandbox_protocol::agent::{
    decode_bytes, encode_bytes, AgentMessage, FileFailure, FileRequest, RunnerMessage,
    ARCHIVE_CHUNK_BYTES,
};
use sandbox_protocol::frame;
use std::fs;
use std::io::{Cursor, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// A channel: the runner's frames to read, and what the agent writes.
struct Channel {
    input: Cursor<Vec<u8>>,
    output: Vec<u8>,
}

impl Read for Channel {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Channel {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.output.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Channel {
    fn new(frames: &[RunnerMessage]) -> Self {
        let input = frames
            .iter()
            .flat_map(|f| frame::encode(f).expect("encodes"))
            .collect();
        Channel {
            input: Cursor::new(input),
            output: Vec::new(),
        }
    }

    /// What the agent wrote, frame by frame.
    fn answers(&self) -> Vec<AgentMessage> {
        let mut out = self.output.as_slice();
        std::iter::from_fn(|| frame::read(&mut out).expect("a frame")).collect()
    }

    /// Every frame the runner sent was read.
    fn all_read(&self) -> bool {
        self.input.position() == self.input.get_ref().len() as u64
    }
}

/// Two folders standing for the home folder and `/tmp`.
struct Session {
    _dir: tempfile::TempDir,
    home: std::path::PathBuf,
    tmp: std::path::PathBuf,
}

impl Session {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (home, tmp) = (dir.path().join("home"), dir.path().join("tmp"));
        fs::create_dir(&home).unwrap();
        fs::create_dir(&tmp).unwrap();
        Session {
            _dir: dir,
            home,
            tmp,
        }
    }

    fn fds(&self) -> (OwnedFd, OwnedFd) {
        (open(&self.home), open(&self.tmp))
    }

    /// Packs the session; the archive and the agent's last answer.
    fn pack(&self, max_bytes: u64) -> (Vec<u8>, AgentMessage) {
        let mut channel = Channel::new(&[]);
        pack(Ok(self.fds()), max_bytes, &mut channel).expect("the channel works");
        let mut answers = channel.answers();
        let last = answers.pop().expect("an answer");
        let mut archive = Vec::new();
        for chunk in answers {
            let AgentMessage::ArchiveChunk { data } = chunk else {
                panic!("a chunk, got {chunk:?}");
            };
            let bytes = decode_bytes(&data).unwrap();
            assert!(bytes.len() <= ARCHIVE_CHUNK_BYTES);
            archive.extend_from_slice(&bytes);
        }
        (archive, last)
    }

    /// Unpacks `archive` into the session, sent in chunks of `chunk` bytes; the answer.
    fn unpack(&self, archive: &[u8], chunk: usize) -> AgentMessage {
        let mut frames: Vec<RunnerMessage> = archive
            .chunks(chunk)
            .map(|piece| {
                RunnerMessage::File(FileRequest::UnpackChunk {
                    data: encode_bytes(piece),
                    last: false,
                })
            })
            .collect();
        frames.push(RunnerMessage::File(FileRequest::UnpackChunk {
            data: String::new(),
            last: true,
        }));
        let mut channel = Channel::new(&frames);
        let limits = Limits {
            max_bytes: 1 << 30,
            max_entries: 1000,
        };
        unpack(Ok(self.fds()), limits, &mut channel).expect("the channel works");
        assert!(channel.all_read(), "every chunk is read");
        let mut answers = channel.answers();
        assert_eq!(answers.len(), 1, "one answer: {answers:?}");
        answers.remove(0)
    }
}

fn entries(archive: &[u8]) -> Vec<Entry> {
    let limits = Limits {
        max_bytes: 1 << 30,
        max_entries: 10_000,
    };
    let mut got = Vec::new();
    each_entry::<_, ArchiveError>(archive, limits, |entry, _| {
        got.push(entry.clone());
        Ok(())
    })
    .expect("a valid archive");
    got
}

fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

#[test]
fn a_session_round_trips_with_its_modes_links_and_empty_folders() {
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), b"outside").unwrap();
    let from = Session::new();
    let big: Vec<u8> = (0..10 << 20).map(|i: u32| (i % 251) as u8).collect();
    fs::write(from.home.join("big.bin"), &big).unwrap();
    fs::write(from.home.join("private"), b"p").unwrap();
    set_mode(&from.home.join("private"), 0o600);
    fs::write(from.home.join("tool"), b"#!/bin/sh\n").unwrap();
    set_mode(&from.home.join("tool"), 0o755);
    fs::create_dir_all(from.home.join("own/deeper")).unwrap();
    set_mode(&from.home.join("own"), 0o700);
    fs::create_dir(from.home.join("kept")).unwrap();
    fs::write(from.home.join("kept/file"), b"in a 0500 folder").unwrap();
    set_mode(&from.home.join("kept"), 0o500);
    fs::create_dir(from.home.join("empty")).unwrap();
    std::os::unix::fs::symlink("/", from.home.join("root")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), from.home.join("out")).unwrap();
    fs::hard_link(from.home.join("private"), from.home.join("hard")).unwrap();
    nix::unistd::mkfifo(&from.tmp.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
    fs::write(from.tmp.join("scratch"), b"tmp too").unwrap();

    let (archive, answer) = from.pack(1 << 30);
    let AgentMessage::Packed {
        bytes,
        entries: count,
        skipped,
    } = answer
    else {
        panic!("packed, got {answer:?}");
    };
    assert_eq!(bytes, archive.len() as u64);
    assert_eq!(skipped, 1, "the FIFO is skipped");
    let listed = entries(&archive);
    assert_eq!(listed.len() as u64, count);
    let kinds: Vec<(String, &Kind)> = listed.iter().map(|e| (e.shown(), &e.kind)).collect();
    assert!(kinds.contains(&(
        "home/root".into(),
        &Kind::Symlink {
            target: b"/".to_vec()
        }
    )));
    assert!(
        !kinds
            .iter()
            .any(|(p, _)| p.starts_with("home/root/") || p.starts_with("home/out/")),
        "no symlink followed"
    );
    assert!(kinds.contains(&("home/hard".into(), &Kind::File { size: 1 })));

    let to = Session::new();
    let answer = to.unpack(&archive, 300_000);
    assert_eq!(
        answer,
        AgentMessage::Unpacked {
            bytes: archive.len() as u64,
            entries: count
        }
    );
    assert_eq!(fs::read(to.home.join("big.bin")).unwrap(), big);
    assert_eq!(mode(&to.home.join("private")), 0o600);
    assert_eq!(mode(&to.home.join("tool")), 0o755);
    assert_eq!(mode(&to.home.join("own")), 0o700);
    assert!(to.home.join("own/deeper").is_dir());
    assert_eq!(mode(&to.home.join("kept")), 0o500);
    assert_eq!(
        fs::read(to.home.join("kept/file")).unwrap(),
        b"in a 0500 folder"
    );
    assert!(fs::read_dir(to.home.join("empty"))
        .unwrap()
        .next()
        .is_none());
    assert_eq!(fs::read_link(to.home.join("root")).unwrap(), Path::new("/"));
    assert_eq!(
        fs::read_link(to.home.join("out")).unwrap(),
        outside.path().join("secret")
    );
    assert_eq!(fs::read(to.home.join("hard")).unwrap(), b"p");
    assert_eq!(fs::read(to.tmp.join("scratch")).unwrap(), b"tmp too");
    assert!(!to.tmp.join("fifo").exists());
    for name in ["big.bin", "kept", "own", "root"] {
        let (a, b) = (from.home.join(name), to.home.join(name));
        let time = |p: &Path| fs::symlink_metadata(p).unwrap().mtime();
        assert_eq!(time(&a), time(&b), "{name}'s time is kept");
    }
    set_mode(&from.home.join("kept"), 0o700);
    set_mode(&to.home.join("kept"), 0o700);
}

#[test]
fn a_pack_over_its_limit_is_refused() {
    let from = Session::new();
    fs::write(from.home.join("big"), vec![1; 100_000]).unwrap();
    let (_, answer) = from.pack(50_000);
    assert!(
        matches!(
            &answer,
            AgentMessage::FileFailed { reason: FileFailure::TooLarge, message } if message.contains("home/big")
        ),
        "{answer:?}"
    );
}

#[test]
fn a_hostile_archive_writes_nothing_outside_and_every_chunk_is_read() {
    let outside = tempfile::tempdir().unwrap();
    let mut writer = sandbox_archive::Writer::new(Vec::new());
    let link = Entry {
        path: b"home/escape".to_vec(),
        kind: Kind::Symlink {
            target: outside.path().as_os_str().as_encoded_bytes().to_vec(),
        },
        mode: 0o777,
        mtime: 0,
    };
    writer
        .add(&link, &mut std::io::empty(), sandbox_archive::Short::Fail)
        .unwrap();
    let mut archive = writer.finish().unwrap().0;
    // A second archive's entry through the link, spliced in before the end marker.
    let mut through = sandbox_archive::Writer::new(Vec::new());
    let file = Entry {
        path: b"home/escape/planted".to_vec(),
        kind: Kind::File { size: 4 },
        mode: 0o644,
        mtime: 0,
    };
    through
        .add(&file, &mut &b"evil"[..], sandbox_archive::Short::Fail)
        .unwrap();
    let through = through.finish().unwrap().0;
    archive.truncate(archive.len() - 1024);
    archive.extend_from_slice(&through);
    let to = Session::new();
    let answer = to.unpack(&archive, 100);
    assert!(
        matches!(&answer, AgentMessage::FileFailed { message, .. } if message.contains("home/escape/planted")),
        "{answer:?}"
    );
    assert!(fs::read_dir(outside.path()).unwrap().next().is_none());
}

#[test]
fn what_stands_in_the_way_is_replaced_never_followed() {
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("victim"), b"untouched").unwrap();
    let from = Session::new();
    fs::write(from.home.join("a.txt"), b"restored").unwrap();
    let (archive, _) = from.pack(1 << 30);
    let to = Session::new();
    std::os::unix::fs::symlink(outside.path().join("victim"), to.home.join("a.txt")).unwrap();
    let answer = to.unpack(&archive, ARCHIVE_CHUNK_BYTES);
    assert!(
        matches!(answer, AgentMessage::Unpacked { .. }),
        "{answer:?}"
    );
    assert_eq!(fs::read(to.home.join("a.txt")).unwrap(), b"restored");
    assert_eq!(
        fs::read(outside.path().join("victim")).unwrap(),
        b"untouched"
    );
}

#[test]
fn a_symlink_swapped_in_during_the_walk_is_stored_as_a_link() {
    let from = Session::new();
    fs::create_dir(from.home.join("real")).unwrap();
    fs::write(from.home.join("real/marker"), b"m").unwrap();
    std::os::unix::fs::symlink("/", from.home.join("swap")).unwrap();
    while_swapping(&from.home.join("real"), &from.home.join("swap"), || {
        for _ in 0..50 {
            let (archive, answer) = from.pack(1 << 30);
            assert!(matches!(answer, AgentMessage::Packed { .. }), "{answer:?}");
            for entry in entries(&archive) {
                let path = entry.shown();
                let below = path
                    .strip_prefix("home/real/")
                    .or(path.strip_prefix("home/swap/"));
                assert!(
                    below.is_none_or(|rest| rest == "marker"),
                    "followed: {path}"
                );
            }
        }
    });
}

#[test]
fn another_request_in_the_middle_of_an_unpack_is_out_of_step() {
    let mut channel = Channel::new(&[RunnerMessage::File(FileRequest::List {
        limit: 1,
        max_bytes: 100,
    })]);
    let to = Session::new();
    let limits = Limits {
        max_bytes: 1 << 20,
        max_entries: 10,
    };
    let result = unpack(Ok(to.fds()), limits, &mut channel);
    assert!(
        matches!(result, Err(AgentError::OutOfStep(_))),
        "{result:?}"
    );
}
