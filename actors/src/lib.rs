//! # leasehold-actors — the actix runtime (to come)
