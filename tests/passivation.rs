//! Passivation (docs/guarantees.md, promise 12; docs/architecture.md, "Passivation"): a tenant
//! idle for `passivate_after`, or the least recently used idle one when an open meets
//! `max_open`, is let go — its log settled (or its final image published), its lease released,
//! its local copy, connection and actor gone — and the host does not notice: a handle it kept
//! reopens the tenant at its next call, a message to its address reopens it. Nothing
//! acknowledged is lost on any durability mode; the oracle is another replica opening the
//! tenant from the stores, never the runtime's word.
//!
//! `passivation/races.rs` pins passivation against a handoff, a forget, an abandon and a
//! concurrent reopen, each at the moment the passivation's flush is under way;
//! `passivation/ending.rs` an open that meets a passivation at its very end;
//! `passivation/eviction.rs` an eviction at `max_open` whose victim's passivation fails.

mod common;
#[path = "passivation/ending.rs"]
mod ending;
#[path = "passivation/eviction.rs"]
mod eviction;
#[path = "passivation/races.rs"]
mod races;

use std::time::Duration;

use common::*;
use leasehold::LeaseStore;
use leasehold::ledger::{LedgerError, LedgerTx};
use leasehold_actors::{
    Breakage, Durability, Event, Messages, PassivationReason, RuntimeConfig, TenantAddr,
    TenantMessage, TenantRef, TenantStatus,
};
use serde::{Deserialize, Serialize};

/// How long the replicas of these tests let a tenant idle (on their manual clocks): shorter
/// than a lease's term, so that time passes in steps with a renewal after each.
pub const AFTER: Duration = Duration::from_secs(5);

/// The three durability modes, each with nothing shipped or imaged by a timer (`Async` ships
/// only at its flush within a test): a passivation that forgot to settle would lose writes.
pub fn modes() -> [(&'static str, Durability); 3] {
    [
        ("Shipped", Durability::Shipped),
        (
            "Async",
            Durability::Async {
                every: Duration::from_secs(3_600),
            },
        ),
        ("Images", Durability::Images),
    ]
}

/// A replica that passivates after [`AFTER`] idle, with `durability`, `max_open` and messages.
pub fn passivating(
    fleet: &Fleet,
    id: &str,
    durability: Durability,
    tweak: impl FnOnce(&mut RuntimeConfig),
) -> Replica {
    fleet.replica_with(id, id, |c| {
        c.durability = durability;
        c.passivate_after = Some(AFTER);
        c.messages = Messages::new().command::<Note>().unwrap();
        tweak(c);
    })
}

/// A command: one event with the given key; answers how many events the tenant holds after it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Note {
    pub key: String,
}

impl TenantMessage for Note {
    type Reply = u64;
    const NAME: &'static str = "test.note";

    fn handle(self, ledger: &mut LedgerTx<'_>) -> Result<u64, LedgerError> {
        let event = leasehold::ledger::NewEvent::new("test", self.key);
        ledger.insert_event(&event)?;
        ledger.event_count()
    }
}

pub fn addr() -> TenantAddr {
    TenantAddr::new(org(), tenant())
}

/// Moves every clock on by `by`, in steps each followed by `r`'s renewal (a manual fleet renews
/// only when asked; its leases hold 8 s after each).
pub async fn pass(fleet: &Fleet, r: &Replica, by: Duration) {
    let step = Duration::from_secs(4);
    let mut left = by;
    while !left.is_zero() {
        let now = left.min(step);
        fleet.advance(now);
        let _ = r.sup.renew_now().await;
        left -= now;
    }
}

/// Moves every clock past `passivate_after` and runs `r`'s idle check; answers how many began.
pub async fn idle_out(fleet: &Fleet, r: &Replica) -> usize {
    pass(fleet, r, AFTER + Duration::from_secs(1)).await;
    r.sup.passivate_idle_now().await.unwrap()
}

/// Waits until the tenant of `t`'s tenure is passivated.
pub async fn until_passivated(t: &TenantRef) {
    until_status(t, TenantStatus::Passivated).await;
}

/// What another replica restores of the main tenant: its event keys, read from the stores.
pub async fn restored_elsewhere(fleet: &Fleet, id: &str) -> Vec<String> {
    let other = fleet.replica(id);
    let t = within(5_000, "the open elsewhere", other.open()).await;
    let keys = keys_of(&t).await;
    t.handoff().await.unwrap();
    keys
}

#[actix_rt::test]
async fn promise12_an_idle_tenant_is_let_go_with_every_acknowledged_write_on_every_mode() {
    for (name, durability) in modes() {
        let fleet = Fleet::new().await;
        let a = passivating(&fleet, "a", durability, |_| {});
        let t = a.open().await;
        for i in 0..3 {
            insert(&t, &format!("{name}-{i}")).await.unwrap();
        }
        assert_eq!(idle_out(&fleet, &a).await, 1, "{name}");
        until_passivated(&t).await;
        let record = fleet.leases.inner().read(&key()).await.unwrap().unwrap();
        assert!(record.released, "{name}: the lease is handed back");
        assert!(!a.ledger_file().exists(), "{name}: the local copy is gone");
        assert!(
            a.saw(|e| matches!(
                e,
                Event::Passivated {
                    reason: PassivationReason::Idle,
                    ..
                }
            ))
            .await
        );
        assert!(a.flushed(&key()).await, "{name}: released flushed");
        // The oracle: another replica restores from the stores alone.
        let keys = restored_elsewhere(&fleet, "b").await;
        assert_eq!(keys, [0, 1, 2].map(|i| format!("{name}-{i}")), "{name}");
    }
}

#[actix_rt::test]
async fn fault_switch_a_passivation_that_does_not_settle_loses_acknowledged_writes() {
    // The oracle above can fail: with the switch, Async and Images lose what they acknowledged.
    for (name, durability) in modes().into_iter().skip(1) {
        let fleet = Fleet::new().await;
        let a = passivating(&fleet, "a", durability, |c| {
            c.breakage = Breakage {
                passivate_unsettled: true,
                ..Breakage::default()
            }
        });
        let t = a.open().await;
        insert(&t, "acked").await.unwrap();
        assert_eq!(idle_out(&fleet, &a).await, 1);
        until_passivated(&t).await;
        let keys = restored_elsewhere(&fleet, "b").await;
        assert!(
            keys.is_empty(),
            "{name}: the switch must lose the write: {keys:?}"
        );
    }
}

#[actix_rt::test]
async fn promise12_a_handle_the_host_kept_reopens_a_passivated_tenant_and_runs_there() {
    for (name, durability) in modes() {
        let fleet = Fleet::new().await;
        let a = passivating(&fleet, "a", durability, |_| {});
        let t = a.open().await;
        let clone = t.clone();
        insert(&t, "before").await.unwrap();
        let first = t.epoch();
        idle_out(&fleet, &a).await;
        until_passivated(&t).await;
        assert_eq!(t.status().await, TenantStatus::Passivated, "{name}");
        // The host does not notice: the next call reopens the tenant here and runs.
        insert(&t, "after").await.unwrap();
        assert!(t.epoch() > first, "{name}: bound to the new tenure");
        assert_eq!(clone.epoch(), t.epoch(), "{name}: every clone follows");
        assert_eq!(keys_of(&clone).await, ["before", "after"], "{name}");
        assert!(t.is_open().await);
        assert!(
            a.saw(|e| matches!(e, Event::Reactivated { passivated_epoch, .. }
                if *passivated_epoch == first))
                .await,
            "{name}"
        );
        // The supervisor's own table has the new tenure.
        let found = a.sup.tenant(&org(), &tenant()).await.unwrap();
        assert_eq!(found.epoch(), t.epoch());
        t.handoff().await.unwrap();
        assert_eq!(restored_elsewhere(&fleet, "b").await, ["before", "after"]);
    }
}

#[actix_rt::test]
async fn promise12_every_verb_of_a_kept_handle_finds_its_passivated_tenant() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Shipped, |_| {});
    let t = a.open().await;
    insert(&t, "one").await.unwrap();
    // admit: reopens; the ticket belongs to the new tenure.
    idle_out(&fleet, &a).await;
    until_passivated(&t).await;
    let ticket = t.admit().await.unwrap();
    assert_eq!(ticket.tenant().epoch(), t.epoch());
    ticket.run(|l| l.event_count()).await.unwrap();
    drop(ticket);
    let _ = t.status().await; // the retirement is handled (activity) before time passes
    // snapshot: reopens (nothing new since the restore: the head is answered).
    idle_out(&fleet, &a).await;
    until_passivated(&t).await;
    let before = t.epoch();
    t.snapshot().await.unwrap();
    assert!(t.epoch() > before);
    // handoff of a passivated tenure: it is flushed and released already.
    idle_out(&fleet, &a).await;
    until_passivated(&t).await;
    let epoch = t.epoch();
    t.handoff().await.unwrap();
    assert_eq!(t.epoch(), epoch, "a handoff reopens nothing");
    // abandon: a no-op; forget: reopens and erases.
    t.abandon().await.unwrap();
    t.forget().await.unwrap();
    let record = fleet.leases.inner().read(&key()).await.unwrap().unwrap();
    assert!(record.floor > epoch, "forgotten on a reopened tenure");
    assert!(fleet.stored_of_tenant().await.is_empty());
    assert_eq!(t.status().await, TenantStatus::Forgotten);
    assert!(
        insert(&t, "late").await.unwrap_err().is_fenced(),
        "a forgotten tenure is not reopened"
    );
}

#[actix_rt::test]
async fn promise12_a_handle_of_a_tenure_that_ended_otherwise_keeps_answering_fenced() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Shipped, |_| {});
    let handed = a.open().await;
    insert(&handed, "x").await.unwrap();
    handed.handoff().await.unwrap();
    // Nobody holds the tenant now: a re-resolving handle would reopen it. It must not.
    let refused = insert(&handed, "after handoff").await.unwrap_err();
    assert!(refused.is_fenced(), "{refused:?}");
    assert_eq!(handed.status().await, TenantStatus::Released);
    let abandoned = a.open().await;
    abandoned.abandon().await.unwrap();
    assert!(
        insert(&abandoned, "after abandon")
            .await
            .unwrap_err()
            .is_fenced()
    );
    assert_eq!(restored_elsewhere(&fleet, "b").await, ["x"]);
}

#[actix_rt::test]
async fn promise12_a_message_to_a_passivated_tenants_address_reopens_it() {
    for (name, durability) in modes() {
        let fleet = Fleet::new().await;
        let a = passivating(&fleet, "a", durability, |_| {});
        let n = a
            .sup
            .send(&addr(), Note { key: "m1".into() })
            .await
            .unwrap();
        assert_eq!(n, 1, "{name}");
        let t = a.sup.tenant(&org(), &tenant()).await.unwrap();
        idle_out(&fleet, &a).await;
        until_passivated(&t).await;
        let n = a
            .sup
            .send(&addr(), Note { key: "m2".into() })
            .await
            .unwrap();
        assert_eq!(n, 2, "{name}: reopened with everything acknowledged");
        assert!(
            a.saw(|e| matches!(e, Event::Reactivated { .. })).await,
            "{name}"
        );
    }
}

#[actix_rt::test]
async fn promise12_a_tenant_used_since_or_holding_a_ticket_is_not_idle() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Shipped, |_| {});
    let t = a.open().await;
    pass(&fleet, &a, AFTER - Duration::from_secs(1)).await;
    insert(&t, "recent").await.unwrap();
    pass(&fleet, &a, Duration::from_secs(2)).await;
    assert_eq!(a.sup.passivate_idle_now().await.unwrap(), 0, "used 2 s ago");
    let ticket = t.admit().await.unwrap();
    pass(&fleet, &a, AFTER * 2).await;
    assert_eq!(
        a.sup.passivate_idle_now().await.unwrap(),
        0,
        "a live ticket"
    );
    drop(ticket);
    // The retirement is activity too: idle only a whole passivate_after later.
    eventually(2_000, "the ticket to retire", || async {
        t.status().await == TenantStatus::Serving
    })
    .await;
    assert_eq!(a.sup.passivate_idle_now().await.unwrap(), 0);
    assert_eq!(idle_out(&fleet, &a).await, 1);
    until_passivated(&t).await;
}

#[actix_rt::test]
async fn promise12_passivation_off_keeps_tenants_open_and_max_open_refuses() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Shipped, |c| {
        c.passivate_after = None;
        c.max_open = 1;
    });
    let t = a.open().await;
    pass(&fleet, &a, AFTER * 10).await;
    assert_eq!(a.sup.passivate_idle_now().await.unwrap(), 0);
    let refused = a.sup.open(&org(), &tenant2()).await.unwrap_err();
    assert_eq!(refused.code(), "LEASEHOLD_OPEN_LIMIT");
    assert!(t.is_open().await);
}

#[actix_rt::test]
async fn promise12_an_open_at_max_open_passivates_the_least_recently_used_idle_tenant() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Shipped, |c| c.max_open = 2);
    let t1 = a.open().await;
    insert(&t1, "one").await.unwrap();
    fleet.advance(Duration::from_secs(1));
    let t2 = a.open2().await;
    fleet.advance(Duration::from_secs(1));
    insert(&t1, "one again").await.unwrap(); // t2 is now the least recently used
    fleet.advance(Duration::from_secs(1));
    let third = derive_third();
    let t3 = within(5_000, "the open at max_open", a.sup.open(&org(), &third))
        .await
        .unwrap();
    assert_eq!(t2.status().await, TenantStatus::Passivated, "the LRU went");
    assert!(t1.is_open().await && t3.is_open().await);
    assert!(
        a.saw(|e| matches!(
            e,
            Event::Passivated {
                reason: PassivationReason::Evicted,
                ..
            }
        ))
        .await
    );
    // None idle (each holds a ticket): the open is refused as before.
    let (k1, k3) = (t1.admit().await.unwrap(), t3.admit().await.unwrap());
    let refused = a.sup.open(&org(), &tenant2()).await.unwrap_err();
    assert_eq!(refused.code(), "LEASEHOLD_OPEN_LIMIT");
    drop((k1, k3));
    // The evicted tenant's kept handle reopens it, evicting the next least recently used.
    insert(&t2, "two").await.unwrap();
    assert_eq!(keys_of(&t2).await, ["two"]);
}

/// A third tenant.
pub fn derive_third() -> leasehold::TenantId {
    leasehold::derive_tenant_id(&[9u8; 32], "https://idp.example/acme", "third").unwrap()
}
