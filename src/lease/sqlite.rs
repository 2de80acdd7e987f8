//! STUB — `SqliteLeaseStore`, the embedded lease store.
