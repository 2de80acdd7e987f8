//! Setting up the lease table: [`PostgresLeaseStore::connect`] creates it if absent and adds
//! the columns an older build's table lacks (under an advisory lock);
//! [`PostgresLeaseStore::connect_existing`] only checks that it is there, in the expected shape.

use super::PostgresLeaseStore;
use super::errors::login_error;
use super::errors::pg_error;
use super::pool::Checkout;
use super::sql::COLUMNS;
use crate::clock::duration_ms;
use crate::durable::StoreError;
use crate::error::Error;

impl PostgresLeaseStore {
    /// Creates the table if it is absent and adds the `attempt` and tip columns to a table made
    /// before they existed (under an advisory lock, so replicas starting together do not race on the
    /// catalog), then checks its shape with a query that reads no row. A refused login is its own
    /// error; a table that cannot serve is [`Error::InvalidOption`] (`table`).
    pub(super) async fn migrate(&self) -> Result<(), Error> {
        let steps = async {
            let client = self.pool.get().await;
            let client = client.map_err(|e| login_error("migrate", e, &self.login))?;
            let mut lease = Checkout::new(client);
            self.create_or_upgrade(&mut lease)
                .await
                .map_err(|e| self.not_a_lease_table(e))?;
            lease.keep();
            Ok(())
        };
        match tokio::time::timeout(self.opts.op_timeout, steps).await {
            Ok(done) => done,
            Err(_) => Err(Error::Store(StoreError::Timeout {
                op: "migrate",
                after_ms: duration_ms(self.opts.op_timeout),
            })),
        }
    }

    async fn create_or_upgrade(&self, lease: &mut Checkout) -> Result<(), StoreError> {
        let shape_check = format!(
            "SELECT {COLUMNS}, l.attempt, l.forgotten_at, l.erasure_floor FROM \"{}\" AS l LIMIT 0",
            self.table
        );
        let lock_name = format!("leasehold.migrate.{}", self.table);
        let quoted = format!("\"{}\"", self.table);
        let db = |e: tokio_postgres::Error| pg_error("migrate", &e);
        let client = lease.client()?;
        let tx = client.transaction().await.map_err(db)?;
        let lock = "SELECT pg_advisory_xact_lock(hashtext($1))";
        tx.execute(lock, &[&lock_name]).await.map_err(db)?;
        let shape = "SELECT to_regclass($1) IS NOT NULL, (SELECT count(*) = 5 FROM pg_attribute \
            WHERE attrelid = to_regclass($1) AND NOT attisdropped \
              AND attname IN ('attempt', 'tip_epoch', 'tip_seq', 'forgotten_at', 'erasure_floor'))";
        let row = tx.query_one(shape, &[&quoted]).await.map_err(db)?;
        let exists: bool = row.try_get(0).map_err(db)?;
        let up_to_date: bool = row.try_get(1).map_err(db)?;
        if !exists {
            tx.batch_execute(&self.sql.create).await.map_err(db)?;
        } else if !up_to_date {
            let added = tx.batch_execute(&self.sql.add_columns).await;
            added.map_err(|e| match pg_error("migrate", &e) {
                StoreError::Backend { op, message } => StoreError::Backend {
                    op,
                    message: format!(
                        "it lacks the attempt, log tip or pending-erasure columns and they cannot be added \
                         ({message}); have its owner run: {}",
                        self.sql.add_columns
                    ),
                },
                other => other,
            })?;
        }
        tx.commit().await.map_err(db)?;
        client.query(&shape_check, &[]).await.map_err(db)?;
        Ok(())
    }

    /// A statement the server refused while setting up the table means the table cannot serve.
    fn not_a_lease_table(&self, e: StoreError) -> Error {
        match e {
            StoreError::Backend { message, .. } => Error::InvalidOption {
                name: "table",
                reason: format!(
                    "{:?} cannot serve as the lease table: {message}",
                    self.table
                ),
            },
            other => Error::from(other),
        }
    }

    /// Checks that the table exists and has every column, within the call deadline; creates
    /// and alters nothing.
    pub(super) async fn check_existing(&self) -> Result<(), Error> {
        let quoted = format!("\"{}\"", self.table);
        let steps = async {
            let client = self.pool.get().await;
            let client = client.map_err(|e| login_error("check_table", e, &self.login))?;
            let mut lease = Checkout::new(client);
            let db = |e: tokio_postgres::Error| Error::from(pg_error("check_table", &e));
            let client = lease.client()?;
            let row = client
                .query_one("SELECT to_regclass($1) IS NOT NULL", &[&quoted])
                .await
                .map_err(db)?;
            let exists: bool = row.try_get(0).map_err(db)?;
            if !exists {
                return Err(Error::StoreMissing {
                    what: format!("the lease table {quoted} (the server has no such table)"),
                });
            }
            let shape = format!(
                "SELECT {COLUMNS}, l.attempt, l.forgotten_at, l.erasure_floor FROM {quoted} AS l LIMIT 0"
            );
            let checked = client.query(&shape, &[]).await;
            checked.map_err(|e| self.not_a_lease_table(pg_error("check_table", &e)))?;
            lease.keep();
            Ok(())
        };
        match tokio::time::timeout(self.opts.op_timeout, steps).await {
            Ok(done) => done,
            Err(_) => Err(Error::Store(StoreError::Timeout {
                op: "check_table",
                after_ms: duration_ms(self.opts.op_timeout),
            })),
        }
    }
}
