//! The lease table's migration: create it if absent (or, opened as existing only, refuse),
//! add the columns newer builds need, and check its shape with a query that reads no row.

use super::PostgresLeaseStore;
use super::errors::{login_error, pg_error};
use super::pool::Checkout;
use super::sql::COLUMNS;
use crate::clock::duration_ms;
use crate::durable::StoreError;
use crate::error::Error;

/// What the migration found of the lease table.
enum Shape {
    /// The table is there (created or upgraded if allowed) and has the expected columns.
    Serves,
    /// The table is absent and was not to be created.
    Missing,
}

impl PostgresLeaseStore {
    /// Creates the table if it is absent and adds the `attempt` and tip columns to a table made
    /// before they existed (under an advisory lock, so replicas starting together do not race on the
    /// catalog), then checks its shape with a query that reads no row. A refused login is its own
    /// error; a table that cannot serve is [`Error::InvalidOption`] (`table`). Without `create`
    /// nothing is created or changed: an absent table is [`Error::StoreMissing`].
    pub(super) async fn migrate(&self, create: bool) -> Result<(), Error> {
        let steps = async {
            let client = super::pool::get_on(&self.io, &self.pool).await;
            let client = client.map_err(|e| login_error("migrate", e, &self.login))?;
            let mut lease = Checkout::new(client);
            match self.create_or_upgrade(&mut lease, create).await {
                Ok(Shape::Missing) => {
                    lease.keep();
                    return Err(Error::StoreMissing {
                        store: "lease table",
                        location: self.table.clone(),
                    });
                }
                Ok(Shape::Serves) => {}
                Err(e) => return Err(self.not_a_lease_table(e)),
            }
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

    async fn create_or_upgrade(
        &self,
        lease: &mut Checkout,
        create: bool,
    ) -> Result<Shape, StoreError> {
        let shape_check = format!(
            "SELECT {COLUMNS}, l.attempt, l.forgotten_at, l.erasure_floor, l.endpoint FROM \"{}\" AS l LIMIT 0",
            self.table
        );
        let lock_name = format!("leasehold.migrate.{}", self.table);
        let quoted = format!("\"{}\"", self.table);
        let db = |e: tokio_postgres::Error| pg_error("migrate", &e);
        let client = lease.client()?;
        let tx = client.transaction().await.map_err(db)?;
        let lock = "SELECT pg_advisory_xact_lock(hashtext($1))";
        tx.execute(lock, &[&lock_name]).await.map_err(db)?;
        let shape = "SELECT to_regclass($1) IS NOT NULL, (SELECT count(*) = 6 FROM pg_attribute \
            WHERE attrelid = to_regclass($1) AND NOT attisdropped \
              AND attname IN ('attempt', 'tip_epoch', 'tip_seq', 'forgotten_at', 'erasure_floor', \
                              'endpoint'))";
        let row = tx.query_one(shape, &[&quoted]).await.map_err(db)?;
        let exists: bool = row.try_get(0).map_err(db)?;
        let up_to_date: bool = row.try_get(1).map_err(db)?;
        if !exists && !create {
            return Ok(Shape::Missing);
        } else if !exists {
            tx.batch_execute(&self.sql.create).await.map_err(db)?;
        } else if !up_to_date && !create {
            return Err(StoreError::Backend {
                op: "migrate",
                message: format!(
                    "it lacks the attempt, log tip, pending-erasure or endpoint columns and is opened as \
                     existing only; have its owner run: {}",
                    self.sql.add_columns
                ),
            });
        } else if !up_to_date {
            let added = tx.batch_execute(&self.sql.add_columns).await;
            added.map_err(|e| match pg_error("migrate", &e) {
                StoreError::Backend { op, message } => StoreError::Backend {
                    op,
                    message: format!(
                        "it lacks the attempt, log tip, pending-erasure or endpoint columns and they cannot be added \
                         ({message}); have its owner run: {}",
                        self.sql.add_columns
                    ),
                },
                other => other,
            })?;
        }
        tx.commit().await.map_err(db)?;
        client.query(&shape_check, &[]).await.map_err(db)?;
        Ok(Shape::Serves)
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
}
