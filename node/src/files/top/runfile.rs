//! The entries of a `top`'s spilled run files, as written and read back.

use std::io::{Read, Write};

use super::Entry;
use super::arena::Arena;

/// Writes `e` as `[seq u64][key len u32][span len u32][key and row]`, little-endian.
pub(super) fn write_entry(w: &mut impl Write, e: &Entry, a: &Arena) -> std::io::Result<()> {
    w.write_all(&e.seq.to_le_bytes())?;
    w.write_all(&e.key_len.to_le_bytes())?;
    w.write_all(&e.len.to_le_bytes())?;
    w.write_all(e.span(a))
}

/// Reads the next entry written by [`write_entry`] into `data` (key and row); returns its
/// key length and seq, `None` at a clean end of file.
pub(super) fn read_entry_into(
    r: &mut impl Read,
    data: &mut Vec<u8>,
) -> std::io::Result<Option<(usize, u64)>> {
    let mut seq = [0u8; 8];
    match r.read_exact(&mut seq) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut n = [0u8; 4];
    r.read_exact(&mut n)?;
    let key_len = u32::from_le_bytes(n) as usize;
    r.read_exact(&mut n)?;
    let len = u32::from_le_bytes(n) as usize;
    if key_len > len {
        return Err(std::io::Error::other(
            "a spilled top entry whose key outruns it",
        ));
    }
    data.clear();
    data.resize(len, 0);
    r.read_exact(data)?;
    Ok(Some((key_len, u64::from_le_bytes(seq))))
}
