//! STUB — conformance suites, `FaultyStore`, `FaultyLeaseStore`.
