//! What the router (`crate::router`) asks of the supervisor: a tenant opened for a message,
//! and the supervisor's own handle of a tenant in its table. Neither counts as a handle a host
//! holds.

use std::future::Future;

use leasehold::{Error, LeaseKey};

use super::{Lookup, Open, Supervisor, stopped};
use crate::tenant::TenantRef;

impl Supervisor {
    /// Opens a tenant for the router: [`Supervisor::open`] without counting the handle as one
    /// a host holds.
    pub(crate) fn open_here(
        &self,
        key: &LeaseKey,
    ) -> impl Future<Output = Result<TenantRef, Error>> + use<> {
        let request = self.addr.send(Open { key: key.clone() });
        async move { request.await.map_err(|_| stopped())? }
    }

    /// The supervisor's own handle of the tenant of `key` in its table (serving, leaving, or
    /// just ended), if any.
    pub(crate) async fn lookup(&self, key: &LeaseKey) -> Result<Option<TenantRef>, Error> {
        let key = key.clone();
        self.addr.send(Lookup { key }).await.map_err(|_| stopped())
    }
}
