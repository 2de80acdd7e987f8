//! The connection pool of the PostgreSQL lease store: how it is built (the URL's settings, a
//! `statement_timeout` equal to the call deadline, and a socket the kernel gives up on when the
//! peer goes silent), and [`Checkout`], which hands a connection to one call and **discards** it
//! unless the call succeeded, so that no connection with a statement still in flight is ever
//! reused (docs/guarantees.md, promise 6 and "Late landings").

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use crate::clock::duration_ms;
use crate::durable::StoreError;
use crate::error::Error;
use crate::io_runtime::IoRuntime;

use super::PgOptions;
use super::errors::{Login, pg_error};

/// A connection taken from the pool for one call. Dropped without [`Checkout::keep`] (the call
/// failed, or its deadline dropped it mid-statement), the connection is **discarded**, never
/// returned to the pool: its statement may still be in flight on a flow that went silent, and
/// the next call must not wait behind it (a fresh connection is opened instead).
pub(super) struct Checkout {
    /// The connection, until it is kept or discarded.
    client: Option<Object>,
    /// Set once the call succeeded: the connection goes back to the pool.
    kept: bool,
}

impl Checkout {
    pub(super) fn new(client: Object) -> Self {
        Self {
            client: Some(client),
            kept: false,
        }
    }

    pub(super) fn client(&mut self) -> Result<&mut Object, StoreError> {
        self.client.as_mut().ok_or(StoreError::Backend {
            op: "checkout",
            message: "the connection was already given up".to_string(),
        })
    }

    /// Prepares (cached per connection) and runs `sql`.
    pub(super) async fn query(
        &mut self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let db = |e: tokio_postgres::Error| pg_error(op, &e);
        let client = self.client()?;
        let stmt = client.prepare_cached(sql).await.map_err(db)?;
        client.query(&stmt, params).await.map_err(db)
    }

    /// The call succeeded: the connection returns to the pool.
    pub(super) fn keep(&mut self) {
        self.kept = true;
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if let Some(client) = self.client.take()
            && !self.kept
        {
            // Detached from the pool and dropped: the connection closes.
            drop(Object::take(client));
        }
    }
}

/// A connection of `pool`, taken (and opened, if the pool must) on the store's runtime thread,
/// so that its I/O task runs there whichever runtime later draws it (`src/io_runtime.rs`).
pub(super) async fn get_on(io: &IoRuntime, pool: &Pool) -> Result<Object, PoolError> {
    let pool = pool.clone();
    match io.handle().spawn(async move { pool.get().await }).await {
        Ok(got) => got,
        // The runtime is shutting down: the store is being dropped.
        Err(_) => Err(PoolError::Closed),
    }
}

/// Builds the pool: the URL's settings plus connect timeout, socket bounds, an application name
/// and a `statement_timeout` equal to the call deadline, over TLS as the URL's `sslmode` asks
/// (`postgres/tls.rs`); and names the login.
pub(super) fn build_pool(url: &str, opts: &PgOptions) -> Result<(Pool, Login), Error> {
    let (url, tls) = super::tls::split_tls(url)?;
    let mut cfg = tokio_postgres::Config::from_str(&url).map_err(|e| Error::InvalidOption {
        name: "url",
        // The URL may hold a password: name the problem, never echo the URL.
        reason: format!("not a PostgreSQL connection URL: {e}"),
    })?;
    let user = cfg.get_user().unwrap_or_default().to_string();
    let login = Login {
        database: cfg.get_dbname().unwrap_or(&user).to_string(),
        user,
        sslmode: tls.mode,
    };
    cfg.connect_timeout(opts.connect_timeout);
    bound_socket(&mut cfg, opts);
    if cfg.get_application_name().is_none() {
        cfg.application_name("leasehold");
    }
    let timeout = format!("-c statement_timeout={}", duration_ms(opts.op_timeout));
    let options = match cfg.get_options() {
        Some(given) => format!("{given} {timeout}"),
        None => timeout,
    };
    cfg.options(options);
    let manager_config = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = match super::tls::connector(&tls)? {
        Some(connector) => Manager::from_config(cfg, connector, manager_config),
        None => Manager::from_config(cfg, NoTls, manager_config),
    };
    let pool = Pool::builder(manager)
        .max_size(opts.pool_size)
        .wait_timeout(Some(opts.wait_timeout))
        .create_timeout(Some(opts.connect_timeout))
        .recycle_timeout(Some(opts.connect_timeout))
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|e| Error::InvalidOption {
            name: "url",
            reason: format!("cannot build the connection pool: {e}"),
        })?;
    Ok((pool, login))
}

/// Bounds a silent socket in the kernel: unacknowledged data is given up after
/// `op_timeout + connect_timeout` (`tcp_user_timeout`), and an idle connection is probed after
/// `op_timeout` (at least 1 s, the kernel's unit), every second, three times.
fn bound_socket(cfg: &mut tokio_postgres::Config, opts: &PgOptions) {
    let second = Duration::from_secs(1);
    cfg.keepalives(true)
        .keepalives_idle(opts.op_timeout.max(second))
        .keepalives_interval(second)
        .keepalives_retries(3)
        .tcp_user_timeout(opts.op_timeout.saturating_add(opts.connect_timeout));
}
