//! The wire format: one frame per direction on each bidirectional stream,
//! `[version u8 = 1][len u32 big-endian][bincode payload]`. Lengths are checked against the
//! configured maximum before any payload byte is read, so a hostile header cannot make us
//! allocate.

use serde::{Deserialize, Serialize};

use super::{Identity, TransportError};

/// The only frame version this build speaks.
pub const VERSION: u8 = 1;
/// Bytes of the frame header (version + length).
pub const HEADER_LEN: usize = 5;

/// A request as sent: the caller's claimed identity (checked against its certificate) and the
/// body.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// Who the caller says it is; must equal the identity of the connection's certificate.
    pub from: Identity,
    /// The service request.
    pub body: T,
}

/// A response as sent: the service's answer, or the server's refusal of the request.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply<T> {
    /// The service handled the request.
    Ok(T),
    /// The server refused the frame or the request before the service saw it.
    Refused {
        /// Why, for the caller's error message.
        reason: String,
    },
}

/// bincode with the standard config, the one encoding of every payload.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, TransportError> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).map_err(|e| {
        TransportError::Codec {
            reason: e.to_string(),
        }
    })
}

/// Decodes a whole payload; trailing bytes are an error (a frame holds exactly one value).
pub fn decode<T: serde::de::DeserializeOwned>(payload: &[u8]) -> Result<T, TransportError> {
    let (value, used) =
        bincode::serde::decode_from_slice::<T, _>(payload, bincode::config::standard()).map_err(
            |e| TransportError::Codec {
                reason: e.to_string(),
            },
        )?;
    if used != payload.len() {
        return Err(TransportError::Codec {
            reason: format!("{} trailing bytes after the payload", payload.len() - used),
        });
    }
    Ok(value)
}

/// Prefixes a payload with its header, refusing payloads above `max`.
pub fn frame(payload: &[u8], max: usize) -> Result<Vec<u8>, TransportError> {
    let size = payload.len();
    let len =
        u32::try_from(size)
            .ok()
            .filter(|_| size <= max)
            .ok_or(TransportError::FrameTooLarge {
                size: size as u64,
                max,
            })?;
    let mut out = Vec::with_capacity(HEADER_LEN + size);
    out.push(VERSION);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

/// Checks a header; returns the payload length it announces.
pub fn parse_header(header: [u8; HEADER_LEN], max: usize) -> Result<usize, TransportError> {
    if header[0] != VERSION {
        return Err(TransportError::BadFrame {
            reason: format!(
                "unknown frame version {} (this build speaks {VERSION})",
                header[0]
            ),
        });
    }
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    let size = usize::try_from(len).unwrap_or(usize::MAX);
    if size > max {
        return Err(TransportError::FrameTooLarge {
            size: u64::from(len),
            max,
        });
    }
    Ok(size)
}

/// How reading a frame from a stream failed: the frame itself was bad, or the stream broke.
#[derive(Debug)]
pub(crate) enum ReadFailure {
    /// Bad version, too large: the peer sent something we refuse.
    Frame(TransportError),
    /// The stream ended early or was reset, or the connection went away.
    Stream(quinn::ReadExactError),
}

/// Reads one frame (header, check, payload) from `recv`.
pub(crate) async fn read_frame(
    recv: &mut quinn::RecvStream,
    max: usize,
) -> Result<Vec<u8>, ReadFailure> {
    let mut header = [0u8; HEADER_LEN];
    recv.read_exact(&mut header)
        .await
        .map_err(ReadFailure::Stream)?;
    let size = parse_header(header, max).map_err(ReadFailure::Frame)?;
    let mut payload = vec![0u8; size];
    recv.read_exact(&mut payload)
        .await
        .map_err(ReadFailure::Stream)?;
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_checks() {
        let f = frame(b"abc", 16).expect("small frame");
        assert_eq!(f, [1, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert!(matches!(
            frame(&[0; 17], 16),
            Err(TransportError::FrameTooLarge { size: 17, max: 16 })
        ));
        assert_eq!(parse_header([1, 0, 0, 0, 16], 16).expect("at max"), 16);
        assert!(matches!(
            parse_header([1, 0x40, 0, 0, 0], 16),
            Err(TransportError::FrameTooLarge { .. })
        ));
        assert!(matches!(
            parse_header([2, 0, 0, 0, 0], 16),
            Err(TransportError::BadFrame { .. })
        ));
    }

    #[test]
    fn envelope_round_trip() {
        let env = Envelope {
            from: Identity::Peer(7),
            body: ("x".to_owned(), 42u32),
        };
        let bytes = encode(&env).expect("encode");
        let back: Envelope<(String, u32)> = decode(&bytes).expect("decode");
        assert_eq!(back.from, Identity::Peer(7));
        assert_eq!(back.body, ("x".to_owned(), 42));
        assert!(decode::<Envelope<(String, u32)>>(&bytes[..bytes.len() - 1]).is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert!(decode::<Envelope<(String, u32)>>(&long).is_err());
    }
}
