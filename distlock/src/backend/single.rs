//! `mode = "single"`: one Redis server, spoken to through a [`Server`], with one subscriber
//! connection for wake-ups.

use std::sync::Arc;

use distlock_config::RedisUrl;

use super::conn::Settings;
use super::server::Server;
use super::subscriber;
use crate::errors::backend::DriverError;
use crate::rt::hub::Hub;

/// Connect to the server at `url` and start the wake-up subscriber.
pub(crate) async fn connect(
    backend: &Arc<str>,
    url: &RedisUrl,
    settings: &Settings,
) -> Result<(Server, Arc<Hub>), DriverError> {
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
    Ok((server, hub))
}
