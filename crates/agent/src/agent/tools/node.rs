//! Node's `tools` package (`node_modules/tools/`): `index.js`, CommonJS (the runtime,
//! `runtime.js`, then an `exports.<server> = ...` assignment per server, which Node's
//! ES-module import of a CommonJS file also sees), `index.mjs`, the ES module face of
//! the same (named exports and a default), `package.json`, whose `exports` send
//! `import` to the one and `require` to the other, and `index.d.ts` (`typescript.rs`).
//! Every name and text of the offer goes in as a string literal ([`literal`]), never as
//! code; function names are [`function_name`]'s, server names identifiers.

use super::schema::literal;
use sandbox_protocol::tools::{function_name, ToolsOffer};
use std::fmt::Write;

/// `index.js`'s fixed part.
const RUNTIME: &str = include_str!("runtime.js");

/// The text of `index.js` for `offer`, calling the agent at `socket`.
pub(super) fn index_js(offer: &ToolsOffer, socket: &str) -> String {
    let mut text = String::from(RUNTIME);
    text.push_str("\n// The tools of this run (generated from its offer).\n");
    let _ = writeln!(text, "const SOCKET = {};", literal(socket));
    for server in &offer.servers {
        let name = literal(&server.name);
        let _ = writeln!(text, "exports.{} = server({name}, [", server.name);
        for tool in &server.tools {
            let _ = writeln!(
                text,
                "  tool({name}, {}, {}, {}),",
                literal(&tool.name),
                literal(&function_name(&tool.name)),
                literal(&tool.description)
            );
        }
        text.push_str("]);\n");
    }
    text
}

/// The text of `index.mjs`: the CommonJS module's names, as an ES module's.
pub(super) fn index_mjs(offer: &ToolsOffer) -> String {
    let mut names = vec!["ToolError", "list"];
    names.extend(offer.servers.iter().map(|s| s.name.as_str()));
    format!(
        "// The ES module face of index.js: import {{ {example} }} from \"tools\".\n\
         import tools from './index.js';\n\
         export const {{ {} }} = tools;\n\
         export default tools;\n",
        names.join(", "),
        example = names.last().copied().unwrap_or("list"),
    )
}

/// The text of `package.json`.
pub(super) fn package_json() -> String {
    let package = serde_json::json!({
        "name": "tools",
        "version": "1.0.0",
        "description": "The tools this run may call (written by the sandbox's agent)",
        "main": "index.js",
        "types": "index.d.ts",
        "exports": {
            ".": {
                "types": "./index.d.ts",
                "import": "./index.mjs",
                "require": "./index.js"
            }
        }
    });
    format!("{package:#}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_protocol::tools::{OfferedServer, OfferedTool};

    fn offer() -> ToolsOffer {
        ToolsOffer {
            servers: vec![OfferedServer {
                name: "docs".into(),
                tools: vec![OfferedTool {
                    name: "read\"); process.exit(3); (\"".into(),
                    description: "*/ </script>\n`${x}`".into(),
                    input_schema: serde_json::Value::Null,
                }],
            }],
        }
    }

    #[test]
    fn every_text_of_the_offer_is_a_literal() {
        let text = index_js(&offer(), "/s");
        let generated = text.split("(generated from its offer)").nth(1).unwrap();
        let expected = [
            ".",
            "const SOCKET = \"/s\";",
            "exports.docs = server(\"docs\", [",
            "  tool(\"docs\", \"read\\\"); process.exit(3); (\\\"\", \
             \"read____process_exit_3_____\", \"*/ </script>\\n`${x}`\"),",
            "]);",
        ];
        assert_eq!(generated.lines().collect::<Vec<_>>(), expected);
    }

    #[test]
    fn the_es_module_names_every_server() {
        assert_eq!(
            index_mjs(&offer()).lines().nth(2),
            Some("export const { ToolError, list, docs } = tools;")
        );
        let package: serde_json::Value = serde_json::from_str(&package_json()).unwrap();
        assert_eq!(package["exports"]["."]["import"], "./index.mjs");
        assert_eq!(package["exports"]["."]["require"], "./index.js");
    }
}
