//! Tests of the PostgreSQL store's checks that need no server.

use super::*;

#[test]
fn table_names_are_plain_lowercase_identifiers() {
    for good in ["leases", "_x", "a1_b2", &"a".repeat(63)] {
        assert_eq!(check_table_name(good), Ok(()), "{good}");
    }
    for bad in [
        "",
        "1abc",
        "Leases",
        "a-b",
        "a.b",
        "a;drop",
        "a\"b",
        &"a".repeat(64),
    ] {
        assert!(
            matches!(
                check_table_name(bad),
                Err(Error::InvalidOption { name: "table", .. })
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn options_that_cannot_work_are_refused() {
    let zero_pool = PgOptions {
        pool_size: 0,
        ..PgOptions::default()
    };
    assert!(zero_pool.check().is_err());
    let zero_deadline = PgOptions {
        op_timeout: Duration::from_micros(10),
        ..PgOptions::default()
    };
    assert!(zero_deadline.check().is_err());
    assert_eq!(PgOptions::default().check(), Ok(()));
}
