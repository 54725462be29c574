//! The uncompressed kernel, `vmlinux`: an ELF image with a PVH entry point, which is
//! what Firecracker boots on x86_64 (it takes no bzImage). It is unpacked from Debian's
//! bzImage, whose payload is compressed with LZ4 in its legacy framing: a magic number,
//! then blocks, each a little-endian length and an LZ4 block of at most 8 MiB.

use super::ImageError;

/// The legacy LZ4 frame's magic number.
const LZ4_LEGACY: u32 = 0x184c_2102;
/// [`LZ4_LEGACY`] as it appears in the file.
const LZ4_LEGACY_MAGIC: [u8; 4] = LZ4_LEGACY.to_le_bytes();
/// The uncompressed size of every block but the last.
const BLOCK_BYTES: usize = 8 << 20;
/// ELF64, little-endian, x86-64.
const ELF_MAGIC: &[u8] = b"\x7fELF\x02\x01";
const EM_X86_64: u16 = 62;

/// Finds the LZ4 payload in `bzimage` and returns the ELF kernel it holds.
pub fn extract(bzimage: &[u8]) -> Result<Vec<u8>, ImageError> {
    let starts = bzimage
        .windows(LZ4_LEGACY_MAGIC.len())
        .enumerate()
        .filter(|(_, w)| *w == LZ4_LEGACY_MAGIC)
        .map(|(at, _)| at);
    for start in starts {
        let kernel = decode_legacy(&bzimage[start + LZ4_LEGACY_MAGIC.len()..]);
        if is_x86_64_elf(&kernel) {
            return Ok(kernel);
        }
    }
    Err(ImageError::Step(
        "no LZ4-compressed ELF kernel found in the kernel image (this builder expects \
         Debian's cloud kernel, CONFIG_KERNEL_LZ4)"
            .into(),
    ))
}

/// Decodes legacy LZ4 blocks until the data stops looking like one (the payload is
/// followed by other bytes of the bzImage).
fn decode_legacy(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut block = vec![0u8; BLOCK_BYTES];
    while let Some((len, rest)) = data.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*len);
        // The magic again starts another frame, which the kernel never has.
        if len == LZ4_LEGACY || len == 0 || len as usize > rest.len() {
            break;
        }
        let len = len as usize;
        let Ok(n) = lz4_flex::block::decompress_into(&rest[..len], &mut block) else {
            break;
        };
        out.extend_from_slice(&block[..n]);
        data = &rest[len..];
        if n < BLOCK_BYTES {
            break;
        }
    }
    out
}

fn is_x86_64_elf(bytes: &[u8]) -> bool {
    bytes.starts_with(ELF_MAGIC)
        && bytes
            .get(18..20)
            .is_some_and(|m| u16::from_le_bytes([m[0], m[1]]) == EM_X86_64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A legacy frame of `payload`, with bytes before and after as in a bzImage.
    fn framed(payload: &[u8]) -> Vec<u8> {
        let mut image = b"MZ some setup code".to_vec();
        image.extend_from_slice(&LZ4_LEGACY_MAGIC);
        for chunk in payload.chunks(BLOCK_BYTES) {
            let block = lz4_flex::block::compress(chunk);
            image.extend_from_slice(&(block.len() as u32).to_le_bytes());
            image.extend_from_slice(&block);
        }
        image.extend_from_slice(&[0xff, 0x00, 0x12, 0x34, 0, 0, 0, 0]);
        image
    }

    fn fake_elf(len: usize) -> Vec<u8> {
        let mut elf = vec![0u8; len];
        elf[..6].copy_from_slice(ELF_MAGIC);
        elf[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
        for (i, b) in elf.iter_mut().enumerate().skip(64) {
            *b = (i % 251) as u8;
        }
        elf
    }

    #[test]
    fn a_framed_kernel_of_several_blocks_comes_back_whole() {
        let elf = fake_elf(BLOCK_BYTES * 2 + 12345);
        assert_eq!(extract(&framed(&elf)).unwrap(), elf);
    }

    #[test]
    fn a_payload_that_is_no_elf_is_refused() {
        let not_elf = vec![7u8; 1000];
        assert!(extract(&framed(&not_elf)).is_err());
        assert!(extract(b"no magic here").is_err());
    }
}
