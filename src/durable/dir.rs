//! STUB — `DirStore`, the embedded durable store.
