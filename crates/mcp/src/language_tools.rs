//! Which languages have a `run_<name>` tool of their own (`MCP_LANGUAGE_TOOLS`,
//! `--language-tools`): by default the eight built-in ones. Every offered language,
//! listed or not, runs through `run_code` ([`crate::run_code`]); the list only keeps the
//! tool list short, since a model reads every tool's description on every turn. A listed
//! name the runner does not offer gets no tool (the server logs it).

use sandbox_protocol::language::LanguageInfo;
use sandbox_protocol::{BadLangName, Lang};

/// The languages with a tool of their own when the operator names none, as
/// `MCP_LANGUAGE_TOOLS` writes them.
pub const DEFAULT: &str = "bash,python,node,typescript,c,cpp,go,java";

/// The languages that get a `run_<name>` tool, as the operator listed them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanguageTools(Vec<Lang>);

impl Default for LanguageTools {
    /// [`DEFAULT`].
    fn default() -> Self {
        let names: Vec<&str> = DEFAULT.split(',').collect();
        Self::parse(&names).expect("the default names are well formed")
    }
}

impl LanguageTools {
    /// The list from its entries (`MCP_LANGUAGE_TOOLS` split at commas): blank entries
    /// are skipped, a repeated name counts once, a name that cannot be a language's is
    /// refused.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, BadLangName> {
        let mut names: Vec<Lang> = Vec::new();
        for entry in entries.iter().map(|e| e.as_ref().trim()) {
            if entry.is_empty() {
                continue;
            }
            let lang = Lang::new(entry)?;
            if !names.contains(&lang) {
                names.push(lang);
            }
        }
        Ok(LanguageTools(names))
    }

    /// Whether `lang` gets a tool of its own (when offered).
    pub fn includes(&self, lang: &Lang) -> bool {
        self.0.contains(lang)
    }

    /// The listed names that none of `offered` has, in the list's order.
    pub fn not_offered(&self, offered: &[LanguageInfo]) -> Vec<String> {
        self.0
            .iter()
            .filter(|lang| !offered.iter().any(|o| &o.name == *lang))
            .map(Lang::to_string)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_checked_and_deduplicated() {
        let tools = LanguageTools::parse(&[" ruby", "", "bash", "ruby"]).expect("a list");
        assert!(tools.includes(&Lang::new("ruby").unwrap()));
        assert!(tools.includes(&Lang::BASH));
        assert!(!tools.includes(&Lang::PYTHON));
        assert_eq!(tools.0.len(), 2);
        assert!(LanguageTools::parse(&["Ruby"]).is_err());
        assert!(LanguageTools::parse(&["c++"]).is_err());
        let none = LanguageTools::parse::<&str>(&[]).expect("an empty list");
        assert!(!none.includes(&Lang::BASH));
        let default = LanguageTools::default();
        for name in DEFAULT.split(',') {
            assert!(default.includes(&Lang::new(name).unwrap()), "{name}");
        }
    }

    #[test]
    fn names_the_runner_does_not_offer_are_found() {
        let tools = LanguageTools::parse(&["bash", "klingon", "python", "cobol"]).unwrap();
        let offered = sandbox_protocol::language::classic();
        assert_eq!(tools.not_offered(&offered), ["klingon", "cobol"]);
    }
}
