//! staging
