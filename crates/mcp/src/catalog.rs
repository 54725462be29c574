//! The tools as this server offers them now: written from the limits its runner
//! publishes in `GET /health` (memory, CPU, timeouts, output cap, languages), so that
//! what a model is told is what the runner enforces: a `run_<name>` tool for each offered
//! language the operator's list names ([`LanguageTools`]), and `run_code` for all of them. The runner owns every number; this server asks
//! at start and again every [`REFRESH`], and rewrites the tools when one changes. Until
//! a runner answers (or with none configured) the runner's defaults stand.

use std::time::Duration;

use rmcp::model::Tool;
use sandbox_protocol::api::{Limits, Packages};
use sandbox_protocol::language::{self, LanguageInfo};
use sandbox_protocol::Lang;

use crate::language_tools::LanguageTools;
use crate::process_tools::ProcessTool;
use crate::sandbox_call::SandboxCall;
use crate::sandbox_tools::SandboxTool;
use crate::snapshot_tools::SnapshotTool;
use crate::tools;
use crate::{code_tools, egress_args, run_code, search_tool};

/// How often the runner's limits are asked for again.
pub const REFRESH: Duration = Duration::from_secs(10);

/// What a runner offers, as its `GET /health` says: the tools are written from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Offer {
    /// The limits of its sandboxes.
    pub limits: Limits,
    /// What programs can import.
    pub packages: Packages,
    /// Its languages, in its table's order.
    pub languages: Vec<LanguageInfo>,
}

/// How this server writes its tools, whatever the runner offers.
#[derive(Debug, Clone)]
pub struct ToolChoice {
    /// This server's own default for calls that give no timeout (`SANDBOX_TIMEOUT_MS`),
    /// the runner's when `None`.
    pub default_timeout: Option<Duration>,
    /// Whether there are tools at all (`FEATURE_SANDBOX_EXEC`): none when turned off.
    pub exec_enabled: bool,
    /// The languages with a `run_<name>` tool of their own (`MCP_LANGUAGE_TOOLS`).
    pub language_tools: LanguageTools,
}

impl Default for ToolChoice {
    /// The runner's default timeout, tools on, the default languages with a tool.
    fn default() -> Self {
        ToolChoice {
            default_timeout: None,
            exec_enabled: true,
            language_tools: LanguageTools::default(),
        }
    }
}

/// The limits in force and the tools written from them.
#[derive(Debug, Clone)]
pub struct Catalog {
    limits: Limits,
    packages: Packages,
    languages: Vec<LanguageInfo>,
    default_timeout_ms: u64,
    tools: Vec<Tool>,
}

impl Catalog {
    /// The tools for `limits`, for the languages every runner offers (bash, python,
    /// node), written as `choice` says.
    pub fn new(limits: Limits, choice: &ToolChoice) -> Self {
        let runner = Offer {
            limits,
            packages: Packages::default(),
            languages: language::classic(),
        };
        Self::of(runner, choice)
    }

    /// As [`new`](Self::new), for what a runner offers: a run tool for each language
    /// `choice` lists (naming what programs can import) and `run_code` for all.
    pub fn of(runner: Offer, choice: &ToolChoice) -> Self {
        let Offer {
            limits,
            packages,
            languages,
        } = runner;
        let default_timeout_ms = match choice.default_timeout {
            Some(own) => (own.as_millis() as u64).min(limits.max_timeout_ms),
            None => limits.default_timeout_ms,
        };
        let tools = if choice.exec_enabled {
            let own = languages
                .iter()
                .filter(|info| choice.language_tools.includes(&info.name))
                // A language called `code` runs through run_code alone.
                .filter(|info| tools::tool_name(&info.name) != run_code::NAME)
                .map(|info| tools::definition(info, &limits, &packages, default_timeout_ms));
            let any = run_code::definition(&languages, &limits, default_timeout_ms);
            let run = own.chain(any).map(|mut tool| {
                egress_args::extend(&mut tool, &limits);
                tool
            });
            let sandbox = SandboxTool::ALL.map(|tool| {
                let mut definition = tool.definition(&limits);
                if tool == SandboxTool::Create {
                    egress_args::extend(&mut definition, &limits);
                }
                definition
            });
            let snapshot = SnapshotTool::ALL.map(|tool| tool.definition(&limits));
            let processes = ProcessTool::ALL.map(|tool| tool.definition(&limits));
            run.chain(sandbox)
                .chain(snapshot)
                .chain(processes)
                .collect()
        } else {
            Vec::new()
        };
        Catalog {
            limits,
            packages,
            languages,
            default_timeout_ms,
            tools,
        }
    }

    /// The limits the tools were written from.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The packages the run tools name.
    pub fn packages(&self) -> &Packages {
        &self.packages
    }

    /// The languages the run tools are for.
    pub fn languages(&self) -> &[LanguageInfo] {
        &self.languages
    }

    /// The language called `lang`, if it has a tool.
    pub fn language(&self, lang: &Lang) -> Option<&LanguageInfo> {
        self.languages.iter().find(|l| &l.name == lang)
    }

    /// Whether the tools were written from what `runner` offers.
    pub fn describes(&self, runner: &Offer) -> bool {
        self.limits == runner.limits
            && self.packages == runner.packages
            && self.languages == runner.languages
    }

    /// The timeout of a call that gives none, in milliseconds.
    pub fn default_timeout_ms(&self) -> u64 {
        self.default_timeout_ms
    }

    /// The longest a run of `lang` with `timeout_ms` keeps its sandbox busy: its timeout
    /// and the language's compile timeout, as the runner publishes it
    /// ([`language::run_time`]). A caller waits for the answer that and the runner's
    /// allowances ([`Limits::answer_within`]).
    pub fn run_time(&self, lang: &Lang, timeout_ms: u64) -> Duration {
        let compile_ms = self.language(lang).map_or(0, |l| l.compile_timeout_ms);
        language::run_time(timeout_ms, compile_ms)
    }

    /// The tools, as `tools/list` shows them.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// The tools for programs that can call the tools of upstream `servers`: the run
    /// tools of Python, TypeScript and Node say so ([`code_tools`]), and `search_tools`
    /// lists them. Unchanged without servers, or with execution turned off.
    pub fn with_code_tools(mut self, servers: &[String]) -> Self {
        if servers.is_empty() || self.tools.is_empty() {
            return self;
        }
        code_tools::describe(&mut self.tools, servers);
        self.tools.push(search_tool::definition(servers));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn the_tools_say_the_runners_limits() {
        let limits = Limits {
            memory_mb: 384,
            default_timeout_ms: 9_000,
            max_timeout_ms: 60_000,
            output_cap_bytes: 64 * 1024,
            cpus: 2.0,
            ..Limits::default()
        };
        let catalog = Catalog::new(limits, &ToolChoice::default());
        assert_eq!(catalog.default_timeout_ms(), 9_000);
        let names: Vec<_> = catalog.tools().iter().map(|t| t.name.to_string()).collect();
        assert_eq!(
            names,
            [
                "run_bash",
                "run_python",
                "run_node",
                "run_code",
                "create_sandbox",
                "upload_file",
                "download_file",
                "list_files",
                "close_sandbox",
                "pause_sandbox",
                "snapshot_sandbox",
                "fork_sandbox",
                "start_process",
                "process_output",
                "write_stdin",
                "kill_process",
                "list_processes"
            ]
        );
        let text = catalog.tools()[0].description.clone().unwrap_or_default();
        for needle in [
            "384 MB",
            "2 CPUs",
            "default 9000 ms",
            "at most 60000 ms",
            "64 KiB",
        ] {
            assert!(text.contains(needle), "{needle:?} missing from {text}");
        }
    }

    #[test]
    fn a_calls_deadline_is_its_run_time_and_the_runners_allowances() {
        let compiled = LanguageInfo {
            name: Lang::new("c").expect("a name"),
            compile: Some("gcc main.c".into()),
            compile_timeout_ms: 30_000,
            ..language::classic().remove(0)
        };
        let offer = Offer {
            limits: Limits {
                queue_timeout_ms: 2_000,
                answer_margin_ms: 10_000,
                ..Limits::default()
            },
            packages: Packages::default(),
            languages: vec![compiled.clone()],
        };
        let catalog = Catalog::of(offer, &ToolChoice::default());
        let c = catalog.run_time(&compiled.name, 5_000);
        assert_eq!(c, Duration::from_secs(35), "the compile timeout counts");
        assert_eq!(catalog.run_time(&Lang::BASH, 5_000), Duration::from_secs(5));
        let deadline = catalog.limits().answer_within(c);
        assert_eq!(
            deadline,
            Duration::from_secs(47),
            "queue wait and answer margin"
        );
        let older: Limits =
            serde_json::from_value(serde_json::json!({"memoryMb": 256, "cpus": 0.5,
                "pidsMax": 64, "defaultTimeoutMs": 15000, "maxTimeoutMs": 300000,
                "outputCapBytes": 1024, "codeCapBytes": 1024, "queueTimeoutMs": 5000,
                "network": false}))
            .expect("an older runner's limits");
        assert_eq!(
            older.answer_margin_ms,
            sandbox_protocol::api::defaults::ANSWER_MARGIN_MS,
            "a runner that publishes no margin gets the documented one"
        );
    }

    #[test]
    fn the_servers_own_default_stays_within_the_runners_maximum() {
        let choice = |default_timeout, exec_enabled| ToolChoice {
            default_timeout,
            exec_enabled,
            ..ToolChoice::default()
        };
        let own = choice(Some(Duration::from_millis(500_000)), true);
        let catalog = Catalog::new(Limits::default(), &own);
        assert_eq!(catalog.default_timeout_ms(), 300_000);
        let own = choice(Some(Duration::from_millis(2_000)), true);
        let catalog = Catalog::new(Limits::default(), &own);
        assert_eq!(catalog.default_timeout_ms(), 2_000);
        assert!(Catalog::new(Limits::default(), &choice(None, false))
            .tools()
            .is_empty());
    }

    /// A runner that offers the eight built-in languages and `extra` ones.
    fn offer_with(extra: &[&str]) -> Offer {
        let languages = crate::language_tools::DEFAULT
            .split(',')
            .chain(extra.iter().copied())
            .map(|name| LanguageInfo {
                name: Lang::new(name).expect("a name"),
                version: format!("{name} 1.2.3"),
                ..language::classic().remove(0)
            })
            .collect();
        Offer {
            limits: Limits::default(),
            packages: Packages::default(),
            languages,
        }
    }

    fn run_tools(catalog: &Catalog) -> Vec<String> {
        let names = catalog.tools().iter().map(|t| t.name.to_string());
        names.filter(|n| n.starts_with("run_")).collect()
    }

    #[test]
    fn the_operators_list_says_which_languages_have_a_tool_and_run_code_runs_all() {
        let offer = offer_with(&["ruby", "rust"]);
        let catalog = Catalog::of(offer.clone(), &ToolChoice::default());
        let eight = crate::language_tools::DEFAULT.split(',');
        let expected: Vec<_> = eight.map(|n| format!("run_{n}")).collect();
        assert_eq!(
            run_tools(&catalog),
            [&expected[..], &["run_code".to_owned()]].concat(),
            "the eight by default, the others through run_code"
        );
        let any = catalog.tools().iter().find(|t| t.name == run_code::NAME);
        let text = any.and_then(|t| t.description.clone()).unwrap_or_default();
        assert!(text.contains("ruby 1.2.3, rust 1.2.3."), "{text}");
        assert_eq!(catalog.languages().len(), 10, "every language runs");

        let choice = ToolChoice {
            language_tools: LanguageTools::parse(&["rust", "python", "klingon"]).unwrap(),
            ..ToolChoice::default()
        };
        let catalog = Catalog::of(offer.clone(), &choice);
        assert_eq!(
            run_tools(&catalog),
            ["run_python", "run_rust", "run_code"],
            "in the runner's order; a name it does not offer gets none"
        );
        let kind = |name: &str| tools::ToolKind::of(name, catalog.languages());
        assert_eq!(kind("run_code"), Some(tools::ToolKind::RunCode));

        let choice = ToolChoice {
            language_tools: LanguageTools::parse::<&str>(&[]).unwrap(),
            ..ToolChoice::default()
        };
        let catalog = Catalog::of(offer.clone(), &choice);
        assert_eq!(run_tools(&catalog), ["run_code"]);

        let choice = ToolChoice {
            language_tools: LanguageTools::parse(&["code", "bash"]).unwrap(),
            ..ToolChoice::default()
        };
        let catalog = Catalog::of(offer_with(&["code"]), &choice);
        assert_eq!(
            run_tools(&catalog),
            ["run_bash", "run_code"],
            "one run_code"
        );

        // Where the runner opens hosts, run_code takes `egress` as the run tools do.
        let open = Offer {
            limits: Limits {
                network_hosts: vec!["pypi.org".into()],
                ..Limits::default()
            },
            ..offer
        };
        let catalog = Catalog::of(open, &ToolChoice::default());
        for name in ["run_python", run_code::NAME] {
            let tool = catalog.tools().iter().find(|t| t.name == name);
            let schema = tool.map(|t| Value::Object((*t.input_schema).clone()));
            let schema = schema.unwrap_or_default();
            assert_eq!(schema["properties"]["egress"]["type"], "array", "{name}");
        }
    }
}
