//! The durable-store conformance suite: what every [`DurableStore`] backend must do.
//!
//! [`durable_store_conformance`] runs every check; each check is also exported on its own. A
//! check panics with a message naming the rule it found broken
//! (`durable store conformance, rule "put never overwrites": …`).
//!
//! Every check writes only under `<ns>/<its own segment>/`, so runs with distinct `ns` can share
//! one bucket; the full suite deletes `<ns>/` when it is done.

use std::fmt::Display;

use crate::DurableStore;
use crate::durable::{ListPage, Put, StoreError, check_key};

/// Objects of this size stand for an image in the round trip check.
const MIB: usize = 1024 * 1024;

/// How many puts race for one key.
const RACERS: usize = 16;

fn broken(rule: &str, what: impl Display) -> ! {
    panic!("durable store conformance, rule {rule:?}: {what}")
}

/// The value of a call the rule needs to succeed.
fn ok<T>(rule: &str, call: impl Display, result: Result<T, StoreError>) -> T {
    result.unwrap_or_else(|e| broken(rule, format_args!("{call} failed: {e}")))
}

fn expect_eq<T: PartialEq + std::fmt::Debug>(rule: &str, what: impl Display, got: T, want: T) {
    if got != want {
        broken(rule, format_args!("{what}: got {got:?}, want {want:?}"));
    }
}

/// A put the rule needs to create its object.
async fn create(store: &dyn DurableStore, rule: &str, key: &str, bytes: &[u8]) {
    let put = ok(
        rule,
        format_args!("put {key:?}"),
        store.put_if_absent(key, bytes.to_vec()).await,
    );
    expect_eq(
        rule,
        format_args!("the first put of {key:?}"),
        put,
        Put::Created,
    );
}

async fn list(store: &dyn DurableStore, rule: &str, prefix: &str) -> Vec<String> {
    ok(
        rule,
        format_args!("list {prefix:?}"),
        store.list(prefix).await,
    )
}

async fn get(store: &dyn DurableStore, rule: &str, key: &str) -> Option<Vec<u8>> {
    ok(rule, format_args!("get {key:?}"), store.get(key).await)
}

/// Runs every check under `ns` (a valid key, unique to this run, e.g. `conf-<nanos>`), then
/// deletes `<ns>/`. Panics naming the first rule the store breaks.
pub async fn durable_store_conformance(store: &dyn DurableStore, ns: &str) {
    if let Err(e) = check_key(ns) {
        panic!("durable store conformance: the namespace must be a valid key: {e}");
    }
    conformance_put_get_round_trips(store, ns).await;
    conformance_put_never_overwrites(store, ns).await;
    conformance_get_missing_is_none(store, ns).await;
    conformance_list_is_sorted_by_whole_segments(store, ns).await;
    conformance_list_of_an_empty_prefix_is_empty(store, ns).await;
    conformance_list_pages_follow_the_listing(store, ns).await;
    conformance_delete_removes_and_missing_is_ok(store, ns).await;
    conformance_delete_keys_removes_each_and_checks_all_first(store, ns).await;
    conformance_delete_prefix_takes_whole_segments(store, ns).await;
    conformance_bad_keys_are_refused_everywhere(store, ns).await;
    conformance_concurrent_puts_have_one_winner(store, ns).await;
    conformance_settle_put_of_a_key_with_no_put_running_answers(store, ns).await;
    conformance_delete_prefix_clears_a_namespace(store, ns).await;
}

/// `settle_put` of a key whose put has returned (or that was never put) answers at once, even
/// with no time to wait; a key that breaks the rules is refused. The runtime's reconciliation
/// asks it before it judges a put (docs/guarantees.md, "Reconciling puts of unknown outcome").
pub async fn conformance_settle_put_of_a_key_with_no_put_running_answers(
    store: &dyn DurableStore,
    ns: &str,
) {
    const RULE: &str = "settle_put of a key with no put running answers at once";
    let key = format!("{ns}/settle/a");
    create(store, RULE, &key, b"x").await;
    let none = std::time::Duration::ZERO;
    ok(
        RULE,
        "settle_put of a landed key",
        store.settle_put(&key, none).await,
    );
    let never = format!("{ns}/settle/never");
    ok(
        RULE,
        "settle_put of a key never put",
        store.settle_put(&never, none).await,
    );
    expect_invalid(
        RULE,
        "settle_put of a prefix",
        store.settle_put(&format!("{ns}/settle/"), none).await,
    );
}

/// Put then get returns the same bytes: empty, small and 1 MiB objects.
pub async fn conformance_put_get_round_trips(store: &dyn DurableStore, ns: &str) {
    const RULE: &str = "put then get round-trips the bytes";
    let mib: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8).collect();
    for (name, bytes) in [
        ("empty", Vec::new()),
        ("small", b"hello".to_vec()),
        ("mib", mib),
    ] {
        let key = format!("{ns}/roundtrip/{name}");
        create(store, RULE, &key, &bytes).await;
        match get(store, RULE, &key).await {
            Some(back) if back == bytes => {}
            Some(back) => broken(
                RULE,
                format_args!(
                    "{key:?}: {} bytes back, {} written, or different",
                    back.len(),
                    bytes.len()
                ),
            ),
            None => broken(RULE, format_args!("{key:?} is missing right after its put")),
        }
        let size = ok(RULE, format_args!("size {key:?}"), store.size(&key).await);
        expect_eq(
            RULE,
            format_args!("the size of {key:?}"),
            size,
            Some(bytes.len() as u64),
        );
    }
}

/// A second put of a key is `AlreadyExists` and leaves the first bytes in place.
pub async fn conformance_put_never_overwrites(store: &dyn DurableStore, ns: &str) {
    const RULE: &str = "put never overwrites";
    let key = format!("{ns}/overwrite/k");
    create(store, RULE, &key, b"first").await;
    for second in [&b"second"[..], b"first", b""] {
        let put = ok(
            RULE,
            "the second put",
            store.put_if_absent(&key, second.to_vec()).await,
        );
        expect_eq(RULE, "the second put of one key", put, Put::AlreadyExists);
    }
    let kept = get(store, RULE, &key).await;
    expect_eq(
        RULE,
        "the object after later puts",
        kept,
        Some(b"first".to_vec()),
    );
}

/// A missing key reads as `None`, and so does a prefix of other objects.
pub async fn conformance_get_missing_is_none(store: &dyn DurableStore, ns: &str) {
    const RULE: &str = "get of a missing key is None";
    let missing = get(store, RULE, &format!("{ns}/missing/nothing")).await;
    expect_eq(RULE, "get of a key never written", missing, None);
    create(store, RULE, &format!("{ns}/missing/sub/x"), b"x").await;
    let prefix = get(store, RULE, &format!("{ns}/missing/sub")).await;
    expect_eq(
        RULE,
        "get of a name that only prefixes other objects",
        prefix,
        None,
    );
    for name in ["missing/nothing", "missing/sub"] {
        let key = format!("{ns}/{name}");
        let size = ok(RULE, format_args!("size {key:?}"), store.size(&key).await);
        expect_eq(RULE, format_args!("size of {key:?}"), size, None);
    }
}

/// `list` returns full keys, sorted, under whole segments only.
pub async fn conformance_list_is_sorted_by_whole_segments(store: &dyn DurableStore, ns: &str) {
    const RULE: &str = "list is sorted and takes whole segments";
    let area = format!("{ns}/list");
    let names = [
        "acme/t2/b",
        "acme2/t9/a",
        "acme/t1/a",
        "acme-x/a",
        "acme/t1/Z",
        "acm/a",
    ];
    for name in names {
        create(store, RULE, &format!("{area}/{name}"), name.as_bytes()).await;
    }
    let under =
        |names: &[&str]| -> Vec<String> { names.iter().map(|n| format!("{area}/{n}")).collect() };
    let acme = list(store, RULE, &format!("{area}/acme/")).await;
    expect_eq(
        RULE,
        "list of acme/",
        acme,
        under(&["acme/t1/Z", "acme/t1/a", "acme/t2/b"]),
    );
    let mut all = under(&names);
    all.sort();
    expect_eq(
        RULE,
        "list of the whole area",
        list(store, RULE, &format!("{area}/")).await,
        all.clone(),
    );
    let everything = list(store, RULE, "").await;
    if !everything.is_sorted() || !all.iter().all(|k| everything.contains(k)) {
        broken(
            RULE,
            "list of \"\" is unsorted or misses keys the area holds",
        );
    }
}

async fn page(
    store: &dyn DurableStore,
    rule: &str,
    prefix: &str,
    after: Option<&str>,
    max_keys: usize,
) -> ListPage {
    ok(
        rule,
        format_args!("list_page {prefix:?} after {after:?}, {max_keys} keys"),
        store.list_page(prefix, after, max_keys).await,
    )
}

/// `list_page` walks the listing in order: pages of at most `max_keys` keys, each after its
/// marker, chained by `next` until `None`, together exactly what `list` returns; a marker need
/// not be a key.
pub async fn conformance_list_pages_follow_the_listing(store: &dyn DurableStore, ns: &str) {
    const RULE: &str = "list pages follow the listing";
    let area = format!("{ns}/pages/");
    let names = ["d/b/c", "d0", "d-x", "d/a", "e/f/g", "d.y", "d/b-z", "c"];
    for name in names {
        create(store, RULE, &format!("{area}{name}"), name.as_bytes()).await;
    }
    let at =
        |names: &[&str]| -> Vec<String> { names.iter().map(|n| format!("{area}{n}")).collect() };
    let whole = list(store, RULE, &area).await;
    let (mut walked, mut after, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let got = page(store, RULE, &area, after.as_deref(), 3).await;
        if got.keys.len() > 3 || pages > names.len() {
            broken(
                RULE,
                format_args!("page {pages} is too long or never ends: {got:?}"),
            );
        }
        walked.extend(got.keys);
        pages += 1;
        match got.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    expect_eq(RULE, "the pages of 3, joined", walked, whole);
    let cases: [(&str, usize, &[&str]); 4] = [
        ("d/b", 2, &["d/b-z", "d/b/c"]),
        ("d/~", 5, &["d0", "e/f/g"]),
        ("z", 5, &[]),
        ("c", 0, &["d-x"]),
    ];
    for (marker, max_keys, want) in cases {
        let after = format!("{area}{marker}");
        let got = page(store, RULE, &area, Some(&after), max_keys).await;
        expect_eq(
            RULE,
            format_args!("the page after {after:?}"),
            got.keys,
            at(want),
        );
    }
    let last = page(store, RULE, &area, Some(&format!("{area}d0")), 1).await;
    expect_eq(
        RULE,
        "the last page",
        last,
        ListPage {
            keys: at(&["e/f/g"]),
            next: None,
        },
    );
}

/// A prefix with nothing under it lists empty, also when a longer name starts with it.
pub async fn conformance_list_of_an_empty_prefix_is_empty(store: &dyn DurableStore, ns: &str) {
    const RULE: &str = "list of an empty prefix is empty";
    let none = list(store, RULE, &format!("{ns}/nothing-here/")).await;
    expect_eq(RULE, "list of a prefix never written", none, Vec::new());
    create(store, RULE, &format!("{ns}/empty/acme2/x"), b"x").await;
    let beside = list(store, RULE, &format!("{ns}/empty/acme/")).await;
    expect_eq(RULE, "list of acme/ beside acme2/x", beside, Vec::new());
}

/// `delete` removes the object (its key can be put again); deleting a missing key is fine.
pub async fn conformance_delete_removes_and_missing_is_ok(store: &dyn DurableStore, ns: &str) {
    const RULE: &str = "delete removes; a missing key is no error";
    let (key, other) = (format!("{ns}/delete/k"), format!("{ns}/delete/k2"));
    create(store, RULE, &key, b"k").await;
    create(store, RULE, &other, b"k2").await;
    ok(RULE, "delete", store.delete(&key).await);
    expect_eq(RULE, "get after delete", get(store, RULE, &key).await, None);
    expect_eq(
        RULE,
        "list after delete",
        list(store, RULE, &format!("{ns}/delete/")).await,
        vec![other.clone()],
    );
    for missing in [
        key.clone(),
        format!("{ns}/delete/never"),
        format!("{ns}/delete/gone/deeper"),
    ] {
        ok(
            RULE,
            format_args!("delete of missing {missing:?}"),
            store.delete(&missing).await,
        );
    }
    create(store, RULE, &key, b"again").await;
    expect_eq(
        RULE,
        "get of the key put again",
        get(store, RULE, &key).await,
        Some(b"again".to_vec()),
    );
}

/// `delete_keys` deletes each key given (missing ones are fine) and nothing else; one bad key
/// refuses the call before anything is deleted.
pub async fn conformance_delete_keys_removes_each_and_checks_all_first(
    store: &dyn DurableStore,
    ns: &str,
) {
    const RULE: &str = "delete_keys removes each key and checks all first";
    let area = format!("{ns}/delete-keys/");
    let keys: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|k| format!("{area}{k}"))
        .collect();
    for key in &keys {
        create(store, RULE, key, b"x").await;
    }
    let bad = vec![keys[0].clone(), format!("{area}../x")];
    if !matches!(
        store.delete_keys(&bad).await,
        Err(StoreError::InvalidKey { .. })
    ) {
        broken(
            RULE,
            "a list holding a bad key was not refused as InvalidKey",
        );
    }
    expect_eq(
        RULE,
        "after a refused call",
        list(store, RULE, &area).await,
        keys.clone(),
    );
    let doomed = vec![keys[0].clone(), keys[2].clone(), format!("{area}missing")];
    ok(RULE, "delete_keys", store.delete_keys(&doomed).await);
    expect_eq(
        RULE,
        "what is left",
        list(store, RULE, &area).await,
        vec![keys[1].clone()],
    );
    ok(RULE, "delete_keys of nothing", store.delete_keys(&[]).await);
}

/// `delete_prefix` takes whole segments: `<ns>/acme` is refused, `<ns>/acme/` deletes exactly
/// the acme objects and counts them, `<ns>/acme2/` stays.
pub async fn conformance_delete_prefix_takes_whole_segments(store: &dyn DurableStore, ns: &str) {
    const RULE: &str = "delete_prefix takes whole segments only";
    let acme = [format!("{ns}/acme/t1/a"), format!("{ns}/acme/t2/b")];
    let neighbour = format!("{ns}/acme2/t9/a");
    for key in acme.iter().chain([&neighbour]) {
        create(store, RULE, key, key.as_bytes()).await;
    }
    let refused = store.delete_prefix(&format!("{ns}/acme")).await;
    if !matches!(refused, Err(StoreError::InvalidKey { .. })) {
        broken(
            RULE,
            format_args!("delete_prefix without a trailing '/' gave {refused:?}"),
        );
    }
    expect_eq(
        RULE,
        "acme/ after the refusal",
        list(store, RULE, &format!("{ns}/acme/")).await,
        acme.to_vec(),
    );
    expect_eq(
        RULE,
        "acme2/ after the refusal",
        list(store, RULE, &format!("{ns}/acme2/")).await,
        vec![neighbour.clone()],
    );
    let count = ok(
        RULE,
        "delete_prefix acme/",
        store.delete_prefix(&format!("{ns}/acme/")).await,
    );
    expect_eq(
        RULE,
        "objects delete_prefix acme/ counted",
        count,
        acme.len(),
    );
    expect_eq(
        RULE,
        "acme/ after its deletion",
        list(store, RULE, &format!("{ns}/acme/")).await,
        Vec::new(),
    );
    expect_eq(
        RULE,
        "the neighbour acme2/",
        get(store, RULE, &neighbour).await,
        Some(neighbour.clone().into_bytes()),
    );
    let again = ok(
        RULE,
        "delete_prefix of nothing",
        store.delete_prefix(&format!("{ns}/acme/")).await,
    );
    expect_eq(RULE, "objects a second delete_prefix counted", again, 0);
}

/// Keys a store must refuse on every call, under `area`.
fn bad_keys(area: &str) -> Vec<String> {
    let mut keys = vec![
        String::new(),
        format!("/{area}/a"),
        format!("{area}/a/"),
        format!("{area}//a"),
    ];
    keys.extend(["x/../a", "./a", "a\0b", "a b", "a\\b"].map(|k| format!("{area}/{k}")));
    keys
}

/// Prefixes a store must refuse (`""` only in `delete_prefix`).
fn bad_prefixes(area: &str) -> Vec<String> {
    let mut prefixes = vec![
        "/".to_string(),
        format!("/{area}/"),
        area.to_string(),
        format!("{area}//"),
    ];
    prefixes.extend(["x/../", "a b/", "a\0/"].map(|p| format!("{area}/{p}")));
    prefixes
}

fn expect_invalid<T: std::fmt::Debug>(
    rule: &str,
    call: impl Display,
    result: Result<T, StoreError>,
) {
    if !matches!(result, Err(StoreError::InvalidKey { .. })) {
        broken(
            rule,
            format_args!("{call} gave {result:?}, want InvalidKey"),
        );
    }
}

/// Bad keys and prefixes are refused by every call with `InvalidKey`, and nothing is written
/// or deleted.
pub async fn conformance_bad_keys_are_refused_everywhere(store: &dyn DurableStore, ns: &str) {
    const RULE: &str = "bad keys are refused by every call and touch nothing";
    let area = format!("{ns}/refuse");
    let kept = format!("{area}/a");
    create(store, RULE, &kept, b"keep").await;
    for key in bad_keys(&area) {
        expect_invalid(
            RULE,
            format_args!("put {key:?}"),
            store.put_if_absent(&key, b"bad".to_vec()).await,
        );
        expect_invalid(RULE, format_args!("get {key:?}"), store.get(&key).await);
        expect_invalid(RULE, format_args!("size {key:?}"), store.size(&key).await);
        expect_invalid(
            RULE,
            format_args!("delete {key:?}"),
            store.delete(&key).await,
        );
    }
    for prefix in bad_prefixes(&area) {
        expect_invalid(
            RULE,
            format_args!("list {prefix:?}"),
            store.list(&prefix).await,
        );
        expect_invalid(
            RULE,
            format_args!("delete_prefix {prefix:?}"),
            store.delete_prefix(&prefix).await,
        );
    }
    expect_invalid(RULE, "delete_prefix \"\"", store.delete_prefix("").await);
    expect_eq(
        RULE,
        "the area after the refusals",
        list(store, RULE, &format!("{area}/")).await,
        vec![kept.clone()],
    );
    expect_eq(
        RULE,
        "the kept object",
        get(store, RULE, &kept).await,
        Some(b"keep".to_vec()),
    );
}

/// Racing puts of one key with different bytes: exactly one `Created`, and the object holds the
/// winner's bytes.
pub async fn conformance_concurrent_puts_have_one_winner(store: &dyn DurableStore, ns: &str) {
    const RULE: &str = "concurrent puts of one key have exactly one winner";
    let key = format!("{ns}/race/k");
    let bytes = |i: usize| -> Vec<u8> { (0..64 * 1024).map(|j| (i * 7 + j % 13) as u8).collect() };
    let puts = (0..RACERS).map(|i| {
        let (key, bytes) = (key.clone(), bytes(i));
        async move { (i, store.put_if_absent(&key, bytes).await) }
    });
    let mut winners = Vec::new();
    for (i, result) in futures::future::join_all(puts).await {
        match ok(RULE, format_args!("racing put {i}"), result) {
            Put::Created => winners.push(i),
            Put::AlreadyExists => {}
        }
    }
    let [winner] = winners[..] else {
        broken(
            RULE,
            format_args!("{} of {RACERS} racing puts were Created", winners.len()),
        );
    };
    if get(store, RULE, &key).await != Some(bytes(winner)) {
        broken(
            RULE,
            format_args!("the object does not hold the bytes of the winner, put {winner}"),
        );
    }
}

/// `delete_prefix("<ns>/")` deletes everything the checks wrote, and `<ns>/` then lists empty.
pub async fn conformance_delete_prefix_clears_a_namespace(store: &dyn DurableStore, ns: &str) {
    const RULE: &str = "delete_prefix clears a whole tree";
    let prefix = format!("{ns}/");
    let before = list(store, RULE, &prefix).await.len();
    let count = ok(
        RULE,
        "delete_prefix of the namespace",
        store.delete_prefix(&prefix).await,
    );
    expect_eq(
        RULE,
        "objects counted by delete_prefix of the namespace",
        count,
        before,
    );
    expect_eq(
        RULE,
        "the namespace after its deletion",
        list(store, RULE, &prefix).await,
        Vec::new(),
    );
}
