//! The program the figure measures, and what every run of it must hand back: exit 0,
//! `df.describe()`'s rows, and one PNG plot under `outputs/`.

use anyhow::{ensure, Context};
use rmcp::model::CallToolResult;
use sandbox_protocol::api::RunResponse;

/// The program measured. In a sandbox its working folder is `/home/sandbox`, whose
/// `outputs/` the run hands back; the direct spawn runs it in a folder of its own with
/// an `outputs/` folder. `matplotlib.use("Agg")` makes it the same program on both
/// paths (in a sandbox, pyplot would otherwise pick the set's `sandbox_plots` backend
/// and hand back a `figure-1.png` as well).
pub const SCRIPT: &str = r#"import numpy as np
import pandas as pd
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

df = pd.DataFrame({"x": np.arange(100), "y": np.random.rand(100)})
print(df.describe())
df.plot(x="x", y="y")
plt.savefig("outputs/plot.png")
"#;
/// The program that shows what warm imports cost a run that does not use them.
pub const ONE_LINER: &str = "print(1)";
/// The one file every run must produce, in `outputs/`.
pub const PLOT: &str = "plot.png";
/// The first bytes of a PNG file.
pub const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";
/// The first bytes of a PNG file in base64 (as the answers carry them).
const PNG_BASE64: &str = "iVBORw0KGgo";
/// What `df.describe()` prints among its rows.
const DESCRIBED: [&str; 2] = ["count", "mean"];

/// (b)'s answer: exit 0, the description printed, and exactly the plot, as a PNG.
pub fn check_answer(answer: &RunResponse) -> anyhow::Result<()> {
    ensure!(
        answer.exit_code == 0 && !answer.timed_out && !answer.oom_killed,
        "exit code {}, timed out {}, OOM-killed {}; stderr: {}",
        answer.exit_code,
        answer.timed_out,
        answer.oom_killed,
        tail(&answer.stderr)
    );
    check_described(&answer.stdout)?;
    let files: Vec<(&str, &str)> = answer
        .outputs
        .iter()
        .map(|f| (f.path.as_str(), f.mime_type.as_str()))
        .collect();
    ensure!(
        files == [(PLOT, "image/png")],
        "outputs {files:?}: one {PLOT} (image/png) expected"
    );
    let data = answer.outputs.first().and_then(|f| f.data.as_deref());
    ensure!(
        data.is_some_and(|d| d.starts_with(PNG_BASE64)),
        "{PLOT} came back without PNG data"
    );
    Ok(())
}

/// (c)'s result: exit 0, the description printed, exactly the plot listed, and one
/// PNG image content.
pub fn check_result(result: &CallToolResult) -> anyhow::Result<()> {
    let structured = result
        .structured_content
        .as_ref()
        .context("the result has no structuredContent")?;
    ensure!(
        result.is_error != Some(true) && structured["exitCode"] == 0,
        "unexpected result {structured}"
    );
    check_described(structured["stdout"].as_str().unwrap_or_default())?;
    let outputs = &structured["outputs"];
    ensure!(
        outputs.as_array().map(Vec::len) == Some(1)
            && outputs[0]["path"] == PLOT
            && outputs[0]["mimeType"] == "image/png",
        "structuredContent.outputs is {outputs}: one {PLOT} (image/png) expected"
    );
    let images: Vec<_> = result.content.iter().filter_map(|c| c.as_image()).collect();
    ensure!(
        images.len() == 1,
        "{} image contents, 1 expected",
        images.len()
    );
    ensure!(
        images
            .iter()
            .all(|i| i.mime_type == "image/png" && i.data.starts_with(PNG_BASE64)),
        "the image content is not a PNG"
    );
    Ok(())
}

/// Whether `stdout` holds what `df.describe()` prints.
pub fn check_described(stdout: &str) -> anyhow::Result<()> {
    ensure!(
        DESCRIBED.iter().all(|word| stdout.contains(word)),
        "stdout lacks df.describe()'s rows: {}",
        tail(stdout)
    );
    Ok(())
}

/// The end of a program's output, for an error message.
pub fn tail(text: &str) -> &str {
    let start = text.len().saturating_sub(2000);
    let start = (start..=text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_protocol::api::OutputFile;

    fn answer(outputs: Vec<OutputFile>) -> RunResponse {
        serde_json::from_value(serde_json::json!({
            "stdout": "       x\ncount 100\nmean 49.5\n",
            "stderr": "",
            "exitCode": 0,
            "durationMs": 1,
            "timedOut": false,
            "oomKilled": false,
            "stdoutTruncated": false,
            "stderrTruncated": false,
            "outputs": outputs,
        }))
        .unwrap()
    }

    fn png(path: &str) -> OutputFile {
        OutputFile {
            path: path.into(),
            size: 8,
            mime_type: "image/png".into(),
            data: Some("iVBORw0KGgo=".into()),
        }
    }

    #[test]
    fn an_answer_needs_exactly_the_plot() {
        assert!(check_answer(&answer(vec![png(PLOT)])).is_ok());
        assert!(check_answer(&answer(vec![])).is_err());
        assert!(check_answer(&answer(vec![png(PLOT), png("figure-1.png")])).is_err());
        let mut no_data = png(PLOT);
        no_data.data = None;
        assert!(check_answer(&answer(vec![no_data])).is_err());
        let mut failed = answer(vec![png(PLOT)]);
        failed.exit_code = 1;
        assert!(check_answer(&failed).is_err());
    }

    #[test]
    fn the_script_saves_where_the_checks_look() {
        assert!(SCRIPT.contains(&format!("outputs/{PLOT}")));
        assert!(SCRIPT.contains("describe()"));
        assert!(PNG_BASE64.len() <= 12);
    }

    #[test]
    fn tail_keeps_the_end_on_a_char_boundary() {
        let text = "é".repeat(1500);
        assert!(tail(&text).len() <= 2001);
        assert_eq!(tail("short"), "short");
    }
}
