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
//!
//! **Compression.** Segment payloads of format 2 are a zstd frame of the codec bytes
//! ([`compress`], [`decompress`]); `zstd` is used here only, like bincode. Decompression is
//! bounded before it starts: the raw size the segment claims must be at most [`LIMIT`]
//! ([`CodecError::TooLarge`], refused before anything is allocated), the output grows only as
//! bytes actually come out of the frame (never allocated from the claim), and a frame that
//! yields more or fewer bytes than it claims, or does not decode, is refused
//! ([`CodecError::RawLength`], [`CodecError::Decompress`]).
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
    /// A compressed payload claims more raw bytes than a reader accepts: refused before
    /// anything is decompressed or allocated (a decompression bomb, or corrupt bytes).
    #[error("decompress: it claims {claimed} raw bytes, more than the {limit} a reader accepts")]
    TooLarge {
        /// The raw size it claims.
        claimed: u64,
        /// [`LIMIT`].
        limit: u64,
    },
    /// A compressed payload is not a zstd frame (truncated, corrupt).
    #[error("decompress: {0}")]
    Decompress(String),
    /// A compressed payload decompressed to another size than the one it claims.
    #[error("decompress: it claims {claimed} raw bytes but holds {actual}")]
    RawLength {
        /// The raw size it claims.
        claimed: u64,
        /// How many it yields (when more than claimed: at least `claimed + 1`).
        actual: u64,
    },
}

/// The zstd level segments are compressed at: measured on real segments by `benches/bytes.rs`
/// (docs/benchmarks.md, bytes and requests).
pub const ZSTD_LEVEL: i32 = 3;

/// Compresses `raw` (codec bytes) into one zstd frame at [`ZSTD_LEVEL`].
pub fn compress(raw: &[u8]) -> Result<Vec<u8>, CodecError> {
    zstd::bulk::compress(raw, ZSTD_LEVEL).map_err(|e| CodecError::Encode(format!("zstd: {e}")))
}

/// Decompresses the zstd frame `compressed` that claims to hold `claimed` raw bytes. A claim
/// over [`LIMIT`] is refused before anything is allocated; the output grows only with the
/// bytes the frame really yields, and must be exactly `claimed` of them.
pub fn decompress(compressed: &[u8], claimed: u64) -> Result<Vec<u8>, CodecError> {
    use std::io::Read;
    if claimed > LIMIT as u64 {
        return Err(CodecError::TooLarge {
            claimed,
            limit: LIMIT as u64,
        });
    }
    let decoder = zstd::stream::read::Decoder::with_buffer(compressed)
        .map_err(|e| CodecError::Decompress(e.to_string()))?
        .single_frame();
    // At most the claim plus one byte is read (more is refused); the buffer starts at most at
    // a few times the input, so a liar's claim is never allocated up front.
    let start = claimed.min((compressed.len() as u64).saturating_mul(8));
    let mut out = Vec::with_capacity(usize::try_from(start).unwrap_or(0));
    decoder
        .take(claimed.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| CodecError::Decompress(e.to_string()))?;
    if out.len() as u64 != claimed {
        return Err(CodecError::RawLength {
            claimed,
            actual: out.len() as u64,
        });
    }
    Ok(out)
}

fn config() -> impl bincode::config::Config {
    bincode::config::legacy().with_limit::<LIMIT>()
}

// The envelopes of forwarded messages: the same bytes, a limit and a format of their own.
mod envelope;

pub use envelope::{
    ENVELOPE_FORMAT, ENVELOPE_LIMIT, Envelope, EnvelopeError, ReplyEnvelope, WireDetail, WireError,
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
    fn compressed_bytes_round_trip_and_are_smaller_for_repetitive_input() {
        let raw: Vec<u8> = (0..8192u32).map(|i| (i % 16) as u8).collect();
        let packed = compress(&raw).unwrap();
        assert!(packed.len() < raw.len() / 10, "{}", packed.len());
        assert_eq!(decompress(&packed, raw.len() as u64).unwrap(), raw);
    }

    #[test]
    fn a_decompression_bomb_is_refused_before_it_is_decompressed() {
        // 64 bytes of frame that would yield 2 GiB of zeros: the claim is refused on sight.
        let claimed = 2 * LIMIT as u64;
        let small = compress(&[0u8; 64]).unwrap();
        assert_eq!(
            decompress(&small, claimed),
            Err(CodecError::TooLarge {
                claimed,
                limit: LIMIT as u64
            })
        );
        // A real frame of 4 MiB of zeros claiming 1 KiB: only 1 KiB + 1 is ever produced.
        let zeros = compress(&vec![0u8; 4 << 20]).unwrap();
        assert!(zeros.len() < 1024, "{}", zeros.len());
        assert_eq!(
            decompress(&zeros, 1024),
            Err(CodecError::RawLength {
                claimed: 1024,
                actual: 1025
            })
        );
        // A claim within the limit but more than the frame holds: refused, never allocated.
        assert_eq!(
            decompress(&small, LIMIT as u64),
            Err(CodecError::RawLength {
                claimed: LIMIT as u64,
                actual: 64
            })
        );
    }

    #[test]
    fn corrupt_compressed_bytes_are_refused_by_kind() {
        let raw: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 13) as u8).collect();
        let packed = compress(&raw).unwrap();
        let mut flipped = packed.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0xff;
        let mut results = vec![
            decompress(&packed[..packed.len() - 3], raw.len() as u64),
            decompress(&[0xde, 0xad, 0xbe, 0xef, 1, 2, 3], raw.len() as u64),
            decompress(&[], raw.len() as u64),
        ];
        // A flipped byte may still decode (zstd frames carry no checksum here: the segment's
        // SHA-256 does that) but never to the raw bytes.
        match decompress(&flipped, raw.len() as u64) {
            Ok(out) => assert_ne!(out, raw),
            other => results.push(other),
        }
        for result in results {
            assert!(
                matches!(
                    result,
                    Err(CodecError::Decompress(_) | CodecError::RawLength { .. })
                ),
                "{result:?}"
            );
        }
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
