//! The binary codec of the change log's segments: the **only** user of `bincode` in the crate.
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
//!
//! **Messages.** The bodies and replies of typed messages (`leasehold_actors::TenantMessage`)
//! are bytes of the same codec, through [`encode_message`] and [`decode_message`]: the same
//! configuration with a limit of their own, [`MESSAGE_LIMIT`] (16 MiB), enforced while
//! encoding (nothing larger is ever allocated) and before decoding (a larger input is refused
//! without being read), and errors of their own ([`MessageCodecError`]).

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

/// The most bytes one message body or reply may take (16 MiB): a larger one is refused with
/// [`MessageCodecError::TooLarge`] when it is encoded and before it is decoded.
pub const MESSAGE_LIMIT: usize = 16 << 20;

/// Why a message body or reply could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageCodecError {
    /// The value takes (or the input holds) more than `limit` bytes; with `bytes` the size
    /// seen so far when encoding (at least `limit + 1`), or the input's size when decoding.
    #[error("{bytes} bytes is more than the {limit} a message may take")]
    TooLarge {
        /// How many bytes it took (when encoding: at least this many).
        bytes: usize,
        /// [`MESSAGE_LIMIT`].
        limit: usize,
    },
    /// The value could not be encoded (a type serde cannot write, a map of unknown length).
    #[error("encode: {0}")]
    Encode(String),
    /// The bytes are not an encoding of the type (truncated, a bad tag, a length past the
    /// limit).
    #[error("decode: {0}")]
    Decode(String),
    /// The bytes hold a value and then `extra` more bytes.
    #[error("decode: {extra} trailing bytes after the value")]
    Trailing {
        /// How many bytes were left over.
        extra: usize,
    },
}

fn message_config() -> impl bincode::config::Config {
    bincode::config::legacy().with_limit::<MESSAGE_LIMIT>()
}

/// A writer that refuses to grow past [`MESSAGE_LIMIT`]: an oversize message fails as it is
/// written, never allocated whole.
struct LimitedVec {
    /// The bytes so far.
    bytes: Vec<u8>,
    /// Set when a write would have passed the limit: the size it would have reached.
    over: Option<usize>,
}

impl bincode::enc::write::Writer for LimitedVec {
    fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
        let len = self.bytes.len().saturating_add(bytes.len());
        if len > MESSAGE_LIMIT {
            self.over = Some(len);
            return Err(bincode::error::EncodeError::UnexpectedEnd);
        }
        self.bytes.extend_from_slice(bytes);
        Ok(())
    }
}

/// Encodes a message body or reply: the bytes of [`encode`], at most [`MESSAGE_LIMIT`].
pub fn encode_message<T: Serialize>(value: &T) -> Result<Vec<u8>, MessageCodecError> {
    let mut out = LimitedVec {
        bytes: Vec::new(),
        over: None,
    };
    match bincode::serde::encode_into_writer(value, &mut out, message_config()) {
        Ok(()) => Ok(out.bytes),
        Err(_) if out.over.is_some() => Err(MessageCodecError::TooLarge {
            bytes: out.over.unwrap_or(MESSAGE_LIMIT + 1),
            limit: MESSAGE_LIMIT,
        }),
        Err(e) => Err(MessageCodecError::Encode(e.to_string())),
    }
}

/// Decodes a message body or reply that must take up all of `bytes`; input over
/// [`MESSAGE_LIMIT`] is refused before it is read.
pub fn decode_message<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, MessageCodecError> {
    if bytes.len() > MESSAGE_LIMIT {
        return Err(MessageCodecError::TooLarge {
            bytes: bytes.len(),
            limit: MESSAGE_LIMIT,
        });
    }
    let (value, read) = bincode::serde::decode_from_slice(bytes, message_config())
        .map_err(|e| MessageCodecError::Decode(e.to_string()))?;
    if read != bytes.len() {
        return Err(MessageCodecError::Trailing {
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

    #[test]
    fn a_message_is_the_codecs_bytes_and_round_trips() {
        let bytes = encode_message(&sample()).unwrap();
        assert_eq!(bytes, encode(&sample()).unwrap(), "one codec, one format");
        assert_eq!(decode_message::<Sample>(&bytes).unwrap(), sample());
    }

    #[test]
    fn a_message_over_its_limit_is_refused_both_ways() {
        let big = "x".repeat(MESSAGE_LIMIT);
        match encode_message(&big) {
            Err(MessageCodecError::TooLarge { bytes, limit }) => {
                assert_eq!(limit, MESSAGE_LIMIT);
                assert!(bytes > MESSAGE_LIMIT, "{bytes}");
            }
            other => panic!("{other:?}"),
        }
        let input = vec![0u8; MESSAGE_LIMIT + 1];
        assert_eq!(
            decode_message::<Vec<u8>>(&input),
            Err(MessageCodecError::TooLarge {
                bytes: MESSAGE_LIMIT + 1,
                limit: MESSAGE_LIMIT
            })
        );
    }

    #[test]
    fn a_message_claiming_more_than_its_limit_is_refused_without_allocating() {
        let mut bytes = ((MESSAGE_LIMIT as u64) + 1).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0; 8]);
        assert!(matches!(
            decode_message::<Vec<u8>>(&bytes),
            Err(MessageCodecError::Decode(_))
        ));
        let mut trailing = encode_message(&sample()).unwrap();
        trailing.push(1);
        assert_eq!(
            decode_message::<Sample>(&trailing),
            Err(MessageCodecError::Trailing { extra: 1 })
        );
    }
}
