//! The binary codec of the change log's segments and of forwarded messages' envelopes
//! (`codec/envelope.rs`): the **only** user of `bincode` in the crate.
//!
//! Bytes are bincode 2 with [`bincode::config::legacy`]: fixed-width little-endian integers and
//! `u64` lengths, the bytes bincode 1 wrote. They are a format of their own, not of one crate:
//! `wincode` (maintained) reads them too, so the segments already in durable stores stay
//! readable whichever crate encodes them.
//!
//! bincode is feature-complete and no longer maintained (RUSTSEC-2025-0141, an "unmaintained"
//! advisory, no vulnerability). That is why it stays behind this one file: changing the codec
//! means changing [`encode`] and [`decode`] here and regenerating the golden-bytes test
//! (`golden_segment_bytes_are_pinned` in `src/log/segment/tests.rs`), which fails the moment
//! the bytes change, so a change can never happen by accident.
//!
//! Decoding is bounded: a length read from corrupt bytes can ask for at most [`LIMIT`] bytes
//! before it is refused, and every byte must be consumed (trailing bytes are an error, not
//! ignored).

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The most bytes one decode may claim (1 GiB): a corrupt length is refused rather than
/// allocated.
pub const LIMIT: usize = 1 << 30;

/// Why encoding or decoding failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The value could not be encoded (larger than [`LIMIT`], or a type serde cannot write).
    #[error("encode: {0}")]
    Encode(String),
    /// The bytes are not an encoding of the type (truncated, a bad tag, a length past
    /// [`LIMIT`]).
    #[error("decode: {0}")]
    Decode(String),
    /// The bytes hold a value and then `extra` more bytes.
    #[error("decode: {extra} trailing bytes after the value")]
    Trailing {
        /// How many bytes were left over.
        extra: usize,
    },
}

fn config() -> impl bincode::config::Config {
    bincode::config::legacy().with_limit::<LIMIT>()
}

// The envelopes of forwarded messages: the same bytes, a limit and a format of their own.
mod envelope;

pub use envelope::{
    ENVELOPE_FORMAT, ENVELOPE_LIMIT, Envelope, EnvelopeError, ReplyEnvelope, WireError,
    decode_envelope, decode_reply, encode_envelope,
};

/// Encodes `value` as bincode 1 bytes.
///
/// bincode applies its limit only when decoding, so the limit is checked here too: nothing is
/// written that [`decode`] would refuse (a batch that changed more than [`LIMIT`] bytes of
/// pages cannot become a segment; its writes are never acknowledged).
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    let bytes = bincode::serde::encode_to_vec(value, config())
        .map_err(|e| CodecError::Encode(e.to_string()))?;
    if bytes.len() > LIMIT {
        return Err(CodecError::Encode(format!(
            "{} bytes is over the limit of {LIMIT} bytes a reader accepts",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// Decodes a `T` that must take up all of `bytes`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, config())
        .map_err(|e| CodecError::Decode(e.to_string()))?;
    if read != bytes.len() {
        return Err(CodecError::Trailing {
            extra: bytes.len() - read,
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Sample {
        a: u32,
        b: Option<u64>,
        c: Vec<u8>,
        d: String,
    }

    fn sample() -> Sample {
        Sample {
            a: 1,
            b: Some(2),
            c: vec![3, 4],
            d: "e".into(),
        }
    }

    #[test]
    fn the_bytes_are_bincode_1s() {
        // u32 LE, Option tag 1 + u64 LE, u64 length + bytes, u64 length + UTF-8.
        let expected: Vec<u8> = [
            &[1, 0, 0, 0][..],
            &[1, 2, 0, 0, 0, 0, 0, 0, 0],
            &[2, 0, 0, 0, 0, 0, 0, 0, 3, 4],
            &[1, 0, 0, 0, 0, 0, 0, 0, b'e'],
        ]
        .concat();
        assert_eq!(encode(&sample()).unwrap(), expected);
        assert_eq!(decode::<Sample>(&expected).unwrap(), sample());
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut bytes = encode(&sample()).unwrap();
        bytes.push(0);
        assert_eq!(
            decode::<Sample>(&bytes),
            Err(CodecError::Trailing { extra: 1 })
        );
    }

    #[test]
    fn a_truncated_value_is_refused() {
        let bytes = encode(&sample()).unwrap();
        assert!(matches!(
            decode::<Sample>(&bytes[..bytes.len() - 1]),
            Err(CodecError::Decode(_))
        ));
    }

    #[test]
    fn a_corrupt_length_past_the_limit_is_refused_without_allocating_it() {
        // A Vec<u8> whose length claims 2^40 bytes.
        let mut bytes = (1u64 << 40).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0; 8]);
        assert!(matches!(
            decode::<Vec<u8>>(&bytes),
            Err(CodecError::Decode(_))
        ));
    }
}
