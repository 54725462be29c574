//! Writing an initramfs: a cpio archive in the "newc" format the kernel unpacks.

use std::io::{self, Write};

/// File type bits of a cpio entry's mode.
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFCHR: u32 = 0o020000;

/// An uncompressed newc archive being written.
pub struct Archive<W: Write> {
    out: W,
    written: u64,
    next_ino: u32,
}

impl<W: Write> Archive<W> {
    /// Starts an archive on `out`.
    pub fn new(out: W) -> Self {
        Archive {
            out,
            written: 0,
            next_ino: 1,
        }
    }

    /// Adds a folder.
    pub fn dir(&mut self, name: &str, perm: u32) -> io::Result<()> {
        self.entry(name, S_IFDIR | perm, (0, 0), &[])
    }

    /// Adds a regular file with its contents.
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) -> io::Result<()> {
        self.entry(name, S_IFREG | perm, (0, 0), data)
    }

    /// Adds a character device node.
    pub fn char_device(&mut self, name: &str, perm: u32, major: u32, minor: u32) -> io::Result<()> {
        self.entry(name, S_IFCHR | perm, (major, minor), &[])
    }

    /// Writes the trailer and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.entry("TRAILER!!!", 0, (0, 0), &[])?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) -> io::Result<()> {
        let ino = self.next_ino;
        self.next_ino += 1;
        let nlink = if mode & S_IFDIR != 0 { 2 } else { 1 };
        let fields = [
            ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime: fixed, so that the same inputs give the same archive
            data.len() as u32,
            0, // dev major
            0, // dev minor
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0, // check
        ];
        let mut header = String::from("070701");
        for field in fields {
            header.push_str(&format!("{field:08x}"));
        }
        self.put(header.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()?;
        self.put(data)?;
        self.pad()
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Pads to a multiple of four bytes, as newc requires after names and data.
    fn pad(&mut self) -> io::Result<()> {
        let pad = (4 - (self.written % 4) as usize) % 4;
        self.put(&[0u8; 3][..pad])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_aligned_and_end_with_a_trailer() {
        let mut archive = Archive::new(Vec::new());
        archive.dir("dev", 0o755).unwrap();
        archive.file("init", 0o755, b"abcde").unwrap();
        let bytes = archive.finish().unwrap();
        assert_eq!(bytes.len() % 4, 0);
        assert!(bytes.starts_with(b"070701"));
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("init\0"));
        assert!(text.contains("abcde"));
        assert!(text.contains("TRAILER!!!\0"));
    }
}
