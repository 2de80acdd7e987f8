//! `forgotten-local-file-left` at the end: a state root keeps a forgotten tenant's directory.
//! The directory is judged by the tenure that wrote it: the newest the history names on that
//! root, or its own marker when that is newer (an open the driver never saw succeed — cut by a
//! close, a kill or a failed start after it marked its files — writes a marker above the floor;
//! docs/guarantees.md, "A local copy of a tenant forgotten elsewhere").

use super::{Report, Tolerance, Violation, forgotten_at};
use crate::finale::Final;
use crate::history::{Record, Tenure};

pub(super) fn check_local_files(
    rec: &Record,
    fin: &Final,
    tolerance: Tolerance,
    report: &mut Report,
) {
    for &(slot, tenant, ref files) in &fin.local_dirs {
        let floor = fin.floors.get(&tenant).copied().unwrap_or(0);
        if floor == 0 {
            continue;
        }
        let marker = fin.local_markers.get(&(slot, tenant)).copied();
        if marker.is_some_and(|epoch| epoch > floor) {
            // Written by an open above the floor, after the forget: not the forgotten copy.
            continue;
        }
        let on_this_root = |t: &Tenure| t.grants.iter().any(|g| g.slot == Some(slot));
        let last = rec
            .tenures
            .range((tenant, 0)..=(tenant, u64::MAX))
            .filter(|(_, t)| on_this_root(t))
            .map(|(&(_, epoch), t)| (epoch, t))
            .max_by_key(|&(epoch, _)| epoch);
        let Some((epoch, tenure)) = last else {
            report.unattributed_local_dirs += 1;
            continue;
        };
        if epoch > floor {
            continue;
        }
        // The forgetting tenure's own root, or a tenure that handed off, must have no copy;
        // a lost tenure keeps its copy until the next open there (the known gap).
        let forgetter = rec.tenures.get(&(tenant, floor)).is_some_and(on_this_root);
        let stale = !forgetter && !tenure.graceful();
        let violation = Violation {
            rule: "forgotten-local-file-left",
            tenant: Some(tenant),
            at: forgotten_at(rec, tenant, floor),
            detail: format!(
                "the state root of replica-{} keeps t{tenant}'s directory {files:?} (marker \
                 {marker:?}); its last tenure there was epoch {epoch} ({}), at or below the \
                 floor {floor}",
                slot + 1,
                if stale {
                    "lost, not handed off"
                } else {
                    "handed off or forgetting"
                }
            ),
        };
        if stale && tolerance.stale_local_copy {
            report.tolerated.push(violation);
        } else {
            report.violations.push(violation);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Grant;

    /// Replica-2 (slot 1) held t3 at epoch 1 and forgot it (floor 1); at the end its root keeps
    /// t3's directory, whose marker is `marker`.
    fn judge(marker: Option<u64>) -> Report {
        let mut rec = Record::default();
        rec.tenures.insert(
            (3, 1),
            Tenure {
                grants: vec![Grant {
                    replica: "replica-2#1".into(),
                    slot: Some(1),
                    acquired_hi: 10,
                }],
                forgotten: Some(1),
                ..Tenure::default()
            },
        );
        let mut fin = Final::default();
        fin.floors.insert(3, 1);
        fin.local_dirs
            .push((1, 3, vec!["ledger.db".into(), "tenure".into()]));
        if let Some(epoch) = marker {
            fin.local_markers.insert((1, 3), epoch);
        }
        let mut report = Report::default();
        check_local_files(&rec, &fin, Tolerance::default(), &mut report);
        report
    }

    #[test]
    fn a_directory_an_open_above_the_floor_wrote_is_no_forgotten_copy() {
        // An open of epoch 2 after the forget that the driver never saw succeed (no grant).
        let report = judge(Some(2));
        assert!(report.violations.is_empty(), "{:?}", report.violations);
    }

    #[test]
    fn a_directory_marked_at_or_below_the_floor_is_a_forgotten_copy() {
        for marker in [Some(1), None] {
            let report = judge(marker);
            let rules: Vec<_> = report.violations.iter().map(|v| v.rule).collect();
            assert_eq!(rules, ["forgotten-local-file-left"], "marker {marker:?}");
        }
    }
}
