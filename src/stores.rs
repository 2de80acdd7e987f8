//! Store URLs: the one place that turns a string into a lease store or a durable store, for a
//! replica's configuration (`RuntimeConfig::from_env` in the actors crate) and for the operator
//! command alike.
//!
//! ```text
//! lease store    sqlite://PATH | PATH                       SqliteLeaseStore (PATH verbatim:
//!                                                            sqlite://leases.db is relative,
//!                                                            sqlite:///var/lib/l.db absolute)
//!                postgres://…[?table=NAME] | postgresql://…  PostgresLeaseStore (feature postgres);
//!                                                            `table` is leasehold's (default
//!                                                            leasehold_leases), the rest goes to
//!                                                            the driver
//! durable store  PATH | file://PATH                         DirStore
//!                s3://BUCKET[/PREFIX]                       S3Store (feature s3), credentials,
//!                                                            region and endpoint from the AWS_*
//!                                                            environment (S3Store::from_env)
//! ```
//!
//! A string with `://` and any other scheme is refused (a mistyped `postgress://` never becomes
//! a SQLite file of that name). Parsing touches nothing; [`LeaseStoreUrl::open`] and
//! [`DurableStoreUrl::open`] open the store, creating a missing lease file, durable directory
//! or lease table with [`IfMissing::Create`] (a replica) and refusing with
//! [`Error::StoreMissing`] and creating nothing with [`IfMissing::Refuse`] (an operator
//! command). An S3 bucket is never created; with `Refuse` one listing request checks it.
//! A PostgreSQL URL may hold a password: [`PgUrl`]'s `Debug` and `Display` never show it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use crate::durable::dir::DirStore;
use crate::durable::{SharedDurableStore, check_list_prefix};
use crate::error::Error;
use crate::lease::SharedLeaseStore;
use crate::lease::sqlite::SqliteLeaseStore;

/// What [`LeaseStoreUrl::open`] and [`DurableStoreUrl::open`] do with a store that is not there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfMissing {
    /// Create it: a new lease file, durable directory or lease table (a replica's first start).
    Create,
    /// Refuse with [`Error::StoreMissing`] and create nothing (an operator command: a mistyped
    /// path must not read as an empty store).
    Refuse,
}

/// Where a replica's leases live: a SQLite file on one host, or a PostgreSQL table for a fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseStoreUrl {
    /// `sqlite://PATH` or a plain path: [`SqliteLeaseStore`].
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…`: `PostgresLeaseStore` (feature `postgres`).
    Postgres(PgUrl),
}

/// A PostgreSQL lease store's address: the driver's connection URL (which may hold a password,
/// never shown) and the lease table.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl {
    /// The URL the driver connects with, leasehold's `table` parameter taken out. Secret.
    connection: String,
    /// The lease table.
    table: String,
}

/// Where a replica's images and segments live: a directory on one host, or an S3 bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurableStoreUrl {
    /// A plain path or `file://PATH`: [`DirStore`].
    Dir(PathBuf),
    /// `s3://BUCKET[/PREFIX]`: `S3Store` (feature `s3`).
    S3 {
        /// The bucket.
        bucket: String,
        /// `""` or whole segments ending with `/` (`s3://b/prod` and `s3://b/prod/` are both
        /// `prod/`).
        prefix: String,
    },
}

/// The lease table when the URL names none (`leasehold_leases`).
pub const DEFAULT_PG_TABLE: &str = "leasehold_leases";

fn refused(name: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidOption {
        name,
        reason: reason.into(),
    }
}

/// `s` without `scheme` (case-insensitive), if it starts with it.
fn strip_scheme<'a>(s: &'a str, scheme: &str) -> Option<&'a str> {
    let head = s.get(..scheme.len())?;
    head.eq_ignore_ascii_case(scheme)
        .then(|| &s[scheme.len()..])
}

/// The scheme of a string that has one (`xyz` of `xyz://…`).
fn scheme_of(s: &str) -> Option<&str> {
    let (scheme, _) = s.split_once("://")?;
    let plain = !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    plain.then_some(scheme)
}

/// A path given after a scheme or alone: non-empty, no NUL.
fn path_of(name: &'static str, what: &str, raw: &str) -> Result<PathBuf, Error> {
    if raw.is_empty() {
        return Err(refused(name, format!("{what} names no path")));
    }
    if raw.contains('\0') {
        return Err(refused(name, format!("{what} has a NUL byte")));
    }
    Ok(PathBuf::from(raw))
}

impl LeaseStoreUrl {
    /// Parses `sqlite://PATH`, a plain `PATH`, or `postgres://…[?table=NAME]`. Bad input is
    /// [`Error::InvalidOption`] (`leases`) saying why; a PostgreSQL URL in a build without the
    /// `postgres` feature is refused too. Touches nothing.
    pub fn parse(s: &str) -> Result<Self, Error> {
        const NAME: &str = "leases";
        if let Some(path) = strip_scheme(s, "sqlite://") {
            return Ok(Self::Sqlite(path_of(NAME, "the SQLite URL", path)?));
        }
        if strip_scheme(s, "postgres://").is_some() || strip_scheme(s, "postgresql://").is_some() {
            return PgUrl::parse(s).map(Self::Postgres);
        }
        if let Some(scheme) = scheme_of(s) {
            return Err(refused(
                NAME,
                format!(
                    "unknown scheme {scheme:?}: a lease store is sqlite://PATH, a path, or postgres://…"
                ),
            ));
        }
        Ok(Self::Sqlite(path_of(NAME, "the lease store", s)?))
    }

    /// Opens the store. With [`IfMissing::Refuse`] a lease file or table that does not exist is
    /// [`Error::StoreMissing`] and nothing is created (a SQLite file is looked for first, so a
    /// file made in the instant between the look and the open is opened).
    pub async fn open(&self, if_missing: IfMissing) -> Result<SharedLeaseStore, Error> {
        match self {
            Self::Sqlite(path) => {
                if if_missing == IfMissing::Refuse && !path.is_file() {
                    return Err(Error::StoreMissing {
                        store: "lease file",
                        location: path.display().to_string(),
                    });
                }
                let path = path.clone();
                let opened = tokio::task::spawn_blocking(move || SqliteLeaseStore::open(&path))
                    .await
                    .map_err(|e| Error::Closed(format!("opening the lease file failed: {e}")))?;
                Ok(Arc::new(opened.map_err(Error::from)?))
            }
            Self::Postgres(url) => url.open(if_missing).await,
        }
    }
}

impl FromStr for LeaseStoreUrl {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Self::parse(s)
    }
}

impl fmt::Display for LeaseStoreUrl {
    /// `sqlite://PATH`, or the PostgreSQL URL with its password hidden.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            Self::Postgres(url) => url.fmt(f),
        }
    }
}

impl PgUrl {
    /// Parses `postgres://…` or `postgresql://…`, taking out leasehold's `table` parameter
    /// (checked: `[a-z_][a-z0-9_]{0,62}`; default [`DEFAULT_PG_TABLE`]). The rest of the URL is
    /// the driver's to judge at connect time.
    pub fn parse(s: &str) -> Result<Self, Error> {
        const NAME: &str = "leases";
        if !cfg!(feature = "postgres") {
            return Err(refused(
                NAME,
                "a PostgreSQL lease store needs a build with the `postgres` feature",
            ));
        }
        let (base, query) = s.split_once('?').unwrap_or((s, ""));
        let mut table = None;
        let mut kept = Vec::new();
        for param in query.split('&').filter(|p| !p.is_empty()) {
            match param.strip_prefix("table=") {
                Some(_) if table.is_some() => {
                    return Err(refused(NAME, "the URL names its table twice"));
                }
                Some(name) => table = Some(name.to_string()),
                None => kept.push(param),
            }
        }
        let table = table.unwrap_or_else(|| DEFAULT_PG_TABLE.to_string());
        #[cfg(feature = "postgres")]
        crate::lease::postgres::check_table_name(&table).map_err(|e| match e {
            Error::InvalidOption { reason, .. } => refused(NAME, reason),
            other => other,
        })?;
        let connection = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        Ok(Self { connection, table })
    }

    /// The lease table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The URL the driver connects with (it may hold a password: never log it).
    pub fn connection(&self) -> &str {
        &self.connection
    }

    /// Connects: with [`IfMissing::Create`] as a replica does (the table is created or brought
    /// up to date), with [`IfMissing::Refuse`] to an existing, up-to-date table only.
    pub async fn open(&self, if_missing: IfMissing) -> Result<SharedLeaseStore, Error> {
        #[cfg(feature = "postgres")]
        {
            use crate::lease::postgres::{PgOptions, PostgresLeaseStore};
            let (url, table, opts) = (&self.connection, &self.table, PgOptions::default());
            let store = match if_missing {
                IfMissing::Create => PostgresLeaseStore::connect_with(url, table, opts).await?,
                IfMissing::Refuse => PostgresLeaseStore::connect_existing(url, table, opts).await?,
            };
            Ok(Arc::new(store))
        }
        #[cfg(not(feature = "postgres"))]
        {
            let _ = if_missing;
            Err(refused(
                "leases",
                "a PostgreSQL lease store needs a build with the `postgres` feature",
            ))
        }
    }
}

/// `url` with the password of its user (`user:PASSWORD@`) and any `password=` parameter hidden.
fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (main, query) = match rest.split_once('?') {
        Some((m, q)) => (m, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match main.find('/') {
        Some(i) => main.split_at(i),
        None => (main, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{name}:***@{host}"),
            None => format!("{user}@{host}"),
        },
        None => authority.to_string(),
    };
    let mut out = format!("{scheme}://{authority}{path}");
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => p.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

impl fmt::Display for PgUrl {
    /// The URL with its password hidden and the table as a parameter.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sep = if self.connection.contains('?') {
            '&'
        } else {
            '?'
        };
        write!(f, "{}{sep}table={}", redact(&self.connection), self.table)
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PgUrl").field(&self.to_string()).finish()
    }
}

impl DurableStoreUrl {
    /// Parses a plain `PATH`, `file://PATH` or `s3://BUCKET[/PREFIX]`. Bad input is
    /// [`Error::InvalidOption`] (`durable`) saying why; an S3 URL in a build without the `s3`
    /// feature is refused too. Touches nothing.
    pub fn parse(s: &str) -> Result<Self, Error> {
        const NAME: &str = "durable";
        if let Some(path) = strip_scheme(s, "file://") {
            return Ok(Self::Dir(path_of(NAME, "the file URL", path)?));
        }
        if let Some(rest) = strip_scheme(s, "s3://") {
            return Self::parse_s3(rest);
        }
        if let Some(scheme) = scheme_of(s) {
            return Err(refused(
                NAME,
                format!(
                    "unknown scheme {scheme:?}: a durable store is a path, file://PATH or s3://BUCKET/PREFIX"
                ),
            ));
        }
        Ok(Self::Dir(path_of(NAME, "the durable store", s)?))
    }

    fn parse_s3(rest: &str) -> Result<Self, Error> {
        const NAME: &str = "durable";
        if !cfg!(feature = "s3") {
            return Err(refused(
                NAME,
                "an S3 durable store needs a build with the `s3` feature",
            ));
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        #[cfg(feature = "s3")]
        crate::durable::s3::check_bucket(bucket).map_err(|e| match e {
            Error::InvalidOption { reason, .. } => refused(NAME, reason),
            other => other,
        })?;
        let prefix = if prefix.is_empty() || prefix.ends_with('/') {
            prefix.to_string()
        } else {
            format!("{prefix}/")
        };
        check_list_prefix(&prefix).map_err(|e| refused(NAME, format!("the S3 prefix: {e}")))?;
        Ok(Self::S3 {
            bucket: bucket.to_string(),
            prefix,
        })
    }

    /// Opens the store. A directory is created with [`IfMissing::Create`]; with
    /// [`IfMissing::Refuse`] a missing one is [`Error::StoreMissing`] and nothing is created.
    /// An S3 bucket must exist either way (it is never created); with `Refuse` one listing
    /// request checks that it answers.
    pub async fn open(&self, if_missing: IfMissing) -> Result<SharedDurableStore, Error> {
        match self {
            Self::Dir(path) => open_dir(path, if_missing).await,
            Self::S3 { bucket, prefix } => open_s3(bucket, prefix, if_missing).await,
        }
    }
}

async fn open_dir(path: &Path, if_missing: IfMissing) -> Result<SharedDurableStore, Error> {
    if if_missing == IfMissing::Refuse && !path.is_dir() {
        return Err(Error::StoreMissing {
            store: "durable directory",
            location: path.display().to_string(),
        });
    }
    let path = path.to_path_buf();
    let opened = tokio::task::spawn_blocking(move || DirStore::open(&path))
        .await
        .map_err(|e| Error::Closed(format!("opening the durable directory failed: {e}")))?;
    Ok(Arc::new(opened?))
}

async fn open_s3(
    bucket: &str,
    prefix: &str,
    if_missing: IfMissing,
) -> Result<SharedDurableStore, Error> {
    #[cfg(feature = "s3")]
    {
        use crate::durable::DurableStore;
        let store = crate::durable::s3::S3Store::from_env(bucket, prefix)?;
        if if_missing == IfMissing::Refuse {
            store.list_page("", None, 1).await?;
        }
        Ok(Arc::new(store))
    }
    #[cfg(not(feature = "s3"))]
    {
        let _ = (bucket, prefix, if_missing);
        Err(refused(
            "durable",
            "an S3 durable store needs a build with the `s3` feature",
        ))
    }
}

impl FromStr for DurableStoreUrl {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Self::parse(s)
    }
}

impl fmt::Display for DurableStoreUrl {
    /// `file://PATH` or `s3://BUCKET/PREFIX`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dir(path) => write!(f, "file://{}", path.display()),
            Self::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

#[cfg(test)]
mod tests;
