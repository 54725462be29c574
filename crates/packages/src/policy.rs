//! The operator's policy for inline dependencies: which packages, how big, how long.

use std::time::Duration;

use crate::names::normalize_name;

/// What the operator allows scripts to install on the host.
///
/// Names are compared in their PEP 503 normalised form, so `PyYAML`, `pyyaml` and
/// `py.yaml` are one name to the policy (and `scikit_learn` is `scikit-learn`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// When set, only these packages (and what the base set already holds) may be
    /// installed; every package of the resolved closure is checked. `None`: any package.
    pub allow: Option<Vec<String>>,
    /// Packages never installed, whether asked for or pulled in by another.
    pub deny: Vec<String>,
    /// The most an inline set may take on disk once installed, in bytes.
    pub max_bytes: u64,
    /// How long one resolution may take, from the request to the finished set
    /// (waiting for a slot included); pip is killed when it runs out.
    pub timeout: Duration,
}

impl Default for Policy {
    /// Any package, at most 256 MiB, two minutes.
    fn default() -> Self {
        Policy {
            allow: None,
            deny: Vec::new(),
            max_bytes: 256 << 20,
            timeout: Duration::from_secs(120),
        }
    }
}

/// Why the policy refuses a package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The package is on the deny list.
    Denied,
    /// There is an allow list and the package is not on it.
    NotAllowed,
}

impl Refusal {
    /// The reason in words, for error messages.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Denied => "it is on the operator's deny list",
            Refusal::NotAllowed => "it is not on the operator's allow list",
        }
    }
}

impl Policy {
    /// Whether the package `name` may be installed. `in_base` says that the base set
    /// already holds it: every script can import it anyway, so the allow list does not
    /// apply to it (the deny list still does).
    pub fn check(&self, name: &str, in_base: bool) -> Result<(), Refusal> {
        let name = normalize_name(name);
        if self.deny.iter().any(|d| normalize_name(d) == name) {
            return Err(Refusal::Denied);
        }
        match &self.allow {
            Some(allow) if !in_base && !allow.iter().any(|a| normalize_name(a) == name) => {
                Err(Refusal::NotAllowed)
            }
            _ => Ok(()),
        }
    }

    /// The lists and the size limit in a canonical form, part of each request's digest:
    /// a request cached under one policy is resolved again under another.
    pub(crate) fn fingerprint(&self) -> String {
        let sorted = |names: &[String]| {
            let mut v: Vec<String> = names.iter().map(|n| normalize_name(n)).collect();
            v.sort();
            v.dedup();
            v.join(",")
        };
        format!(
            "allow={}\ndeny={}\nmax_bytes={}\n",
            self.allow.as_deref().map_or_else(|| "*".to_owned(), sorted),
            sorted(&self.deny),
            self.max_bytes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_package_by_default() {
        assert_eq!(Policy::default().check("anything", false), Ok(()));
    }

    #[test]
    fn deny_wins_and_names_are_normalised() {
        let p = Policy {
            deny: vec!["Py_YAML".into()],
            ..Policy::default()
        };
        assert_eq!(p.check("py-yaml", false), Err(Refusal::Denied));
        assert_eq!(p.check("PY.YAML", true), Err(Refusal::Denied));
        assert_eq!(p.check("pyyaml", false), Ok(()));
    }

    #[test]
    fn allow_list_spares_the_base_set() {
        let p = Policy {
            allow: Some(vec!["humanize".into(), "Scikit_Learn".into()]),
            deny: vec!["requests".into()],
            ..Policy::default()
        };
        assert_eq!(p.check("humanize", false), Ok(()));
        assert_eq!(p.check("scikit-learn", false), Ok(()));
        assert_eq!(p.check("six", false), Err(Refusal::NotAllowed));
        assert_eq!(p.check("numpy", true), Ok(()));
        assert_eq!(p.check("requests", true), Err(Refusal::Denied));
    }

    #[test]
    fn fingerprint_ignores_spelling_and_order() {
        let a = Policy {
            allow: Some(vec!["B".into(), "a_x".into()]),
            ..Policy::default()
        };
        let b = Policy {
            allow: Some(vec!["a-x".into(), "b".into(), "b".into()]),
            ..Policy::default()
        };
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), Policy::default().fingerprint());
    }
}
