//! What the command line's words mean, checked before any store is opened: store URLs, tenant
//! keys, restore targets and durations. Pure: every function here is a function of its text, so
//! a bad argument is refused with a clear message and nothing is touched.

use std::path::PathBuf;
use std::time::Duration;

use leasehold::LeaseKey;
use leasehold::layout::LogPos;
use leasehold::log::Target;

use crate::time::parse_rfc3339;

/// Where the leases are (`--leases`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseUrl {
    /// `sqlite://PATH`: a SQLite lease file (`sqlite:///abs/path`, `sqlite://relative/path`).
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…`: the URL as the store takes it (TLS options included).
    Postgres(String),
}

/// Where the images and segments are (`--durable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurableUrl {
    /// A path or `file://PATH`: a durable directory.
    Dir(PathBuf),
    /// `s3://BUCKET[/PREFIX]`: a bucket, and the fleet's prefix in it (`""` or ending with `/`).
    S3 {
        /// The bucket.
        bucket: String,
        /// The prefix, `""` or whole segments ending with `/`.
        prefix: String,
    },
}

/// `--leases`: a URL with its scheme; a bare path is refused (say `sqlite://` to mean a file).
pub fn lease_url(text: &str) -> Result<LeaseUrl, String> {
    if let Some(path) = text.strip_prefix("sqlite://") {
        if path.is_empty() {
            return Err("sqlite:// names no file: write sqlite://PATH".into());
        }
        return Ok(LeaseUrl::Sqlite(PathBuf::from(path)));
    }
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        return Ok(LeaseUrl::Postgres(text.to_owned()));
    }
    match text.split_once("://") {
        Some((scheme, _)) => Err(format!(
            "unknown scheme {scheme:?}: the lease store is sqlite://PATH or postgres://…"
        )),
        None => Err(format!(
            "{text:?} has no scheme: write sqlite://{text} for a lease file, or postgres://… for a table"
        )),
    }
}

/// `--durable`: a directory (`PATH` or `file://PATH`) or `s3://BUCKET[/PREFIX]`. A prefix that
/// does not end with `/` gets one (`s3://b/prod` is the prefix `prod/`).
pub fn durable_url(text: &str) -> Result<DurableUrl, String> {
    if let Some(rest) = text.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err("s3:// names no bucket: write s3://BUCKET[/PREFIX]".into());
        }
        let prefix = match prefix {
            "" => String::new(),
            p if p.ends_with('/') => p.to_owned(),
            p => format!("{p}/"),
        };
        if prefix.starts_with('/') || prefix.contains("//") {
            return Err(format!("the prefix {prefix:?} has an empty segment"));
        }
        return Ok(DurableUrl::S3 {
            bucket: bucket.to_owned(),
            prefix,
        });
    }
    let path = match text.strip_prefix("file://") {
        Some(path) => path,
        None if text.contains("://") => {
            return Err(format!(
                "unknown scheme in {text:?}: the durable store is a PATH, file://PATH or s3://BUCKET/PREFIX"
            ));
        }
        None => text,
    };
    if path.is_empty() {
        return Err("the durable directory's path is empty".into());
    }
    Ok(DurableUrl::Dir(PathBuf::from(path)))
}

/// A tenant, `ORG/TENANT`.
pub fn tenant_key(text: &str) -> Result<LeaseKey, String> {
    LeaseKey::parse(text).map_err(|e| format!("{text:?} is not a tenant ORG/TENANT: {e}"))
}

/// A log position: `e<epoch>:<seq>` (`e3:41`) or the form positions are printed in
/// (`e00000003/log-000000000041`).
pub fn position(text: &str) -> Option<LogPos> {
    let rest = text.strip_prefix('e')?;
    let (epoch, seq) = match rest.split_once(':') {
        Some(parts) => parts,
        None => {
            let (epoch, name) = rest.split_once('/')?;
            (epoch, name.strip_prefix("log-")?)
        }
    };
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().ok())
            .flatten()
    };
    let pos = LogPos {
        epoch: number(epoch)?,
        seq: number(seq)?,
    };
    (pos.epoch >= 1 && pos.seq >= 1).then_some(pos)
}

/// `--at`: a log position, milliseconds since the Unix epoch, or an RFC 3339 time.
pub fn target(text: &str) -> Result<Target, String> {
    if let Some(pos) = position(text) {
        return Ok(Target::Position(pos));
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let unix_ms = text
            .parse()
            .map_err(|_| format!("{text} ms is out of range"))?;
        return Ok(Target::Time { unix_ms });
    }
    parse_rfc3339(text).map(|unix_ms| Target::Time { unix_ms }).map_err(|why| {
        format!(
            "{text:?} is no restore target ({why}): give a time (RFC 3339, 2025-06-01T12:00:00Z, or \
             unix milliseconds) or a log position (e3:41)"
        )
    })
}

/// A duration: a number and a unit (`500ms`, `30s`, `2m`, `1h`); a bare number is seconds.
pub fn duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is no duration: write e.g. 500ms, 30s, 2m or 1h"))?;
    let ms = match unit {
        "ms" => Some(n),
        "" | "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => {
            return Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m or h)"));
        }
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_urls_need_their_scheme() {
        assert_eq!(
            lease_url("sqlite:///var/lib/l.db"),
            Ok(LeaseUrl::Sqlite("/var/lib/l.db".into()))
        );
        assert_eq!(
            lease_url("sqlite://l.db"),
            Ok(LeaseUrl::Sqlite("l.db".into()))
        );
        let pg = "postgresql://u@h/db?sslmode=verify-full";
        assert_eq!(lease_url(pg), Ok(LeaseUrl::Postgres(pg.into())));
        assert!(
            lease_url("leases.db")
                .unwrap_err()
                .contains("sqlite://leases.db")
        );
        assert!(lease_url("mysql://h").unwrap_err().contains("mysql"));
        assert!(lease_url("sqlite://").is_err());
    }

    #[test]
    fn durable_urls_are_paths_files_or_buckets() {
        assert_eq!(durable_url("d"), Ok(DurableUrl::Dir("d".into())));
        assert_eq!(
            durable_url("file:///srv/d"),
            Ok(DurableUrl::Dir("/srv/d".into()))
        );
        let s3 = |bucket: &str, prefix: &str| DurableUrl::S3 {
            bucket: bucket.into(),
            prefix: prefix.into(),
        };
        assert_eq!(durable_url("s3://b"), Ok(s3("b", "")));
        assert_eq!(durable_url("s3://b/"), Ok(s3("b", "")));
        assert_eq!(durable_url("s3://b/prod"), Ok(s3("b", "prod/")));
        assert_eq!(durable_url("s3://b/a/b/"), Ok(s3("b", "a/b/")));
        assert!(durable_url("s3:///p").is_err());
        assert!(durable_url("s3://b//p").is_err());
        assert!(durable_url("gs://b").is_err());
        assert!(durable_url("").is_err());
    }

    #[test]
    fn positions_come_in_the_short_and_the_printed_form() {
        let p = |epoch, seq| Some(LogPos { epoch, seq });
        assert_eq!(position("e3:41"), p(3, 41));
        assert_eq!(position("e00000003/log-000000000041"), p(3, 41));
        assert_eq!(position(&LogPos { epoch: 7, seq: 2 }.to_string()), p(7, 2));
        for bad in [
            "e3", "3:41", "e:41", "e3:", "e3:x", "e0:1", "e1:0", "e3:-1", "e3/41",
        ] {
            assert_eq!(position(bad), None, "{bad}");
        }
    }

    #[test]
    fn targets_are_positions_times_or_milliseconds() {
        assert_eq!(
            target("e3:41"),
            Ok(Target::Position(LogPos { epoch: 3, seq: 41 }))
        );
        assert_eq!(
            target("1700000000000"),
            Ok(Target::Time {
                unix_ms: 1_700_000_000_000
            })
        );
        assert_eq!(
            target("2023-11-14T22:13:20Z"),
            Ok(Target::Time {
                unix_ms: 1_700_000_000_000
            })
        );
        assert_eq!(
            target("2023-11-14T23:13:20.5+01:00"),
            Ok(Target::Time {
                unix_ms: 1_700_000_000_500
            })
        );
        for bad in [
            "yesterday",
            "",
            "2023-13-01T00:00:00Z",
            "99999999999999999999999",
        ] {
            assert!(target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_take_a_unit_and_seconds_by_default() {
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("1h"), Ok(Duration::from_secs(3_600)));
        assert_eq!(duration("0s"), Ok(Duration::ZERO));
        for bad in ["", "s", "1d", "-1s", "1.5s", "99999999999999999999h"] {
            assert!(duration(bad).is_err(), "{bad}");
        }
    }
}
