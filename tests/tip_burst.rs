//! Many tenants shipping at once on a slow but healthy lease store (docs/guarantees.md, "The
//! log tip" and "When shipping fails"): every tip move answers far inside `store_deadline`, so
//! no write may be answered `Unshipped` and no tenure may end, however many tenants ship in the
//! same moment. Seen failing before its fix (docs/testing.md, "The change log under review"):
//! a replica's tip moves queued one after another behind a constant wait.
//!
//! One replica, `store_deadline` 1 s, 60 tenants writing once at the same moment, every tip
//! move taking 150 ms: on a store that moves one tip per call (the test kit's wrapper over
//! SQLite), and on PostgreSQL with a trigger that makes every tip-moving statement take 150 ms
//! on the server (`scripts/with-servers.sh` sets `LEASEHOLD_TEST_PG_URL`).

mod common;

use std::time::{Duration, Instant};

use common::*;
use futures::future::join_all;
use leasehold::ledger::NewEvent;
use leasehold::testkit::{FaultyLeaseStore, LeaseOp};
use leasehold::{Error, TenantId};
use leasehold_actors::{Supervisor, TenantRef};

/// How many tenants write at once.
const TENANTS: usize = 60;

/// How long every tip move takes.
const PER_MOVE: Duration = Duration::from_millis(150);

/// Makes each of the next `n` calls of `move_tip` take `delay` (each call its own).
fn slow_tip_moves(store: FaultyLeaseStore, n: usize, delay: Duration) {
    let next = store.clone();
    store.before_next(LeaseOp::MoveTip, move || async move {
        if n > 1 {
            slow_tip_moves(next, n - 1, delay);
        }
        tokio::time::sleep(delay).await;
    });
}

/// Opens `TENANTS` tenants on `sup`.
async fn open_all(sup: &Supervisor) -> Vec<TenantRef> {
    let mut tenants = Vec::with_capacity(TENANTS);
    for i in 0..TENANTS {
        let tenant = TenantId::new(format!("burst-{i}")).unwrap();
        tenants.push(sup.open(&org(), &tenant).await.unwrap());
    }
    tenants
}

/// Every tenant writes once, all at the same moment: the writes answered `Unshipped`.
async fn burst(tenants: &[TenantRef]) -> Vec<Error> {
    let writes = tenants.iter().map(|t| {
        let event = NewEvent::new("test", "burst");
        t.run(move |l| l.insert_event(&event).map(|_| ()))
    });
    let started = Instant::now();
    let answers = within(60_000, "the burst", join_all(writes)).await;
    eprintln!("the burst took {:?}", started.elapsed());
    answers.into_iter().filter_map(Result::err).collect()
}

#[actix_rt::test]
async fn shipped_a_burst_of_tenants_on_a_store_moving_one_tip_per_call_is_all_acknowledged() {
    let fleet = Fleet::real_time(Duration::from_secs(30), Duration::from_secs(5)).await;
    // SQLite batches; this test is of a store that does not.
    fleet.leases.one_move_per_call();
    let a = fleet.replica_with("a", "a", |c| {
        c.store_deadline = Duration::from_secs(1);
        c.arbiters = 2;
    });
    let tenants = open_all(&a.sup).await;
    slow_tip_moves(fleet.leases.clone(), 4 * TENANTS, PER_MOVE);
    let refused = burst(&tenants).await;
    assert!(
        refused.is_empty(),
        "{} of {TENANTS} writes refused on a healthy store: {:?}",
        refused.len(),
        refused.first()
    );
}

#[cfg(feature = "postgres")]
#[actix_rt::test]
async fn shipped_a_burst_of_tenants_on_a_slow_postgres_is_all_acknowledged() {
    use leasehold::durable::dir::DirStore;
    use leasehold::lease::postgres::PostgresLeaseStore;
    use leasehold_actors::RuntimeConfig;
    let url = std::env::var("LEASEHOLD_TEST_PG_URL").unwrap_or_else(|_| {
        panic!("LEASEHOLD_TEST_PG_URL is not set: run through scripts/with-servers.sh")
    });
    let table = format!(
        "burst_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let leases = PostgresLeaseStore::connect(&url, &table).await.unwrap();
    // Every statement that moves a tip takes 150 ms on the server (a slow disk, a busy server):
    // far inside the deadline.
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let _driver = tokio::spawn(connection);
    admin
        .batch_execute(&format!(
            "CREATE OR REPLACE FUNCTION leasehold_test_slow_tip() RETURNS trigger
                 LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.15); RETURN NULL; END $$;
             CREATE TRIGGER slow_tip BEFORE UPDATE OF tip_epoch, tip_seq ON \"{table}\"
                 FOR EACH STATEMENT EXECUTE FUNCTION leasehold_test_slow_tip();"
        ))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let durable = DirStore::open(&dir.path().join("durable")).unwrap();
    let mut cfg = RuntimeConfig::new(
        leasehold::ReplicaId::new("a").unwrap(),
        dir.path().join("node"),
        std::sync::Arc::new(leases),
        std::sync::Arc::new(durable),
    );
    cfg.store_deadline = Duration::from_secs(1);
    cfg.snapshot_every = None;
    cfg.arbiters = 2;
    let sup = Supervisor::start(cfg).unwrap();
    let tenants = open_all(&sup).await;
    let refused = burst(&tenants).await;
    assert!(
        refused.is_empty(),
        "{} of {TENANTS} writes refused on a healthy server: {:?}",
        refused.len(),
        refused.first()
    );
    sup.close().await.unwrap();
}
