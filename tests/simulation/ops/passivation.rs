//! The passivation cases (a leading [`Op::Passivation`]): the everyday ops and the outages and
//! stalls of the first fault classes, with passivation on, and the ops that let a tenure go
//! idle ([`Op::Passivate`]) or race its passivation with a write, an open, a handoff or a
//! forget ([`Op::RacePassivate`]).
//!
//! Every clock move of these cases goes through the world's `pass_time`, which runs each
//! replica's idle check right after it, as the model does: the runtime's own idle timer (real
//! time) then never finds a tenant idle that the model has not let go already. So the ops that
//! move clocks inside a call (a drained handoff's pause, the lapses, a zombie's ship) stay out,
//! as do crash (a dead process's kept handles would reopen through a supervisor that lives on
//! in this process) and late landings (docs/testing.md, "Passivation in the simulation").

use proptest::prelude::*;

use super::{Op, Racer, at, everyday_op, faulty_op, on, tenant};

/// The leading op: on `Images` one case in two (a passivation that did not publish its final
/// image loses writes there; on `Shipped` everything acknowledged is in the log already).
pub(super) fn case() -> impl Strategy<Value = Op> {
    any::<bool>().prop_map(|images| Op::Passivation { images })
}

/// The call that races a passivation.
fn racer() -> impl Strategy<Value = Racer> {
    prop::sample::select(vec![
        Racer::Write,
        Racer::Open,
        Racer::Handoff,
        Racer::Forget,
        Racer::Abandon,
    ])
}

/// One op of a passivation case.
pub(super) fn op() -> BoxedStrategy<Op> {
    let everyday = everyday_op().prop_map(|op| match op {
        // Its pause moves the clocks while the handoff drains: no idle check could follow it.
        Op::DrainedHandoff { t, at, renew, .. } => Op::DrainedHandoff {
            t,
            at,
            pause: 0,
            renew,
        },
        other => other,
    });
    prop_oneof![
        100 => everyday,
        10 => faulty_op(),
        3 => super::replica().prop_map(|r| Op::Close { r }),
        12 => on(|t, at| Op::Passivate { t, at, ms: 0 }),
        8 => (tenant(), at(), racer())
            .prop_map(|(t, at, with)| Op::RacePassivate { t, at, ms: 0, with }),
    ]
    .boxed()
}
