//! Events: what host code appends ([`NewEvent`], built with a builder) and what the ledger
//! stores and reads back ([`Event`]), with the mapping from an `events` row.

use super::LedgerError;

/// An event to append: build it with [`NewEvent::new`] and the builder methods.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// Who caused it; `"host"` unless set.
    pub actor: String,
    /// What happened (non-empty).
    pub kind: String,
    /// What it is about, if anything.
    pub subject: Option<String>,
    /// Its data, stored as JSON text.
    pub payload: serde_json::Value,
    /// The idempotency key (non-empty): a second event with the same key is not stored.
    pub idem_key: String,
    /// The run (call) that appended it, if the host tracks one.
    pub run_id: Option<String>,
}

impl NewEvent {
    /// An event of `kind` under `idem_key`, by `"host"`, with a `null` payload.
    pub fn new(kind: impl Into<String>, idem_key: impl Into<String>) -> Self {
        Self {
            actor: "host".to_string(),
            kind: kind.into(),
            subject: None,
            payload: serde_json::Value::Null,
            idem_key: idem_key.into(),
            run_id: None,
        }
    }

    /// Sets who caused it.
    pub fn actor(mut self, actor: impl Into<String>) -> Self {
        self.actor = actor.into();
        self
    }

    /// Sets what it is about.
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// Sets its data.
    pub fn payload(mut self, payload: serde_json::Value) -> Self {
        self.payload = payload;
        self
    }

    /// Sets the run that appended it.
    pub fn run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }
}

/// A stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Its position in the ledger, from 1, never reused.
    pub seq: i64,
    /// Wall-clock milliseconds since the Unix epoch when it was appended.
    pub ts_ms: i64,
    /// Who caused it.
    pub actor: String,
    /// What happened.
    pub kind: String,
    /// What it is about, if anything.
    pub subject: Option<String>,
    /// Its data.
    pub payload: serde_json::Value,
    /// Its idempotency key.
    pub idem_key: String,
    /// The run that appended it, if any.
    pub run_id: Option<String>,
}

/// The raw columns of one `events` row; the payload is parsed by [`event_from_row`].
pub(super) type EventRow = (
    i64,
    i64,
    String,
    String,
    Option<String>,
    String,
    String,
    Option<String>,
);

pub(super) fn read_event_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<EventRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
    ))
}

pub(super) fn event_from_row(row: EventRow) -> Result<Event, LedgerError> {
    let (seq, ts_ms, actor, kind, subject, payload, idem_key, run_id) = row;
    let payload = serde_json::from_str(&payload).map_err(|e| {
        LedgerError::Sqlite(format!("events.payload of seq {seq} is not JSON: {e}"))
    })?;
    Ok(Event {
        seq,
        ts_ms,
        actor,
        kind,
        subject,
        payload,
        idem_key,
        run_id,
    })
}
