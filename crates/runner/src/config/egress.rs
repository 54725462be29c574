//! The network by operator policy (issue 33): the flags that open named hosts to the
//! sandboxes, through the runner's proxy, and their checks. Off unless
//! `RUNNER_EGRESS_ALLOW` or `RUNNER_EGRESS_ALLOW_CIDRS` names something.

use super::{check, BackendKind, ConfigError};
use sandbox_egress::{
    Grant, Limits, NotAllowed, Policy, DEFAULT_MAX_BYTES, DEFAULT_MAX_CONNECTIONS,
};

/// What a run or a session that names no `egress` is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EgressDefault {
    /// Nothing: a request names the hosts it needs.
    None,
    /// Every host the operator opened.
    All,
}

/// The egress flags.
#[derive(Debug, Clone, clap::Args)]
pub struct EgressArgs {
    /// Hosts the sandboxes may reach through the runner's proxy: a comma list of `host`,
    /// `*.domain` (its subdomains) and `host:port` (ports 80 and 443 when none is given).
    /// Empty: no network at all (the default).
    #[arg(long, env = "RUNNER_EGRESS_ALLOW", default_value = "")]
    pub egress_allow: String,
    /// Address ranges (CIDR, comma list) the proxy may connect to: IP literals inside
    /// them, and allowed names that resolve into them even where the range is private.
    #[arg(long, env = "RUNNER_EGRESS_ALLOW_CIDRS", default_value = "")]
    pub egress_allow_cidrs: String,
    /// What a run or a session that names no `egress` is granted: `none` or `all` of the
    /// allowed hosts.
    #[arg(
        long,
        env = "RUNNER_EGRESS_DEFAULT",
        value_enum,
        default_value = "none"
    )]
    pub egress_default: EgressDefault,
    /// Bytes one sandbox may move through the proxy, in and out together, over its
    /// whole life (a session's runs included).
    #[arg(long, env = "RUNNER_EGRESS_MAX_BYTES", default_value_t = DEFAULT_MAX_BYTES)]
    pub egress_max_bytes: u64,
    /// Connections one sandbox may have open through the proxy at once.
    #[arg(long, env = "RUNNER_EGRESS_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub egress_max_connections: usize,
}

/// Validated egress settings.
#[derive(Debug, Clone)]
pub struct EgressConfig {
    /// What is open (nothing: egress is off).
    pub policy: Policy,
    /// What a request that names no `egress` is granted.
    pub default: EgressDefault,
    /// Bytes one sandbox may move through the proxy over its life.
    pub max_bytes: u64,
    /// Connections one sandbox may have open at once.
    pub max_connections: usize,
}

impl EgressArgs {
    /// Parses the policy and checks the caps; egress configured on a backend that does
    /// not build it yet (the vm backend) is refused, so that it fails closed.
    pub(super) fn validate(&self, backend: BackendKind) -> Result<EgressConfig, ConfigError> {
        let policy = Policy::parse(&self.egress_allow, &self.egress_allow_cidrs)
            .map_err(|e| ConfigError::Egress(e.to_string()))?;
        check(
            self.egress_max_bytes >= 1,
            "RUNNER_EGRESS_MAX_BYTES",
            "at least 1",
            self.egress_max_bytes,
        )?;
        check(
            (1..=1024).contains(&self.egress_max_connections),
            "RUNNER_EGRESS_MAX_CONNECTIONS",
            "between 1 and 1024",
            self.egress_max_connections,
        )?;
        if !policy.is_off() && backend == BackendKind::Vm {
            return Err(ConfigError::Egress(
                "the vm backend does not reach the proxy yet: RUNNER_EGRESS_ALLOW and \
                 RUNNER_EGRESS_ALLOW_CIDRS work with the process backend only"
                    .into(),
            ));
        }
        Ok(EgressConfig {
            policy,
            default: self.egress_default,
            max_bytes: self.egress_max_bytes,
            max_connections: self.egress_max_connections,
        })
    }
}

impl EgressConfig {
    /// Whether anything is open.
    pub fn is_on(&self) -> bool {
        !self.policy.is_off()
    }

    /// The proxy's per-sandbox caps.
    pub fn limits(&self) -> Limits {
        Limits {
            max_bytes: self.max_bytes,
            max_connections: self.max_connections,
        }
    }

    /// The grant of a run or a session that names `asked` (none: the operator's
    /// default), or the names outside the policy if any is. `None` where egress is off
    /// (an empty list is then taken, any name refused).
    pub fn grant(&self, asked: Option<&[String]>) -> Result<Option<Grant>, NotAllowed> {
        if !self.is_on() {
            self.policy.grant(asked.unwrap_or_default())?;
            return Ok(None);
        }
        let grant = match (asked, self.default) {
            (Some(names), _) => self.policy.grant(names)?,
            (None, EgressDefault::All) => self.policy.grant_all(),
            (None, EgressDefault::None) => Grant::none(),
        };
        Ok(Some(grant))
    }
}
