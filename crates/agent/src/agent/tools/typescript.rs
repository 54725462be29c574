//! `index.d.ts` of Node's `tools` package: TypeScript declarations of the module, each
//! server a constant whose functions take an object of the tool's parameters, with
//! JSDoc from the offer's descriptions. The TypeScript loader transpiles without
//! checking, so this is documentation (for an editor, or a program that reads it).
//! Texts go into comments with every `*/` broken (`*\/`), property names in as string
//! literals ([`literal`]); function names are [`function_name`]'s.

use super::schema::{literal, parameters, Parameter};
use sandbox_protocol::tools::{function_name, OfferedTool, ToolsOffer};
use std::fmt::Write;

/// The declarations every module has.
const PREAMBLE: &str = "\
/** The tools this run may call, by server (written by the sandbox's agent). */
/** A call that failed: the tool's error, or the sandbox's refusal, as its message. */
export declare class ToolError extends Error {}
/** One tool of a server, as list() gives it. */
export interface ListedTool {
  /** The tool's name, as its server names it. */
  name: string;
  /** Its function's name in this module. */
  function: string;
  /** What it does. */
  description: string;
}
/** The servers and their tools. */
export declare function list(): { server: string; tools: ListedTool[] }[];
";

/// The text of `index.d.ts` for `offer`.
pub(super) fn index_d_ts(offer: &ToolsOffer) -> String {
    let mut text = String::from(PREAMBLE);
    for server in &offer.servers {
        let _ = writeln!(
            text,
            "/** The tools of the server {}. */",
            comment(&server.name)
        );
        let _ = writeln!(text, "export declare const {}: {{", server.name);
        for tool in &server.tools {
            text.push_str(&function(tool));
        }
        text.push_str("};\n");
    }
    let mut names = vec![
        "ToolError: typeof ToolError".to_owned(),
        "list: typeof list".to_owned(),
    ];
    names.extend(
        offer
            .servers
            .iter()
            .map(|s| format!("{0}: typeof {0}", s.name)),
    );
    let _ = writeln!(
        text,
        "declare const tools: {{ {} }};\nexport default tools;",
        names.join("; ")
    );
    text
}

/// One function's declaration, with its JSDoc.
fn function(tool: &OfferedTool) -> String {
    let parameters = parameters(tool);
    let mut doc = vec![if tool.description.trim().is_empty() {
        format!("The tool {}.", tool.name)
    } else {
        tool.description.trim().to_owned()
    }];
    doc.push(String::new());
    for p in &parameters {
        doc.push(format!("@param args.{}", super::schema::line(p)));
    }
    doc.push("@returns the tool's result: its structured content, else its text.".into());
    doc.push("@throws ToolError when the call fails.".into());
    let mut text = String::from("  /**\n");
    for line in doc.iter().flat_map(|entry| entry.split('\n')) {
        let _ = writeln!(text, "   * {}", comment(line));
    }
    text.push_str("   */\n");
    let _ = writeln!(
        text,
        "  {}(args{}: {{ {} }}): Promise<any>;",
        function_name(&tool.name),
        if parameters.iter().any(|p| p.required) {
            ""
        } else {
            "?"
        },
        fields(&parameters)
    );
    text
}

/// The parameters as an object type's fields, and any other property.
fn fields(parameters: &[Parameter]) -> String {
    let mut fields: Vec<String> = parameters
        .iter()
        .map(|p| {
            let optional = if p.required { "" } else { "?" };
            format!("{}{optional}: {}", literal(&p.name), ts_type(&p.kind))
        })
        .collect();
    fields.push("[other: string]: unknown".into());
    fields.join("; ")
}

/// The TypeScript type of a JSON type (several: their union).
fn ts_type(kind: &str) -> String {
    if kind.is_empty() {
        return "unknown".into();
    }
    let types: Vec<&str> = kind
        .split('|')
        .map(|k| match k {
            "string" => "string",
            "integer" | "number" => "number",
            "boolean" => "boolean",
            "null" => "null",
            "array" => "unknown[]",
            "object" => "Record<string, unknown>",
            _ => "unknown",
        })
        .collect();
    types.join(" | ")
}

/// `text` fit for a block comment: no `*/` can end it early.
fn comment(text: &str) -> String {
    text.replace("*/", "*\\/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_protocol::tools::OfferedServer;
    use serde_json::json;

    #[test]
    fn a_description_cannot_end_its_comment() {
        let offer = ToolsOffer {
            servers: vec![OfferedServer {
                name: "docs".into(),
                tools: vec![OfferedTool {
                    name: "read-page".into(),
                    description: "Reads. */ export const x = 1; /*\nSecond line".into(),
                    input_schema: json!({
                        "properties": {
                            "url": {"type": "string", "description": "The page */ here"},
                            "max-bytes": {"type": ["integer", "null"]}
                        },
                        "required": ["url"]
                    }),
                }],
            }],
        };
        let text = index_d_ts(&offer);
        assert_eq!(
            text.matches("*/").count(),
            text.matches("/**").count(),
            "{text}"
        );
        assert!(text.contains("   * Reads. *\\/ export const x = 1; /*\n   * Second line\n"));
        assert!(text.contains("   * @param args.url (string, required): The page *\\/ here\n"));
        assert!(text.contains(
            "  read_page(args: { \"url\": string; \"max-bytes\"?: number | null; \
             [other: string]: unknown }): Promise<any>;\n"
        ));
        assert!(text.ends_with(
            "declare const tools: { ToolError: typeof ToolError; list: typeof list; \
             docs: typeof docs };\nexport default tools;\n"
        ));
    }
}
