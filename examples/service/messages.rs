//! The service's typed messages: what a request becomes before it goes to a tenant's address.
//! Every replica of the fleet registers the same set ([`messages`]), so any replica can run a
//! message another one forwards.

use leasehold::ledger::{LedgerError, LedgerRead, LedgerTx};
use leasehold_actors::{Error, Messages, NewEvent, TenantMessage, TenantQuery};
use serde::{Deserialize, Serialize};

/// Appends one event; answers its position in the ledger.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppendEvent {
    /// What happened (`order.placed`).
    pub kind: String,
    /// What it happened to, if anything.
    pub subject: Option<String>,
    /// The payload, as JSON text (the message codec carries no free-form JSON values).
    pub payload: String,
    /// The event's own idempotency key: the request's `Idempotency-Key`.
    pub key: String,
}

/// Where an appended event sits.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Appended {
    /// Its sequence number; `None` when an event with the same key was already there.
    pub seq: Option<i64>,
}

impl TenantMessage for AppendEvent {
    type Reply = Appended;
    const NAME: &'static str = "service.append_event";

    fn handle(self, ledger: &mut LedgerTx<'_>) -> Result<Appended, LedgerError> {
        let payload = serde_json::from_str(&self.payload)
            .map_err(|e| LedgerError::Host(format!("the payload is not JSON: {e}")))?;
        let mut event = NewEvent::new(self.kind, self.key).payload(payload);
        if let Some(subject) = self.subject {
            event = event.subject(subject);
        }
        Ok(Appended {
            seq: ledger.insert_event(&event)?,
        })
    }
}

/// Reads events after a position (a query: it runs beside the writes, never holds them up).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadEvents {
    /// Events after this sequence number.
    pub after: i64,
    /// At most this many.
    pub limit: u32,
}

/// One event as the service shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventView {
    /// Its sequence number.
    pub seq: i64,
    /// When it was appended (milliseconds since the Unix epoch).
    pub ts_ms: i64,
    /// What happened.
    pub kind: String,
    /// What it happened to.
    pub subject: Option<String>,
    /// Its payload, as JSON text.
    pub payload: String,
    /// Its idempotency key.
    pub key: String,
}

impl TenantQuery for ReadEvents {
    type Reply = Vec<EventView>;
    const NAME: &'static str = "service.read_events";

    fn query(self, ledger: &LedgerRead<'_>) -> Result<Vec<EventView>, LedgerError> {
        let events = ledger.events_after(self.after, self.limit as usize)?;
        Ok(events
            .into_iter()
            .map(|e| EventView {
                seq: e.seq,
                ts_ms: e.ts_ms,
                kind: e.kind,
                subject: e.subject,
                payload: e.payload.to_string(),
                key: e.idem_key,
            })
            .collect())
    }
}

/// The named query of the service: how many events of each kind the tenant holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CountByKind;

impl TenantQuery for CountByKind {
    type Reply = Vec<(String, u64)>;
    const NAME: &'static str = "service.count_by_kind";

    fn query(self, ledger: &LedgerRead<'_>) -> Result<Vec<(String, u64)>, LedgerError> {
        let mut statement =
            ledger.prepare("SELECT kind, COUNT(*) FROM events GROUP BY kind ORDER BY kind")?;
        let rows =
            statement.query_map([], |row| Ok((row.get(0)?, row.get::<_, i64>(1)? as u64)))?;
        let mut counts = Vec::new();
        for row in rows {
            counts.push(row?);
        }
        Ok(counts)
    }
}

/// The messages every replica of the service registers.
pub fn messages() -> Result<Messages, Error> {
    Messages::new()
        .command::<AppendEvent>()?
        .query::<ReadEvents>()?
        .query::<CountByKind>()
}
