//! Opening the stores the command line names — existing ones only, through the library's one
//! opener of store URLs (`leasehold::stores`, with `IfMissing::Refuse`): a missing lease file,
//! lease table, durable directory or bucket is an error naming it, and nothing is created. Every
//! store is wrapped in a `Deadline` of `--store-deadline`.

use std::sync::Arc;

use leasehold::deadline::Deadline;
use leasehold::durable::SharedDurableStore;
use leasehold::lease::SharedLeaseStore;
use leasehold::stores::{IfMissing, LeaseStoreUrl, OpenOptions};

use crate::args::Cli;
use crate::exit::Failure;

/// How every verb opens a store.
fn options(cli: &Cli) -> OpenOptions {
    OpenOptions {
        if_missing: IfMissing::Refuse,
        accept_shared_permissions: cli.accept_shared_permissions,
    }
}

/// The lease store of `--leases`, which `verb` needs.
pub async fn lease_store(cli: &Cli) -> Result<SharedLeaseStore, Failure> {
    let verb = cli.command.name();
    let Some(url) = &cli.leases else {
        return Err(Failure::usage(format!(
            "`{verb}` needs the lease store: --leases sqlite://PATH or postgres://… (or LEASEHOLD_LEASES)"
        )));
    };
    let url = match (url, &cli.pg_table) {
        (LeaseStoreUrl::Postgres(pg), Some(table)) => {
            LeaseStoreUrl::Postgres(pg.with_table(table).map_err(Failure::from)?)
        }
        _ => url.clone(),
    };
    let store = url.open_with(options(cli)).await?;
    Ok(Arc::new(Deadline::new(store, cli.store_deadline)?))
}

/// The durable store of `--durable`, which `verb` needs.
pub async fn durable_store(cli: &Cli) -> Result<SharedDurableStore, Failure> {
    let verb = cli.command.name();
    let Some(url) = &cli.durable else {
        return Err(Failure::usage(format!(
            "`{verb}` needs the durable store: --durable PATH or s3://BUCKET/PREFIX (or LEASEHOLD_DURABLE)"
        )));
    };
    let store = url.open_with(options(cli)).await.map_err(|e| match url {
        leasehold::stores::DurableStoreUrl::S3 { bucket, .. }
            if !matches!(e, leasehold::Error::StoreMissing { .. }) =>
        {
            Failure::from(e).context(format!("bucket {bucket:?}"))
        }
        _ => Failure::from(e),
    })?;
    Ok(Arc::new(Deadline::new(store, cli.store_deadline)?))
}
