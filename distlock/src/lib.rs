//! distlock
