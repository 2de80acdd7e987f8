//! STUB — `Deadline<S>`: every call of the wrapped lease or durable store settles within a limit.
