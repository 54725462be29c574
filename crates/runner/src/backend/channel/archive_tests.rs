//! The runner's side of an archive's exchange, against an agent stand-in that speaks
//! the frames (the agent's own side is tested in the agent crate, on real folders).

use super::*;
use crate::backend::archive::{ArchiveRefusal, ArchiveSummary};
use sandbox_protocol::agent::{
    decode_bytes, encode_bytes, AgentMessage, FileFailure, FileRequest, RunnerMessage,
    ARCHIVE_CHUNK_BYTES,
};
use sandbox_protocol::frame;
use std::os::unix::fs::PermissionsExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

async fn receive(s: &mut DuplexStream) -> RunnerMessage {
    let mut header = [0u8; 4];
    s.read_exact(&mut header).await.expect("a header");
    let mut payload = vec![0u8; frame::payload_len(header).expect("a length")];
    s.read_exact(&mut payload).await.expect("a payload");
    frame::decode(&payload).expect("a runner message")
}

async fn answer(s: &mut DuplexStream, message: &AgentMessage) {
    s.write_all(&frame::encode(message).expect("encodes"))
        .await
        .expect("written");
}

fn chunk(bytes: &[u8]) -> AgentMessage {
    AgentMessage::ArchiveChunk {
        data: encode_bytes(bytes),
    }
}

/// An agent that answers a Pack with `pieces` as chunks and `end`, then Ready (to show
/// the channel is in step).
async fn packing_agent(
    mut s: DuplexStream,
    pieces: Vec<Vec<u8>>,
    end: AgentMessage,
) -> RunnerMessage {
    let request = receive(&mut s).await;
    for piece in &pieces {
        answer(&mut s, &chunk(piece)).await;
    }
    answer(&mut s, &end).await;
    answer(&mut s, &AgentMessage::Ready).await;
    request
}

#[tokio::test]
async fn a_pack_is_written_to_a_private_file() {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join("session.tar");
    let (mut runner, agent) = tokio::io::duplex(1 << 16);
    let pieces = vec![vec![1; 1000], vec![2; 24]];
    let end = AgentMessage::Packed {
        bytes: 1024,
        entries: 3,
        skipped: 1,
    };
    let agent = tokio::spawn(packing_agent(agent, pieces, end));
    let summary = pack_to(&mut runner, &to, 4096)
        .await
        .expect("the channel works");
    assert_eq!(
        summary.expect("packed"),
        ArchiveSummary {
            bytes: 1024,
            entries: 3
        }
    );
    assert_eq!(
        agent.await.unwrap(),
        RunnerMessage::File(FileRequest::Pack { max_bytes: 4096 })
    );
    let written = std::fs::read(&to).unwrap();
    assert_eq!(written, [vec![1; 1000], vec![2; 24]].concat());
    let mode = std::fs::metadata(&to).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    expect_ready(&mut runner).await.expect("in step");
}

#[tokio::test]
async fn a_pack_over_its_limit_is_refused_and_the_rest_drained() {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join("session.tar");
    let (mut runner, agent) = tokio::io::duplex(1 << 16);
    let pieces = vec![vec![1; 3000], vec![2; 3000], vec![3; 3000]];
    let end = AgentMessage::Packed {
        bytes: 9000,
        entries: 3,
        skipped: 0,
    };
    tokio::spawn(packing_agent(agent, pieces, end));
    let refused = pack_to(&mut runner, &to, 5000)
        .await
        .expect("the channel works");
    assert!(
        matches!(refused, Err(ArchiveRefusal::TooLarge { limit: 5000 })),
        "{refused:?}"
    );
    assert!(std::fs::metadata(&to).unwrap().len() <= 5000);
    expect_ready(&mut runner).await.expect("in step");
}

#[tokio::test]
async fn the_agent_s_refusal_comes_through() {
    let dir = tempfile::tempdir().unwrap();
    let (mut runner, agent) = tokio::io::duplex(1 << 16);
    let end = AgentMessage::FileFailed {
        reason: FileFailure::BadPath,
        message: "home/x: too deep".into(),
    };
    tokio::spawn(packing_agent(agent, vec![vec![0; 10]], end));
    let refused = pack_to(&mut runner, &dir.path().join("a.tar"), 1 << 20)
        .await
        .expect("the channel works");
    assert!(
        matches!(&refused, Err(ArchiveRefusal::Refused(m)) if m == "home/x: too deep"),
        "{refused:?}"
    );
    expect_ready(&mut runner).await.expect("in step");
}

#[tokio::test]
async fn an_unpack_sends_the_file_in_chunks_and_marks_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let from = dir.path().join("session.tar");
    let archive: Vec<u8> = (0..(5 * ARCHIVE_CHUNK_BYTES / 2))
        .map(|i| i as u8)
        .collect();
    std::fs::write(&from, &archive).unwrap();
    let (mut runner, mut agent) = tokio::io::duplex(1 << 16);
    let agent = tokio::spawn(async move {
        let request = receive(&mut agent).await;
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        loop {
            let RunnerMessage::File(FileRequest::UnpackChunk { data, last }) =
                receive(&mut agent).await
            else {
                panic!("a chunk");
            };
            let bytes = decode_bytes(&data).unwrap();
            sizes.push(bytes.len());
            got.extend_from_slice(&bytes);
            if last {
                break;
            }
        }
        let end = AgentMessage::Unpacked {
            bytes: got.len() as u64,
            entries: 7,
        };
        answer(&mut agent, &end).await;
        (request, got, sizes)
    });
    let summary = unpack_from(&mut runner, &from)
        .await
        .expect("the channel works");
    assert_eq!(
        summary.expect("unpacked"),
        ArchiveSummary {
            bytes: archive.len() as u64,
            entries: 7
        }
    );
    let (request, got, sizes) = agent.await.unwrap();
    let len = archive.len() as u64;
    assert_eq!(
        request,
        RunnerMessage::File(FileRequest::Unpack {
            max_bytes: len,
            max_entries: len / 512
        })
    );
    assert_eq!(got, archive);
    assert_eq!(
        sizes,
        [
            ARCHIVE_CHUNK_BYTES,
            ARCHIVE_CHUNK_BYTES,
            ARCHIVE_CHUNK_BYTES / 2
        ]
    );
}

#[tokio::test]
async fn a_missing_file_is_refused_before_the_agent_is_asked() {
    let (mut runner, _agent) = tokio::io::duplex(1 << 16);
    let refused = unpack_from(&mut runner, Path::new("/nonexistent/session.tar"))
        .await
        .expect("nothing sent");
    assert!(matches!(refused, Err(ArchiveRefusal::Io(_))), "{refused:?}");
}
