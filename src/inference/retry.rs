//! Retries of transient failures: capped exponential backoff with jitter, honouring
//! `Retry-After`.
