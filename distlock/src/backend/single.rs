//! `mode = "single"`: one Redis server, spoken to through a [`Server`], with one subscriber
//! connection for wake-ups.

use std::sync::Arc;
use std::time::Duration;

use distlock_config::RedisUrl;
use futures_util::future::BoxFuture;

use super::capabilities::{Announce, Facts};
use super::conn::Settings;
use super::server::Server;
use super::subscriber;
use super::topology::{ScriptReplies, Topology};
use crate::check::probe::Probe;
use crate::check::report::ServerReport;
use crate::errors::backend::DriverError;
use crate::protocol::keys::{FenceScope, LockKeys};
use crate::protocol::{Attempt, Call, HandedOff, Publish, Released};
use crate::rt::hub::Hub;
use crate::terms::owner::{Hold, OwnerId};

/// A single-server backend's driver.
#[derive(Debug)]
pub(super) struct Single(Server);

/// Connect to the server at `url` and start the wake-up subscriber.
pub(super) async fn connect(
    backend: &Arc<str>,
    url: &RedisUrl,
    settings: &Settings,
) -> Result<(Single, Arc<Hub>), DriverError> {
    let client = settings.client_for(url)?;
    let server = Server::connect(settings, &url.address, client.clone(), true).await?;
    let seen = subscriber::RunId::of(&server).await;
    let (hub, requests) = Hub::subscribed(settings.revocation.clone());
    subscriber::spawn(
        backend.clone(),
        &hub,
        requests,
        subscriber::connector(&url.address, client),
        settings.connect_timeout,
        None,
        Some(subscriber::refresh(server.clone(), seen)),
    );
    Ok((Single(server), hub))
}

impl Topology for Single {
    fn facts(&self) -> Facts {
        Facts {
            fence_scope: FenceScope::Server,
            hand_off: true,
            quorum: None,
            announce: Announce::Publish(Publish::Plain),
            cluster: false,
            reply_addresses: None,
        }
    }

    fn acquire<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
        lease: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Attempt, DriverError>> {
        Box::pin(self.0.acquire(keys, hold, lease, wait))
    }

    fn release<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
    ) -> BoxFuture<'a, Result<Released, DriverError>> {
        Box::pin(self.0.release(keys, hold))
    }

    fn hand_off<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
        to: Hold,
        lease: Duration,
        holder: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<HandedOff>, DriverError>> {
        Box::pin(self.0.handoff(keys, hold, to, lease, holder))
    }

    fn cancel<'a>(
        &'a self,
        keys: &'a LockKeys,
        owner: OwnerId,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        Box::pin(self.0.cancel(keys, owner))
    }

    fn renew_each<'a>(
        &'a self,
        items: &'a [(&'a LockKeys, OwnerId)],
        lease: Duration,
    ) -> BoxFuture<'a, Vec<Result<bool, DriverError>>> {
        Box::pin(self.0.renew_each(items, lease))
    }

    fn force_release<'a>(
        &'a self,
        keys: &'a LockKeys,
        revocation: &'a str,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        Box::pin(self.0.force_release(keys, revocation))
    }

    fn next_sequence<'a>(
        &'a self,
        key: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<u64, DriverError>> {
        Box::pin(self.0.next_sequence(key, ttl))
    }

    fn scan<'a>(
        &'a self,
        pattern: &'a str,
        limit: usize,
    ) -> Option<BoxFuture<'a, Result<Vec<String>, DriverError>>> {
        Some(Box::pin(self.0.scan(pattern, limit)))
    }

    fn probe<'a>(
        &'a self,
        probe: &'a Probe,
    ) -> Option<BoxFuture<'a, Vec<Result<ServerReport, DriverError>>>> {
        Some(Box::pin(async move { vec![self.0.probe(probe).await] }))
    }

    fn run_script<'a>(&'a self, call: &'a Call) -> Option<BoxFuture<'a, ScriptReplies>> {
        Some(Box::pin(async move {
            (vec![self.0.run(call, "script timed out").await], 1)
        }))
    }
}
