//! The `egress` argument of the run tools and `create_sandbox` (issue 33): the hosts a
//! program may reach through the runner's proxy, among those its operator opened
//! (`GET /health`'s `limits.networkHosts`). Where the runner opens hosts, these tools'
//! descriptions name them and say that pip, npm, curl and the like work through the
//! proxy, and their schemas take `egress`; where it opens none, nothing of this shows.

use rmcp::model::Tool;
use sandbox_protocol::api::Limits;
use serde_json::{json, Value};
use std::sync::Arc;

use crate::tools::ArgsError;

/// The most names one call may list.
pub const MAX_NAMES: usize = 64;
/// The longest name (a DNS name's most, with a port).
const MAX_NAME_BYTES: usize = 260;
/// What a call whose `egress` is not a list of names is told.
const BAD: ArgsError = ArgsError::BadEgress(MAX_NAMES);

/// Reads `egress` from a call's arguments: none when absent (the runner's default then
/// applies), else a list of at most [`MAX_NAMES`] host names, passed on as they are (the
/// runner checks them against its operator's list).
pub fn parse(
    arguments: Option<&rmcp::model::JsonObject>,
) -> Result<Option<Vec<String>>, ArgsError> {
    let Some(value) = arguments.and_then(|a| a.get("egress")) else {
        return Ok(None);
    };
    let Value::Array(items) = value else {
        return match value {
            Value::Null => Ok(None),
            _ => Err(BAD),
        };
    };
    if items.len() > MAX_NAMES {
        return Err(BAD);
    }
    items
        .iter()
        .map(|item| match item {
            Value::String(name) if !name.is_empty() && name.len() <= MAX_NAME_BYTES => {
                Ok(name.clone())
            }
            _ => Err(BAD),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// What a program may reach, for a tool's description: empty where the runner opens no
/// host.
pub fn sentence(limits: &Limits) -> String {
    if limits.network_hosts.is_empty() {
        return String::new();
    }
    let default = if limits.network_by_default {
        "every one of them when egress is not given"
    } else {
        "none of them unless egress lists it"
    };
    format!(
        " Network: a program may reach only these hosts, through the runner's proxy \
         (HTTP_PROXY and HTTPS_PROXY are set, so pip install, npm install, curl, wget, git, \
         Python's urllib and requests work; tools that ignore those variables get no \
         network): {hosts}. List the ones the program needs in egress (it gets {default}); \
         any other host gets a 403 from the proxy.",
        hosts = limits.network_hosts.join(", "),
    )
}

/// `egress` in a tool's schema.
fn property(limits: &Limits) -> Value {
    json!({
        "type": "array",
        "items": {"type": "string"},
        "maxItems": MAX_NAMES,
        "description": format!(
            "Hosts the program may reach through the proxy, among: {}. Omit it for the \
             server's default.",
            limits.network_hosts.join(", ")
        ),
    })
}

/// Adds the sentence to `tool`'s description and `egress` to its schema, where the
/// runner opens hosts.
pub fn extend(tool: &mut Tool, limits: &Limits) {
    if limits.network_hosts.is_empty() {
        return;
    }
    let description = format!(
        "{}{}",
        tool.description.as_deref().unwrap_or(""),
        sentence(limits)
    );
    tool.description = Some(description.into());
    let mut schema = (*tool.input_schema).clone();
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.insert("egress".into(), property(limits));
    }
    tool.input_schema = Arc::new(schema);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> rmcp::model::JsonObject {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn egress_is_a_list_of_names_or_nothing() {
        assert_eq!(parse(None), Ok(None));
        assert_eq!(parse(Some(&args(json!({"code": "x"})))), Ok(None));
        assert_eq!(parse(Some(&args(json!({"egress": null})))), Ok(None));
        assert_eq!(
            parse(Some(&args(
                json!({"egress": ["pypi.org", "files.pythonhosted.org"]})
            ))),
            Ok(Some(vec![
                "pypi.org".into(),
                "files.pythonhosted.org".into()
            ]))
        );
        assert_eq!(parse(Some(&args(json!({"egress": []})))), Ok(Some(vec![])));
        for bad in [
            json!("pypi.org"),
            json!([1]),
            json!([""]),
            json!(["x".repeat(MAX_NAME_BYTES + 1)]),
            json!(vec!["a.test"; MAX_NAMES + 1]),
        ] {
            assert_eq!(
                parse(Some(&args(json!({ "egress": bad })))),
                Err(BAD),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_a_runner_that_opens_hosts_shows_egress() {
        let off = Limits::default();
        assert_eq!(sentence(&off), "");
        let schema = crate::schema::object(json!({"type": "object", "properties": {}}));
        let mut tool = Tool::new("run_bash", "Runs.", schema);
        extend(&mut tool, &off);
        assert_eq!(tool.description.as_deref(), Some("Runs."));
        assert!(tool.input_schema["properties"].get("egress").is_none());
        let on = Limits {
            network: true,
            network_hosts: vec!["pypi.org".into(), "*.pythonhosted.org".into()],
            ..Limits::default()
        };
        extend(&mut tool, &on);
        let description = tool.description.as_deref().unwrap_or_default();
        assert!(
            description.contains("pypi.org, *.pythonhosted.org"),
            "{description}"
        );
        assert!(description.contains("pip install"), "{description}");
        assert!(description.contains("none of them unless egress lists it"));
        let egress = &tool.input_schema["properties"]["egress"];
        assert_eq!(egress["type"], "array", "{egress}");
    }
}
