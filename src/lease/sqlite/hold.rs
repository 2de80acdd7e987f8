//! Holding the lease file's connection idle (testkit): a drill that stops a replica's process
//! first makes sure the process has no transaction open on the shared file. A process stopped
//! inside a write transaction holds the file's write lock and stalls every writer of every
//! replica until it resumes (docs/guarantees.md, assumption 6); a drill that wants
//! the tenant taken over while its owner is stopped must stop the owner between transactions.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use rusqlite::Connection;

use super::SqliteLeaseStore;

/// The connection of a [`SqliteLeaseStore`] handle, held idle until this is dropped; every call
/// of the handle (its clones included) waits meanwhile.
#[derive(Debug)]
pub struct ConnectionHold {
    release: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl SqliteLeaseStore {
    /// Takes this handle's connection once the call under way (if any) has finished, and keeps
    /// it until the returned hold is dropped. Blocks until the connection is taken: call it on
    /// a blocking thread.
    pub fn hold_connection(&self) -> ConnectionHold {
        hold(Arc::clone(&self.conn))
    }
}

fn hold(conn: Arc<Mutex<Connection>>) -> ConnectionHold {
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let _guard = conn.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = held_tx.send(());
        // Returns when the hold is dropped (its sender with it).
        let _ = release_rx.recv();
    });
    // Err only if the thread died before taking the lock; the hold then holds nothing.
    let _ = held_rx.recv();
    ConnectionHold {
        release: Some(release_tx),
        thread: Some(thread),
    }
}

impl Drop for ConnectionHold {
    fn drop(&mut self) {
        self.release.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_call_waits_while_the_connection_is_held_and_goes_on_once_released() {
        let conn = Arc::new(Mutex::new(Connection::open_in_memory().unwrap()));
        let held = hold(Arc::clone(&conn));
        assert!(conn.try_lock().is_err(), "the connection is held");
        drop(held);
        let taken = conn.try_lock();
        assert!(taken.is_ok(), "released once the hold is dropped");
        drop(taken);
        // A hold taken while a call holds the connection waits for that call.
        let busy = Arc::clone(&conn);
        let done = Arc::new(AtomicBool::new(false));
        let call_done = Arc::clone(&done);
        let (started_tx, started_rx) = mpsc::channel();
        let call = std::thread::spawn(move || {
            let _guard = busy.lock().unwrap();
            started_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            call_done.store(true, Ordering::SeqCst);
        });
        started_rx.recv().unwrap();
        let held = hold(Arc::clone(&conn));
        assert!(
            done.load(Ordering::SeqCst),
            "the hold waited for the call under way"
        );
        drop(held);
        call.join().unwrap();
    }
}
