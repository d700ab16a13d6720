//! A refused password, explained: the client library reports a refused `AUTH` without the
//! server's answer, so `init` asks the server once more on a connection of its own (the
//! same address and TLS settings, no credentials sent at connect) and reports its answer
//! (`WRONGPASS ...`) with the user it tried, never the password.

use distlock_config::BackendConfig;
use redis::{ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};

use super::conn::Settings;
use crate::InitError;

/// `e` as [`InitError::AuthRefused`] when it is a refused password at one of `cfg`'s URLs;
/// otherwise `e` unchanged.
pub(crate) async fn explain(e: InitError, cfg: &BackendConfig) -> InitError {
    let InitError::Connect {
        backend,
        address,
        source,
    } = e
    else {
        return e;
    };
    let refused = source.is_auth_refused();
    let url = cfg.mode.urls().into_iter().find(|u| u.address == address);
    let (true, Some(url)) = (refused, url) else {
        return InitError::Connect {
            backend,
            address,
            source,
        };
    };
    let info = url.driver_url().as_ref().into_connection_info().ok();
    let creds = info.as_ref().map(ConnectionInfo::redis_settings);
    let user = creds
        .and_then(RedisConnectionInfo::username)
        .unwrap_or("default")
        .to_owned();
    let answer = match (info.as_ref(), creds.and_then(RedisConnectionInfo::password)) {
        (Some(info), Some(password)) => ask(cfg, &address, info, &user, password).await,
        _ => None,
    };
    InitError::AuthRefused {
        backend,
        address,
        user,
        answer: answer.unwrap_or_else(|| "the server's answer could not be read again".to_owned()),
    }
}

/// The server's answer to `AUTH user password`, on a connection without credentials.
async fn ask(
    cfg: &BackendConfig,
    address: &str,
    info: &ConnectionInfo,
    user: &str,
    password: &str,
) -> Option<String> {
    let settings = Settings::of(cfg).ok()?;
    let plain = RedisConnectionInfo::default().set_protocol(info.redis_settings().protocol());
    let client = settings
        .client(address, info.clone().set_redis_settings(plain))
        .ok()?;
    let attempt = async {
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        let mut auth = redis::cmd("AUTH");
        if user != "default" {
            auth.arg(user);
        }
        auth.arg(password);
        match auth.query_async::<()>(&mut conn).await {
            Ok(()) => None,
            Err(e) => Some(match (e.code(), e.detail()) {
                (Some(code), Some(detail)) => format!("{code} {detail}"),
                _ => e.to_string(),
            }),
        }
    };
    tokio::time::timeout(cfg.connect_timeout + cfg.response_timeout, attempt)
        .await
        .ok()
        .flatten()
}
