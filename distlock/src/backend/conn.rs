//! Connection settings shared by every mode: built here and nowhere else.
//!
//! Every TCP connection distlock opens — commands, subscribers, sentinels, cluster and
//! quorum nodes — has `TCP_NODELAY` (every lock operation is a small request waiting for its
//! reply; redis-rs leaves Nagle on) and TCP keepalive (a peer that vanished without a FIN,
//! e.g. behind a NAT that dropped the flow, is detected within 25 s of silence: 10 s idle,
//! then 3 probes 5 s apart).
//!
//! TLS (`rediss://`, cargo feature `tls`) is set here too: the CA bundle (`tls_ca`, else
//! the platform's roots), the client certificate and key of mutual TLS (`tls_cert`,
//! `tls_key`) and `tls_insecure_skip_verify` apply to every connection of the backend —
//! the masters a sentinel names and the nodes a cluster reports included, which are
//! reached over TLS when the configured URLs are `rediss://`.

use std::sync::Arc;
use std::time::Duration;

use distlock_config::{BackendConfig, RedisUrl};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::io::tcp::{socket2::TcpKeepalive, TcpSettings};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::errors::backend::{bounded, DriverError};

/// Idle time before the first keepalive probe.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// Between keepalive probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered probes before the connection is declared dead.
const KEEPALIVE_PROBES: u32 = 3;

/// How a backend connects: its timeouts, and TLS.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Longest wait for a connection.
    pub(crate) connect_timeout: Duration,
    /// Longest wait for any reply.
    pub(crate) response_timeout: Duration,
    /// `Some` when the backend's URLs are `rediss://`.
    tls: Option<Arc<Tls>>,
    /// `tcp_nodelay`: whether the command connections ([`Settings::manager`], the cluster
    /// client) send each request at once; the others always do ([`Settings::tcp`]).
    nodelay: bool,
    /// The backend-wide revocation channel its subscribers listen on
    /// (`crate::upkeep::revoke`); set by the backend before it connects.
    pub(crate) revocation: Option<String>,
}

/// The TLS options of a backend, files read.
struct Tls {
    /// Verify nothing (`tls_insecure_skip_verify`).
    insecure: bool,
    /// A CA bundle and/or a client certificate: `None` uses the platform's roots, no
    /// client certificate.
    #[cfg(feature = "tls")]
    certs: Option<redis::TlsCertificates>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key (nor the certificates).
        f.debug_struct("Tls")
            .field("insecure", &self.insecure)
            .finish_non_exhaustive()
    }
}

/// Why a backend's TLS options cannot be used: a message naming the field and the file.
#[derive(Debug)]
pub(crate) struct TlsSetupError(pub(crate) String);

/// The TCP keepalive of every connection.
pub(crate) fn keepalive() -> TcpKeepalive {
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    let keepalive = keepalive.with_retries(KEEPALIVE_PROBES);
    keepalive
}

impl Settings {
    /// The settings of `cfg`; reads its TLS files.
    pub(crate) fn of(cfg: &BackendConfig) -> Result<Settings, TlsSetupError> {
        let tls = if cfg.mode.urls().iter().any(|u| u.tls) {
            Some(Arc::new(Tls::of(cfg)?))
        } else {
            None
        };
        Ok(Settings {
            connect_timeout: cfg.connect_timeout,
            response_timeout: cfg.response_timeout,
            tls,
            nodelay: cfg.tcp_nodelay,
            revocation: None,
        })
    }

    /// Whether connections use TLS.
    pub(crate) fn uses_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The address of a server at `host:port` that a sentinel names: TLS when the
    /// backend's URLs are.
    pub(crate) fn addr(&self, host: String, port: u16) -> ConnectionAddr {
        match &self.tls {
            Some(tls) => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: tls.insecure,
                tls_params: None,
            },
            None => ConnectionAddr::Tcp(host, port),
        }
    }

    /// The TCP options of every connection but the command connections: each request is
    /// sent at once (`TCP_NODELAY`).
    pub(crate) fn tcp(&self) -> TcpSettings {
        TcpSettings::default()
            .set_nodelay(true)
            .set_keepalive(keepalive())
    }

    /// The TCP options of the command connections, which many tasks share: `TCP_NODELAY`
    /// only with `tcp_nodelay = true`. Otherwise Nagle's algorithm gathers the requests
    /// written while an earlier one is unanswered into fewer, larger writes (a request on
    /// an idle connection still goes at once): more lock operations per second when many
    /// tasks lock at once (`BackendConfig::tcp_nodelay`).
    fn command_tcp(&self) -> TcpSettings {
        TcpSettings::default()
            .set_nodelay(self.nodelay)
            .set_keepalive(keepalive())
    }

    /// What to connect to for `url`, with [`Settings::tcp`].
    pub(crate) fn info(&self, url: &RedisUrl) -> Result<ConnectionInfo, DriverError> {
        // valkey:// and valkeys:// as redis:// and rediss://: the driver's spelling.
        let info = url
            .driver_url()
            .as_ref()
            .into_connection_info()
            .map_err(|e| DriverError::redis(&url.address, e))?;
        let info = match (info.addr().clone(), &self.tls) {
            (ConnectionAddr::TcpTls { host, port, .. }, Some(_)) => {
                let addr = self.addr(host, port);
                info.set_addr(addr)
            }
            _ => info,
        };
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
        self.client_with(address, info, self.tcp())
    }

    /// A client for `info` (the server at `address`) with the TCP options `tcp`.
    fn client_with(
        &self,
        address: &str,
        info: ConnectionInfo,
        tcp: TcpSettings,
    ) -> Result<redis::Client, DriverError> {
        let info = info.set_tcp_settings(tcp);
        #[cfg(feature = "tls")]
        if let (ConnectionAddr::TcpTls { .. }, Some(tls)) = (info.addr(), &self.tls) {
            if let Some(certs) = &tls.certs {
                return redis::Client::build_with_tls(info, certs.clone())
                    .map_err(|e| DriverError::redis(address, e));
            }
        }
        redis::Client::open(info).map_err(|e| DriverError::redis(address, e))
    }

    /// A client for the server at `url`.
    pub(crate) fn client_for(&self, url: &RedisUrl) -> Result<redis::Client, DriverError> {
        self.client(&url.address, self.info(url)?)
    }

    /// Open an auto-reconnecting multiplexed connection to the server of `client`, with the
    /// command connections' TCP options ([`Settings::command_tcp`]). `extra` is added to
    /// the response timeout (a connection that sends `WAIT`).
    pub(crate) async fn manager(
        &self,
        address: &str,
        client: &redis::Client,
        extra: Duration,
    ) -> Result<ConnectionManager, DriverError> {
        let client = self.client_with(
            address,
            client.get_connection_info().clone(),
            self.command_tcp(),
        )?;
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

    /// A cluster client builder over `nodes` for the cluster's command connections: with
    /// their TCP options ([`Settings::command_tcp`]).
    pub(crate) fn cluster_commands(&self, nodes: &[RedisUrl]) -> ClusterClientBuilder {
        self.cluster(nodes).tcp_settings(self.command_tcp())
    }

    /// A cluster client builder over `nodes` with these settings (a subscriber's).
    pub(crate) fn cluster(&self, nodes: &[RedisUrl]) -> ClusterClientBuilder {
        let builder = ClusterClientBuilder::new(nodes.iter().map(|u| u.driver_url().into_owned()))
            .tcp_settings(self.tcp())
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.response_timeout)
            .min_retry_wait(10)
            .max_retry_wait(100);
        #[cfg(feature = "tls")]
        let builder = match &self.tls {
            Some(tls) => {
                let builder = match &tls.certs {
                    Some(certs) => builder.certs(certs.clone()),
                    None => builder,
                };
                if tls.insecure {
                    builder.tls(redis::TlsMode::Insecure)
                } else {
                    builder.tls(redis::TlsMode::Secure)
                }
            }
            None => builder,
        };
        builder
    }
}

impl Tls {
    #[cfg(feature = "tls")]
    fn of(cfg: &BackendConfig) -> Result<Tls, TlsSetupError> {
        // rustls needs a process-wide crypto provider; ring is the one this build has.
        // Installing fails only when one is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let read = |field: &str, path: &std::path::Path| {
            std::fs::read(path).map_err(|e| {
                TlsSetupError(format!(
                    "{field} = \"{}\": cannot read the file: {e}",
                    path.display()
                ))
            })
        };
        let root_cert = match &cfg.tls_ca {
            Some(path) => Some(read("tls_ca", path)?),
            None => None,
        };
        let client_tls = match (&cfg.tls_cert, &cfg.tls_key) {
            (Some(cert), Some(key)) => {
                let client = redis::ClientTlsConfig {
                    client_cert: read("tls_cert", cert)?,
                    client_key: read("tls_key", key)?,
                };
                check_client_certificate(cert, key, &client)?;
                Some(client)
            }
            _ => None,
        };
        let certs =
            (root_cert.is_some() || client_tls.is_some()).then_some(redis::TlsCertificates {
                client_tls,
                root_cert,
            });
        Ok(Tls {
            insecure: cfg.tls_insecure_skip_verify,
            certs,
        })
    }

    #[cfg(not(feature = "tls"))]
    fn of(cfg: &BackendConfig) -> Result<Tls, TlsSetupError> {
        let url = cfg.mode.urls().into_iter().find(|u| u.tls);
        Err(TlsSetupError(format!(
            "{}: rediss:// (TLS) needs distlock's cargo feature `tls` (on by default), which this build leaves out",
            url.map(|u| u.address.as_str()).unwrap_or("?")
        )))
    }
}

/// The client certificate and key as rustls will take them, tried before any connection:
/// a certificate rustls refuses (an X.509 v1 one, as `openssl x509 -req` signs without
/// `-extfile`; a key that does not match it) is the client certificate's problem, named
/// with its field and file, not a connection failure that looks like the server's.
#[cfg(feature = "tls")]
fn check_client_certificate(
    cert_path: &std::path::Path,
    key_path: &std::path::Path,
    client: &redis::ClientTlsConfig,
) -> Result<(), TlsSetupError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let cert_field = format!("tls_cert = \"{}\"", cert_path.display());
    let key_field = format!("tls_key = \"{}\"", key_path.display());
    let certs = CertificateDer::pem_slice_iter(&client.client_cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsSetupError(format!("{cert_field}: not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(TlsSetupError(format!(
            "{cert_field}: the file holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        )));
    }
    let key = PrivateKeyDer::from_pem_slice(&client.client_key)
        .map_err(|e| TlsSetupError(format!("{key_field}: not a PEM private key: {e}")))?;
    rustls::ClientConfig::builder()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_client_auth_cert(certs, key)
        .map(|_| ())
        .map_err(|e| {
            let text = e.to_string();
            let hint = if text.contains("UnsupportedCertVersion") {
                ": it is an X.509 v1 certificate (as `openssl x509 -req` signs without \
                 `-extfile`); rustls takes v3 only: sign it again with extensions, e.g. \
                 `-extfile` with `basicConstraints=CA:FALSE` and `extendedKeyUsage=clientAuth`"
            } else if text.contains("InconsistentKeys") || text.contains("key") {
                ": check that `tls_key` is the private key of this certificate"
            } else {
                ""
            };
            TlsSetupError(format!(
                "{cert_field} (with {key_field}): the client certificate is refused by the TLS library: {text}{hint}"
            ))
        })
}

/// `host:port` of a list of URLs, comma-separated, for messages.
pub(crate) fn addresses(urls: &[RedisUrl]) -> String {
    urls.iter()
        .map(|u| u.address.as_str())
        .collect::<Vec<_>>()
        .join(",")
}
