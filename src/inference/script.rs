//! The `script` driver.
