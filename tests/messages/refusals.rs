//! Bad input to an address (docs/guarantees.md, promise 11): a message the replica does not
//! register, a body over the message limit, a query that tries to write, a bad idempotency
//! key — each gets its typed error and stable code, nothing runs, nothing is written, and an
//! unknown message does not even open its tenant.

use leasehold::Error;
use leasehold::LeaseStore;
use leasehold::codec::MESSAGE_LIMIT;

use super::common::*;
use super::*;

/// A command no replica registers.
#[derive(Debug, Serialize, Deserialize)]
struct Unregistered;

impl TenantMessage for Unregistered {
    type Reply = ();
    const NAME: &'static str = "bank.close_account";
    fn handle(self, _: &mut LedgerTx<'_>) -> Result<(), LedgerError> {
        Ok(())
    }
}

/// A query that tries to write.
#[derive(Debug, Serialize, Deserialize)]
struct SneakyQuery;

impl TenantQuery for SneakyQuery {
    type Reply = usize;
    const NAME: &'static str = "test.sneaky";
    fn query(self, ledger: &LedgerRead<'_>) -> Result<usize, LedgerError> {
        let mut stmt = ledger.prepare("CREATE TABLE stolen (x)")?;
        stmt.raw_execute()
            .map_err(|e| LedgerError::Sqlite(e.to_string()))
    }
}

#[actix_rt::test]
async fn promise11_an_unknown_message_is_refused_before_its_tenant_is_opened() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    let refused = a.sup.send(&addr(), Unregistered).await;
    assert!(
        matches!(refused, Err(Error::UnknownMessage { ref name, version: 1 }) if name == "bank.close_account"),
        "{refused:?}"
    );
    assert_eq!(refused.unwrap_err().code(), "LEASEHOLD_UNKNOWN_MESSAGE");
    let record = fleet.leases.inner().read(&key()).await.unwrap();
    assert!(record.is_none(), "no lease was taken: {record:?}");
}

#[actix_rt::test]
async fn promise11_a_body_over_the_message_limit_is_refused_and_nothing_runs() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    let huge = Deposit {
        account: "x".repeat(MESSAGE_LIMIT),
        cents: 1,
    };
    let refused = a.sup.send(&addr(), huge).await;
    assert!(
        matches!(refused, Err(Error::TooLarge { limit, .. }) if limit == MESSAGE_LIMIT as u64),
        "{refused:?}"
    );
    assert!(fleet.leases.inner().read(&key()).await.unwrap().is_none());
}

#[actix_rt::test]
async fn promise11_a_query_cannot_write_and_a_bad_key_is_refused() {
    let fleet = Fleet::new().await;
    let messages = || bank_messages().query::<SneakyQuery>().unwrap();
    let a = fleet.replica_with("a", "a", |c| c.messages = messages());
    assert_eq!(a.sup.send(&addr(), deposit("judy", 3)).await, Ok(3));
    let refused = a.sup.send(&addr(), SneakyQuery).await;
    assert!(
        matches!(refused, Err(Error::Ledger(LedgerError::Refused(_)))),
        "{refused:?}"
    );
    let long_key = "k".repeat(leasehold_actors::message::MAX_IDEMPOTENCY_KEY + 1);
    for key in [String::new(), long_key] {
        let refused = a
            .sup
            .request(&addr(), deposit("judy", 3))
            .idempotency_key(key)
            .await;
        assert!(
            matches!(refused, Err(Error::BadMessage { .. })),
            "{refused:?}"
        );
    }
    assert_eq!(
        a.sup.send(&addr(), balance_of("judy")).await,
        Ok(3),
        "nothing ran"
    );
}

#[test]
fn promise11_a_name_registered_twice_is_refused_before_the_replica_starts() {
    let twice = bank_messages().command::<Deposit>();
    assert!(
        matches!(twice, Err(Error::InvalidOption { name: "messages", ref reason }) if reason.contains("bank.deposit")),
        "{twice:?}"
    );
}
