//! A runtime thread for network clients whose connections outlive the call that opened them.
//! `tokio-postgres` splits a connection into a client and an I/O task, and `hyper` (under
//! `object_store`'s S3 client) runs each pooled keep-alive connection as a task too; both spawn
//! that task on whatever runtime the call that opened the connection ran on. A pooled
//! connection is then used by calls on every runtime of the process — the actix arbiters (which
//! drive their runtime no more while a host's closure blocks), the tip batch thread (which
//! drives its runtime only while it sends a batch), a host's own — so its I/O must run on a
//! runtime that is always driven: a current-thread runtime on a thread of its own, here.
//! Before, a connection opened by a tip batch or on a busy arbiter hung every later call that
//! drew it from the pool, until the next batch or the call's deadline (docs/guarantees.md,
//! "Late landings": the PostgreSQL lease store and the S3 store open their connections here).
//!
//! The thread ends when the last clone of its owner is dropped; the connections end with it.

use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::durable::StoreError;
use crate::error::Error;

/// The runtime thread of one store (shared by its clones).
#[derive(Debug, Clone)]
pub(crate) struct IoRuntime {
    /// Spawns onto the thread's runtime.
    handle: Handle,
    /// Dropped with the last clone: the thread's runtime returns, and the thread ends.
    _stop: Arc<oneshot::Sender<()>>,
}

impl IoRuntime {
    /// Starts the thread (named `leasehold-<what>-io`) and its runtime.
    pub(crate) fn start(what: &'static str) -> Result<Self, Error> {
        let fail = |message: String| {
            Error::Store(StoreError::Io {
                op: "start",
                message: format!("{what}: {message}"),
            })
        };
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("leasehold-{what}-io"))
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

    /// Spawns onto the thread's runtime.
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }
}
