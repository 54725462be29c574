//! Python's `tools` module (`tools.py`): the runtime (`runtime.py`: the call over the
//! agent's socket, `ToolError`, the functions' signatures), then one attribute per
//! server, made from the offer. Every name and text of the offer goes in as a string
//! literal ([`literal`]), never as code; function names are
//! [`function_name`]'s.

use super::schema::{doc, literal, parameters};
use sandbox_protocol::tools::{function_name, OfferedServer, ToolsOffer};
use std::fmt::Write;

/// The module's fixed part.
const RUNTIME: &str = include_str!("runtime.py");

/// The text of `tools.py` for `offer`, calling the agent at `socket`.
pub(super) fn module(offer: &ToolsOffer, socket: &str) -> String {
    let mut text = String::from(RUNTIME);
    text.push_str("\n\n# The tools of this run (generated from its offer).\n");
    let _ = writeln!(text, "_SOCKET = {}", literal(socket));
    for server in &offer.servers {
        text.push('\n');
        text.push_str(&server_attribute(server));
    }
    let names: Vec<&str> = offer.servers.iter().map(|s| s.name.as_str()).collect();
    let _ = writeln!(text, "\nlist = _listing([{}])", names.join(", "));
    let exported: Vec<String> = names.iter().map(|name| literal(name)).collect();
    let _ = writeln!(text, "__all__ += [\"list\", {}]", exported.join(", "));
    text
}

/// `name = _Server("name", [_function(...), ...])`. The server's name is an identifier
/// (the offer was checked), so it may stand as the attribute's name.
fn server_attribute(server: &OfferedServer) -> String {
    let name = literal(&server.name);
    let mut text = format!("{} = _Server({name}, [\n", server.name);
    for tool in &server.tools {
        let shown: Vec<String> = parameters(tool)
            .iter()
            .map(|p| {
                let required = if p.required { "True" } else { "False" };
                format!("({}, {}, {required})", literal(&p.name), literal(&p.kind))
            })
            .collect();
        let _ = writeln!(
            text,
            "    _function({name}, {}, {}, {}, {}, [{}]),",
            literal(&tool.name),
            literal(&function_name(&tool.name)),
            literal(&tool.description),
            literal(&doc(tool)),
            shown.join(", ")
        );
    }
    text.push_str("])\n");
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_protocol::tools::OfferedTool;
    use serde_json::json;

    #[test]
    fn every_text_of_the_offer_is_a_literal() {
        let offer = ToolsOffer {
            servers: vec![OfferedServer {
                name: "tracker".into(),
                tools: vec![OfferedTool {
                    name: "get\")\nimport os #".into(),
                    description: "\"\"\"\nos.system('x')".into(),
                    input_schema: json!({"properties": {"a\"b": {"type": "string"}}}),
                }],
            }],
        };
        let text = module(&offer, "/run/sandbox-tools/socket");
        let generated = text.split("(generated from its offer)").nth(1).unwrap();
        assert!(generated.contains("tracker = _Server(\"tracker\", [\n"));
        assert!(generated.contains(
            "_function(\"tracker\", \"get\\\")\\nimport os #\", \"get___import_os__\", "
        ));
        assert!(generated.contains("[(\"a\\\"b\", \"string\", False)]"));
        assert!(!generated.contains("\nimport os"));
        assert!(!generated.contains("\nos.system"));
        assert!(generated.contains("list = _listing([tracker])\n"));
        assert!(generated.contains("__all__ += [\"list\", \"tracker\"]\n"));
    }
}
