//! Clients through tenant addresses (`--clients addresses`), the replica's side: every replica
//! runs a transport (`RuntimeConfig::transport`, loopback, one fleet key) and registers two
//! typed messages; a client's write is the command `drill.note` sent to the tenant's address
//! through a random replica, which runs it wherever the tenant is (here, opened here, or
//! forwarded to the holder).
//!
//! ```text
//!  driver ── Send{tenant, key} ──> replica A ── Supervisor::request(addr, Note).idempotency_key(key)
//!                                     │ run here / open here / forward to B (route::decide)
//!                                     ▼
//!            replica B (the holder): Note::handle ── event `key` + drill_notes row
//!                                      (key, B, epoch of B's latest acquire of the tenant, run_at)
//!  driver <── Sent{epoch, run_at, ack_at, ran_on: B} ──┘
//! ```
//!
//! The note is written by the code that ran the command, into a table without a unique key:
//! a command that ran twice leaves two rows (`ran-twice`), and each row names the replica that
//! ran it and the epoch that replica's own lease store answered its acquire with — the checker
//! holds the pair against the tenures the stores granted (`ran-off-holder`,
//! [`crate::address_rules`]), never against the runtime's word.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use leasehold::ledger::{LedgerError, LedgerRead, LedgerTx, NewEvent};
use leasehold_actors::{
    FleetKey, Messages, Supervisor, TenantAddr, TenantMessage, TenantQuery, TransportConfig,
};
use serde::{Deserialize, Serialize};

use crate::acquire_times::AcquireTimes;
use crate::protocol::{self, Answer, NoteRow, now_ms};

/// How long a replica waits for a message's reply: less than the driver's `WRITE_TIMEOUT`, so
/// that the replica's answer (a reply, or the runtime's typed refusal) reaches the driver.
pub const SEND_DEADLINE: Duration = Duration::from_millis(1_600);

/// The fleet key every replica of a run shares (a test key: the transport is on loopback).
const FLEET_KEY: [u8; 32] = *b"leasehold-drill-fleet-key-32byte";

/// What the code that runs a message must know of its own replica.
struct Host {
    /// The replica's name.
    name: String,
    /// Its lease store's answers to its acquires.
    acquired: AcquireTimes,
}

/// This process's [`Host`], set once when the replica starts.
static HOST: OnceLock<Host> = OnceLock::new();

/// Records the replica's name and acquire notes for the messages' handlers.
pub fn set_host(name: &str, acquired: AcquireTimes) {
    let _ = HOST.set(Host {
        name: name.to_owned(),
        acquired,
    });
}

/// The transport of a replica of the run: loopback, any port, the run's fleet key.
pub fn transport() -> Result<TransportConfig, leasehold::Error> {
    let bind = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    Ok(TransportConfig::new(
        bind,
        FleetKey::new(FLEET_KEY.to_vec())?,
    ))
}

/// The messages every replica of the run registers.
pub fn messages() -> Result<Messages, leasehold::Error> {
    Messages::new().command::<Note>()?.query::<Seen>()
}

/// Appends the note `key` to tenant `tenant`; answers where it ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Note {
    /// The tenant (its number: which lease key the handler's epoch is looked up by).
    pub tenant: u32,
    /// The note's key, unique over the run.
    pub key: String,
}

const NOTES_TABLE: &str = "CREATE TABLE IF NOT EXISTS drill_notes (
    key TEXT NOT NULL, replica TEXT NOT NULL, epoch INTEGER NOT NULL, run_at INTEGER NOT NULL)";

impl TenantMessage for Note {
    type Reply = NoteRow;
    const NAME: &'static str = "drill.note";

    fn handle(self, ledger: &mut LedgerTx<'_>) -> Result<NoteRow, LedgerError> {
        let run_at = now_ms();
        let host = HOST
            .get()
            .ok_or_else(|| LedgerError::Sqlite("the drill's host is not set".into()))?;
        let key = protocol::lease_key(self.tenant)
            .map_err(|e| LedgerError::Sqlite(format!("tenant {}: {e}", self.tenant)))?;
        let epoch = host.acquired.latest_epoch(&key).unwrap_or(0);
        let row = NoteRow {
            key: self.key,
            replica: host.name.clone(),
            epoch,
            run_at,
        };
        ledger.insert_event(&NewEvent::new("drill.write", row.key.clone()))?;
        ledger.execute(NOTES_TABLE, [])?;
        ledger.execute(
            "INSERT INTO drill_notes (key, replica, epoch, run_at) VALUES (?1, ?2, ?3, ?4)",
            rusqlite::params![row.key, row.replica, row.epoch as i64, row.run_at as i64],
        )?;
        Ok(row)
    }
}

/// The note of `key`, if the tenant holds one: a read-only query.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Seen {
    /// The note's key.
    pub key: String,
}

impl TenantQuery for Seen {
    type Reply = Option<NoteRow>;
    const NAME: &'static str = "drill.seen";

    fn query(self, ledger: &LedgerRead<'_>) -> Result<Option<NoteRow>, LedgerError> {
        let tables: i64 = ledger.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'drill_notes'",
            [],
            |r| r.get(0),
        )?;
        if tables == 0 {
            return Ok(None);
        }
        let mut stmt = ledger.prepare(
            "SELECT key, replica, epoch, run_at FROM drill_notes WHERE key = ?1 \
             ORDER BY rowid LIMIT 1",
        )?;
        let mut rows = stmt.query([&self.key]).map_err(LedgerError::from)?;
        match rows.next().map_err(LedgerError::from)? {
            Some(row) => Ok(Some(note_of(row)?)),
            None => Ok(None),
        }
    }
}

fn note_of(row: &rusqlite::Row<'_>) -> Result<NoteRow, LedgerError> {
    let epoch: i64 = row.get(2).map_err(LedgerError::from)?;
    let run_at: i64 = row.get(3).map_err(LedgerError::from)?;
    Ok(NoteRow {
        key: row.get(0).map_err(LedgerError::from)?,
        replica: row.get(1).map_err(LedgerError::from)?,
        epoch: u64::try_from(epoch).unwrap_or(0),
        run_at: u64::try_from(run_at).unwrap_or(0),
    })
}

/// Every note of the ledger, oldest first (a run of an open tenant: the final read).
pub fn read_notes(ledger: &mut LedgerTx<'_>) -> Result<Vec<NoteRow>, LedgerError> {
    ledger.execute(NOTES_TABLE, [])?;
    let mut stmt =
        ledger.prepare("SELECT key, replica, epoch, run_at FROM drill_notes ORDER BY rowid")?;
    let mut rows = stmt.query([]).map_err(LedgerError::from)?;
    let mut notes = Vec::new();
    while let Some(row) = rows.next().map_err(LedgerError::from)? {
        notes.push(note_of(row)?);
    }
    Ok(notes)
}

/// Sends the note `key` to `tenant`'s address through `supervisor`.
pub async fn send(supervisor: &Supervisor, addr: TenantAddr, tenant: u32, key: String) -> Answer {
    let note = Note {
        tenant,
        key: key.clone(),
    };
    let sent = supervisor
        .request(&addr, note)
        .idempotency_key(key)
        .deadline(SEND_DEADLINE)
        .await;
    let ack_at = now_ms();
    match sent {
        Ok(row) => Answer::Sent {
            epoch: row.epoch,
            run_at: row.run_at,
            ack_at,
            ran_on: row.replica,
        },
        Err(e) => crate::replica::failed(&e),
    }
}

/// Asks `tenant`'s address for the note `key` through `supervisor`.
pub async fn ask(supervisor: &Supervisor, addr: TenantAddr, key: String) -> Answer {
    let sent_at = now_ms();
    let seen = supervisor.ask(&addr, Seen { key }, SEND_DEADLINE).await;
    let answered_at = now_ms();
    match seen {
        Ok(note) => Answer::Seen {
            note,
            sent_at,
            answered_at,
        },
        Err(e) => crate::replica::failed(&e),
    }
}

/// The `acquired` line's reporter: the tenant's number of each key of the run.
pub fn reporter(
    out: crate::replica::Output,
    tenants: std::collections::HashMap<String, u32>,
) -> crate::acquire_times::Reporter {
    Arc::new(move |key, epoch, at| {
        if let Some(&tenant) = tenants.get(key.as_str()) {
            out.send(&protocol::Line::Acquired { tenant, epoch, at });
        }
    })
}
