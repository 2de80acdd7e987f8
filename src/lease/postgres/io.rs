//! The thread that drives the store's connections. `tokio-postgres` splits a connection into a
//! client and an I/O task, and the pool spawns that task on whatever runtime the call that
//! opened the connection ran on. A pooled connection is then used by calls on every runtime of
//! the process — the actix arbiters, the tip batch thread, a host's own — so its I/O task must
//! run on a runtime that is always driven: a current-thread runtime on a thread of its own,
//! here, on which every connection is opened ([`IoRuntime::get`]). Before, a connection opened
//! by a tip batch (a thread that drives its runtime only while it sends a batch) left every
//! later call that drew it hanging until the next batch, or until its deadline once writes
//! stopped (docs/guarantees.md, the PostgreSQL lease store).
//!
//! The thread ends when the last clone of the store is dropped; the connections end with it.

use std::sync::Arc;

use deadpool_postgres::{Object, Pool, PoolError};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::error::Error;

/// The runtime thread of one store (shared by its clones).
#[derive(Debug, Clone)]
pub(super) struct IoRuntime {
    /// Spawns onto the thread's runtime.
    handle: Handle,
    /// Dropped with the last clone: the thread's runtime returns, and the thread ends.
    _stop: Arc<oneshot::Sender<()>>,
}

impl IoRuntime {
    /// Starts the thread and its runtime.
    pub(super) fn start() -> Result<Self, Error> {
        let fail = |message: String| Error::InvalidOption {
            name: "postgres",
            reason: message,
        };
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("leasehold-pg-io".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = handle_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(runtime.handle().clone()));
                // Ends when every clone of the store is gone (the sender dropped).
                let _ = runtime.block_on(stop_rx);
            })
            .map_err(|e| fail(format!("the connection thread did not start: {e}")))?;
        let handle = handle_rx
            .recv()
            .map_err(|_| fail("the connection thread ended at its start".to_string()))?
            .map_err(|e| fail(format!("the connection thread has no runtime: {e}")))?;
        Ok(Self {
            handle,
            _stop: Arc::new(stop_tx),
        })
    }

    /// A connection of `pool`, taken (and opened, if the pool must) on the thread's runtime, so
    /// that its I/O task runs there.
    pub(super) async fn get(&self, pool: &Pool) -> Result<Object, PoolError> {
        let pool = pool.clone();
        match self.handle.spawn(async move { pool.get().await }).await {
            Ok(got) => got,
            // The runtime is shutting down: the store is being dropped.
            Err(_) => Err(PoolError::Closed),
        }
    }
}
