//! The storage rules of the end audit (docs/guarantees.md, "durable bytes per tenant" and "The
//! change log"), judged from what the stores hold once the last retention ran: a pure function
//! of one tenant's listing, its lease record and the manifests of its images.
//!
//! ```text
//!  every object of an epoch above the floor is named:
//!    an image  <e>/snap-<n>.db   ⇔ its manifest <e>/snap-<n>.json         (else orphan-object)
//!    a segment <e>/log-<s>.seg  on the chain: s ≤ tip, and no later epoch
//!                               shipped s (it is the newest at s)          (else orphan-object)
//!  with a retain (`--retain-ms`), after the last image (the head, taken at the end):
//!    images older than head.created − retain − slack: at most one (the window's base)
//!    segments below that base's position: none (the base's own stays)    (else storage-bound)
//! ```
//!
//! The bound is the guarantee's, computed here from the objects and a little looser than the
//! runtime's plan can be (its cutoff is taken later than the head's stamp, and the slack
//! covers the rest), so every finding is an object the runtime promised to delete. Without a
//! retain nothing is old enough to go, and only the naming rules apply.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use leasehold::LeaseKey;
use leasehold::image::Manifest;
use leasehold::layout::{LogPos, epoch_of, manifest_of, segment_of};
use leasehold::lease::LeaseRecord;

use crate::checker::{Report, Violation};
use crate::finale::Final;

/// Slack between the head's stamp and the cutoff the last retention used. A retention starts
/// after each image on the same host's clock, but one at a time: an image published while one
/// runs gets the next, once the one under way (started after an image a little older) ends,
/// and the audit, which sees only their ends (`crate::audit`), may judge the one under way.
/// Five seconds covers an image the fresh replica's first compaction took just before the
/// end's.
pub const RETENTION_SLACK_MS: u64 = 5_000;

/// What the stores hold of one tenant at the end.
#[derive(Debug, Clone, Default)]
pub struct TenantStore {
    /// Its lease record.
    pub record: Option<LeaseRecord>,
    /// Every key under its prefix.
    pub objects: Vec<String>,
    /// The manifests of its images above the floor that could be read and parsed.
    pub manifests: Vec<Manifest>,
    /// Whether the last retention is known to have run after the head (the end's image):
    /// only then is the retention bound judged.
    pub retention_ran: bool,
}

/// One finding of the storage rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `orphan-object` or `storage-bound`.
    pub rule: &'static str,
    /// What exactly.
    pub detail: String,
}

/// What a tenant holds, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    /// Objects above the floor.
    pub objects: u64,
    /// Bytes of the images among them (their manifests' sizes).
    pub image_bytes: u64,
}

/// Judges one tenant (`key`) by the storage rules; `retain` is the replicas' when the run set one.
pub fn judge(key: &LeaseKey, held: &TenantStore, retain: Option<Duration>) -> (Vec<Finding>, Held) {
    let floor = held.record.as_ref().map_or(0, |r| r.floor);
    let live: Vec<&String> = held
        .objects
        .iter()
        .filter(|o| epoch_of(key, o).is_some_and(|e| e > floor))
        .collect();
    let mut findings = orphans(key, held, &live);
    let manifests: BTreeMap<(u64, u64), &Manifest> = held
        .manifests
        .iter()
        .filter(|m| m.epoch > floor)
        .map(|m| ((m.epoch, m.seq), m))
        .collect();
    if let (Some(retain), true) = (retain, held.retention_ran) {
        findings.extend(retention(key, held, &live, &manifests, retain));
    }
    let held = Held {
        objects: live.len() as u64,
        image_bytes: manifests.values().map(|m| m.size).sum(),
    };
    (findings, held)
}

/// Lone images and manifests, and segments off the chain.
fn orphans(key: &LeaseKey, held: &TenantStore, live: &[&String]) -> Vec<Finding> {
    let mut findings = Vec::new();
    let images: BTreeSet<(u64, u64)> = live.iter().filter_map(|o| image_of(key, o)).collect();
    let manifests: BTreeSet<(u64, u64)> = live.iter().filter_map(|o| manifest_of(key, o)).collect();
    for &(e, s) in images.difference(&manifests) {
        findings.push(orphan(format!(
            "the image e{e:08}/snap-{s:06}.db has no manifest: no head, chain or retention names it"
        )));
    }
    for &(e, s) in manifests.difference(&images) {
        findings.push(orphan(format!(
            "the manifest e{e:08}/snap-{s:06}.json has no image"
        )));
    }
    let tip = held
        .record
        .as_ref()
        .and_then(|r| r.tip)
        .map_or(0, |t| t.seq);
    let segments: Vec<LogPos> = live.iter().filter_map(|o| segment_of(key, o)).collect();
    let mut newest: BTreeMap<u64, u64> = BTreeMap::new();
    for p in &segments {
        let e = newest.entry(p.seq).or_insert(p.epoch);
        *e = (*e).max(p.epoch);
    }
    for p in &segments {
        if p.seq > tip {
            findings.push(orphan(format!(
                "the segment {p} lies above the tip (seq {tip}): no tip names it"
            )));
        } else if newest.get(&p.seq) != Some(&p.epoch) {
            findings.push(orphan(format!(
                "the segment {p} is off the chain: a later tenure shipped seq {}",
                p.seq
            )));
        }
    }
    findings
}

/// Images and segments retention should have deleted after the last image.
fn retention(
    key: &LeaseKey,
    held: &TenantStore,
    live: &[&String],
    manifests: &BTreeMap<(u64, u64), &Manifest>,
    retain: Duration,
) -> Vec<Finding> {
    let Some(head) = held.record.as_ref().and_then(|r| r.head.as_ref()) else {
        return Vec::new();
    };
    let Some(head) = manifests.get(&(head.epoch, head.seq)) else {
        return Vec::new();
    };
    let retain_ms = u64::try_from(retain.as_millis()).unwrap_or(u64::MAX);
    let cutoff = head
        .created_at_ms
        .saturating_sub(retain_ms)
        .saturating_sub(RETENTION_SLACK_MS);
    let log_seq = |m: &Manifest| m.log.map_or(0, |p| p.seq);
    let mut old: Vec<&Manifest> = manifests
        .values()
        .copied()
        .filter(|m| (m.epoch, m.seq) != (head.epoch, head.seq) && m.created_at_ms < cutoff)
        .collect();
    old.sort_by_key(|m| (log_seq(m), m.created_at_ms));
    let base = old.pop();
    let mut findings: Vec<Finding> = old
        .iter()
        .map(|m| {
            bound(format!(
                "the image e{:08}/snap-{:06} was published at {} ms, more than retain ({retain_ms} \
                 ms) before the head's {} ms, and is not the window's base",
                m.epoch, m.seq, m.created_at_ms, head.created_at_ms
            ))
        })
        .collect();
    let covered = base.map_or(0, log_seq).min(log_seq(head));
    let tip = held
        .record
        .as_ref()
        .and_then(|r| r.tip)
        .map_or(0, |t| t.seq);
    for p in live.iter().filter_map(|o| segment_of(key, o)) {
        // The base's own segment stays: the next run judges the base on the chain by it
        // (docs/guarantees.md, the storage bound; `src/plan/retention.rs`).
        if p.seq < covered && p.seq <= tip {
            findings.push(bound(format!(
                "the segment {p} lies below the window's base (seq {covered}): every kept \
                 image holds it and no moment of the window precedes it"
            )));
        }
    }
    findings
}

/// The storage rules of every tenant the end audit listed (`crate::storage`).
pub fn check(fin: &Final, retain: Option<Duration>, report: &mut Report) {
    let mut tenants: Vec<&u32> = fin.storage.keys().collect();
    tenants.sort_unstable();
    for &tenant in tenants {
        let (Some(held), Ok(key)) = (fin.storage.get(&tenant), crate::protocol::lease_key(tenant))
        else {
            continue;
        };
        let (findings, counted) = judge(&key, held, retain);
        report.held.objects += counted.objects;
        report.held.image_bytes += counted.image_bytes;
        for f in findings {
            report.violations.push(Violation {
                rule: f.rule,
                tenant: Some(tenant),
                at: 0,
                detail: format!("t{tenant} at the end: {}", f.detail),
            });
        }
    }
}

/// `(epoch, seq)` of an image key `<key>/e<epoch>/snap-<seq>.db`.
fn image_of(key: &LeaseKey, object: &str) -> Option<(u64, u64)> {
    let epoch = epoch_of(key, object)?;
    let digits = object
        .rsplit_once('/')?
        .1
        .strip_prefix("snap-")?
        .strip_suffix(".db")?;
    (digits.len() >= 6 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok().map(|seq| (epoch, seq)))
        .flatten()
}

fn orphan(detail: String) -> Finding {
    Finding {
        rule: "orphan-object",
        detail,
    }
}

fn bound(detail: String) -> Finding {
    Finding {
        rule: "storage-bound",
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::layout::{ImageRef, image_key, manifest_key, segment_key};
    use leasehold::{OrgId, TenantId};

    fn key() -> LeaseKey {
        LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t1").unwrap())
    }

    fn manifest(epoch: u64, seq: u64, log: u64, created: u64) -> Manifest {
        Manifest {
            format: 1,
            key: key().to_string(),
            epoch,
            seq,
            size: 4096,
            sha256: "0".repeat(64),
            base: None,
            created_at_ms: created,
            log: Some(LogPos { epoch, seq: log }),
            beyond_log: false,
        }
    }

    fn record(head: (u64, u64), tip: LogPos, floor: u64) -> LeaseRecord {
        LeaseRecord {
            key: key().to_string(),
            owner: "r".into(),
            epoch: tip.epoch,
            expires_at_ms: 0,
            released: true,
            floor,
            head: Some(ImageRef {
                epoch: head.0,
                seq: head.1,
                sha256: "0".repeat(64),
            }),
            tip: Some(tip),
        }
    }

    /// A tenant holding `images` (with manifests) and segments `1..=tip` of `epoch`.
    fn tenant(images: &[Manifest], epoch: u64, tip: u64) -> TenantStore {
        let k = key();
        let mut objects: Vec<String> = images
            .iter()
            .flat_map(|m| {
                [
                    image_key(&k, m.epoch, m.seq),
                    manifest_key(&k, m.epoch, m.seq),
                ]
            })
            .collect();
        objects.extend((1..=tip).map(|seq| segment_key(&k, LogPos { epoch, seq })));
        let head = images.last().map_or((epoch, 1), |m| (m.epoch, m.seq));
        TenantStore {
            record: Some(record(head, LogPos { epoch, seq: tip }, 0)),
            objects,
            manifests: images.to_vec(),
            retention_ran: true,
        }
    }

    fn rules(findings: &[Finding]) -> Vec<&'static str> {
        findings.iter().map(|f| f.rule).collect()
    }

    #[test]
    fn a_whole_chain_without_retain_is_within_the_bound() {
        let t = tenant(
            &[manifest(1, 1, 10, 1_000), manifest(1, 2, 20, 2_000)],
            1,
            25,
        );
        let (findings, held) = judge(&key(), &t, None);
        assert_eq!(findings, []);
        assert_eq!(held.objects, 4 + 25);
    }

    #[test]
    fn a_lone_image_and_a_segment_above_the_tip_are_orphans() {
        let mut t = tenant(&[manifest(1, 1, 10, 1_000)], 1, 12);
        t.objects.push(image_key(&key(), 1, 2));
        t.objects
            .push(segment_key(&key(), LogPos { epoch: 1, seq: 13 }));
        let (findings, _) = judge(&key(), &t, None);
        assert_eq!(rules(&findings), ["orphan-object", "orphan-object"]);
    }

    #[test]
    fn a_segment_a_later_tenure_shipped_over_is_off_the_chain() {
        let mut t = tenant(&[manifest(2, 1, 10, 1_000)], 2, 12);
        t.objects
            .push(segment_key(&key(), LogPos { epoch: 1, seq: 11 }));
        let (findings, _) = judge(&key(), &t, None);
        assert_eq!(rules(&findings), ["orphan-object"]);
    }

    #[test]
    fn with_a_retain_only_the_base_may_be_old_and_no_segment_below_it_may_stay() {
        // retain 10 s; the head at 60 s: images of 5 s and 20 s are older than 50 s − 5 s.
        let images = [
            manifest(1, 1, 10, 5_000),
            manifest(1, 2, 20, 20_000),
            manifest(1, 3, 30, 55_000),
            manifest(1, 4, 40, 60_000),
        ];
        let mut t = tenant(&images, 1, 40);
        let retain = Some(Duration::from_secs(10));
        let (findings, _) = judge(&key(), &t, retain);
        // e1/1 is old and not the base (e1/2 is); segments 1..=19 lie below the base.
        assert_eq!(findings.len(), 1 + 19, "{findings:?}");
        assert!(findings.iter().all(|f| f.rule == "storage-bound"));
        // What retention leaves: the base e1/2, the younger images, the base's own segment 20
        // (the next run judges the base on the chain by it: docs/guarantees.md, the storage
        // bound) and the segments after it.
        let k = key();
        t.objects.retain(|o| {
            o != &image_key(&k, 1, 1)
                && o != &manifest_key(&k, 1, 1)
                && segment_of(&k, o).is_none_or(|p| p.seq >= 20)
        });
        t.manifests.remove(0);
        assert_eq!(judge(&key(), &t, retain).0, []);
    }

    /// Seed 405740540 (20 s, `--retain-ms 6000 --compact-segments 100`, under load): the base
    /// e5/1 at seq 100 was published 20.7 s before the head, retention deleted segments 1..=99
    /// and kept the base's own segment 100, as it promises; the audit counted segment 100 among
    /// those it promised to delete (`storage-bound`) whenever its base was the runtime's.
    #[test]
    fn the_bases_own_segment_is_no_finding_when_the_audit_and_retention_agree_on_the_base() {
        let images = [manifest(5, 1, 100, 19_139), manifest(6, 1, 128, 39_862)];
        let mut t = tenant(&images, 5, 128);
        let k = key();
        t.objects
            .retain(|o| segment_of(&k, o).is_none_or(|p| p.seq >= 100));
        assert_eq!(judge(&key(), &t, Some(Duration::from_secs(6))).0, []);
        // Segment 99 left behind is one retention promised to delete.
        t.objects
            .push(segment_key(&k, LogPos { epoch: 5, seq: 99 }));
        assert_eq!(
            rules(&judge(&key(), &t, Some(Duration::from_secs(6))).0),
            ["storage-bound"]
        );
    }

    #[test]
    fn nothing_is_judged_for_retention_unless_it_ran_after_the_head() {
        let images = [manifest(1, 1, 10, 5_000), manifest(1, 2, 40, 60_000)];
        let mut t = tenant(&images, 1, 40);
        t.retention_ran = false;
        assert_eq!(judge(&key(), &t, Some(Duration::from_secs(10))).0, []);
    }

    #[test]
    fn objects_at_or_below_the_floor_are_left_to_the_erasure_rules() {
        let mut t = tenant(&[manifest(3, 1, 1, 1_000)], 3, 1);
        t.objects.push(image_key(&key(), 2, 1)); // lone, but of a forgotten epoch
        if let Some(r) = t.record.as_mut() {
            r.floor = 2;
        }
        assert_eq!(judge(&key(), &t, None).0, []);
    }
}
