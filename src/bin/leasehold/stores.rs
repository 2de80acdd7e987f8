//! Opening the stores the command line names — existing ones only: a missing lease file, lease
//! table, durable directory or bucket is an error naming it, and nothing is created. Every
//! store is wrapped in a `Deadline` of `--store-deadline`.

use std::sync::Arc;

use leasehold::deadline::Deadline;
use leasehold::durable::SharedDurableStore;
use leasehold::durable::dir::{DirOptions, DirStore};
use leasehold::lease::SharedLeaseStore;
use leasehold::lease::sqlite::{LeaseFileOptions, SqliteLeaseStore};

use crate::args::Cli;
use crate::exit::Failure;
use crate::parse::{DurableUrl, LeaseUrl};

/// The lease store of `--leases`, which `verb` needs.
pub async fn lease_store(cli: &Cli) -> Result<SharedLeaseStore, Failure> {
    let verb = cli.command.name();
    let Some(url) = &cli.leases else {
        return Err(Failure::usage(format!(
            "`{verb}` needs the lease store: --leases sqlite://PATH or postgres://… (or LEASEHOLD_LEASES)"
        )));
    };
    let store: SharedLeaseStore = match url {
        LeaseUrl::Sqlite(path) => {
            let options = LeaseFileOptions {
                create: false,
                accept_shared_permissions: cli.accept_shared_permissions,
            };
            Arc::new(SqliteLeaseStore::open_existing(path, options)?)
        }
        LeaseUrl::Postgres(url) => postgres(url, &cli.pg_table).await?,
    };
    Ok(Arc::new(Deadline::new(store, cli.store_deadline)?))
}

#[cfg(feature = "postgres")]
async fn postgres(url: &str, table: &str) -> Result<SharedLeaseStore, Failure> {
    use leasehold::lease::postgres::{PgOptions, PostgresLeaseStore};
    let store = PostgresLeaseStore::connect_existing(url, table, PgOptions::default()).await?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_url: &str, _table: &str) -> Result<SharedLeaseStore, Failure> {
    Err(Failure::usage(
        "this build has no PostgreSQL lease store: build leasehold with the postgres feature",
    ))
}

/// The durable store of `--durable`, which `verb` needs.
pub async fn durable_store(cli: &Cli) -> Result<SharedDurableStore, Failure> {
    let verb = cli.command.name();
    let Some(url) = &cli.durable else {
        return Err(Failure::usage(format!(
            "`{verb}` needs the durable store: --durable PATH or s3://BUCKET/PREFIX (or LEASEHOLD_DURABLE)"
        )));
    };
    let store: SharedDurableStore = match url {
        DurableUrl::Dir(path) => {
            let options = DirOptions {
                create: false,
                accept_shared_permissions: cli.accept_shared_permissions,
            };
            Arc::new(DirStore::open_with(path, options)?)
        }
        DurableUrl::S3 { bucket, prefix } => s3(bucket, prefix).await?,
    };
    Ok(Arc::new(Deadline::new(store, cli.store_deadline)?))
}

/// An S3 store from the usual AWS variables, once one listing showed that its bucket exists.
#[cfg(feature = "s3")]
async fn s3(bucket: &str, prefix: &str) -> Result<SharedDurableStore, Failure> {
    use leasehold::durable::DurableStore;
    use leasehold::durable::s3::S3Store;
    let store = S3Store::from_env(bucket, prefix)?;
    if let Err(e) = store.list_page("", None, 1).await {
        if e.to_string().contains("NoSuchBucket") {
            return Err(leasehold::Error::StoreMissing {
                store: "bucket",
                location: bucket.to_string(),
            }
            .into());
        }
        return Err(Failure::from(e).context(format!("bucket {bucket:?}")));
    }
    Ok(Arc::new(store))
}

#[cfg(not(feature = "s3"))]
async fn s3(_bucket: &str, _prefix: &str) -> Result<SharedDurableStore, Failure> {
    Err(Failure::usage(
        "this build has no S3 durable store: build leasehold with the s3 feature",
    ))
}
