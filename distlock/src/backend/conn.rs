//! Connection settings shared by every mode: built here and nowhere else.
//!
//! Every TCP connection distlock opens — commands, subscribers, sentinels, cluster and
//! quorum nodes — has `TCP_NODELAY` (every lock operation is a small request waiting for its
//! reply; redis-rs leaves Nagle on) and TCP keepalive (a peer that vanished without a FIN,
//! e.g. behind a NAT that dropped the flow, is detected within 25 s of silence: 10 s idle,
//! then 3 probes 5 s apart).

use std::time::Duration;

use distlock_config::{BackendConfig, RedisUrl};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::io::tcp::{socket2::TcpKeepalive, TcpSettings};
use redis::{ConnectionInfo, IntoConnectionInfo};

use super::error::{bounded, DriverError};

/// Idle time before the first keepalive probe.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// Between keepalive probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered probes before the connection is declared dead.
const KEEPALIVE_PROBES: u32 = 3;

/// How a backend connects: its timeouts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Longest wait for a connection.
    pub(crate) connect_timeout: Duration,
    /// Longest wait for any reply.
    pub(crate) response_timeout: Duration,
}

impl Settings {
    pub(crate) fn of(cfg: &BackendConfig) -> Settings {
        Settings {
            connect_timeout: cfg.connect_timeout,
            response_timeout: cfg.response_timeout,
        }
    }

    /// The TCP options of every connection.
    pub(crate) fn tcp(&self) -> TcpSettings {
        let keepalive = TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL);
        #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
        let keepalive = keepalive.with_retries(KEEPALIVE_PROBES);
        TcpSettings::default()
            .set_nodelay(true)
            .set_keepalive(keepalive)
    }

    /// What to connect to for `url`, with [`Settings::tcp`].
    pub(crate) fn info(&self, url: &RedisUrl) -> Result<ConnectionInfo, DriverError> {
        let info = url
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| DriverError::redis(&url.address, e))?;
        Ok(self.with_tcp(info))
    }

    /// `info` with [`Settings::tcp`].
    pub(crate) fn with_tcp(&self, info: ConnectionInfo) -> ConnectionInfo {
        info.set_tcp_settings(self.tcp())
    }

    /// A client for `info` (the server at `address`).
    pub(crate) fn client(
        &self,
        address: &str,
        info: ConnectionInfo,
    ) -> Result<redis::Client, DriverError> {
        redis::Client::open(self.with_tcp(info)).map_err(|e| DriverError::redis(address, e))
    }

    /// A client for the server at `url`.
    pub(crate) fn client_for(&self, url: &RedisUrl) -> Result<redis::Client, DriverError> {
        self.client(&url.address, self.info(url)?)
    }

    /// Open an auto-reconnecting multiplexed connection to the server of `client`. `extra`
    /// is added to the response timeout (a connection that sends `WAIT`).
    pub(crate) async fn manager(
        &self,
        address: &str,
        client: redis::Client,
        extra: Duration,
    ) -> Result<ConnectionManager, DriverError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout + extra))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200));
        // It retries once inside: twice the connect timeout bounds it.
        bounded(
            address,
            "connect timed out",
            self.connect_timeout * 2,
            ConnectionManager::new_with_config(client, config),
        )
        .await
    }

    /// A cluster client builder over `nodes` with these settings.
    pub(crate) fn cluster(&self, nodes: &[RedisUrl]) -> ClusterClientBuilder {
        ClusterClientBuilder::new(nodes.iter().map(|u| u.url.as_str()))
            .tcp_settings(self.tcp())
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.response_timeout)
            .min_retry_wait(10)
            .max_retry_wait(100)
    }
}

/// `host:port` of a list of URLs, comma-separated, for messages.
pub(crate) fn addresses(urls: &[RedisUrl]) -> String {
    urls.iter()
        .map(|u| u.address.as_str())
        .collect::<Vec<_>>()
        .join(",")
}
