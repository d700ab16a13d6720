//! Test harness: where the test servers are, and private redis-server processes.
