//! [`ConfigError`] and where errors point.

use crate::Source;

/// A configuration error that names where it is: source, line and field.
///
/// It displays as `LOCATION: FIELD: MESSAGE`, for example
/// `config/distlock.toml:7: backends.main.url: unsupported scheme "http" in "http://h": use redis:// or rediss:// (or valkey:// or valkeys://)`.
///
/// `Debug` prints the same text (what `main` shows when it returns the error).
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {field}: {message}")]
pub struct ConfigError {
    /// `path:line`, `<string>:line`, or just the path when no line applies.
    pub location: String,
    /// The dotted field, e.g. `backends.main.url`; `(file)` when the whole file is concerned.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl ConfigError {
    /// The 1-based line in [`location`](Self::location), when it has one.
    ///
    /// # Examples
    ///
    /// ```
    /// # mod distlock { pub(crate) use distlock_config as config; } // as seen from the `distlock` crate
    /// use distlock::config::Config;
    ///
    /// let err = Config::from_str("[backends.main]\nmode = \"single\"\nurl = \"http://h\"\n").unwrap_err();
    /// assert_eq!(err.line(), Some(3));
    /// assert_eq!(err.field, "backends.main.url");
    /// ```
    pub fn line(&self) -> Option<usize> {
        let (_, line) = self.location.rsplit_once(':')?;
        line.parse().ok()
    }
}

/// Turns byte offsets in the text into `SOURCE:LINE` locations.
pub(crate) struct Locator<'a> {
    text: &'a str,
    label: String,
}

impl<'a> Locator<'a> {
    pub(crate) fn new(text: &'a str, source: &Source) -> Self {
        Locator {
            text,
            label: source.to_string(),
        }
    }

    /// The 1-based line holding byte `offset`.
    pub(crate) fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        1 + self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
    }

    /// An error at the line holding byte `offset`.
    pub(crate) fn at(
        &self,
        offset: usize,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            location: format!("{}:{}", self.label, self.line(offset)),
            field: field.into(),
            message: message.into(),
        }
    }

    /// An error that concerns no particular line.
    pub(crate) fn whole(
        &self,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            location: self.label.clone(),
            field: field.into(),
            message: message.into(),
        }
    }
}
