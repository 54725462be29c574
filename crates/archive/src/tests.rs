//! Hostile archives: each refused with its entry named, nothing of it written.

use super::*;

const LIMITS: Limits = Limits {
    max_bytes: 1 << 30,
    max_entries: 1000,
};

/// One raw tar entry: a header of type `kind` naming `path` (and `link`), declaring
/// `size` bytes, followed by `data` padded to a block. Nothing is checked.
fn raw(path: &[u8], kind: u8, size: u64, link: &[u8], data: &[u8]) -> Vec<u8> {
    let mut header = tar::Header::new_gnu();
    header.as_old_mut().name[..path.len()].copy_from_slice(path);
    header.as_old_mut().linkname[..link.len()].copy_from_slice(link);
    header.set_entry_type(tar::EntryType::new(kind));
    header.set_size(size);
    header.set_mode(0o644);
    header.set_mtime(1_700_000_000);
    header.set_cksum();
    let mut out = header.as_bytes().to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

fn dir(path: &str) -> Vec<u8> {
    raw(path.as_bytes(), b'5', 0, b"", b"")
}

fn file(path: &str, data: &[u8]) -> Vec<u8> {
    raw(path.as_bytes(), b'0', data.len() as u64, b"", data)
}

/// The entries and the end marker.
fn archive(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut out = entries.concat();
    out.extend_from_slice(&[0; 1024]);
    out
}

/// Normalizes `input`; the error's message, and what was written.
fn refused(input: &[u8], limits: Limits) -> (String, Vec<u8>) {
    let mut out = Vec::new();
    match normalize(input, &mut out, limits) {
        Ok(summary) => panic!("accepted: {summary:?}"),
        Err(e) => (e.to_string(), out),
    }
}

fn assert_refused(input: &[u8], naming: &str, saying: &str) -> Vec<u8> {
    let (message, out) = refused(input, LIMITS);
    assert!(
        message.contains(naming) && message.contains(saying),
        "{message:?} should name {naming:?} and say {saying:?}"
    );
    out
}

/// The checked entries of `input`, with each file's data.
fn entries(input: &[u8]) -> Vec<(Entry, Vec<u8>)> {
    let mut got = Vec::new();
    each_entry::<_, ArchiveError>(input, LIMITS, |entry, data| {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(data, &mut bytes).map_err(ArchiveError::Write)?;
        got.push((entry.clone(), bytes));
        Ok(())
    })
    .expect("a valid archive");
    got
}

#[test]
fn a_written_archive_reads_back_the_same_and_normalizes_to_itself() {
    let long = format!("home/{}/{}", "d".repeat(150), "f".repeat(200));
    let hundred = format!("home/{}", "h".repeat(95));
    let hundred_one = format!("home/{}", "h".repeat(96));
    let items = [
        (b"home".to_vec(), Kind::Dir, 0o700),
        (b"home/a.txt".to_vec(), Kind::File { size: 5 }, 0o600),
        (
            b"home/link".to_vec(),
            Kind::Symlink {
                target: b"/".to_vec(),
            },
            0o777,
        ),
        (
            b"home/far".to_vec(),
            Kind::Symlink {
                target: format!("/{}", "t".repeat(300)).into_bytes(),
            },
            0o777,
        ),
        (long.clone().into_bytes(), Kind::File { size: 3 }, 0o4755),
        (b"tmp".to_vec(), Kind::Dir, 0o1777),
        (hundred.into_bytes(), Kind::Dir, 0o755),
        (hundred_one.into_bytes(), Kind::Dir, 0o755),
        (
            b"tmp/l100".to_vec(),
            Kind::Symlink {
                target: vec![b'x'; 100],
            },
            0o777,
        ),
        (
            b"tmp/l101".to_vec(),
            Kind::Symlink {
                target: vec![b'x'; 101],
            },
            0o777,
        ),
        (b"tmp/empty".to_vec(), Kind::Dir, 0o500),
    ];
    let mut writer = Writer::new(Vec::new());
    for (path, kind, mode) in &items {
        let entry = Entry {
            path: path.clone(),
            kind: kind.clone(),
            mode: kept_mode(*mode),
            mtime: 1_700_000_000,
        };
        let mut data: &[u8] = b"hello";
        writer.add(&entry, &mut data, Short::Fail).expect("added");
    }
    let (written, bytes) = writer.finish().expect("finished");
    assert_eq!(bytes, written.len() as u64);
    let read = entries(&written);
    let paths: Vec<&[u8]> = read.iter().map(|(e, _)| e.path.as_slice()).collect();
    let wanted: Vec<&[u8]> = items.iter().map(|(p, _, _)| p.as_slice()).collect();
    assert_eq!(paths, wanted);
    assert_eq!(read[1].1, b"hello");
    assert_eq!(read[4].1, b"hel", "exactly the declared size");
    assert_eq!(read[4].0.mode, 0o755, "setuid dropped");
    assert_eq!(read[5].0.mode, 0o1777, "sticky kept");
    assert_eq!(read[3].0.kind, items[3].1, "a long target kept whole");
    let mut again = Vec::new();
    let summary = normalize(written.as_slice(), &mut again, LIMITS).expect("normalized");
    assert_eq!(again, written, "a writer's archive normalizes to itself");
    assert_eq!(summary.entries, items.len() as u64);
    let costs: u64 = read.iter().map(|(e, _)| cost(e.path.len(), &e.kind)).sum();
    assert_eq!(summary.bytes, costs + END_MARKER, "the cost is exact");
}

#[test]
fn a_short_file_is_padded_or_refused_as_asked() {
    let entry = Entry {
        path: b"home/grew".to_vec(),
        kind: Kind::File { size: 1000 },
        mode: 0o644,
        mtime: 0,
    };
    let mut writer = Writer::new(Vec::new());
    let mut data: &[u8] = b"only this";
    writer.add(&entry, &mut data, Short::Pad).expect("padded");
    let (written, _) = writer.finish().expect("finished");
    let read = entries(&written);
    assert_eq!(read[0].1.len(), 1000);
    assert!(read[0].1.starts_with(b"only this"));
    let mut writer = Writer::new(Vec::new());
    let mut data: &[u8] = b"only this";
    let result = writer.add(&entry, &mut data, Short::Fail);
    assert!(matches!(result, Err(AddError::ShortData)), "{result:?}");
}

#[test]
fn dot_dot_is_refused() {
    let input = archive(&[dir("home"), file("home/../etc/passwd", b"x")]);
    let out = assert_refused(&input, "home/../etc/passwd", "'..'");
    assert!(
        !out.windows(6).any(|w| w == b"passwd"),
        "nothing of it written"
    );
}

#[test]
fn an_absolute_path_is_refused() {
    assert_refused(
        &archive(&[file("/etc/passwd", b"x")]),
        "/etc/passwd",
        "relative",
    );
    assert_refused(
        &archive(&[file("etc/passwd", b"x")]),
        "etc/passwd",
        "'home' or 'tmp'",
    );
    assert_refused(&archive(&[file("home//x", b"x")]), "home//x", "plain names");
    assert_refused(
        &archive(&[file("home/./x", b"x")]),
        "home/./x",
        "plain names",
    );
}

#[test]
fn a_file_through_a_symlink_is_refused() {
    let input = archive(&[
        dir("home"),
        raw(b"home/out", b'2', 0, b"/etc", b""),
        file("home/out/passwd", b"x"),
    ]);
    assert_refused(&input, "home/out/passwd", "lies below \"home/out\"");
    let input = archive(&[file("home/f", b"x"), file("home/f/g", b"y")]);
    assert_refused(&input, "home/f/g", "not a folder");
}

#[test]
fn hard_links_are_refused_inside_and_out() {
    let inside = archive(&[
        file("home/a", b"x"),
        raw(b"home/b", b'1', 0, b"home/a", b""),
    ]);
    assert_refused(&inside, "home/b", "a hard link");
    let outside = archive(&[raw(b"home/shadow", b'1', 0, b"/etc/shadow", b"")]);
    assert_refused(&outside, "home/shadow", "a hard link");
}

#[test]
fn devices_and_fifos_are_refused() {
    assert_refused(
        &archive(&[raw(b"home/c", b'3', 0, b"", b"")]),
        "home/c",
        "a character device",
    );
    assert_refused(
        &archive(&[raw(b"home/b", b'4', 0, b"", b"")]),
        "home/b",
        "a block device",
    );
    assert_refused(
        &archive(&[raw(b"tmp/p", b'6', 0, b"", b"")]),
        "tmp/p",
        "a FIFO",
    );
}

#[test]
fn a_huge_declared_size_is_refused_before_its_data_is_read() {
    let mut input = raw(b"home/huge", b'0', 1 << 40, b"", b"");
    input.extend_from_slice(b"a few bytes");
    let (message, out) = refused(&input, LIMITS);
    assert!(
        message.contains("home/huge") && message.contains("1099511627776"),
        "{message}"
    );
    assert!(out.is_empty(), "nothing written: {} bytes", out.len());
}

#[test]
fn more_entries_than_the_limit_are_refused() {
    let tiny: Vec<Vec<u8>> = (0..20).map(|i| file(&format!("tmp/{i}"), b"")).collect();
    let limits = Limits {
        max_entries: 10,
        ..LIMITS
    };
    let (message, _) = refused(&archive(&tiny), limits);
    assert!(
        message.contains("tmp/10") && message.contains("more than 10 entries"),
        "{message}"
    );
}

#[test]
fn the_byte_limit_counts_every_entry() {
    let files: Vec<Vec<u8>> = (0..8)
        .map(|i| file(&format!("tmp/{i}"), &[7; 600]))
        .collect();
    let limits = Limits {
        max_bytes: 4 * 1536 + END_MARKER,
        ..LIMITS
    };
    let (message, _) = refused(&archive(&files), limits);
    assert!(
        message.contains("\"tmp/4\"") && message.contains("over its limit"),
        "{message}"
    );
}

#[test]
fn a_duplicate_path_is_refused() {
    let input = archive(&[file("home/a", b"x"), file("home/a", b"y")]);
    assert_refused(&input, "home/a", "came earlier");
    let input = archive(&[file("home/a", b"x"), raw(b"home/a/", b'5', 0, b"", b"")]);
    assert_refused(&input, "home/a", "came earlier");
}

#[test]
fn a_truncated_stream_is_refused() {
    let whole = archive(&[file("home/a", &[1; 2000]), file("home/b", b"x")]);
    let (message, _) = refused(&whole[..1000], LIMITS);
    assert!(
        message.contains("home/a") && message.contains("ends before"),
        "{message}"
    );
    let (message, _) = refused(&whole[..2560 + 100], LIMITS);
    assert!(
        message.contains("garbled or truncated after \"home/a\""),
        "{message}"
    );
    let (message, _) = refused(&whole[..2560], LIMITS);
    assert!(
        message.contains("without its end marker after \"home/a\""),
        "{message}"
    );
    let (message, _) = refused(b"", LIMITS);
    assert!(message.contains("without its end marker"), "{message}");
}

#[test]
fn a_garbled_header_is_refused() {
    let mut input = archive(&[file("home/a", b"x")]);
    input[0] ^= 1;
    let (message, _) = refused(&input, LIMITS);
    assert!(message.contains("checksum"), "{message}");
}

/// A PAX extended header ('x') carrying `records`.
fn pax(records: &[(&str, &[u8])]) -> Vec<u8> {
    let mut data = Vec::new();
    for (key, value) in records {
        let body = [b" ", key.as_bytes(), b"=", value, b"\n"].concat();
        let mut len = body.len() + 1;
        while format!("{len}").len() + body.len() != len {
            len += 1;
        }
        data.extend_from_slice(format!("{len}").as_bytes());
        data.extend_from_slice(&body);
    }
    raw(b"PaxHeaders/x", b'x', data.len() as u64, b"", &data)
}

#[test]
fn a_pax_header_setting_dot_dot_is_refused() {
    let input = archive(&[
        pax(&[("path", b"home/../../etc/cron.d/x")]),
        file("home/innocent", b"x"),
    ]);
    assert_refused(&input, "home/../../etc/cron.d/x", "'..'");
    let input = archive(&[
        pax(&[("linkpath", b"/etc/shadow")]),
        raw(b"home/l", b'1', 0, b"home/x", b""),
    ]);
    assert_refused(&input, "home/l", "a hard link");
}

/// A GNU long name entry ('L') for `name`.
fn long_name(name: &[u8]) -> Vec<u8> {
    let data = [name, b"\0"].concat();
    raw(b"././@LongLink", b'L', data.len() as u64, b"", &data)
}

#[test]
fn gnu_long_names_are_read_and_checked() {
    let deep = format!("home/{}", vec!["d"; 63].join("/"));
    let long = format!("home/{}", "n".repeat(300));
    let input = archive(&[long_name(long.as_bytes()), file("home/short", b"x")]);
    let read = entries(&input);
    assert_eq!(read[0].0.path, long.as_bytes());
    let bad = format!("home/{}/../../x", "n".repeat(300));
    let input = archive(&[long_name(bad.as_bytes()), file("home/short", b"x")]);
    assert_refused(&input, &bad, "'..'");
    let deeper = format!("{deep}/e");
    let input = archive(&[long_name(deeper.as_bytes()), dir("home/short")]);
    assert_refused(&input, &deeper, "65 levels deep");
    let longest = format!("home/{}", "n".repeat(5000));
    let input = archive(&[long_name(longest.as_bytes()), dir("home/short")]);
    assert_refused(&input, "home/nnn", "5005 bytes long");
}

#[test]
fn an_extension_header_of_any_declared_size_is_not_read_into_memory() {
    let mut input = raw(b"././@LongLink", b'L', 1 << 40, b"", b"");
    input.extend_from_slice(&vec![b'n'; 200_000]);
    let (message, _) = refused(&input, LIMITS);
    assert!(message.contains("extension headers"), "{message}");
}

#[test]
fn home_and_tmp_themselves_must_be_folders() {
    assert_refused(&archive(&[file("home", b"x")]), "home", "must be folders");
    assert_refused(
        &archive(&[raw(b"tmp", b'2', 0, b"/", b"")]),
        "tmp",
        "must be folders",
    );
}

#[test]
fn a_symlink_needs_a_target_of_allowed_length() {
    assert_refused(
        &archive(&[raw(b"home/l", b'2', 0, b"", b"")]),
        "home/l",
        "non-empty",
    );
    let far = format!("/{}", "t".repeat(5000));
    let input = archive(&[
        pax(&[("linkpath", far.as_bytes())]),
        raw(b"home/l", b'2', 0, b"x", b""),
    ]);
    assert_refused(&input, "home/l", "5001 bytes long");
}
