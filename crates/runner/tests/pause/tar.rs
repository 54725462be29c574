//! Tar archives built byte by byte, so that a test can write what no tar library would:
//! `..` in a name, absolute names, devices, sizes that lie.

/// One header block's type flag.
#[derive(Clone, Copy)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    HardLink,
    CharDevice,
    Fifo,
}

impl Kind {
    fn flag(self) -> u8 {
        match self {
            Kind::File => b'0',
            Kind::HardLink => b'1',
            Kind::Symlink => b'2',
            Kind::CharDevice => b'3',
            Kind::Dir => b'5',
            Kind::Fifo => b'6',
        }
    }
}

/// An archive being built.
#[derive(Default)]
pub struct Tar {
    bytes: Vec<u8>,
}

impl Tar {
    /// An entry whose header says `size` and whose data is `data` (padded to a block).
    pub fn entry(mut self, name: &str, kind: Kind, link: &str, size: u64, data: &[u8]) -> Tar {
        let mut header = [0u8; 512];
        put(&mut header[0..100], name.as_bytes());
        put(&mut header[100..108], b"0000644\0");
        put(&mut header[108..116], b"0001750\0");
        put(&mut header[116..124], b"0001750\0");
        put(&mut header[124..136], format!("{size:011o}\0").as_bytes());
        put(&mut header[136..148], b"00000000000\0");
        header[156] = kind.flag();
        put(&mut header[157..257], link.as_bytes());
        put(&mut header[257..265], b"ustar\x0000");
        header[148..156].fill(b' ');
        let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
        put(&mut header[148..156], format!("{sum:06o}\0 ").as_bytes());
        self.bytes.extend_from_slice(&header);
        self.bytes.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.bytes.extend(std::iter::repeat_n(0u8, pad));
        self
    }

    /// A regular file with `data`.
    pub fn file(self, name: &str, data: &[u8]) -> Tar {
        self.entry(name, Kind::File, "", data.len() as u64, data)
    }

    /// A folder.
    pub fn dir(self, name: &str) -> Tar {
        self.entry(name, Kind::Dir, "", 0, b"")
    }

    /// A symbolic link to `target`.
    pub fn symlink(self, name: &str, target: &str) -> Tar {
        self.entry(name, Kind::Symlink, target, 0, b"")
    }

    /// The archive, with its two closing blocks.
    pub fn finish(mut self) -> Vec<u8> {
        self.bytes.extend(std::iter::repeat_n(0u8, 1024));
        self.bytes
    }

    /// The archive cut where it is (no closing blocks).
    pub fn truncated(self) -> Vec<u8> {
        self.bytes
    }
}

fn put(field: &mut [u8], value: &[u8]) {
    let n = value.len().min(field.len());
    field[..n].copy_from_slice(&value[..n]);
}
