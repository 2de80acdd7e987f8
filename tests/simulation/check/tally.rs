//! What the ops of this process came to and how long each kind took, for the test's output.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::model::Res;
use crate::ops::Op;

/// How often each kind of op came to each outcome, over every case of this process.
static TALLY: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

pub fn tally(op: &Op, observed: &[Res]) {
    let name = format!("{op:?}");
    let name = name.split([' ', '(']).next().unwrap_or_default();
    let outcome: Vec<String> = observed
        .iter()
        .map(|r| {
            let r = format!("{r:?}");
            r.split('(').next().unwrap_or_default().to_string()
        })
        .collect();
    let mut tally = TALLY.lock().unwrap_or_else(|e| e.into_inner());
    *tally
        .entry(format!("{name} -> {}", outcome.join(",")))
        .or_default() += 1;
}

/// Real time spent on each kind of op (its calls and the checks after it), over every case.
static TIMES: Mutex<BTreeMap<String, Duration>> = Mutex::new(BTreeMap::new());

pub fn time(op: &Op, took: Duration) {
    let name = format!("{op:?}");
    let name = name
        .split([' ', '('])
        .next()
        .unwrap_or_default()
        .to_string();
    let mut times = TIMES.lock().unwrap_or_else(|e| e.into_inner());
    *times.entry(name).or_default() += took;
}

/// What the ops of this process came to, one line per (op, outcome), and the real time each
/// kind of op took in all, for the test's output.
pub fn coverage() -> String {
    let tally = TALLY.lock().unwrap_or_else(|e| e.into_inner());
    let times = TIMES.lock().unwrap_or_else(|e| e.into_inner());
    let outcomes = tally.iter().map(|(k, n)| format!("{n:>7}  {k}"));
    let spent = times
        .iter()
        .map(|(k, d)| format!("{:>7} ms  {k}", d.as_millis()));
    outcomes.chain(spent).collect::<Vec<_>>().join("\n")
}
