//! The envelope decoder under arbitrary input (docs/guarantees.md, promise 11, "bad input";
//! `src/codec/envelope.rs`): a property test standing in for a fuzzer. Whatever the bytes,
//! decoding never panics, never allocates more than about the input's size (never past the
//! envelope limit, whatever a length field claims), accepts only whole
//! envelopes (a frame cut anywhere is `Cut`, one with bytes after it is `Trailing`) and reads
//! back exactly what it accepted.
//!
//! Allocation is measured by a counting allocator on the decoding thread only.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use leasehold::codec::{
    ENVELOPE_FORMAT, ENVELOPE_LIMIT, Envelope, EnvelopeError, ReplyEnvelope, WireDetail, WireError,
    decode_envelope, decode_reply, encode_envelope,
};
use proptest::prelude::*;

/// Counts the bytes this thread holds while `TRACKING` is set, and their peak.
struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static HELD: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call goes to the system allocator unchanged; the counters are plain
// thread-local cells that never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn note(delta: isize) {
    let _ = TRACKING.try_with(|on| {
        if on.get() {
            HELD.with(|held| {
                let now = held.get().saturating_add_signed(delta);
                held.set(now);
                PEAK.with(|peak| peak.set(peak.get().max(now)));
            });
        }
    });
}

/// Decodes `bytes` as both kinds of envelope and returns the most bytes held meanwhile.
fn peak_while_decoding(bytes: &[u8]) -> usize {
    HELD.with(|h| h.set(0));
    PEAK.with(|p| p.set(0));
    TRACKING.with(|t| t.set(true));
    let envelope = decode_envelope(bytes);
    let reply = decode_reply(bytes);
    TRACKING.with(|t| t.set(false));
    drop((envelope, reply));
    PEAK.with(Cell::get)
}

/// The most a decode of `input` bytes may hold: the copy of what decoded (at most the input)
/// and a little for the error's text; far below [`ENVELOPE_LIMIT`].
fn held_at_most(input: usize) -> usize {
    (input + 1_024).min(ENVELOPE_LIMIT)
}

fn envelope() -> impl Strategy<Value = Envelope> {
    (
        ("[a-z0-9-]{0,12}", "[a-z0-9_-]{0,12}", "[a-z0-9_-]{0,12}"),
        ("\\PC{0,16}", any::<u32>(), "\\PC{0,24}"),
        (any::<u64>(), any::<u8>(), any::<bool>()),
        proptest::collection::vec(any::<u8>(), 0..256),
    )
        .prop_map(
            |((from, org, tenant), (name, version, key), (deadline_ms, hops, open), body)| {
                Envelope {
                    format: ENVELOPE_FORMAT,
                    from,
                    org,
                    tenant,
                    name,
                    version,
                    idempotency_key: key,
                    deadline_ms,
                    hops,
                    open,
                    body,
                }
            },
        )
}

fn detail() -> impl Strategy<Value = WireDetail> {
    prop_oneof![
        (any::<u64>(), any::<u64>()).prop_map(|(bytes, limit)| WireDetail::Size { bytes, limit }),
        (any::<u64>(), any::<bool>()).prop_map(|(after_ms, outcome_unknown)| {
            WireDetail::Deadline {
                after_ms,
                outcome_unknown,
            }
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(epoch, lease_left_ms)| WireDetail::Lease {
            epoch,
            lease_left_ms
        }),
    ]
}

fn reply() -> impl Strategy<Value = ReplyEnvelope> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Ok),
        (
            "[A-Z_]{0,20}",
            "\\PC{0,30}",
            proptest::option::of("[a-z0-9-]{1,8}"),
            proptest::option::of(detail()),
        )
            .prop_map(|(code, message, holder, detail)| Err(WireError {
                code,
                message,
                holder,
                detail,
            })),
    ]
    .prop_map(|outcome| ReplyEnvelope {
        format: ENVELOPE_FORMAT,
        outcome,
    })
}

/// Bytes that start like an envelope (its format), then anything: what gets past the format
/// check, where a fuzzer spends its time.
fn framed_noise() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..512)
        .prop_map(|rest| [&ENVELOPE_FORMAT.to_le_bytes()[..], &rest].concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    #[test]
    fn arbitrary_bytes_never_panic_and_never_allocate_past_the_limit(
        bytes in prop_oneof![proptest::collection::vec(any::<u8>(), 0..512), framed_noise()]
    ) {
        let peak = peak_while_decoding(&bytes);
        prop_assert!(peak <= held_at_most(bytes.len()), "{peak} bytes held decoding {} bytes", bytes.len());
        if let Ok(decoded) = decode_envelope(&bytes) {
            prop_assert_eq!(encode_envelope(&decoded).unwrap(), bytes.clone(), "accepted bytes read back whole");
        }
        if let Ok(decoded) = decode_reply(&bytes) {
            prop_assert_eq!(encode_envelope(&decoded).unwrap(), bytes, "accepted bytes read back whole");
        }
    }

    #[test]
    fn a_whole_envelope_round_trips_and_every_cut_or_padding_is_refused(
        e in envelope(), pad in proptest::collection::vec(any::<u8>(), 1..8), at in any::<prop::sample::Index>()
    ) {
        let bytes = encode_envelope(&e).unwrap();
        prop_assert_eq!(decode_envelope(&bytes), Ok(e));
        let cut = at.index(bytes.len());
        prop_assert_eq!(decode_envelope(&bytes[..cut]), Err(EnvelopeError::Cut));
        let padded = [&bytes[..], &pad].concat();
        prop_assert_eq!(decode_envelope(&padded), Err(EnvelopeError::Trailing { extra: pad.len() }));
    }

    #[test]
    fn a_whole_reply_round_trips_and_every_cut_is_refused(r in reply(), at in any::<prop::sample::Index>()) {
        let bytes = encode_envelope(&r).unwrap();
        prop_assert_eq!(decode_reply(&bytes), Ok(r));
        let cut = at.index(bytes.len());
        prop_assert_eq!(decode_reply(&bytes[..cut]), Err(EnvelopeError::Cut));
    }

    #[test]
    fn a_flipped_byte_never_panics_and_what_decodes_reads_back_the_same(
        e in envelope(), at in any::<prop::sample::Index>(), flip in 1u8..=255
    ) {
        let mut bytes = encode_envelope(&e).unwrap();
        let i = at.index(bytes.len());
        bytes[i] ^= flip;
        prop_assert!(peak_while_decoding(&bytes) <= held_at_most(bytes.len()));
        if let Ok(decoded) = decode_envelope(&bytes) {
            prop_assert_eq!(encode_envelope(&decoded).unwrap(), bytes);
        }
    }
}

#[test]
fn a_small_frame_claiming_a_huge_field_allocates_little() {
    // Format, then a sender id claiming 15 MiB, then 8 bytes: a liar of 18 bytes.
    let claim = [
        &ENVELOPE_FORMAT.to_le_bytes()[..],
        &(15u64 << 20).to_le_bytes(),
        b"r1r1r1r1",
    ]
    .concat();
    let peak = peak_while_decoding(&claim);
    assert!(decode_envelope(&claim).is_err());
    assert!(peak < 1 << 20, "{peak} bytes held for an 18-byte frame");
}
