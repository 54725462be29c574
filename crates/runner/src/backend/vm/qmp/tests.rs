//! The QMP exchange against a stand-in for QEMU's side of the socket (QEMU is no part
//! of ours): the greeting, events skipped, refusals, a descriptor handed over.

use super::*;
use std::io::{BufRead, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream as StdStream;

/// QEMU's side: the greeting, then for each command line read the canned lines.
fn stand_in(script: Vec<(&'static str, Vec<String>)>) -> (UnixStream, std::thread::JoinHandle<()>) {
    let (ours, theirs) = StdStream::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    let handle = std::thread::spawn(move || {
        let mut writer = theirs.try_clone().unwrap();
        let mut reader = std::io::BufReader::new(theirs);
        writeln!(
            writer,
            r#"{{"QMP": {{"version": {{}}, "capabilities": []}}}}"#
        )
        .unwrap();
        for (command, lines) in script {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let asked: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(asked["execute"], command, "{line}");
            for l in lines {
                writeln!(writer, "{l}").unwrap();
            }
        }
    });
    (UnixStream::from_std(ours).unwrap(), handle)
}

fn ok() -> Vec<String> {
    vec![r#"{"return": {}}"#.into()]
}

#[tokio::test]
async fn commands_are_answered_past_events_and_refusals_carry_qemus_words() {
    let (stream, qemu) = stand_in(vec![
        ("qmp_capabilities", ok()),
        (
            "query-migrate",
            vec![
                r#"{"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 2}}"#.into(),
                r#"{"return": {"status": "completed"}}"#.into(),
            ],
        ),
        (
            "migrate",
            vec![r#"{"error": {"class": "GenericError", "desc": "no such fd"}}"#.into()],
        ),
    ]);
    let mut qmp = Qmp::new(stream);
    let status = qmp.execute("query-migrate", json!({})).await.unwrap();
    assert_eq!(status["status"], "completed");
    let refused = qmp
        .execute("migrate", json!({"uri": "fd:x"}))
        .await
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "QEMU refused migrate: GenericError: no such fd"
    );
    qemu.join().unwrap();
}

#[tokio::test]
async fn a_closed_socket_and_a_line_that_is_not_qmp_are_errors() {
    let (stream, qemu) = stand_in(vec![("qmp_capabilities", vec!["[1, 2]".into()])]);
    let err = Qmp::new(stream)
        .execute("stop", json!({}))
        .await
        .unwrap_err();
    assert!(matches!(err, QmpError::Malformed(_)), "{err}");
    qemu.join().unwrap();

    let (stream, qemu) = stand_in(vec![("qmp_capabilities", ok()), ("cont", ok())]);
    let mut qmp = Qmp::new(stream);
    qmp.execute("cont", json!({})).await.unwrap();
    qemu.join().unwrap();
    let err = qmp.execute("stop", json!({})).await.unwrap_err();
    assert!(
        matches!(err, QmpError::Closed(ref c) if c == "stop"),
        "{err}"
    );
}

#[tokio::test]
async fn a_descriptor_travels_with_getfd() {
    let (ours, theirs) = StdStream::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    let qemu = std::thread::spawn(move || {
        let mut theirs = theirs;
        theirs
            .write_all(b"{\"QMP\": {}}\n")
            .and_then(|()| read_line(&mut theirs).map(drop))
            .and_then(|()| theirs.write_all(b"{\"return\": {}}\n"))
            .unwrap();
        let (line, fd) = receive_with_rights(&theirs);
        theirs.write_all(b"{\"return\": {}}\n").unwrap();
        (line, fd)
    });
    let mut qmp = Qmp::new(UnixStream::from_std(ours).unwrap());
    let (mut reader, writer) = StdStream::pair().unwrap();
    qmp.send_fd("state", std::os::fd::AsFd::as_fd(&writer))
        .await
        .unwrap();
    drop(writer);
    let (line, fd) = qemu.join().unwrap();
    let asked: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        asked,
        json!({"execute": "getfd", "arguments": {"fdname": "state"}})
    );
    // What QEMU writes to the descriptor it got reaches the runner's end.
    let mut passed = StdStream::from(fd.expect("a descriptor came with getfd"));
    passed.write_all(b"saved").unwrap();
    drop(passed);
    let mut got = String::new();
    reader.read_to_string(&mut got).unwrap();
    assert_eq!(got, "saved");
}

fn read_line(stream: &mut StdStream) -> std::io::Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8];
    while byte[0] != b'\n' {
        stream.read_exact(&mut byte)?;
        line.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// Reads one command line, and the descriptor that came with it.
fn receive_with_rights(stream: &StdStream) -> (String, Option<OwnedFd>) {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut line = Vec::new();
    let mut fd = None;
    while !line.ends_with(b"\n") {
        let mut buf = [0u8; 256];
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!([i32; 1]);
        let msg = recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::empty(),
        )
        .unwrap();
        for cmsg in msg.cmsgs().unwrap() {
            if let ControlMessageOwned::ScmRights(fds) = cmsg {
                // SAFETY: the kernel just installed these descriptors in this process
                // for this message; nothing else owns them.
                fd = fds.first().map(|raw| unsafe { OwnedFd::from_raw_fd(*raw) });
            }
        }
        let n = msg.bytes;
        line.extend_from_slice(&buf[..n]);
    }
    (String::from_utf8(line).unwrap(), fd)
}
