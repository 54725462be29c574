//! The task, two ways: "which crash issues are closed, with their titles", over the
//! tracker's 200 issues. (a) As an MCP client has a model do it: `list_issues` for each
//! page, one call after another, every page's text read by the model; (b) one
//! `run_python` through sandbox-mcp whose program makes the same calls through
//! `import tools`, filters, and prints the answer.
//!
//! What reaches the model is counted the same way both ways: the UTF-8 bytes of the
//! `text` of every content block of the tools' results (their `structuredContent` and
//! the JSON-RPC framing are not counted; a result with a block that is not text fails
//! the bench, since the count would then not say what the model reads). The bench plays
//! the model of (a): it reads the answer from that text.

use super::calls::{call_directly, json_of, run_python, ToolCallCheck};
use super::rounds::{Quiet, Rounds};
use crate::stats::{self, Latency};
use anyhow::{bail, ensure, Context};
use rmcp::model::{CallToolResult, JsonObject};
use rmcp::service::Peer;
use rmcp::RoleClient;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The tracker's pages (20 issues each).
pub const PAGES: u64 = 10;
/// The tracker's issues: every one must be read.
pub const ISSUES: usize = 200;
/// The tool each page is read with.
const LIST: &str = "list_issues";

/// The program of (b): the same calls, filtered in the sandbox, a few lines printed.
pub const PROGRAM: &str = r##"import tools
found = []
for page in range(1, 11):
    for issue in tools.tracker.list_issues(page=page)["issues"]:
        if issue["state"] == "closed" and "crash" in issue["labels"]:
            found.append(issue)
print(f"{len(found)} closed crash issues:")
for issue in found:
    print(f"#{issue['id']} {issue['title']}")
"##;

/// An issue of the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Found {
    /// Its number.
    pub id: u64,
    /// Its title.
    pub title: String,
}

/// One way of doing the task.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Way {
    /// Calls that reached the tracker per task.
    pub tracker_calls: u64,
    /// Tool calls the model makes per task.
    pub model_calls: u64,
    /// Bytes of the results' text content the model reads (the median of the rounds).
    pub model_bytes: u64,
    /// Bytes of JSON arguments the model writes for its calls.
    pub written_bytes: u64,
    /// The calls' own time (what a model spends between them is not counted): (a) the
    /// sum of its calls' round trips, (b) the one `tools/call`.
    pub latency: Latency,
}

/// The task's figures.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskFigures {
    /// Measured rounds (each: (a) then (b)).
    pub rounds: usize,
    /// The issues the answer names, the same both ways in every round.
    pub answer: Vec<u64>,
    /// (a) `list_issues` called page by page by the client.
    pub direct: Way,
    /// (b) one `run_python` whose program calls the tools.
    pub from_code: Way,
}

/// One round's result of one way.
pub(super) struct Done {
    /// The calls' time.
    pub(super) took: Duration,
    /// Bytes of text the model reads.
    pub(super) model_bytes: u64,
    /// The issues found.
    pub(super) answer: Vec<Found>,
}

/// Does the task both ways each round (after the warm-up), each way on a quiet runner;
/// checks that both find the same issues.
pub async fn measure(
    direct: &Peer<RoleClient>,
    mcp: &Peer<RoleClient>,
    quiet: &Quiet<'_>,
    rounds: &Rounds,
) -> anyhow::Result<TaskFigures> {
    let code = PROGRAM;
    let (mut direct_runs, mut code_runs) = (Vec::new(), Vec::new());
    let begun = Instant::now();
    let mut answer = Vec::new();
    let mut round = 0;
    while rounds.go_on(direct_runs.len(), begun.elapsed()) {
        quiet.wait().await?;
        let a = by_hand(direct)
            .await
            .context("the task, (a) by the client")?;
        quiet.wait().await?;
        let b = by_code(mcp, code)
            .await
            .context("the task, (b) from code")?;
        ensure!(
            a.answer == b.answer && !a.answer.is_empty(),
            "the two ways disagree: (a) found {:?}, (b) {:?}",
            a.answer,
            b.answer
        );
        answer = a.answer.iter().map(|f| f.id).collect();
        if rounds.counts(round) {
            direct_runs.push((a.took, a.model_bytes));
            code_runs.push((b.took, b.model_bytes));
        }
        round += 1;
    }
    let written = |args: &Value| serde_json::to_vec(args).map_or(0, |b| b.len() as u64);
    let direct_written = (1..=PAGES).map(|p| written(&json!({"page": p}))).sum();
    Ok(TaskFigures {
        rounds: direct_runs.len(),
        answer,
        direct: way(&direct_runs, PAGES, PAGES, direct_written)?,
        from_code: way(&code_runs, PAGES, 1, written(&json!({"code": code})))?,
    })
}

fn way(
    runs: &[(Duration, u64)],
    tracker_calls: u64,
    model_calls: u64,
    written_bytes: u64,
) -> anyhow::Result<Way> {
    let times: Vec<Duration> = runs.iter().map(|(t, _)| *t).collect();
    let mut bytes: Vec<u64> = runs.iter().map(|(_, b)| *b).collect();
    bytes.sort_unstable();
    Ok(Way {
        tracker_calls,
        model_calls,
        model_bytes: bytes.get(bytes.len() / 2).copied().context("no round")?,
        written_bytes,
        latency: stats::latency(&times).context("no round")?,
    })
}

/// (a): every page, one call after the other; the model reads each page's text.
pub(super) async fn by_hand(tracker: &Peer<RoleClient>) -> anyhow::Result<Done> {
    let mut took = Duration::ZERO;
    let mut model_bytes = 0;
    let mut read = Vec::new();
    for page in 1..=PAGES {
        let mut arguments = JsonObject::new();
        arguments.insert("page".into(), page.into());
        let (call, result) = call_directly(tracker, LIST, arguments).await?;
        took += call;
        let text = text_of(&result)?;
        model_bytes += text.len() as u64;
        read.push(json_of(&text)?);
    }
    let (seen, answer) = closed_crashes(&read)?;
    ensure!(seen == ISSUES, "the pages held {seen} issues, not {ISSUES}");
    Ok(Done {
        took,
        model_bytes,
        answer,
    })
}

/// (b): one `run_python`; the model reads its result's text.
async fn by_code(mcp: &Peer<RoleClient>, code: &str) -> anyhow::Result<Done> {
    let (took, result) = run_python(mcp, code).await?;
    let stdout = ToolCallCheck {
        calls: PAGES as usize,
        tool: LIST,
    }
    .check(&result)?;
    Ok(Done {
        took,
        model_bytes: text_of(&result)?.len() as u64,
        answer: found_in_output(&stdout)?,
    })
}

/// The text of a result's content blocks, joined: what a client hands its model.
pub fn text_of(result: &CallToolResult) -> anyhow::Result<String> {
    let mut text = String::new();
    for block in &result.content {
        match block.as_text() {
            Some(block) => text.push_str(&block.text),
            None => bail!("a result with a block that is not text: {block:?}"),
        }
    }
    Ok(text)
}

/// The issues seen over `pages` (each `{"issues": [...]}`), and the closed ones
/// labelled `crash`, in page order.
pub fn closed_crashes(pages: &[Value]) -> anyhow::Result<(usize, Vec<Found>)> {
    let mut seen = 0;
    let mut found = Vec::new();
    for page in pages {
        let issues = page["issues"]
            .as_array()
            .with_context(|| format!("a page without issues: {page}"))?;
        seen += issues.len();
        for issue in issues {
            let closed = issue["state"] == "closed";
            let crash = issue["labels"]
                .as_array()
                .is_some_and(|labels| labels.iter().any(|l| l == "crash"));
            if closed && crash {
                found.push(Found {
                    id: issue["id"].as_u64().context("an issue without an id")?,
                    title: issue["title"].as_str().unwrap_or_default().to_owned(),
                });
            }
        }
    }
    Ok((seen, found))
}

/// The issues the program of (b) printed: its `#ID TITLE` lines, after a first line
/// that gives their count.
pub fn found_in_output(stdout: &str) -> anyhow::Result<Vec<Found>> {
    let mut lines = stdout.lines();
    let head = lines.next().unwrap_or_default();
    let count: usize = head
        .strip_suffix(" closed crash issues:")
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("the program printed {stdout:?}"))?;
    let found = lines
        .map(|line| {
            let (id, title) = line
                .strip_prefix('#')
                .and_then(|rest| rest.split_once(' '))
                .with_context(|| format!("a line that is not `#ID TITLE`: {line:?}"))?;
            let id = id.parse().with_context(|| format!("an id {id:?}"))?;
            Ok(Found {
                id,
                title: title.to_owned(),
            })
        })
        .collect::<anyhow::Result<Vec<Found>>>()?;
    ensure!(
        found.len() == count,
        "{count} announced, {} printed",
        found.len()
    );
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools_from_code::upstream::SERVER;
    use rmcp::model::ContentBlock;

    fn issue(id: u64, state: &str, labels: &[&str]) -> Value {
        json!({"id": id, "title": format!("Issue {id}"), "state": state, "labels": labels})
    }

    #[test]
    fn the_answer_is_the_closed_crash_issues_in_page_order() {
        let pages = [
            json!({"issues": [issue(1, "closed", &["bug"]), issue(15, "closed", &["crash", "ui"])]}),
            json!({"issues": [issue(20, "open", &["crash"]), issue(30, "closed", &["crash"])]}),
        ];
        let (seen, found) = closed_crashes(&pages).unwrap();
        assert_eq!(seen, 4);
        let ids: Vec<u64> = found.iter().map(|f| f.id).collect();
        assert_eq!(ids, [15, 30]);
        assert_eq!(found[0].title, "Issue 15");
        assert!(closed_crashes(&[json!({"page": 1})]).is_err());
    }

    #[test]
    fn the_program_s_lines_are_read_back_and_counted() {
        let out = "2 closed crash issues:\n#15 Issue 15: crash in the network\n#30 Issue 30\n";
        let found = found_in_output(out).unwrap();
        assert_eq!(
            found,
            [
                Found {
                    id: 15,
                    title: "Issue 15: crash in the network".into()
                },
                Found {
                    id: 30,
                    title: "Issue 30".into()
                }
            ]
        );
        assert!(found_in_output("3 closed crash issues:\n#15 x\n").is_err());
        assert!(found_in_output("Traceback (most recent call last):\n").is_err());
        assert!(found_in_output("1 closed crash issues:\n15 x\n").is_err());
        assert_eq!(found_in_output("0 closed crash issues:\n").unwrap(), []);
    }

    #[test]
    fn the_program_reads_every_page_and_prints_what_the_reader_expects() {
        assert!(PROGRAM.starts_with("import tools\n"));
        assert!(PROGRAM.contains(&format!("range(1, {})", PAGES + 1)));
        let call = format!("tools.{SERVER}.{LIST}(page=page)");
        assert!(PROGRAM.contains(&call), "{PROGRAM}");
    }

    #[test]
    fn what_reaches_the_model_is_the_text_of_the_blocks() {
        let result = CallToolResult::success(vec![
            ContentBlock::text("héllo"),
            ContentBlock::text(" world"),
        ]);
        assert_eq!(text_of(&result).unwrap().len(), 12);
        let image = CallToolResult::success(vec![ContentBlock::image("AAAA", "image/png")]);
        assert!(text_of(&image).is_err());
    }

    #[test]
    fn a_way_takes_the_median_of_its_rounds() {
        let runs = [(3, 700), (1, 710), (2, 705)].map(|(ms, b)| (Duration::from_millis(ms), b));
        let way = way(&runs, 10, 1, 400).unwrap();
        assert_eq!(way.model_bytes, 705);
        assert_eq!(way.latency.p50_ms, 2.0);
        assert_eq!((way.tracker_calls, way.model_calls), (10, 1));
        assert!(super::way(&[], 10, 1, 0).is_err());
    }
}
