//! `leasehold inspect`: one tenant as the stores hold it — its lease (as the lease store's clock
//! sees it), its epochs with their objects and bytes (dead at or below the floor), its images
//! with their manifests, its segments, the chain from the tip back to the head image, and the
//! state of two checks: every manifest parses, and the chain fetches as an open would fetch it
//! (segments checked, head image verified). `verify` checks every image and segment and restores.

use std::collections::{BTreeMap, HashMap};

use futures::future::join_all;
use leasehold::LeaseKey;
use leasehold::durable::DurableStore;
use leasehold::image::parse_manifest;
use leasehold::layout::{ImageRef, LogPos, epoch_of, image_key, manifest_of, segment_of};
use leasehold::lease::LeaseStore;
use serde::Serialize;

use super::verify::{Check, chain_check};
use super::{Outcome, entry_of, list_all, unknown_tenant};
use crate::exit::{Exit, Failure};
use crate::report::{LEASE_COLUMNS, LeaseView, image_name, pos_name, table};
use crate::time::{bytes, format_rfc3339};

/// How many sizes are asked at once.
const SIZES_AT_ONCE: usize = 32;

/// The `--json` document of `inspect`.
#[derive(Debug, Serialize)]
pub struct InspectReport {
    /// The tenant.
    pub key: String,
    /// Its lease (`null`: the lease store has no record of it).
    pub lease: Option<LeaseView>,
    /// Its epochs in the durable store, oldest first.
    pub epochs: Vec<EpochView>,
    /// Its images, oldest first.
    pub images: Vec<ImageView>,
    /// Its segments.
    pub segments: SegmentsView,
    /// The chain from the tip back to the head image.
    pub chain: Option<ChainView>,
    /// Objects under the tenant that are not laid out as images, manifests or segments.
    pub foreign_objects: usize,
    /// Bytes of every object of the tenant.
    pub total_bytes: u64,
    /// The checks inspect makes (`manifests`, `chain`).
    pub checks: Vec<Check>,
    /// Whether they held.
    pub verified: bool,
}

/// One epoch's objects.
#[derive(Debug, Default, Serialize)]
pub struct EpochView {
    /// The epoch.
    pub epoch: u64,
    /// Objects in it.
    pub objects: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Images in it.
    pub images: usize,
    /// Segments in it.
    pub segments: usize,
    /// At or below the floor: what a sweep deletes.
    pub dead: bool,
}

/// One image.
#[derive(Debug, Serialize)]
pub struct ImageView {
    /// Its epoch.
    pub epoch: u64,
    /// Its number in the epoch.
    pub seq: u64,
    /// The image object's size (`null`: missing).
    pub size: Option<u64>,
    /// Whether it is the head.
    pub head: bool,
    /// At or below the floor.
    pub dead: bool,
    /// From its manifest: its SHA-256 (`null`: the manifest is missing or does not parse).
    pub sha256: Option<String>,
    /// The image it was built on.
    pub base: Option<ImageRef>,
    /// The log position it holds.
    pub log: Option<LogPos>,
    /// When it was published (RFC 3339).
    pub created_at: Option<String>,
    /// Whether it holds writes no segment carries (a tenure without a log).
    pub beyond_log: bool,
    /// Why its manifest could not be read (`null`: it parses).
    pub problem: Option<String>,
}

/// The segments, all epochs together.
#[derive(Debug, Default, Serialize)]
pub struct SegmentsView {
    /// How many.
    pub count: usize,
    /// Their bytes.
    pub bytes: u64,
    /// The lowest position.
    pub first: Option<LogPos>,
    /// The highest position.
    pub last: Option<LogPos>,
}

/// The chain a restore follows.
#[derive(Debug, Serialize)]
pub struct ChainView {
    /// Where it starts (the lease's tip).
    pub tip: Option<LogPos>,
    /// The image it ends at (`null`: an empty database).
    pub image: Option<ImageRef>,
    /// The log position that image holds.
    pub image_position: Option<LogPos>,
    /// Segments from there up to the tip.
    pub segments: usize,
    /// Their page bytes.
    pub bytes: u64,
}

/// Inspects `key`.
pub async fn run(
    leases: &dyn LeaseStore,
    durable: &dyn DurableStore,
    key: &LeaseKey,
    now_unix_ms: u64,
) -> Result<Outcome, Failure> {
    let entry = entry_of(leases, key).await?;
    let listed = list_all(durable, &key.prefix()).await?;
    if entry.is_none() && listed.is_empty() {
        return Err(unknown_tenant(key));
    }
    let record = entry.as_ref().map(|e| e.record.clone());
    let floor = record.as_ref().map_or(0, |r| r.floor);
    let head = record.as_ref().and_then(|r| r.head.clone());
    let sizes = sizes_of(durable, &listed).await?;
    let mut report = InspectReport {
        key: key.to_string(),
        lease: entry.as_ref().map(|e| LeaseView::of(e, now_unix_ms)),
        epochs: Vec::new(),
        images: Vec::new(),
        segments: SegmentsView::default(),
        chain: None,
        foreign_objects: 0,
        total_bytes: sizes.iter().flatten().sum(),
        checks: Vec::new(),
        verified: true,
    };
    let size_of: HashMap<&str, Option<u64>> = listed
        .iter()
        .map(String::as_str)
        .zip(sizes.iter().copied())
        .collect();
    let mut epochs: BTreeMap<u64, EpochView> = BTreeMap::new();
    let mut problems = Vec::new();
    for (object, size) in listed.iter().zip(&sizes) {
        let Some(epoch) = epoch_of(key, object) else {
            report.foreign_objects += 1;
            continue;
        };
        let e = epochs.entry(epoch).or_insert_with(|| EpochView {
            epoch,
            dead: epoch <= floor,
            ..EpochView::default()
        });
        e.objects += 1;
        e.bytes += size.unwrap_or(0);
        if let Some(pos) = segment_of(key, object) {
            e.segments += 1;
            let s = &mut report.segments;
            s.count += 1;
            s.bytes += size.unwrap_or(0);
            s.first = s.first.filter(|f| f.seq <= pos.seq).or(Some(pos));
            s.last = s.last.filter(|l| l.seq >= pos.seq).or(Some(pos));
        } else if let Some((epoch, seq)) = manifest_of(key, object) {
            e.images += 1;
            let image_size = size_of
                .get(image_key(key, epoch, seq).as_str())
                .copied()
                .flatten();
            let view = image_view(durable, key, (epoch, seq), image_size, &head, floor).await?;
            if let Some(problem) = &view.problem {
                problems.push(format!("e{epoch}/{seq}: {problem}"));
            }
            report.images.push(view);
        }
    }
    report.epochs = epochs.into_values().collect();
    let fine = format!("{} manifests parse", report.images.len());
    let manifests = Check {
        check: "manifests",
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            fine
        } else {
            problems.join("; ")
        },
    };
    report.checks.push(manifests);
    if let Some(record) = record.filter(|r| r.head.is_some() || r.tip.is_some()) {
        let (chain, fetched) = chain_check(durable, key, &record).await?;
        report.chain = fetched.map(|f| ChainView {
            tip: record.tip,
            image: f.image.as_ref().map(|(m, _)| m.image_ref()),
            image_position: f.image.as_ref().and_then(|(m, _)| m.log),
            segments: f.segments.len(),
            bytes: f
                .segments
                .iter()
                .map(|s| s.pages.len() as u64 * u64::from(s.header.page_size))
                .sum(),
        });
        report.checks.push(chain);
    }
    report.verified = report.checks.iter().all(|c| c.ok);
    let human = human(&report);
    Outcome::new(&report, human, Exit::Ok)
}

/// The size of every listed object (`None`: gone meanwhile), a few at a time.
async fn sizes_of(
    durable: &dyn DurableStore,
    listed: &[String],
) -> Result<Vec<Option<u64>>, Failure> {
    let mut sizes = Vec::with_capacity(listed.len());
    for chunk in listed.chunks(SIZES_AT_ONCE) {
        for size in join_all(chunk.iter().map(|k| durable.size(k))).await {
            sizes.push(size?);
        }
    }
    Ok(sizes)
}

/// One image and its manifest.
async fn image_view(
    durable: &dyn DurableStore,
    key: &LeaseKey,
    (epoch, seq): (u64, u64),
    size: Option<u64>,
    head: &Option<ImageRef>,
    floor: u64,
) -> Result<ImageView, Failure> {
    let mut view = ImageView {
        epoch,
        seq,
        size,
        head: head
            .as_ref()
            .is_some_and(|h| (h.epoch, h.seq) == (epoch, seq)),
        dead: epoch <= floor,
        sha256: None,
        base: None,
        log: None,
        created_at: None,
        beyond_log: false,
        problem: None,
    };
    let manifest_key = leasehold::layout::manifest_key(key, epoch, seq);
    match durable.get(&manifest_key).await? {
        None => view.problem = Some("the manifest vanished".into()),
        Some(bytes) => match parse_manifest(&bytes, key, epoch, seq) {
            Ok(m) => {
                view.sha256 = Some(m.sha256);
                view.base = m.base;
                view.log = m.log;
                view.created_at = Some(format_rfc3339(m.created_at_ms));
                view.beyond_log = m.beyond_log;
            }
            Err(e) => view.problem = Some(format!("the manifest does not parse: {e}")),
        },
    }
    if size.is_none() && view.problem.is_none() && !view.dead {
        view.problem = Some("the image object is missing".into());
    }
    Ok(view)
}

/// The text of an inspect's report.
fn human(r: &InspectReport) -> String {
    let mut out = format!("tenant {}\n\nlease\n", r.key);
    match &r.lease {
        Some(lease) => out.push_str(&table(&LEASE_COLUMNS, &[lease.row()])),
        None => out.push_str("  none: the lease store has no record of it\n"),
    }
    out.push_str("\nepochs\n");
    let rows: Vec<Vec<String>> = r
        .epochs
        .iter()
        .map(|e| {
            vec![
                format!("e{}", e.epoch),
                e.objects.to_string(),
                bytes(e.bytes),
                e.images.to_string(),
                e.segments.to_string(),
                if e.dead {
                    "dead (at or below the floor)".into()
                } else {
                    String::new()
                },
            ]
        })
        .collect();
    out.push_str(&table(
        &["EPOCH", "OBJECTS", "BYTES", "IMAGES", "SEGMENTS", ""],
        &rows,
    ));
    out.push_str("\nimages\n");
    let rows: Vec<Vec<String>> = r.images.iter().map(image_row).collect();
    out.push_str(&table(
        &["IMAGE", "SIZE", "LOG", "BASE", "CREATED", "NOTE"],
        &rows,
    ));
    let s = &r.segments;
    let span = match (s.first, s.last) {
        (Some(f), Some(l)) => format!(", {} .. {}", pos_name(f), pos_name(l)),
        _ => String::new(),
    };
    out.push_str(&format!(
        "\nsegments: {}, {}{span}\n",
        s.count,
        bytes(s.bytes)
    ));
    if let Some(c) = &r.chain {
        let image = c
            .image
            .as_ref()
            .map_or("an empty database".into(), image_name);
        let tip = c.tip.map_or("no tip".into(), pos_name);
        out.push_str(&format!(
            "chain: from {tip} back to {image}: {} segments, {} of pages\n",
            c.segments,
            bytes(c.bytes)
        ));
    }
    out.push_str(&format!(
        "total: {}, {} foreign objects\n\nchecks\n",
        bytes(r.total_bytes),
        r.foreign_objects
    ));
    for c in &r.checks {
        let mark = if c.ok { "ok  " } else { "FAIL" };
        out.push_str(&format!("  {mark} {:<10} {}\n", c.check, c.detail));
    }
    out.push_str("  (verify checks every image and segment and restores the tenant)\n");
    out
}

fn image_row(i: &ImageView) -> Vec<String> {
    let mut note = Vec::new();
    if i.head {
        note.push("head".to_owned());
    }
    if i.dead {
        note.push("dead".to_owned());
    }
    if i.beyond_log {
        note.push("beyond the log".to_owned());
    }
    if let Some(p) = &i.problem {
        note.push(p.clone());
    }
    vec![
        format!("e{}/{}", i.epoch, i.seq),
        i.size.map_or("-".into(), bytes),
        i.log.map_or("-".into(), pos_name),
        i.base.as_ref().map_or("-".into(), image_name),
        i.created_at.clone().unwrap_or_else(|| "-".into()),
        note.join(", "),
    ]
}
