//! CQL native protocol v4 framing: the 9-byte header and the body primitives
//! (`[short]`, `[int]`, `[string]`, `[bytes]`, …) of the protocol spec, section 3.

use std::collections::HashMap;

use thiserror::Error;

/// Version byte of a v4 request frame.
pub(crate) const VERSION_REQUEST: u8 = 0x04;
/// Version byte of a v4 response frame.
pub(crate) const VERSION_RESPONSE: u8 = 0x84;
/// Length of the frame header in bytes.
pub(crate) const HEADER_LEN: usize = 9;
/// Largest body accepted; the spec caps frames at 256 MiB.
pub(crate) const MAX_BODY_LEN: usize = 256 * 1024 * 1024;

/// Header flag: the body is compressed (never negotiated by the double).
pub(crate) const FLAG_COMPRESSION: u8 = 0x01;
/// Header flag: the request carries a custom payload before the body.
pub(crate) const FLAG_CUSTOM_PAYLOAD: u8 = 0x04;

/// Frame opcodes used by the double.
pub(crate) mod opcode {
    /// ERROR response.
    pub(crate) const ERROR: u8 = 0x00;
    /// STARTUP request.
    pub(crate) const STARTUP: u8 = 0x01;
    /// READY response.
    pub(crate) const READY: u8 = 0x02;
    /// OPTIONS request.
    pub(crate) const OPTIONS: u8 = 0x05;
    /// SUPPORTED response.
    pub(crate) const SUPPORTED: u8 = 0x06;
    /// QUERY request.
    pub(crate) const QUERY: u8 = 0x07;
    /// RESULT response.
    pub(crate) const RESULT: u8 = 0x08;
    /// PREPARE request.
    pub(crate) const PREPARE: u8 = 0x09;
    /// EXECUTE request.
    pub(crate) const EXECUTE: u8 = 0x0A;
    /// REGISTER request.
    pub(crate) const REGISTER: u8 = 0x0B;
    /// BATCH request.
    pub(crate) const BATCH: u8 = 0x0D;
}

/// A malformed request body.
#[derive(Debug, Error)]
pub enum FrameError {
    /// The body ended before a field was complete.
    #[error("frame body truncated while reading {0}")]
    Truncated(&'static str),
    /// A `[string]` was not UTF-8.
    #[error("string in frame body is not valid UTF-8")]
    BadUtf8,
    /// A length field was negative where that is not allowed.
    #[error("negative length {0} in frame body")]
    NegativeLength(i32),
}

/// The decoded 9-byte frame header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    /// Protocol version byte (0x04 for v4 requests).
    pub(crate) version: u8,
    /// Header flags (compression, tracing, custom payload, warnings).
    pub(crate) flags: u8,
    /// Stream id echoed in the response so the driver can match it.
    pub(crate) stream: i16,
    /// Request opcode.
    pub(crate) opcode: u8,
    /// Body length in bytes.
    pub(crate) length: usize,
}

impl Header {
    /// Decodes a header from exactly [`HEADER_LEN`] bytes.
    pub(crate) fn decode(b: &[u8; HEADER_LEN]) -> Self {
        let length = u32::from_be_bytes([b[5], b[6], b[7], b[8]]);
        Self {
            version: b[0],
            flags: b[1],
            stream: i16::from_be_bytes([b[2], b[3]]),
            opcode: b[4],
            length: length as usize,
        }
    }
}

/// Encodes a full response frame (header and body).
pub(crate) fn encode_response(stream: i16, opcode: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.push(VERSION_RESPONSE);
    out.push(0);
    out.extend_from_slice(&stream.to_be_bytes());
    out.push(opcode);
    // Bodies are built in memory from bounded results, far below 4 GiB.
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A bound value as sent by the client: `[value]` distinguishes null and unset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RawValue {
    /// Length -1: the CQL null.
    Null,
    /// Length -2: "leave this column alone" (v4).
    Unset,
    /// A serialized value.
    Bytes(Vec<u8>),
}

/// Cursor over a request body.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Starts reading at the beginning of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], FrameError> {
        if self.buf.len() < n {
            return Err(FrameError::Truncated(what));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.buf
    }

    /// Reads a `[byte]`.
    pub(crate) fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1, "byte")?[0])
    }

    /// Reads a `[short]` (unsigned 16-bit).
    pub(crate) fn u16(&mut self) -> Result<u16, FrameError> {
        let b = self.take(2, "short")?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Reads an `[int]`.
    pub(crate) fn i32(&mut self) -> Result<i32, FrameError> {
        let b = self.take(4, "int")?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Reads a `[long]`.
    pub(crate) fn i64(&mut self) -> Result<i64, FrameError> {
        let b = self.take(8, "long")?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    /// Reads a `[string]` (short length, UTF-8).
    pub(crate) fn string(&mut self) -> Result<String, FrameError> {
        let n = self.u16()? as usize;
        let b = self.take(n, "string")?;
        String::from_utf8(b.to_vec()).map_err(|_| FrameError::BadUtf8)
    }

    /// Reads a `[long string]` (int length, UTF-8).
    pub(crate) fn long_string(&mut self) -> Result<String, FrameError> {
        let n = self.i32()?;
        let n = usize::try_from(n).map_err(|_| FrameError::NegativeLength(n))?;
        let b = self.take(n, "long string")?;
        String::from_utf8(b.to_vec()).map_err(|_| FrameError::BadUtf8)
    }

    /// Reads `[bytes]`; a negative length is null.
    pub(crate) fn bytes(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(None);
        }
        Ok(Some(self.take(n as usize, "bytes")?.to_vec()))
    }

    /// Reads `[short bytes]`.
    pub(crate) fn short_bytes(&mut self) -> Result<Vec<u8>, FrameError> {
        let n = self.u16()? as usize;
        Ok(self.take(n, "short bytes")?.to_vec())
    }

    /// Reads a `[value]` (bytes with the null and unset markers).
    pub(crate) fn value(&mut self) -> Result<RawValue, FrameError> {
        let n = self.i32()?;
        match n {
            -1 => Ok(RawValue::Null),
            -2 => Ok(RawValue::Unset),
            n if n < 0 => Err(FrameError::NegativeLength(n)),
            n => Ok(RawValue::Bytes(self.take(n as usize, "value")?.to_vec())),
        }
    }

    /// Reads a `[string map]`.
    pub(crate) fn string_map(&mut self) -> Result<HashMap<String, String>, FrameError> {
        let n = self.u16()?;
        let mut m = HashMap::new();
        for _ in 0..n {
            let k = self.string()?;
            let v = self.string()?;
            m.insert(k, v);
        }
        Ok(m)
    }

    /// Skips a `[bytes map]` (custom payloads, which the double ignores).
    pub(crate) fn skip_bytes_map(&mut self) -> Result<(), FrameError> {
        let n = self.u16()?;
        for _ in 0..n {
            self.string()?;
            self.bytes()?;
        }
        Ok(())
    }
}

/// Builder for a response body.
#[derive(Default)]
pub(crate) struct Writer {
    /// The bytes written so far.
    pub(crate) buf: Vec<u8>,
}

impl Writer {
    /// Writes a `[byte]`.
    pub(crate) fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    /// Writes a `[short]`.
    pub(crate) fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// Writes an `[int]`.
    pub(crate) fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// Writes a `[string]`; longer strings are cut at 64 KiB (only error messages can be that long).
    pub(crate) fn string(&mut self, s: &str) {
        let mut end = s.len().min(u16::MAX as usize);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16);
        self.buf.extend_from_slice(&s.as_bytes()[..end]);
    }

    /// Writes `[bytes]`, `None` as null.
    pub(crate) fn bytes(&mut self, b: Option<&[u8]>) {
        match b {
            None => self.i32(-1),
            Some(b) => {
                self.i32(len_i32(b.len()));
                self.buf.extend_from_slice(b);
            }
        }
    }

    /// Writes `[short bytes]`.
    pub(crate) fn short_bytes(&mut self, b: &[u8]) {
        self.u16(b.len().min(u16::MAX as usize) as u16);
        self.buf.extend_from_slice(b);
    }

    /// Writes a `[string multimap]`.
    pub(crate) fn string_multimap(&mut self, m: &[(&str, &[&str])]) {
        self.u16(m.len() as u16);
        for (k, vs) in m {
            self.string(k);
            self.u16(vs.len() as u16);
            for v in *vs {
                self.string(v);
            }
        }
    }
}

/// Converts an in-memory length to the protocol's `[int]`, saturating (values are capped
/// at 256 MiB by the frame limit long before this matters).
pub(crate) fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_primitives() {
        let mut w = Writer::default();
        w.u16(7);
        w.i32(-3);
        w.string("héllo");
        w.bytes(Some(b"ab"));
        w.bytes(None);
        let mut r = Reader::new(&w.buf);
        assert_eq!(r.u16().unwrap(), 7);
        assert_eq!(r.i32().unwrap(), -3);
        assert_eq!(r.string().unwrap(), "héllo");
        assert_eq!(r.bytes().unwrap(), Some(b"ab".to_vec()));
        assert_eq!(r.bytes().unwrap(), None);
        assert!(r.u8().is_err());
    }

    #[test]
    fn header_decodes() {
        let h = Header::decode(&[4, 0, 0, 5, 7, 0, 0, 0, 10]);
        assert_eq!(
            (h.version, h.stream, h.opcode, h.length),
            (4, 5, opcode::QUERY, 10)
        );
    }
}
