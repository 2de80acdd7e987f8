//! The operator command line (to come: sweep of tenants never opened again).
fn main() {}
