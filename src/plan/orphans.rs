//! What a crashed process leaves behind in a live tenant: objects of dead tenures that nothing
//! names and nothing can name any more, found by listing (docs/guarantees.md, "Reconciling puts
//! of unknown outcome"). A pure function of the listing and the lease record; the shell deletes
//! a candidate only once it has seen it for longer than the longest put lives
//! ([`OrphanAges`]), so a put landing late finds its companion gone too.
//!
//! Only epochs above the floor (the floor's sweep takes those) and **below the record's epoch**
//! are judged: a tenure older than the record's can move neither the tip nor the head any more
//! (its moves are refused once a later tenure acquired), so what it left unnamed stays unnamed.
//! The record's own epoch — the live tenure, or the last one — is never judged here: its puts in
//! flight and its images being published are its replica's to reconcile.
//!
//! - a segment above the tip, or at a `seq` a later epoch shipped too (off the chain for good);
//! - an image without its manifest (the manifest put never landed: no head can name it);
//! - a manifest without its image (a half-finished delete, or a manifest landing after its
//!   lone image went), unless the head names it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::ids::LeaseKey;
use crate::layout::{epoch_of, image_key, manifest_key, manifest_of, segment_key, segment_of};
use crate::lease::LeaseRecord;

/// The image a `.db` key of `key` names: `Some((epoch, seq))` for `<key>/e<epoch>/snap-<seq>.db`.
fn image_of(key: &LeaseKey, object: &str) -> Option<(u64, u64)> {
    let epoch = epoch_of(key, object)?;
    let name = object.rsplit_once('/')?.1;
    let digits = name.strip_prefix("snap-")?.strip_suffix(".db")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((epoch, digits.parse().ok()?))
}

/// The orphans among `listed` (every key of `key`, or one page of it, sorted), for the lease
/// record `record` read **before** the listing. Sorted; never a key outside the layout, at or
/// below the floor, or of an epoch at or above the record's.
pub fn orphans(key: &LeaseKey, listed: &[String], record: &LeaseRecord) -> Vec<String> {
    let dead = |epoch: u64| epoch > record.floor && epoch < record.epoch;
    let listed_set: BTreeSet<&str> = listed.iter().map(String::as_str).collect();
    let head = record.head.as_ref().map(|h| (h.epoch, h.seq));
    let tip_seq = record.tip.map_or(0, |t| t.seq);
    let mut newest_at: BTreeMap<u64, u64> = BTreeMap::new();
    for p in listed.iter().filter_map(|k| segment_of(key, k)) {
        if p.epoch > record.floor {
            let e = newest_at.entry(p.seq).or_insert(p.epoch);
            *e = (*e).max(p.epoch);
        }
    }
    let mut found = Vec::new();
    for object in listed {
        if let Some(p) = segment_of(key, object) {
            let off_chain = p.seq > tip_seq || newest_at.get(&p.seq).is_some_and(|&e| e > p.epoch);
            if dead(p.epoch) && off_chain {
                found.push(segment_key(key, p));
            }
        } else if let Some((epoch, seq)) = image_of(key, object) {
            let lone = !listed_set.contains(manifest_key(key, epoch, seq).as_str());
            if dead(epoch) && lone && head != Some((epoch, seq)) {
                found.push(image_key(key, epoch, seq));
            }
        } else if let Some((epoch, seq)) = manifest_of(key, object) {
            let lone = !listed_set.contains(image_key(key, epoch, seq).as_str());
            if dead(epoch) && lone && head != Some((epoch, seq)) {
                found.push(manifest_key(key, epoch, seq));
            }
        }
    }
    found.sort();
    found
}

/// When the replica first saw each orphan candidate, by its own monotonic clock: a candidate is
/// deleted only once it has been seen for `settle_ms` (the longest a put lives), so nothing is
/// judged while a put that may complete it (a manifest landing late) could still land. The
/// replica's own clock, not the store's last-modified times: no clocks of two hosts are compared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrphanAges {
    /// First sighting of each candidate, by key.
    first_seen: HashMap<String, u64>,
}

impl OrphanAges {
    /// No candidate seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the candidates of one look at `tenant` made at `now_ms` (every candidate of that
    /// tenant that is not among them any more is forgotten) and returns those seen for at least
    /// `settle_ms`: the ones to delete now.
    pub fn due(
        &mut self,
        tenant: &LeaseKey,
        candidates: &[String],
        now_ms: u64,
        settle_ms: u64,
    ) -> Vec<String> {
        let prefix = tenant.prefix();
        let now_set: BTreeSet<&str> = candidates.iter().map(String::as_str).collect();
        self.first_seen
            .retain(|k, _| !k.starts_with(&prefix) || now_set.contains(k.as_str()));
        let mut due = Vec::new();
        for candidate in candidates {
            let seen = *self.first_seen.entry(candidate.clone()).or_insert(now_ms);
            if now_ms.saturating_sub(seen) >= settle_ms {
                due.push(candidate.clone());
            }
        }
        due
    }

    /// Forgets `keys` (deleted).
    pub fn forget(&mut self, keys: &[String]) {
        for k in keys {
            self.first_seen.remove(k);
        }
    }

    /// How many candidates are remembered.
    pub fn len(&self) -> usize {
        self.first_seen.len()
    }

    /// Whether no candidate is remembered.
    pub fn is_empty(&self) -> bool {
        self.first_seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{ImageRef, LogPos};

    fn key() -> LeaseKey {
        LeaseKey::parse("acme/t1").unwrap()
    }

    fn pos(epoch: u64, seq: u64) -> LogPos {
        LogPos { epoch, seq }
    }

    fn record(
        epoch: u64,
        floor: u64,
        tip: Option<LogPos>,
        head: Option<(u64, u64)>,
    ) -> LeaseRecord {
        LeaseRecord {
            key: "acme/t1".into(),
            owner: "a".into(),
            epoch,
            expires_at_ms: 0,
            released: false,
            floor,
            head: head.map(|(epoch, seq)| ImageRef {
                epoch,
                seq,
                sha256: "00".repeat(32),
            }),
            tip,
        }
    }

    fn sorted(mut keys: Vec<String>) -> Vec<String> {
        keys.sort();
        keys
    }

    #[test]
    fn segments_of_dead_tenures_off_the_chain_are_orphans_and_the_live_ones_never() {
        // Epoch 2 shipped 1..=4 and a late 5 its tip never named; epoch 3 continued from 4 and
        // shipped 5, 6; a zombie of epoch 2 landed 7; epoch 4 (the live one) has 7 in flight.
        let mut listed: Vec<String> = (1..=5).map(|s| segment_key(&key(), pos(2, s))).collect();
        listed.extend([pos(3, 5), pos(3, 6), pos(2, 7), pos(4, 7)].map(|p| segment_key(&key(), p)));
        let listed = sorted(listed);
        let r = record(4, 0, Some(pos(3, 6)), None);
        assert_eq!(
            orphans(&key(), &listed, &r),
            vec![
                segment_key(&key(), pos(2, 5)),
                segment_key(&key(), pos(2, 7))
            ]
        );
    }

    #[test]
    fn a_lone_image_or_manifest_of_a_dead_tenure_is_an_orphan_unless_the_head_names_it() {
        let listed = sorted(vec![
            image_key(&key(), 2, 1),
            manifest_key(&key(), 2, 1),
            image_key(&key(), 2, 2),
            manifest_key(&key(), 2, 3),
            image_key(&key(), 2, 4),
            image_key(&key(), 3, 1),
        ]);
        let r = record(3, 0, None, Some((2, 4)));
        assert_eq!(
            orphans(&key(), &listed, &r),
            vec![image_key(&key(), 2, 2), manifest_key(&key(), 2, 3)],
            "the head's lone image stays (a restore falls back from it); epoch 3 is live"
        );
    }

    #[test]
    fn nothing_at_or_below_the_floor_nor_outside_the_layout_is_judged() {
        let listed = sorted(vec![
            image_key(&key(), 1, 1),
            segment_key(&key(), pos(1, 9)),
            "acme/t1/e00000002/notes.txt".to_string(),
            "acme/t1/stray.db".to_string(),
        ]);
        let r = record(3, 1, None, None);
        assert!(orphans(&key(), &listed, &r).is_empty());
    }

    #[test]
    fn a_candidate_goes_only_once_seen_for_the_settle_time_and_is_forgotten_when_gone() {
        let mut ages = OrphanAges::new();
        let a = vec!["acme/t1/e00000002/snap-000001.db".to_string()];
        assert!(ages.due(&key(), &a, 1_000, 500).is_empty());
        assert!(ages.due(&key(), &a, 1_499, 500).is_empty());
        assert_eq!(ages.due(&key(), &a, 1_500, 500), a);
        // Gone from a later look (a manifest landed): forgotten, and counted afresh if back.
        assert!(ages.due(&key(), &[], 1_600, 500).is_empty());
        assert!(ages.is_empty());
        assert!(ages.due(&key(), &a, 1_700, 500).is_empty());
        // Another tenant's look does not forget this one's candidates.
        let other = LeaseKey::parse("acme/t2").unwrap();
        assert!(ages.due(&other, &[], 1_800, 500).is_empty());
        assert_eq!(ages.due(&key(), &a, 2_200, 500), a);
        ages.forget(&a);
        assert_eq!(ages.len(), 0);
    }
}
