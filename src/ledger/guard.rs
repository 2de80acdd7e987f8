//! The authorizer that keeps host code inside its bracket (promise 8 in docs/guarantees.md).
//!
//! SQLite asks the authorizer about every action of a statement while it is prepared. While host
//! code runs (the [`HostGuard`] is up) it refuses what would reach around the bracket:
//!
//! - transaction control: `BEGIN`, `COMMIT`/`END`, `ROLLBACK`, `SAVEPOINT`, `RELEASE`;
//! - `ATTACH` and `DETACH`: a bracket reaches its own ledger only;
//! - every pragma that is not on the read-only lists below, and a read-only one given a value;
//! - `UPDATE`, `DELETE`, `DROP` and `ALTER` of the append-only `events` table, and any write
//!   to `sqlite_sequence` (which would make `seq` values come back);
//! - any use of the runtime's own tables, named `_leasehold_…` (the stored replies of
//!   idempotent messages, `_leasehold_replies`): reading, writing, dropping or altering them,
//!   an index or trigger on them, or a table, view or index of that name — a host that could
//!   write a stored reply could forge the answer to a retried command.
//!
//! A **read-only** guard ([`HostGuard::read_only`], the read connection of a query) refuses,
//! besides, everything that is not a read: every write, every `CREATE`, `DROP` and `ALTER`.
//!
//! `VACUUM` never reaches the authorizer, so [`refuse_unguarded`] refuses it by its keyword.
//! The runtime's own statements run with the guard down.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::ErrorCode;
use rusqlite::hooks::{AuthAction, Authorization, TransactionOperation};

use super::LedgerError;

/// Pragmas that only read, and whose value (`table_info(events)`) is an argument, not a setting.
const ARGUMENT_PRAGMAS: &[&str] = &[
    "foreign_key_check",
    "foreign_key_list",
    "index_info",
    "index_list",
    "index_xinfo",
    "integrity_check",
    "quick_check",
    "table_info",
    "table_list",
    "table_xinfo",
];

/// Pragmas that only read when they are given no value (`PRAGMA user_version`).
const READ_PRAGMAS: &[&str] = &[
    "application_id",
    "auto_vacuum",
    "busy_timeout",
    "cache_size",
    "collation_list",
    "compile_options",
    "data_version",
    "database_list",
    "encoding",
    "foreign_keys",
    "freelist_count",
    "function_list",
    "journal_mode",
    "journal_size_limit",
    "max_page_count",
    "module_list",
    "page_count",
    "page_size",
    "pragma_list",
    "schema_version",
    "synchronous",
    "user_version",
    "wal_autocheckpoint",
];

/// The table whose rows are never changed or removed by host code.
const EVENTS: &str = "events";

/// The prefix of the runtime's own tables (`_leasehold_replies`): host code never touches them.
pub(crate) const RUNTIME_PREFIX: &str = "_leasehold_";

/// Whether host code is running, and why the authorizer refused its last statement.
#[derive(Debug, Default)]
pub(crate) struct HostGuard {
    /// True while host code runs.
    active: AtomicBool,
    /// A query's guard: only reads pass.
    read_only: bool,
    /// What the authorizer refused last, for the error message.
    refusal: Mutex<Option<String>>,
}

impl HostGuard {
    /// The guard of a query's read connection: everything but a read is refused.
    pub(super) fn read_only() -> Self {
        Self {
            read_only: true,
            ..Self::default()
        }
    }

    /// Raises the guard before host code runs.
    pub(super) fn enter(&self) {
        self.remember(None);
        self.active.store(true, Ordering::SeqCst);
    }

    /// Lowers the guard after host code returned (or panicked).
    pub(super) fn leave(&self) {
        self.active.store(false, Ordering::SeqCst);
    }

    /// The authorizer's answer for one action.
    pub(super) fn authorize(&self, action: &AuthAction<'_>) -> Authorization {
        if !self.active.load(Ordering::SeqCst) {
            return Authorization::Allow;
        }
        let refused = match self.read_only {
            true => read_refusal(action),
            false => refusal_of(action),
        };
        match refused {
            None => Authorization::Allow,
            Some(why) => {
                self.remember(Some(why));
                Authorization::Deny
            }
        }
    }

    /// Maps an error of a host statement: an authorizer denial becomes [`LedgerError::Refused`]
    /// naming what was refused.
    pub(super) fn error(&self, e: rusqlite::Error) -> LedgerError {
        if e.sqlite_error_code() != Some(ErrorCode::AuthorizationForStatementDenied) {
            return LedgerError::from(e);
        }
        let why = self.refusal.lock().ok().and_then(|mut r| r.take());
        LedgerError::Refused(why.unwrap_or_else(|| format!("not authorized: {e}")))
    }

    fn remember(&self, why: Option<String>) {
        if let Ok(mut slot) = self.refusal.lock() {
            *slot = why;
        }
    }
}

/// Why host code may not perform `action`, or `None` if it may.
pub(super) fn refusal_of(action: &AuthAction<'_>) -> Option<String> {
    const CONTROL: &str =
        "transaction control belongs to the runtime; host code runs inside its bracket";
    if let Some(why) = runtime_table_refusal(action) {
        return Some(why);
    }
    match *action {
        AuthAction::Transaction { operation } => {
            Some(format!("{}: {CONTROL}", transaction_word(operation)))
        }
        AuthAction::Savepoint {
            operation,
            savepoint_name,
        } => Some(format!(
            "{} {savepoint_name}: {CONTROL}",
            savepoint_word(operation)
        )),
        AuthAction::Attach { filename } => Some(format!(
            "ATTACH {filename:?}: a host bracket reaches its own ledger only"
        )),
        AuthAction::Detach { database_name } => Some(format!(
            "DETACH {database_name}: a host bracket reaches its own ledger only"
        )),
        AuthAction::Pragma {
            pragma_name,
            pragma_value,
        } => pragma_refusal(pragma_name, pragma_value),
        AuthAction::Update { table_name, .. } => events_refusal("UPDATE", table_name),
        AuthAction::Delete { table_name } => events_refusal("DELETE FROM", table_name),
        AuthAction::Insert { table_name } if is_sequence(table_name) => {
            events_refusal("INSERT INTO", table_name)
        }
        AuthAction::DropTable { table_name } => events_refusal("DROP TABLE", table_name),
        AuthAction::AlterTable { table_name, .. } => events_refusal("ALTER TABLE", table_name),
        _ => None,
    }
}

/// Why a query (a read-only bracket) may not perform `action`: anything [`refusal_of`] refuses,
/// and anything that is not a read.
pub(super) fn read_refusal(action: &AuthAction<'_>) -> Option<String> {
    if let Some(why) = refusal_of(action) {
        return Some(why);
    }
    match action {
        AuthAction::Select
        | AuthAction::Read { .. }
        | AuthAction::Function { .. }
        | AuthAction::Recursive
        | AuthAction::Pragma { .. } => None,
        other => Some(format!(
            "{other:?}: a query only reads; writes belong to commands (TenantMessage)"
        )),
    }
}

/// Whether `name` is one of the runtime's own tables (or an index, view or trigger named so).
fn is_runtime(name: &str) -> bool {
    name.len() >= RUNTIME_PREFIX.len()
        && name[..RUNTIME_PREFIX.len()].eq_ignore_ascii_case(RUNTIME_PREFIX)
}

/// Why `action` would touch one of the runtime's own tables, if it would.
fn runtime_table_refusal(action: &AuthAction<'_>) -> Option<String> {
    let names: &[&str] = match *action {
        AuthAction::Read { table_name, .. }
        | AuthAction::Insert { table_name }
        | AuthAction::Update { table_name, .. }
        | AuthAction::Delete { table_name }
        | AuthAction::DropTable { table_name }
        | AuthAction::DropTempTable { table_name }
        | AuthAction::AlterTable { table_name, .. }
        | AuthAction::CreateTable { table_name }
        | AuthAction::CreateTempTable { table_name }
        | AuthAction::Analyze { table_name }
        | AuthAction::CreateVtable { table_name, .. }
        | AuthAction::DropVtable { table_name, .. } => &[table_name],
        AuthAction::CreateIndex {
            index_name,
            table_name,
        }
        | AuthAction::CreateTempIndex {
            index_name,
            table_name,
        }
        | AuthAction::DropIndex {
            index_name,
            table_name,
        }
        | AuthAction::DropTempIndex {
            index_name,
            table_name,
        } => &[index_name, table_name],
        AuthAction::CreateTrigger {
            trigger_name,
            table_name,
        }
        | AuthAction::CreateTempTrigger {
            trigger_name,
            table_name,
        }
        | AuthAction::DropTrigger {
            trigger_name,
            table_name,
        }
        | AuthAction::DropTempTrigger {
            trigger_name,
            table_name,
        } => &[trigger_name, table_name],
        AuthAction::CreateView { view_name }
        | AuthAction::CreateTempView { view_name }
        | AuthAction::DropView { view_name }
        | AuthAction::DropTempView { view_name } => &[view_name],
        AuthAction::Reindex { index_name } => &[index_name],
        _ => &[],
    };
    names.iter().find(|n| is_runtime(n)).map(|name| {
        format!(
            "{name}: the runtime's own table (stored replies of idempotent messages); host code cannot read or change it"
        )
    })
}

fn transaction_word(op: TransactionOperation) -> &'static str {
    match op {
        TransactionOperation::Begin => "BEGIN",
        TransactionOperation::Rollback => "ROLLBACK",
        TransactionOperation::Release => "RELEASE",
        // SQLite names the third transaction action "COMMIT" (also for END).
        _ => "COMMIT",
    }
}

fn savepoint_word(op: TransactionOperation) -> &'static str {
    match op {
        TransactionOperation::Begin => "SAVEPOINT",
        TransactionOperation::Release => "RELEASE",
        TransactionOperation::Rollback => "ROLLBACK TO",
        _ => "SAVEPOINT",
    }
}

fn pragma_refusal(name: &str, value: Option<&str>) -> Option<String> {
    let name_lc = name.to_ascii_lowercase();
    let allowed = match value {
        Some(_) => ARGUMENT_PRAGMAS.contains(&name_lc.as_str()),
        None => {
            READ_PRAGMAS.contains(&name_lc.as_str()) || ARGUMENT_PRAGMAS.contains(&name_lc.as_str())
        }
    };
    if allowed {
        return None;
    }
    let shown = value.map_or_else(|| name.to_string(), |v| format!("{name}={v}"));
    Some(format!(
        "PRAGMA {shown}: only read-only pragmas are allowed in a host bracket; the runtime owns the connection's settings"
    ))
}

fn is_sequence(table: &str) -> bool {
    table.eq_ignore_ascii_case("sqlite_sequence")
}

fn events_refusal(verb: &str, table: &str) -> Option<String> {
    if table.eq_ignore_ascii_case(EVENTS) {
        Some(format!("{verb} {table}: the events table is append-only"))
    } else if is_sequence(table) {
        Some(format!(
            "{verb} {table}: event sequence numbers are the runtime's"
        ))
    } else {
        None
    }
}

/// Refuses what the authorizer never sees: `VACUUM` (and `VACUUM INTO`).
pub(super) fn refuse_unguarded(sql: &str) -> Result<(), LedgerError> {
    match leading_keyword(sql) {
        Some(word) if word.eq_ignore_ascii_case("VACUUM") => Err(LedgerError::Refused(
            "VACUUM: the runtime owns the ledger file; images are taken by the runtime".to_string(),
        )),
        _ => Ok(()),
    }
}

/// The first keyword of `sql`, past white space and `--` / `/* */` comments.
fn leading_keyword(sql: &str) -> Option<&str> {
    let mut rest = sql;
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, tail)| tail);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, tail)| tail);
        } else {
            break;
        }
    }
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pragma<'a>(name: &'a str, value: Option<&'a str>) -> AuthAction<'a> {
        AuthAction::Pragma {
            pragma_name: name,
            pragma_value: value,
        }
    }

    #[test]
    fn transaction_control_is_refused_and_named() {
        let begin = AuthAction::Transaction {
            operation: TransactionOperation::Begin,
        };
        let commit = AuthAction::Transaction {
            operation: TransactionOperation::Unknown,
        };
        let release = AuthAction::Savepoint {
            operation: TransactionOperation::Release,
            savepoint_name: "lh_call",
        };
        assert!(refusal_of(&begin).is_some_and(|m| m.starts_with("BEGIN:")));
        assert!(refusal_of(&commit).is_some_and(|m| m.starts_with("COMMIT:")));
        assert!(refusal_of(&release).is_some_and(|m| m.starts_with("RELEASE lh_call:")));
    }

    #[test]
    fn only_read_only_pragmas_pass() {
        assert_eq!(refusal_of(&pragma("user_version", None)), None);
        assert_eq!(refusal_of(&pragma("table_info", Some("events"))), None);
        assert_eq!(refusal_of(&pragma("JOURNAL_MODE", None)), None);
        for (name, value) in [
            ("journal_mode", Some("DELETE")),
            ("user_version", Some("7")),
            ("foreign_keys", Some("OFF")),
            ("wal_checkpoint", None),
            ("optimize", None),
            ("writable_schema", Some("ON")),
        ] {
            assert!(
                refusal_of(&pragma(name, value)).is_some(),
                "{name} {value:?}"
            );
        }
    }

    #[test]
    fn the_events_table_is_append_only_for_host_code() {
        let ins = AuthAction::Insert {
            table_name: "events",
        };
        let del = AuthAction::Delete {
            table_name: "events",
        };
        let other = AuthAction::Delete {
            table_name: "accounts",
        };
        let seq = AuthAction::Update {
            table_name: "sqlite_sequence",
            column_name: "seq",
        };
        assert_eq!(refusal_of(&ins), None);
        assert_eq!(refusal_of(&other), None);
        assert!(refusal_of(&del).is_some());
        assert!(refusal_of(&seq).is_some());
    }

    #[test]
    fn the_runtimes_own_tables_are_out_of_host_codes_reach() {
        let touch = [
            AuthAction::Read {
                table_name: "_leasehold_replies",
                column_name: "reply",
            },
            AuthAction::Insert {
                table_name: "_LEASEHOLD_replies",
            },
            AuthAction::Update {
                table_name: "_leasehold_replies",
                column_name: "reply",
            },
            AuthAction::Delete {
                table_name: "_leasehold_replies",
            },
            AuthAction::DropTable {
                table_name: "_leasehold_replies",
            },
            AuthAction::CreateTrigger {
                trigger_name: "t",
                table_name: "_leasehold_replies",
            },
            AuthAction::DropIndex {
                index_name: "_leasehold_replies_at",
                table_name: "_leasehold_replies",
            },
            AuthAction::CreateTable {
                table_name: "_leasehold_mine",
            },
        ];
        for action in &touch {
            assert!(refusal_of(action).is_some(), "{action:?}");
            assert!(read_refusal(action).is_some(), "{action:?}");
        }
        let own = AuthAction::Read {
            table_name: "accounts",
            column_name: "cents",
        };
        assert_eq!(refusal_of(&own), None);
        assert_eq!(read_refusal(&own), None);
    }

    #[test]
    fn a_query_only_reads() {
        let writes = [
            AuthAction::Insert {
                table_name: "accounts",
            },
            AuthAction::Update {
                table_name: "accounts",
                column_name: "cents",
            },
            AuthAction::Delete {
                table_name: "accounts",
            },
            AuthAction::CreateTable {
                table_name: "report",
            },
            AuthAction::CreateTempTable {
                table_name: "scratch",
            },
        ];
        for action in &writes {
            assert_eq!(refusal_of(action), None, "a command may: {action:?}");
            assert!(
                read_refusal(action).is_some(),
                "a query may not: {action:?}"
            );
        }
        assert_eq!(read_refusal(&AuthAction::Select), None);
        assert_eq!(read_refusal(&pragma("user_version", None)), None);
        assert!(read_refusal(&pragma("user_version", Some("3"))).is_some());
    }

    #[test]
    fn vacuum_is_found_past_comments() {
        assert_eq!(
            leading_keyword("  -- note\n /* x */ vacuum into 'f'"),
            Some("vacuum")
        );
        assert_eq!(leading_keyword("SELECT 1"), Some("SELECT"));
        assert_eq!(leading_keyword("/* only a comment"), None);
        assert!(refuse_unguarded("VACUUM").is_err());
        assert!(refuse_unguarded("select 'VACUUM'").is_ok());
    }
}
