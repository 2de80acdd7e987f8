//! The segment format pinned: the golden bytes, and every check of [`Segment::decode`].

use sha2::{Digest, Sha256};

use super::*;
use crate::ids::{OrgId, TenantId};
use crate::log::sums::PageSums;

fn key() -> LeaseKey {
    LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t1").unwrap())
}

const POS: LogPos = LogPos { epoch: 2, seq: 5 };
const PREV: LogPos = LogPos { epoch: 1, seq: 4 };

/// The fixed segment of the golden files, as format 1 writes it: page size 512, pages 1 and 3
/// of 3, every field a value no other field has, so a reordering moves bytes.
fn golden_segment() -> Segment {
    let mut first: Vec<u8> = (0..512u32).map(|i| (i * 7 % 251) as u8).collect();
    first[..16].copy_from_slice(b"SQLite format 3\0");
    first[16..18].copy_from_slice(&512u16.to_be_bytes());
    let third: Vec<u8> = (0..512u32).map(|i| ((i * 13 + 5) % 256) as u8).collect();
    Segment {
        header: SegmentHeader {
            format: SEGMENT_FORMAT_PLAIN,
            key: "acme/t1".into(),
            pos: POS,
            prev: Some(PREV),
            page_size: 512,
            db_pages: 3,
            sum_before: 0x0102_0304_0506_0708,
            sum_after: 0x1112_1314_1516_1718,
            created_at_ms: 1_700_000_000_123,
        },
        pages: vec![
            Page {
                pgno: 1,
                data: first,
            },
            Page {
                pgno: 3,
                data: third,
            },
        ],
    }
}

const GOLDEN_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/segment_fixtures/golden-v1.seg"
);

/// The segment format, byte for byte: the fixed [`golden_segment`] encodes to exactly the bytes
/// of `tests/segment_fixtures/golden-v1.seg` and decodes back from them. It fails when a field
/// of the header or a page is added, removed or reordered, when a type changes width, or when
/// the codec or its configuration changes (`src/codec.rs`) — each would make segments already
/// in durable stores unreadable.
///
/// To change the format **deliberately**: bump [`SEGMENT_FORMAT`] (and keep reading the old
/// one), then regenerate with
/// `LEASEHOLD_REGENERATE_GOLDEN=1 cargo test -p leasehold --lib golden_segment_bytes_are_pinned`
/// and commit the new file under a new name (`golden-v2.seg`), keeping the old one pinned.
#[test]
fn golden_segment_bytes_are_pinned() {
    let encoded = golden_segment()
        .encode_with(SegmentCompression::Off)
        .unwrap()
        .bytes;
    if std::env::var_os("LEASEHOLD_REGENERATE_GOLDEN").is_some() {
        std::fs::write(GOLDEN_PATH, &encoded).unwrap();
    }
    let golden = std::fs::read(GOLDEN_PATH).unwrap();
    assert_eq!(
        encoded, golden,
        "the segment encoding changed; see this test's doc comment"
    );
    // Independent of the codec crate: bincode 1's fixed-width little-endian layout.
    assert_eq!(&golden[..4], &SEGMENT_FORMAT_PLAIN.to_le_bytes());
    assert_eq!(&golden[4..12], &7u64.to_le_bytes());
    assert_eq!(&golden[12..19], b"acme/t1");
    assert_eq!(&golden[19..27], &POS.epoch.to_le_bytes());
    assert_eq!(&golden[27..35], &POS.seq.to_le_bytes());
    assert_eq!(golden[35], 1, "Some(prev)");
    let body = &golden[..golden.len() - CHECKSUM_LEN];
    assert_eq!(
        &golden[golden.len() - CHECKSUM_LEN..],
        Sha256::digest(body).as_slice()
    );
    assert_eq!(
        Segment::decode(&golden, &key(), POS).unwrap(),
        golden_segment()
    );
}

/// The bytes of `seg` as a writer that skipped the shape checks would ship them.
fn sealed(seg: &Segment) -> Vec<u8> {
    let mut bytes = crate::codec::encode(seg).unwrap();
    let sum = Sha256::digest(&bytes);
    bytes.extend_from_slice(&sum);
    bytes
}

fn refused(bytes: &[u8], pos: LogPos) -> String {
    match Segment::decode(bytes, &key(), pos) {
        Err(LogError::Corrupt { what, reason }) => {
            assert_eq!(what, segment_key(&key(), pos));
            reason
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|s| s.header)),
    }
}

#[test]
fn a_flipped_byte_anywhere_is_refused_by_the_sha256() {
    let bytes = golden_segment().encode().unwrap();
    for at in [0, 40, bytes.len() / 2, bytes.len() - 1] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x01;
        assert!(refused(&bad, POS).contains("SHA-256"), "byte {at}");
    }
    assert!(refused(&bytes[..10], POS).contains("shorter"));
}

#[test]
fn a_segment_fetched_under_another_key_or_position_is_refused() {
    let bytes = golden_segment().encode().unwrap();
    let other = LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t2").unwrap());
    assert!(matches!(
        Segment::decode(&bytes, &other, POS),
        Err(LogError::Corrupt { .. })
    ));
    assert!(refused(&bytes, LogPos { epoch: 3, seq: 5 }).contains("fetched as"));
    assert!(refused(&bytes, LogPos { epoch: 2, seq: 6 }).contains("fetched as"));
}

#[test]
fn trailing_bytes_under_a_valid_sha256_are_refused() {
    let mut body = crate::codec::encode(&golden_segment()).unwrap();
    body.push(0);
    let sum = Sha256::digest(&body);
    body.extend_from_slice(&sum);
    assert!(refused(&body, POS).contains("trailing"));
}

#[test]
fn every_shape_check_refuses_on_decode_and_on_encode() {
    type Break = fn(&mut Segment);
    let breaks: [(&str, Break); 10] = [
        ("format 3", |s| s.header.format = 3),
        ("page size", |s| s.header.page_size = 1000),
        ("at least one page", |s| s.header.db_pages = 0),
        ("ascend", |s| s.pages.swap(0, 1)),
        ("ascend", |s| s.pages[1].pgno = 4),
        ("bytes, not", |s| s.pages[1].data.push(0)),
        ("database header", |s| s.pages[0].data[16] = 0x10),
        ("right before", |s| {
            s.header.prev = Some(LogPos { epoch: 1, seq: 3 })
        }),
        ("later epoch", |s| {
            s.header.prev = Some(LogPos { epoch: 3, seq: 4 })
        }),
        ("no previous", |s| s.header.prev = None),
    ];
    for (expected, break_it) in breaks {
        let mut seg = golden_segment();
        break_it(&mut seg);
        let reason = refused(&sealed(&seg), POS);
        assert!(reason.contains(expected), "{expected}: {reason}");
        if expected != "format 3" {
            assert!(seg.encode().is_err(), "{expected}: encode");
        }
    }
}

#[test]
fn the_first_segment_has_no_prev_and_a_page_size_is_any_power_of_two_from_512() {
    let mut seg = golden_segment();
    seg.header.pos = LogPos { epoch: 2, seq: 1 };
    seg.header.prev = None;
    let pos = seg.header.pos;
    let decoded = Segment::decode(&seg.encode().unwrap(), &key(), pos).unwrap();
    seg.header.format = SEGMENT_FORMAT;
    assert_eq!(decoded, seg);
    assert!(is_page_size(512) && is_page_size(65_536));
    assert!(!is_page_size(256) && !is_page_size(131_072) && !is_page_size(4095));
}

#[test]
fn from_changes_keeps_the_pages_in_ascending_order() {
    let mut pages = std::collections::BTreeMap::new();
    let db = golden_segment();
    pages.insert(3, db.pages[1].data.clone());
    pages.insert(1, db.pages[0].data.clone());
    let changes = Changes {
        page_size: 512,
        db_pages: 3,
        pages,
        sum_before: PageSums::empty().total(),
        sum_after: 9,
    };
    let seg = Segment::from_changes(&key(), POS, Some(PREV), changes, 4);
    assert_eq!(
        seg.pages.iter().map(|p| p.pgno).collect::<Vec<_>>(),
        vec![1, 3]
    );
    assert_eq!(seg.header.key, "acme/t1");
    assert_eq!((seg.header.sum_after, seg.header.created_at_ms), (9, 4));
    assert!(seg.encode().is_ok());
}

#[test]
fn the_encoded_length_is_what_encode_writes() {
    let mut seg = golden_segment();
    let key_len = seg.header.key.len() as u64;
    let len = |seg: &Segment| {
        let plain = seg.encode_with(SegmentCompression::Off).unwrap();
        let packed = seg.encode_with(SegmentCompression::Zstd).unwrap();
        assert_eq!(
            packed.raw_len, plain.raw_len,
            "one raw size whatever is stored"
        );
        assert!(packed.bytes.len() as u64 <= packed.raw_len);
        assert_eq!(plain.bytes.len() as u64, plain.raw_len);
        plain.raw_len
    };
    assert_eq!(len(&seg), encoded_len(key_len, true, 512, 2));
    seg.pages.truncate(1);
    assert_eq!(len(&seg), encoded_len(key_len, true, 512, 1));
    let first = Segment::from_changes(
        &key(),
        LogPos { epoch: 1, seq: 1 },
        None,
        crate::log::Changes {
            page_size: 512,
            db_pages: 3,
            pages: [(2, vec![0; 512]), (3, vec![1; 512])].into_iter().collect(),
            sum_before: 0,
            sum_after: 0,
        },
        0,
    );
    assert_eq!(len(&first), encoded_len(key_len, false, 512, 2));
    assert!(encoded_bound(512, 2) >= encoded_len(key_len, true, 512, 2));
    assert_eq!(
        encoded_bound(4096, 1_000) - encoded_bound(4096, 0),
        1_000 * (4096 + ENCODED_PER_PAGE)
    );
}

const GOLDEN_V2_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/segment_fixtures/golden-v2.seg"
);

/// The bytes of a format-2 segment whose codec bytes (compressed by zstd) are `inner` and
/// whose prefix claims `claimed` raw bytes, sealed with a valid SHA-256.
fn sealed_v2(inner: &[u8], claimed: u64) -> Vec<u8> {
    let frame = crate::codec::compress(inner).unwrap();
    let mut bytes = SEGMENT_FORMAT.to_le_bytes().to_vec();
    bytes.extend_from_slice(&claimed.to_le_bytes());
    bytes.extend_from_slice(&frame);
    let sum = Sha256::digest(&bytes);
    bytes.extend_from_slice(&sum);
    bytes
}

/// Format 2, pinned: `tests/segment_fixtures/golden-v2.seg` (written by this build's zstd)
/// decodes to the golden segment, its prefix is the format and the raw length, and what this
/// build writes decompresses to the same codec bytes (the zstd frame itself may differ between
/// zstd versions; the bytes inside it may not). Format 1 stays pinned and read by
/// [`golden_segment_bytes_are_pinned`]: old segments decode whatever the writer writes now.
#[test]
fn golden_v2_segment_bytes_are_pinned() {
    let encoded = golden_segment().encode().unwrap();
    if std::env::var_os("LEASEHOLD_REGENERATE_GOLDEN").is_some() {
        std::fs::write(GOLDEN_V2_PATH, &encoded).unwrap();
    }
    let golden = std::fs::read(GOLDEN_V2_PATH).unwrap();
    let v1 = std::fs::read(GOLDEN_PATH).unwrap();
    assert!(golden.len() < v1.len(), "{} vs {}", golden.len(), v1.len());
    assert_eq!(&golden[..4], &SEGMENT_FORMAT.to_le_bytes());
    let claimed = u64::from_le_bytes(golden[4..12].try_into().unwrap());
    assert_eq!(
        claimed as usize,
        v1.len() - CHECKSUM_LEN,
        "the plain codec bytes' size"
    );
    let inner = |bytes: &[u8]| {
        let body = &bytes[..bytes.len() - CHECKSUM_LEN];
        crate::codec::decompress(&body[COMPRESSED_PREFIX_LEN..], claimed).unwrap()
    };
    let pinned_inner = inner(&golden);
    assert_eq!(inner(&encoded), pinned_inner);
    // The codec bytes inside are format 1's with the format field 2.
    assert_eq!(&pinned_inner[..4], &SEGMENT_FORMAT.to_le_bytes());
    assert_eq!(&pinned_inner[4..], &v1[4..v1.len() - CHECKSUM_LEN]);
    let mut expected = golden_segment();
    expected.header.format = SEGMENT_FORMAT;
    assert_eq!(Segment::decode(&golden, &key(), POS).unwrap(), expected);
    assert_eq!(
        Segment::decode(&v1, &key(), POS).unwrap(),
        golden_segment(),
        "format 1 still reads"
    );
}

#[test]
fn a_segment_compression_would_not_shrink_is_written_plain() {
    let mut seg = golden_segment();
    // Pages of noise (an xorshift): zstd cannot shrink them.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for page in &mut seg.pages {
        for (i, byte) in page.data.iter_mut().enumerate() {
            if page.pgno == 1 && i < 100 {
                continue;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *byte = x as u8;
        }
    }
    let encoded = seg.encode_with(SegmentCompression::Zstd).unwrap();
    // Only the header's zeros compress: whichever format, never more than plain.
    assert!(encoded.bytes.len() as u64 <= encoded.raw_len);
    let format = u32::from_le_bytes(encoded.bytes[..4].try_into().unwrap());
    seg.header.format = format;
    assert_eq!(Segment::decode(&encoded.bytes, &key(), POS).unwrap(), seg);
    // The rule: format 2 only when the frame and its 12-byte prefix are smaller than plain.
    assert!(compression_pays(100, 113));
    assert!(!compression_pays(100, 112));
    assert!(!compression_pays(usize::MAX, 10));
    // And the writer follows it: a frame bigger than plain is written as format 1.
    let plain = seg.encode_with(SegmentCompression::Off).unwrap();
    let frame = crate::codec::compress(&plain.bytes[..plain.bytes.len() - CHECKSUM_LEN]).unwrap();
    let expected = if compression_pays(frame.len(), plain.bytes.len() - CHECKSUM_LEN) {
        SEGMENT_FORMAT
    } else {
        SEGMENT_FORMAT_PLAIN
    };
    assert_eq!(format, expected);
}

/// A decompression bomb: a format-2 segment of a few hundred bytes, with a valid SHA-256,
/// claiming 2^40 raw bytes, is refused as corrupt before anything is decompressed or
/// allocated; one whose frame yields more than it claims is refused as soon as it passes the
/// claim.
#[test]
fn a_compressed_segment_claiming_a_huge_raw_size_is_refused_before_allocating() {
    let inner = crate::codec::encode(&SegmentRef {
        header: &SegmentHeader {
            format: SEGMENT_FORMAT,
            ..golden_segment().header
        },
        pages: &golden_segment().pages,
    })
    .unwrap();
    let bomb = sealed_v2(&inner, 1 << 40);
    assert!(bomb.len() < 1024, "{}", bomb.len());
    let reason = refused(&bomb, POS);
    assert!(
        reason.contains("claims 1099511627776 raw bytes, more than the 1073741824"),
        "{reason}"
    );
    let reason = refused(&sealed_v2(&inner, 100), POS);
    assert!(
        reason.contains("claims 100 raw bytes but holds 101"),
        "{reason}"
    );
    assert_eq!(
        Segment::decode(&sealed_v2(&inner, inner.len() as u64), &key(), POS)
            .unwrap()
            .header
            .format,
        SEGMENT_FORMAT
    );
}

/// Corrupt compressed bytes under a valid SHA-256 (a writer's bug, not the disk's: the disk's
/// is caught by the SHA-256 first) are refused as corrupt, by kind, never decoded.
#[test]
fn corrupt_compressed_bytes_under_a_valid_sha256_are_refused() {
    let encoded = golden_segment().encode().unwrap();
    let body = &encoded[..encoded.len() - CHECKSUM_LEN];
    let reseal = |body: &[u8]| {
        let mut bytes = body.to_vec();
        let sum = Sha256::digest(&bytes);
        bytes.extend_from_slice(&sum);
        bytes
    };
    // The frame cut short, the frame replaced by junk, no frame at all, the claim cut.
    let cut = reseal(&body[..body.len() - 5]);
    assert!(refused(&cut, POS).contains("decompress"));
    let junk = reseal(
        &[
            &body[..COMPRESSED_PREFIX_LEN],
            &[0xde, 0xad, 0xbe, 0xef, 0, 1],
        ]
        .concat(),
    );
    assert!(refused(&junk, POS).contains("decompress"));
    let empty = reseal(&body[..COMPRESSED_PREFIX_LEN]);
    assert!(refused(&empty, POS).contains("decompress"));
    let short = reseal(&body[..7]);
    assert!(refused(&short, POS).contains("cut before its raw length"));
    // A frame whose codec bytes say format 1 inside format 2.
    let plain = golden_segment()
        .encode_with(SegmentCompression::Off)
        .unwrap();
    let inner = &plain.bytes[..plain.bytes.len() - CHECKSUM_LEN];
    let reason = refused(&sealed_v2(inner, inner.len() as u64), POS);
    assert!(reason.contains("header says format 1"), "{reason}");
}

/// A page's bytes are encoded as one byte string (`serde_bytes`): the same bytes as the
/// sequence of `u8` they were encoded as before, both ways (the golden files pin the rest).
#[test]
fn pages_encode_as_before() {
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Before {
        pgno: u32,
        data: Vec<u8>,
    }
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 13 % 256) as u8).collect();
    let page = Page {
        pgno: 7,
        data: data.clone(),
    };
    let before = Before { pgno: 7, data };
    let bytes = crate::codec::encode(&page).unwrap();
    assert_eq!(bytes, crate::codec::encode(&before).unwrap());
    assert_eq!(crate::codec::decode::<Page>(&bytes).unwrap(), page);
    assert_eq!(crate::codec::decode::<Before>(&bytes).unwrap(), before);
}
