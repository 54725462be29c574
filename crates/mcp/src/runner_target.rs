//! Where a runner is and how to authenticate to it ([`RunnerTarget`]).
//!
//! A runner URL may carry a user name and password (`http://user:password@host`, for a
//! proxy in front of the runner). They are taken out of the URL once, when it is parsed:
//! the URL kept is the one shown everywhere (`/health`, `/metrics` labels, the log, errors,
//! the runner's digest in sandbox ids), and the credentials live apart, never printed, and
//! are sent as HTTP Basic authentication on every request, as an HTTP client sends a URL's
//! credentials (percent-decoded).

use std::borrow::Cow;
use std::fmt;

use percent_encoding::percent_decode_str;

/// A runner URL that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("SANDBOX_RUNNER_URL {url} is not usable: {reason}")]
pub struct RunnerUrlError {
    /// The value given, quoted, without its user name and password (or a note in its
    /// place where they cannot be told apart).
    pub url: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Where a runner is and how to authenticate to it.
#[derive(Clone)]
pub struct RunnerTarget {
    url: reqwest::Url,
    credentials: Option<RunnerCredentials>,
    token: Option<String>,
}

/// The user name and password of a runner's URL, percent-decoded; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct RunnerCredentials {
    username: String,
    password: Option<String>,
}

impl RunnerTarget {
    /// Parses and checks the runner's base URL, and takes its user name and password out of
    /// it. The error shows the value without them.
    pub fn new(url: &str, token: Option<String>) -> Result<Self, RunnerUrlError> {
        let bad = |reason: &str| RunnerUrlError {
            url: shown(url),
            reason: reason.to_owned(),
        };
        let mut parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        if parsed.scheme() != "http" {
            return Err(bad(
                "only http:// is supported (put TLS in front of both services)",
            ));
        }
        if parsed.host().is_none() {
            return Err(bad("it has no host"));
        }
        let credentials = RunnerCredentials::take_from(&mut parsed).map_err(bad)?;
        Ok(RunnerTarget {
            url: parsed,
            credentials,
            token: token.filter(|t| !t.is_empty()),
        })
    }

    /// The runner's base URL, without user name or password (the only form of it that is
    /// shown), for example `http://127.0.0.1:8080/`.
    pub fn url(&self) -> &reqwest::Url {
        &self.url
    }

    /// The bearer token for the runner's API, if it asks for one.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The same runner's credentials and token at `url` (one of the addresses of its host
    /// name): `url` is this target's URL with another host, so it has no credentials.
    pub(crate) fn at(&self, url: reqwest::Url) -> Self {
        RunnerTarget {
            url,
            ..self.clone()
        }
    }

    /// `request` with the URL's user name and password as HTTP Basic authentication, when
    /// it had them.
    pub(crate) fn basic_auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.credentials {
            Some(c) => request.basic_auth(&c.username, c.password.as_ref()),
            None => request,
        }
    }
}

impl fmt::Debug for RunnerTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |present: bool| if present { "<redacted>" } else { "none" };
        f.debug_struct("RunnerTarget")
            .field("url", &self.url.as_str())
            .field("credentials", &redacted(self.credentials.is_some()))
            .field("token", &redacted(self.token.is_some()))
            .finish()
    }
}

impl RunnerCredentials {
    /// Takes the user name and password out of `url` (which must have a host), decoded as
    /// an HTTP client decodes them; `None` when it has neither.
    fn take_from(url: &mut reqwest::Url) -> Result<Option<Self>, &'static str> {
        if url.username().is_empty() && url.password().is_none() {
            return Ok(None);
        }
        let decode = |s: &str| percent_decode_str(s).decode_utf8().map(Cow::into_owned);
        let username = decode(url.username())
            .map_err(|_| "its user name is not UTF-8 once percent-decoded")?;
        let password = url
            .password()
            .map(decode)
            .transpose()
            .map_err(|_| "its password is not UTF-8 once percent-decoded")?;
        url.set_username("")
            .and_then(|()| url.set_password(None))
            .map_err(|()| "its user name and password cannot be taken out of it")?;
        Ok(Some(RunnerCredentials { username, password }))
    }
}

impl fmt::Debug for RunnerCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RunnerCredentials(<redacted>)")
    }
}

/// `value` as an error may show it: quoted and without user name and password; when it
/// does not parse as a URL and holds an `@` (so where its credentials end is unclear),
/// not at all.
fn shown(value: &str) -> String {
    let stripped = reqwest::Url::parse(value).ok().and_then(|mut url| {
        url.set_username("").ok()?;
        url.set_password(None).ok()?;
        Some(url.to_string())
    });
    match stripped {
        Some(url) if !url.contains('@') => format!("{url:?}"),
        _ if !value.contains('@') => format!("{value:?}"),
        _ => "(its value holds an '@' and is not shown: it may hold a password)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::RunnerId;

    const SECRETS: [&str; 4] = ["op%40corp", "op@corp", "w0rd", "lonely"];

    fn assert_hidden(text: &str) {
        for secret in SECRETS {
            assert!(!text.contains(secret), "{secret:?} shown in {text}");
        }
    }

    #[test]
    fn credentials_leave_the_url_and_are_never_printed() {
        let written = "http://runner-op%40corp:p%40ss%3Aw0rd%2F%23x@127.0.0.1:9/base/";
        let target = RunnerTarget::new(written, Some("tok-s3cret".into())).unwrap();
        assert_eq!(target.url().as_str(), "http://127.0.0.1:9/base/");
        let credentials = target.credentials.clone().unwrap();
        assert_eq!(credentials.username, "runner-op@corp");
        assert_eq!(credentials.password.as_deref(), Some("p@ss:w0rd/#x"));
        assert_hidden(&format!("{target:?}"));
        assert!(!format!("{target:?}").contains("s3cret"));
        // A user name alone, and a password alone.
        let lone = RunnerTarget::new("http://lonely@10.0.0.1:8081", None).unwrap();
        assert_eq!(lone.url().as_str(), "http://10.0.0.1:8081/");
        let credentials = lone.credentials.unwrap();
        assert_eq!(
            (credentials.username.as_str(), credentials.password),
            ("lonely", None)
        );
        let secret_only = RunnerTarget::new("http://:lonely@10.0.0.1:8081", None).unwrap();
        assert_eq!(secret_only.url().as_str(), "http://10.0.0.1:8081/");
        assert_eq!(
            secret_only.credentials.unwrap().password.as_deref(),
            Some("lonely")
        );
        let plain = RunnerTarget::new("http://10.0.0.1:8081", None).unwrap();
        assert!(plain.credentials.is_none());
    }

    #[test]
    fn refused_urls_are_shown_without_credentials() {
        for (value, shown_as) in [
            (
                "https://runner-op%40corp:p%40ss%3Aw0rd@10.0.0.1:9",
                "\"https://10.0.0.1:9/\"",
            ),
            // A raw '/' ends the host part early: the port does not parse.
            (
                "http://runner-op%40corp:p@ss:w0rd/#x@10.0.0.1:9",
                "not shown",
            ),
            ("http://lonely@", "not shown"),
            ("ftp://10.0.0.1", "\"ftp://10.0.0.1/\""),
        ] {
            let error = RunnerTarget::new(value, None).unwrap_err().to_string();
            assert!(error.contains("SANDBOX_RUNNER_URL"), "{error}");
            assert!(error.contains(shown_as), "{value}: {error}");
            assert_hidden(&error);
        }
        let error = RunnerTarget::new("http://lonely:%FF@10.0.0.1:9", None).unwrap_err();
        assert!(
            error.to_string().contains("password is not UTF-8"),
            "{error}"
        );
    }

    #[test]
    fn a_runner_s_digest_is_that_of_its_url_without_credentials() {
        let digest = |url| {
            let target = RunnerTarget::new(url, None).unwrap();
            crate::runner_client::RunnerClient::new(target)
                .unwrap()
                .id()
        };
        // As before credentials were taken out of URLs (sandbox ids made then still work).
        let before = "RunnerId([40, 247, 235, 206, 167, 230, 166, 222])";
        assert_eq!(format!("{:?}", digest("http://127.0.0.1:8081")), before);
        assert_eq!(format!("{:?}", digest("http://127.0.0.1:8081/")), before);
        assert_eq!(
            digest("http://lonely:w0rd@127.0.0.1:8081"),
            RunnerId::of_url("http://127.0.0.1:8081")
        );
    }
}
