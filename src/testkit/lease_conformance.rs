//! STUB
