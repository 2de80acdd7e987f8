//! How a command ends: its exit status (documented in docs/operations.md, "Exit status") and,
//! when it fails, a stable code and a message. Which status an error gets is a pure function of
//! the error ([`exit_of`]).

use std::fmt;

use leasehold::Error;

/// The exit statuses of `leasehold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done.
    Ok = 0,
    /// Something failed that no other status names.
    Failed = 1,
    /// A bad argument: nothing was touched.
    Usage = 2,
    /// A store, a tenant or a restore target that does not exist: nothing was created.
    NotFound = 3,
    /// The tenant is held by another replica (`forget`).
    Held = 4,
    /// A check failed (`verify`, the integrity check of `restore`), or the data is corrupt.
    VerifyFailed = 5,
    /// A store could not be reached or did not answer in time (the outcome of a write is then
    /// unknown: run the command again).
    Unreachable = 6,
    /// A store's directory or file lets the group or others in (`--accept-shared-permissions`).
    NotPrivate = 7,
}

impl Exit {
    /// The process's exit status.
    pub fn status(self) -> u8 {
        self as u8
    }

    /// The status's name in `--json` output.
    pub fn name(self) -> &'static str {
        match self {
            Exit::Ok => "ok",
            Exit::Failed => "failed",
            Exit::Usage => "usage",
            Exit::NotFound => "not_found",
            Exit::Held => "held",
            Exit::VerifyFailed => "verify_failed",
            Exit::Unreachable => "unreachable",
            Exit::NotPrivate => "not_private",
        }
    }
}

/// Why a command failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// How the process exits.
    pub exit: Exit,
    /// A stable code: the library's (`LEASEHOLD_STORE_MISSING`, …) or the command's own
    /// (`LEASEHOLD_CLI_USAGE`, `LEASEHOLD_CLI_NOT_FOUND`, `LEASEHOLD_CLI_VERIFY_FAILED`).
    pub code: String,
    /// What happened, for a person.
    pub message: String,
}

impl Failure {
    /// A bad argument.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, "LEASEHOLD_CLI_USAGE", message)
    }

    /// A tenant or restore target that does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Exit::NotFound, "LEASEHOLD_CLI_NOT_FOUND", message)
    }

    /// A check that failed.
    pub fn verify_failed(message: impl Into<String>) -> Self {
        Self::new(Exit::VerifyFailed, "LEASEHOLD_CLI_VERIFY_FAILED", message)
    }

    fn new(exit: Exit, code: &str, message: impl Into<String>) -> Self {
        Self {
            exit,
            code: code.to_owned(),
            message: message.into(),
        }
    }

    /// `self` with `context` before its message.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The exit status of a library error.
pub fn exit_of(e: &Error) -> Exit {
    match e {
        Error::StoreMissing { .. } | Error::UnknownDatabase { .. } => Exit::NotFound,
        Error::LeaseHeld { .. } => Exit::Held,
        Error::Corrupt(_) => Exit::VerifyFailed,
        Error::Store(_) | Error::AuthFailed { .. } => Exit::Unreachable,
        Error::NotPrivate { .. } => Exit::NotPrivate,
        Error::InvalidId(_) | Error::InvalidPath(_) | Error::InvalidOption { .. } => Exit::Usage,
        _ => Exit::Failed,
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Self {
            exit: exit_of(&e),
            code: e.code().to_owned(),
            message: e.to_string(),
        }
    }
}

impl From<leasehold::lease::LeaseError> for Failure {
    fn from(e: leasehold::lease::LeaseError) -> Self {
        Error::from(e).into()
    }
}

impl From<leasehold::durable::StoreError> for Failure {
    fn from(e: leasehold::durable::StoreError) -> Self {
        Error::from(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::durable::StoreError;

    #[test]
    fn each_kind_of_error_has_its_own_status() {
        let store = |e| Failure::from(Error::from(e));
        let missing = store(StoreError::Missing {
            store: "lease file",
            location: "x".into(),
        });
        assert_eq!(
            (missing.exit, missing.code.as_str()),
            (Exit::NotFound, "LEASEHOLD_STORE_MISSING")
        );
        let down = store(StoreError::Unavailable {
            op: "list",
            message: "refused".into(),
        });
        assert_eq!(down.exit, Exit::Unreachable);
        let timeout = store(StoreError::Timeout {
            op: "get",
            after_ms: 1,
        });
        assert_eq!(timeout.exit, Exit::Unreachable);
        let shared = store(StoreError::NotPrivate {
            path: "p".into(),
            mode: 0o755,
        });
        assert_eq!(shared.exit, Exit::NotPrivate);
        let held = Failure::from(Error::LeaseHeld {
            key: "a/b".into(),
            owner: "r".into(),
            epoch: 2,
        });
        assert_eq!(held.exit, Exit::Held);
        assert_eq!(
            Failure::from(Error::Corrupt("c".into())).exit,
            Exit::VerifyFailed
        );
        assert_eq!(
            Failure::from(Error::InvalidPath("p".into())).exit,
            Exit::Usage
        );
        assert_eq!(Failure::from(Error::Closed("c".into())).exit, Exit::Failed);
    }

    #[test]
    fn statuses_are_distinct_and_named() {
        let all = [
            Exit::Ok,
            Exit::Failed,
            Exit::Usage,
            Exit::NotFound,
            Exit::Held,
            Exit::VerifyFailed,
            Exit::Unreachable,
            Exit::NotPrivate,
        ];
        for (i, exit) in all.iter().enumerate() {
            assert_eq!(usize::from(exit.status()), i);
        }
        let mut names: Vec<_> = all.iter().map(|e| e.name()).collect();
        names.dedup();
        assert_eq!(names.len(), all.len());
    }
}
