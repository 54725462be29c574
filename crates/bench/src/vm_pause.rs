//! The vm backend's pause and wake (issue 31), under TCG: the rounds of `pause` (a run
//! in the active session, the pause, the run that wakes it) on a runner of its own with
//! `--backend vm --vmm qemu --accel tcg`, a pool of one VM, and a session holding
//! [`VM_BYTES`] of files.
//!
//! The image is `--vm-image`, or one `sandbox-runner image build --out` makes (a cache:
//! the second build is a hit). The runner gets a state folder of its own, removed after.
//! Not in the default sections: it boots VMs under TCG, which takes the machine's CPUs
//! for minutes.

use crate::clients::RunnerApi;
use crate::pause::{pause_row, PauseRow, RunnerUnderTest};
use crate::services::{Binaries, Service};
use anyhow::{ensure, Context};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The bytes of files of the measured session.
pub const VM_BYTES: u64 = 1 << 20;
/// VMs of the runner: one, refilled between the steps.
const POOL_SIZE: usize = 1;
/// How long a request may take: a wake may wait for a VM to boot under TCG.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(180);
/// How long the pool may take to boot its VM again.
const REFILL_TIMEOUT: Duration = Duration::from_secs(180);
/// How long an image build may take (from nothing it builds the static agent).
const IMAGE_BUILD_TIMEOUT: Duration = Duration::from_secs(1800);

/// How many rounds, and the image.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Measured rounds.
    pub rounds: usize,
    /// Unmeasured rounds before them.
    pub warmup: usize,
    /// The image folder to boot; none: build one into `image_cache`.
    pub image: Option<PathBuf>,
    /// Where the image is built when none is given.
    pub image_cache: PathBuf,
}

/// Everything the section measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VmPauseFigures {
    /// The VMM.
    pub vmm: &'static str,
    /// Its accelerator.
    pub accel: &'static str,
    /// VMs of the runner.
    pub pool_size: usize,
    /// Measured rounds.
    pub rounds: usize,
    /// Unmeasured rounds before them.
    pub warmup: usize,
    /// The pause and the wake, next to a run in the active session.
    pub row: PauseRow,
}

/// Finds or builds the image, starts the VM runner and measures.
pub async fn measure(
    bins: &Binaries,
    token: &str,
    sizes: &Sizes,
) -> anyhow::Result<VmPauseFigures> {
    let image = match &sizes.image {
        Some(dir) => dir.clone(),
        None => build_image(&bins.runner, &sizes.image_cache).await?,
    };
    let state = tempfile::Builder::new()
        .prefix("bench-vm-state-")
        .tempdir()
        .context("making the VM runner's state folder")?;
    let row = on_vm_runner(bins, token, &image, state.path(), sizes).await?;
    state
        .close()
        .context("removing the VM runner's state folder")?;
    Ok(VmPauseFigures {
        vmm: "qemu",
        accel: "tcg",
        pool_size: POOL_SIZE,
        rounds: sizes.rounds,
        warmup: sizes.warmup,
        row,
    })
}

/// The flags of the VM runner, after the bench's own.
fn runner_flags(image: &Path, state: &Path) -> Vec<String> {
    let image = image.display().to_string();
    let state = state.display().to_string();
    let flags = [
        "--backend",
        "vm",
        "--vmm",
        "qemu",
        "--accel",
        "tcg",
        "--vm-image",
        &image,
        "--state-dir",
        &state,
        // A wake may wait for a VM to boot (seconds under TCG).
        "--queue-timeout-ms",
        "120000",
        // No warm imports: under TCG they would hold the guest's vCPU for seconds.
        "--warm-imports",
        "",
    ];
    flags.iter().map(|f| f.to_string()).collect()
}

async fn on_vm_runner(
    bins: &Binaries,
    token: &str,
    image: &Path,
    state: &Path,
    sizes: &Sizes,
) -> anyhow::Result<PauseRow> {
    let flags = runner_flags(image, state);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let runner = Service::runner_with(&bins.runner, token, POOL_SIZE, &flags).await?;
    eprintln!("bench: vm pause and wake (QEMU, TCG)");
    let measured = async {
        let api = RunnerApi::with_timeout(&runner.url, token, REQUEST_TIMEOUT)?;
        let under_test = RunnerUnderTest {
            api: &api,
            refill: REFILL_TIMEOUT,
        };
        pause_row(&under_test, VM_BYTES, sizes.warmup, sizes.rounds).await
    }
    .await;
    let stopped = runner.stop().await.context("stopping the VM runner");
    let row = measured?;
    stopped?;
    Ok(row)
}

/// `sandbox-runner image build --out cache` (its output shown): the image folder.
async fn build_image(runner: &Path, cache: &Path) -> anyhow::Result<PathBuf> {
    eprintln!("bench: building the VM image into {}", cache.display());
    let build = tokio::process::Command::new(runner)
        .args(["image", "build", "--out"])
        .arg(cache)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .status();
    let status = tokio::time::timeout(IMAGE_BUILD_TIMEOUT, build)
        .await
        .context("the image build took too long")?
        .context("running sandbox-runner image build")?;
    ensure!(status.success(), "sandbox-runner image build: {status}");
    Ok(cache.join("current"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vm_runner_boots_the_image_under_tcg_in_its_own_state_folder() {
        let flags = runner_flags(Path::new("/img"), Path::new("/state"));
        let pairs: Vec<&[String]> = flags.chunks(2).collect();
        for pair in [
            ["--backend", "vm"],
            ["--accel", "tcg"],
            ["--vm-image", "/img"],
            ["--state-dir", "/state"],
            ["--warm-imports", ""],
        ] {
            assert!(pairs.iter().any(|p| p == &pair), "{pair:?} in {flags:?}");
        }
    }
}
