//! The replica's stdout: [`Output`], one writer thread printing one JSON line per message, and
//! [`Forwarder`], the observer that turns the runtime's events about tenants into lines.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::mpsc;
use std::time::Duration;

use leasehold_actors::{Event, Observer};

use crate::protocol::Line;

/// What the writer thread takes.
enum Out {
    /// One line to print.
    Line(String),
    /// Answer when every line before it is printed.
    Flush(mpsc::SyncSender<()>),
}

/// The replica's stdout: one writer thread, one line per message, flushed at once.
#[derive(Clone)]
pub struct Output(mpsc::Sender<Out>);

impl Output {
    /// Starts the writer thread.
    pub fn start() -> Self {
        let (tx, rx) = mpsc::channel::<Out>();
        std::thread::spawn(move || {
            let stdout = std::io::stdout();
            for item in rx {
                match item {
                    Out::Line(text) => {
                        let mut lock = stdout.lock();
                        if writeln!(lock, "{text}")
                            .and_then(|()| lock.flush())
                            .is_err()
                        {
                            return;
                        }
                    }
                    Out::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
        Self(tx)
    }

    /// Prints `line` (from the writer thread).
    pub fn send(&self, line: &Line) {
        match serde_json::to_string(line) {
            Ok(text) => {
                let _ = self.0.send(Out::Line(text));
            }
            Err(e) => eprintln!("drill replica: cannot encode a line: {e}"),
        }
    }

    /// Waits (at most two seconds) until every line sent so far is printed.
    pub fn flush(&self) {
        let (tx, rx) = mpsc::sync_channel(1);
        if self.0.send(Out::Flush(tx)).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(2));
        }
    }
}

/// Forwards the runtime's events about tenants to stdout.
pub struct Forwarder {
    /// Where lines go.
    pub out: Output,
    /// Lease key → tenant number.
    pub tenants: HashMap<String, u32>,
}

impl Observer for Forwarder {
    fn on_event(&self, event: &Event) {
        let tenant = |key: &str| self.tenants.get(key).copied();
        let line = match event {
            Event::Opened { key, epoch, .. } => tenant(key).map(|tenant| Line::Opened {
                tenant,
                epoch: *epoch,
            }),
            Event::SnapshotPublished {
                key,
                image,
                taken_at_ms,
            } => tenant(key).map(|tenant| Line::Published {
                tenant,
                epoch: image.epoch,
                seq: image.seq,
                taken_at: *taken_at_ms,
            }),
            Event::Released {
                key,
                epoch,
                flushed,
            } => tenant(key).map(|tenant| Line::Released {
                tenant,
                epoch: *epoch,
                flushed: *flushed,
            }),
            Event::Lost { key, epoch } => tenant(key).map(|tenant| Line::Lost {
                tenant,
                epoch: *epoch,
            }),
            Event::Forgotten { key, floor } => tenant(key).map(|tenant| Line::Forgotten {
                tenant,
                floor: *floor,
            }),
            Event::Swept { key, objects } => tenant(key).map(|tenant| Line::Swept {
                tenant,
                objects: Some(*objects),
            }),
            Event::SweepFailed { key, .. } => tenant(key).map(|tenant| Line::Swept {
                tenant,
                objects: None,
            }),
            Event::ShipFailed {
                key,
                segment,
                error,
            } => tenant(key).map(|tenant| Line::ShipFailed {
                tenant,
                segment: segment.clone(),
                error: error.clone(),
            }),
            Event::SnapshotFailed { key, error } => {
                tenant(key).map(|tenant| Line::SnapshotFailed {
                    tenant,
                    error: error.clone(),
                })
            }
            _ => None,
        };
        if let Some(line) = line {
            self.out.send(&line);
        }
    }
}
