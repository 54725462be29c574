//! What pip's output says went wrong.

use crate::process::last_lines;

/// What pip's output says went wrong.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// "No matching distribution found for X"; `versions` is pip's "from versions"
    /// list, `None` when it is "none".
    NotFound {
        requirement: String,
        versions: Option<String>,
    },
    /// A connection to the index failed.
    Unreachable {
        requirement: Option<String>,
        detail: String,
    },
    /// The requirements cannot all hold at once.
    Conflict { detail: String },
    /// The scratch filled up (its size is the policy's limit and a margin).
    NoSpace,
    /// Something else.
    Other,
}

/// Connection failures as pip (urllib3, requests) words them.
const UNREACHABLE: &[&str] = &[
    "Failed to establish a new connection",
    "Max retries exceeded",
    "Network is unreachable",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Connection refused",
    "ConnectTimeoutError",
    "Read timed out",
    "ProxyError",
    "There was a problem confirming the ssl certificate",
];

pub(crate) fn classify(text: &str) -> Failure {
    if text.contains("No space left on device") || text.contains("[Errno 28]") {
        return Failure::NoSpace;
    }
    let requirement = text.lines().find_map(|l| {
        l.split_once("No matching distribution found for ")
            .map(|(_, r)| r.trim().to_owned())
    });
    if let Some(line) = text
        .lines()
        .find(|l| UNREACHABLE.iter().any(|m| l.contains(m)))
    {
        let detail = UNREACHABLE
            .iter()
            .find_map(|m| line.find(m).map(|i| &line[i..]))
            .unwrap_or(line);
        // urllib3 quotes the cause inside its exception's repr: keep the cause.
        let detail = detail.split('\'').next().unwrap_or(detail);
        return Failure::Unreachable {
            requirement,
            detail: detail
                .chars()
                .take(200)
                .collect::<String>()
                .trim()
                .to_owned(),
        };
    }
    if let Some(requirement) = requirement {
        let versions = text.lines().find_map(|l| {
            let (_, rest) = l.split_once("(from versions: ")?;
            let list = rest.trim_end().strip_suffix(')')?.trim();
            (list != "none").then(|| list.to_owned())
        });
        return Failure::NotFound {
            requirement,
            versions,
        };
    }
    if text.contains("ResolutionImpossible") || text.contains("conflicting dependencies") {
        let caused: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.contains("The conflict is caused by:"))
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .map(str::trim)
            .collect();
        let detail = if caused.is_empty() {
            last_lines(text, 3)
        } else {
            caused.join("; ")
        };
        return Failure::Conflict { detail };
    }
    Failure::Other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_the_requirement() {
        let text = "ERROR: Could not find a version that satisfies the requirement \
                    this-package-does-not-exist-xyz-123 (from versions: none)\n\
                    ERROR: No matching distribution found for this-package-does-not-exist-xyz-123\n";
        assert_eq!(
            classify(text),
            Failure::NotFound {
                requirement: "this-package-does-not-exist-xyz-123".into(),
                versions: None
            }
        );
        let text = "ERROR: Could not find a version that satisfies the requirement six>=99 \
                    (from versions: 1.16.0, 1.17.0)\nERROR: No matching distribution found for six>=99\n";
        assert_eq!(
            classify(text),
            Failure::NotFound {
                requirement: "six>=99".into(),
                versions: Some("1.16.0, 1.17.0".into())
            }
        );
    }

    #[test]
    fn connection_errors_win_over_not_found() {
        let text = "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, \
                    status=None)) after connection broken by 'NewConnectionError('<pip._vendor.\
                    urllib3.connection.HTTPConnection object at 0x7f>: Failed to establish a new \
                    connection: [Errno 111] Connection refused')': /simple/six/\n\
                    ERROR: Could not find a version that satisfies the requirement six (from versions: none)\n\
                    ERROR: No matching distribution found for six\n";
        match classify(text) {
            Failure::Unreachable {
                requirement,
                detail,
            } => {
                assert_eq!(requirement.as_deref(), Some("six"));
                assert!(
                    detail.starts_with("Failed to establish a new connection"),
                    "{detail}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn conflicts_say_what_conflicts() {
        let text = "ERROR: Cannot install numpy<2 because these package versions have conflicting dependencies.\n\n\
                    The conflict is caused by:\n    The user requested numpy<2\n    \
                    The user requested (constraint) numpy==2.1.0\n\nTo fix this you could try to:\n\
                    ERROR: ResolutionImpossible: for help visit https://pip.pypa.io\n";
        assert_eq!(
            classify(text),
            Failure::Conflict {
                detail: "The user requested numpy<2; The user requested (constraint) numpy==2.1.0"
                    .into()
            }
        );
        assert_eq!(classify("ERROR: something else\n"), Failure::Other);
        assert_eq!(
            classify("ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device\n"),
            Failure::NoSpace
        );
    }
}
