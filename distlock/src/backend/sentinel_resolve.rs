//! Asking the sentinels where the master is: the sentinels of a group, the resolver that
//! asks them in turn, and the addresses they answer with (`+switch-master` payloads too).

use super::conn::Settings;
use crate::errors::backend::{bounded, DriverError};

/// One sentinel.
pub(super) struct Sentinel {
    /// `host:port`.
    pub(super) address: String,
    pub(super) client: redis::Client,
}

/// Asks the sentinels, in turn, where the master is.
pub(super) struct Resolver<'a> {
    pub(super) master_name: &'a str,
    pub(super) sentinels: &'a [Sentinel],
    pub(super) settings: Settings,
    pub(super) start: usize,
}

impl Resolver<'_> {
    /// `(host:port, host, port)` of the master, from the first sentinel that knows it.
    pub(super) async fn resolve(&mut self) -> Result<(String, String, u16), DriverError> {
        let n = self.sentinels.len();
        let mut failures = Vec::new();
        for i in 0..n {
            let s = &self.sentinels[(self.start + i) % n];
            match self.ask(s).await {
                Ok(Some(found)) => return Ok(found),
                Ok(None) => failures.push(format!(
                    "{}: knows no master named {:?}",
                    s.address, self.master_name
                )),
                Err(e) => failures.push(format!("{}: {e}", s.address)),
            }
        }
        Err(DriverError::NoMaster {
            addresses: addresses(self.sentinels),
            detail: failures.join("; "),
        })
    }

    /// Whether the sentinels may be failing over the master at `address`: one that
    /// answers names another master, or flags it down (`s_down`, `o_down`) or its
    /// failover under way (`failover_in_progress`, on the sentinel leading it); or none
    /// answers. Every sentinel is asked: only the leader knows its failover is under way.
    /// A sentinel that refuses `SENTINEL MASTER` (an ACL user without it) is asked for
    /// the address alone.
    pub(super) async fn failover_under_way(&mut self, address: &str) -> bool {
        let mut answered = false;
        for s in self.sentinels {
            let (named, flags) = match self.master_state(s).await {
                Ok(state) => state,
                // A user without `+sentinel|master`: the address alone.
                Err(e) if e.is_no_perm() => match self.ask(s).await {
                    Ok(found) => (found.map(|(address, ..)| address), String::new()),
                    Err(_) => continue,
                },
                Err(_) => continue,
            };
            answered = true;
            let down = flags
                .split(',')
                .any(|f| matches!(f, "s_down" | "o_down" | "failover_in_progress"));
            if down || named.as_deref() != Some(address) {
                return true;
            }
        }
        !answered
    }

    /// What sentinel `s` says of the master: its address and its flags.
    async fn master_state(&self, s: &Sentinel) -> Result<(Option<String>, String), DriverError> {
        let mut conn = self.connect(s).await?;
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("master").arg(self.master_name);
        let fields: std::collections::HashMap<String, String> = bounded(
            &s.address,
            "SENTINEL timed out",
            self.settings.response_timeout,
            cmd.query_async(&mut conn),
        )
        .await?;
        let named = match (fields.get("ip"), fields.get("port")) {
            (Some(host), Some(port)) => port.parse().ok().map(|p| join_address(host, p)),
            _ => None,
        };
        Ok((named, fields.get("flags").cloned().unwrap_or_default()))
    }

    async fn connect(
        &self,
        s: &Sentinel,
    ) -> Result<redis::aio::MultiplexedConnection, DriverError> {
        bounded(
            &s.address,
            "connect timed out",
            self.settings.connect_timeout,
            s.client.get_multiplexed_async_connection(),
        )
        .await
    }

    async fn ask(&self, s: &Sentinel) -> Result<Option<(String, String, u16)>, DriverError> {
        let mut conn = self.connect(s).await?;
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("get-master-addr-by-name").arg(self.master_name);
        let reply: Option<(String, u16)> = bounded(
            &s.address,
            "SENTINEL timed out",
            self.settings.response_timeout,
            cmd.query_async(&mut conn),
        )
        .await?;
        Ok(reply.map(|(host, port)| (join_address(&host, port), host, port)))
    }
}

/// The sentinels' `host:port`, comma-separated, for messages.
pub(super) fn addresses(sentinels: &[Sentinel]) -> String {
    sentinels
        .iter()
        .map(|s| s.address.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

pub(super) fn join_address(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

pub(super) fn split_address(address: &str) -> Result<(String, u16), DriverError> {
    let bad = || DriverError::NotMaster {
        address: address.to_owned(),
        role: "an address that does not parse as host:port".into(),
    };
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    let port = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((host.to_owned(), port))
}

/// `<name> <old-ip> <old-port> <new-ip> <new-port>` for our master: the new address.
pub(super) fn parse_switch(payload: &str, master_name: &str) -> Option<(String, String, u16)> {
    let parts: Vec<&str> = payload.split_whitespace().collect();
    match parts.as_slice() {
        [name, _, _, host, port] if *name == master_name => {
            let port: u16 = port.parse().ok()?;
            Some((join_address(host, port), (*host).to_owned(), port))
        }
        _ => None,
    }
}
