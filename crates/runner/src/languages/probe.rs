//! The checks a row passes before it is offered: every path it requires exists on the
//! host, and its version command answers (its first line is the version a client is
//! told). The rows are checked side by side, each command bounded in time.

use super::row::Row;
use super::Context;
use crate::helper::wait_within;
use sandbox_jail::layout::PATH;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a version command may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// For each row, its toolchain's version, or why it cannot be offered.
pub fn check_all(rows: &[Row], context: &Context) -> Vec<Result<String, String>> {
    std::thread::scope(|scope| {
        let checks: Vec<_> = rows
            .iter()
            .map(|row| scope.spawn(move || check(row, context)))
            .collect();
        checks
            .into_iter()
            .map(|check| {
                check
                    .join()
                    .unwrap_or_else(|_| Err("its check panicked".into()))
            })
            .collect()
    })
}

/// The version of one row's toolchain, or why it cannot be offered.
fn check(row: &Row, context: &Context) -> Result<String, String> {
    for required in &row.requires {
        let path = Row::on_host(required, context)
            .ok_or_else(|| format!("it needs the package set ({required}), and none is built"))?;
        if !Path::new(&path).exists() {
            return Err(format!("{path} is not on this host"));
        }
    }
    if row.version.is_empty() {
        return Ok(row.name.to_string());
    }
    let args: Option<Vec<String>> = row
        .version
        .iter()
        .map(|a| Row::on_host(a, context))
        .collect();
    let args = args.ok_or("its version command needs the package set, and none is built")?;
    version(&args)
}

/// The first line a version command prints (on stdout, else on stderr).
fn version(args: &[String]) -> Result<String, String> {
    let shown = args.join(" ");
    let mut child = Command::new(&args[0])
        .args(&args[1..])
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", "/tmp")
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("`{shown}` could not start: {e}"))?;
    let status = wait_within(&mut child, VERSION_TIMEOUT).map_err(|e| format!("`{shown}` {e}"))?;
    let read = |stream: Option<&mut dyn Read>| {
        let mut text = String::new();
        if let Some(stream) = stream {
            let _ = stream.take(64 * 1024).read_to_string(&mut text);
        }
        text
    };
    let stdout = read(child.stdout.as_mut().map(|s| s as &mut dyn Read));
    let stderr = read(child.stderr.as_mut().map(|s| s as &mut dyn Read));
    if !status.success() {
        let said = stderr.lines().next().unwrap_or("").trim();
        return Err(format!("`{shown}` failed ({status}): {said}"));
    }
    let first = |text: &str| {
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_owned)
    };
    first(&stdout)
        .or_else(|| first(&stderr))
        .ok_or_else(|| format!("`{shown}` printed nothing"))
}
