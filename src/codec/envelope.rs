//! The envelope of a forwarded message: what one replica's transport sends another as the body
//! of an HTTP request ([`Envelope`]), and what comes back ([`ReplyEnvelope`]). Bytes of the
//! codec's format (bincode 1's layout), versioned and size-limited:
//!
//! - **Versioned.** Both start with a `u16` format ([`ENVELOPE_FORMAT`]), read on its own
//!   first: a format this build does not know is refused as [`EnvelopeError::UnknownFormat`]
//!   before the rest is looked at.
//! - **Size-limited.** At most [`ENVELOPE_LIMIT`] bytes: larger input is refused before it is
//!   read. Decoding borrows every string and the body from the input and copies out only an
//!   envelope that decoded whole, so no length read from the input can make a decode allocate
//!   more than the input's size (bincode alone allocates what a length claims: 15 MiB for an
//!   18-byte liar, `tests/envelope_fuzz.rs`).
//! - **Whole.** Every byte must be consumed: input cut short is [`EnvelopeError::Cut`], input
//!   with bytes after the value is [`EnvelopeError::Trailing`].
//!
//! The bytes are pinned by `golden_envelope_bytes_are_pinned` (below) and fuzzed by
//! `tests/envelope_fuzz.rs`: decoding arbitrary bytes never panics and never accepts a cut or
//! padded frame.

use serde::{Deserialize, Serialize};

/// The envelope format this build writes and reads.
pub const ENVELOPE_FORMAT: u16 = 1;

/// The most bytes one envelope (or reply envelope) may take: a message body of 16 MiB and
/// 64 KiB for the rest.
pub const ENVELOPE_LIMIT: usize = (16 << 20) + (64 << 10);

/// A message forwarded from one replica to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// [`ENVELOPE_FORMAT`].
    pub format: u16,
    /// The replica that sent it (its id).
    pub from: String,
    /// The tenant's organization.
    pub org: String,
    /// The tenant.
    pub tenant: String,
    /// The message's registered name.
    pub name: String,
    /// The schema version of its body.
    pub version: u32,
    /// The key that makes a retry safe: the same for every hop and retry of one send.
    pub idempotency_key: String,
    /// How long the sender still waits for the answer, in milliseconds, when it sent this:
    /// time left, not a time of day, so the replicas' clocks never enter it.
    pub deadline_ms: u64,
    /// How many times the message was forwarded before this hop (the first forward sends 1).
    pub hops: u8,
    /// The sender's placement chose the receiver to open the tenant (nobody held it).
    pub open: bool,
    /// The message's body, of the codec's bytes.
    pub body: Vec<u8>,
}

/// Why the receiving replica did not answer with a reply: a refusal with a stable code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    /// The stable code (`LEASEHOLD_MOVED`, `LEASEHOLD_FENCED`, …).
    pub code: String,
    /// What happened, for people.
    pub message: String,
    /// The replica that holds the tenant, when the code is about where it is (moved,
    /// unavailable, held).
    pub holder: Option<String>,
    /// The refusal's figures, for the codes that have some, so that the sender's caller hears
    /// the error the receiver's caller would have.
    pub detail: Option<WireDetail>,
}

/// The figures of a refusal ([`WireError::detail`]), by what it is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireDetail {
    /// `LEASEHOLD_TOO_LARGE`: how many bytes (at least), and the most allowed.
    Size {
        /// How many bytes it took.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// `LEASEHOLD_DEADLINE_EXCEEDED`: the deadline the receiver had, and whether the message
    /// reached its tenant there (a command that may have run: the outcome is unknown).
    Deadline {
        /// The deadline, in milliseconds.
        after_ms: u64,
        /// Whether the outcome is unknown.
        outcome_unknown: bool,
    },
    /// `LEASEHOLD_LEASE_HELD`, `LEASEHOLD_UNAVAILABLE`: the holder's tenure and how long its
    /// lease still runs by the store's clock (0 when unknown).
    Lease {
        /// The holder's epoch (0 when unknown).
        epoch: u64,
        /// How long its lease still runs, in milliseconds.
        lease_left_ms: u64,
    },
}

/// The answer to an [`Envelope`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyEnvelope {
    /// [`ENVELOPE_FORMAT`].
    pub format: u16,
    /// The reply's bytes, or why there is none.
    pub outcome: Result<Vec<u8>, WireError>,
}

/// Why an envelope could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// The input (or the value) takes more than `limit` bytes; refused before it is read.
    #[error("{bytes} bytes is more than the {limit} an envelope may take")]
    TooLarge {
        /// How many bytes it took (when encoding: at least this many).
        bytes: usize,
        /// [`ENVELOPE_LIMIT`].
        limit: usize,
    },
    /// The envelope is of a format this build does not know.
    #[error("unknown envelope format {format}; this build knows {ENVELOPE_FORMAT}")]
    UnknownFormat {
        /// The format it claims.
        format: u16,
    },
    /// The input ends before the envelope does: a frame cut mid-way.
    #[error("the envelope is cut short")]
    Cut,
    /// The bytes are not an envelope (a bad tag, bad UTF-8, a length past the limit).
    #[error("the envelope does not decode: {0}")]
    Undecodable(String),
    /// The bytes hold an envelope and then `extra` more bytes.
    #[error("{extra} trailing bytes after the envelope")]
    Trailing {
        /// How many bytes were left over.
        extra: usize,
    },
    /// The value could not be encoded.
    #[error("the envelope does not encode: {0}")]
    Encode(String),
}

fn config() -> impl bincode::config::Config {
    bincode::config::legacy().with_limit::<ENVELOPE_LIMIT>()
}

/// Encodes an [`Envelope`] or a [`ReplyEnvelope`]: at most [`ENVELOPE_LIMIT`] bytes.
pub fn encode_envelope<T: Serialize>(value: &T) -> Result<Vec<u8>, EnvelopeError> {
    let bytes = bincode::serde::encode_to_vec(value, config())
        .map_err(|e| EnvelopeError::Encode(e.to_string()))?;
    if bytes.len() > ENVELOPE_LIMIT {
        return Err(EnvelopeError::TooLarge {
            bytes: bytes.len(),
            limit: ENVELOPE_LIMIT,
        });
    }
    Ok(bytes)
}

/// Decodes an [`Envelope`] that must take up all of `bytes`.
pub fn decode_envelope(bytes: &[u8]) -> Result<Envelope, EnvelopeError> {
    decode_versioned::<EnvelopeRef<'_>>(bytes).map(EnvelopeRef::owned)
}

/// Decodes a [`ReplyEnvelope`] that must take up all of `bytes`.
pub fn decode_reply(bytes: &[u8]) -> Result<ReplyEnvelope, EnvelopeError> {
    decode_versioned::<ReplyRef<'_>>(bytes).map(ReplyRef::owned)
}

/// An [`Envelope`] whose strings and body point into the input: decoding it allocates
/// nothing, so a length field that lies (claims more than the input holds) costs nothing
/// either; only what decoded whole is copied out (at most the input's size).
#[derive(Deserialize)]
struct EnvelopeRef<'a> {
    format: u16,
    from: &'a str,
    org: &'a str,
    tenant: &'a str,
    name: &'a str,
    version: u32,
    idempotency_key: &'a str,
    deadline_ms: u64,
    hops: u8,
    open: bool,
    body: &'a [u8],
}

impl EnvelopeRef<'_> {
    fn owned(self) -> Envelope {
        Envelope {
            format: self.format,
            from: self.from.to_owned(),
            org: self.org.to_owned(),
            tenant: self.tenant.to_owned(),
            name: self.name.to_owned(),
            version: self.version,
            idempotency_key: self.idempotency_key.to_owned(),
            deadline_ms: self.deadline_ms,
            hops: self.hops,
            open: self.open,
            body: self.body.to_vec(),
        }
    }
}

/// A [`WireError`] pointing into the input.
#[derive(Deserialize)]
struct WireErrorRef<'a> {
    code: &'a str,
    message: &'a str,
    holder: Option<&'a str>,
    detail: Option<WireDetail>,
}

/// A [`ReplyEnvelope`] pointing into the input.
#[derive(Deserialize)]
struct ReplyRef<'a> {
    format: u16,
    #[serde(borrow)]
    outcome: Result<&'a [u8], WireErrorRef<'a>>,
}

impl ReplyRef<'_> {
    fn owned(self) -> ReplyEnvelope {
        ReplyEnvelope {
            format: self.format,
            outcome: match self.outcome {
                Ok(bytes) => Ok(bytes.to_vec()),
                Err(e) => Err(WireError {
                    code: e.code.to_owned(),
                    message: e.message.to_owned(),
                    holder: e.holder.map(str::to_owned),
                    detail: e.detail,
                }),
            },
        }
    }
}

/// The checks every envelope passes, in order: the size, the format (the first two bytes, on
/// their own), then the value, borrowed from the input, which must take up every byte.
fn decode_versioned<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, EnvelopeError> {
    if bytes.len() > ENVELOPE_LIMIT {
        return Err(EnvelopeError::TooLarge {
            bytes: bytes.len(),
            limit: ENVELOPE_LIMIT,
        });
    }
    let format = match bytes {
        [a, b, ..] => u16::from_le_bytes([*a, *b]),
        _ => return Err(EnvelopeError::Cut),
    };
    if format != ENVELOPE_FORMAT {
        return Err(EnvelopeError::UnknownFormat { format });
    }
    let (value, read) =
        bincode::serde::borrow_decode_from_slice(bytes, config()).map_err(|e| match e {
            bincode::error::DecodeError::UnexpectedEnd { .. } => EnvelopeError::Cut,
            other => EnvelopeError::Undecodable(other.to_string()),
        })?;
    if read != bytes.len() {
        return Err(EnvelopeError::Trailing {
            extra: bytes.len() - read,
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Envelope {
        Envelope {
            format: ENVELOPE_FORMAT,
            from: "r1".into(),
            org: "acme".into(),
            tenant: "t1".into(),
            name: "bank.deposit".into(),
            version: 2,
            idempotency_key: "k-17".into(),
            deadline_ms: 1_500,
            hops: 1,
            open: true,
            body: vec![9, 8],
        }
    }

    /// A `u64` length and the bytes, as bincode 1 writes a string or a byte vector.
    fn lp(bytes: &[u8]) -> Vec<u8> {
        [&(bytes.len() as u64).to_le_bytes()[..], bytes].concat()
    }

    /// The envelope's bytes, written out by hand (bincode 1's fixed-width little-endian
    /// layout, fields in order). A change of the envelope or the codec fails this test: keep
    /// the old format readable (a new [`ENVELOPE_FORMAT`] beside it) before changing the
    /// expected bytes, or replicas of two builds stop understanding each other.
    #[test]
    fn golden_envelope_bytes_are_pinned() {
        let expected: Vec<u8> = [
            &1u16.to_le_bytes()[..],
            &lp(b"r1"),
            &lp(b"acme"),
            &lp(b"t1"),
            &lp(b"bank.deposit"),
            &2u32.to_le_bytes(),
            &lp(b"k-17"),
            &1_500u64.to_le_bytes(),
            &[1],
            &[1],
            &lp(&[9, 8]),
        ]
        .concat();
        assert_eq!(encode_envelope(&sample()).unwrap(), expected);
        assert_eq!(decode_envelope(&expected).unwrap(), sample());
        let reply = ReplyEnvelope {
            format: ENVELOPE_FORMAT,
            outcome: Err(WireError {
                code: "LEASEHOLD_MOVED".into(),
                message: "m".into(),
                holder: Some("r2".into()),
                detail: Some(WireDetail::Lease {
                    epoch: 4,
                    lease_left_ms: 9,
                }),
            }),
        };
        let expected_reply: Vec<u8> = [
            &1u16.to_le_bytes()[..],
            &1u32.to_le_bytes(), // Err: the second variant
            &lp(b"LEASEHOLD_MOVED"),
            &lp(b"m"),
            &[1],
            &lp(b"r2"),
            &[1],
            &2u32.to_le_bytes(), // Lease: the third variant
            &4u64.to_le_bytes(),
            &9u64.to_le_bytes(),
        ]
        .concat();
        assert_eq!(encode_envelope(&reply).unwrap(), expected_reply);
        assert_eq!(decode_reply(&expected_reply).unwrap(), reply);
        let ok = ReplyEnvelope {
            format: ENVELOPE_FORMAT,
            outcome: Ok(vec![5]),
        };
        let expected_ok = [&1u16.to_le_bytes()[..], &0u32.to_le_bytes(), &lp(&[5])].concat();
        assert_eq!(encode_envelope(&ok).unwrap(), expected_ok);
    }

    #[test]
    fn a_cut_padded_oversize_or_foreign_envelope_is_refused_by_kind() {
        let bytes = encode_envelope(&sample()).unwrap();
        for cut in [0, 1, 2, 10, bytes.len() - 1] {
            assert_eq!(
                decode_envelope(&bytes[..cut]),
                Err(EnvelopeError::Cut),
                "{cut}"
            );
        }
        let padded = [&bytes[..], &[0]].concat();
        assert_eq!(
            decode_envelope(&padded),
            Err(EnvelopeError::Trailing { extra: 1 })
        );
        let mut foreign = bytes.clone();
        foreign[..2].copy_from_slice(&2u16.to_le_bytes());
        assert_eq!(
            decode_envelope(&foreign),
            Err(EnvelopeError::UnknownFormat { format: 2 })
        );
        let huge = vec![0u8; ENVELOPE_LIMIT + 1];
        assert_eq!(
            decode_envelope(&huge),
            Err(EnvelopeError::TooLarge {
                bytes: ENVELOPE_LIMIT + 1,
                limit: ENVELOPE_LIMIT
            })
        );
        let big = Envelope {
            body: vec![0; ENVELOPE_LIMIT],
            ..sample()
        };
        assert!(matches!(
            encode_envelope(&big),
            Err(EnvelopeError::TooLarge { .. } | EnvelopeError::Encode(_))
        ));
    }

    #[test]
    fn a_length_claiming_more_than_the_limit_is_refused_without_allocating_it() {
        // The sender's id claims 2^40 bytes.
        let claim = [&1u16.to_le_bytes()[..], &(1u64 << 40).to_le_bytes(), b"r1"].concat();
        assert!(matches!(
            decode_envelope(&claim),
            Err(EnvelopeError::Undecodable(_) | EnvelopeError::Cut)
        ));
    }
}
