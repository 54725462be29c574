//! Network by operator policy (issue 33): what the runner's proxy adds to a small HTTPS
//! request. The same client (the host's curl, which sandboxes share) fetches the same
//! page of the section's own HTTPS host (`site`: a network namespace, its own CA) from a
//! sandbox, through the proxy (CONNECT, the ClientHello's name checked, the address
//! checked), and from the host directly, in alternating batches of the same run. Each
//! request is a new connection and TLS handshake; its times are curl's own (`time_total`,
//! and `time_appconnect`: until the handshake was done), so a run's own start is not
//! counted on either side.
//!
//! The runner is a real one of the section's own (`RUNNER_EGRESS_ALLOW` naming the host,
//! its sandboxes forked from templates), started in a mount namespace where the site's
//! hosts file is /etc/hosts; each batch is one `POST /run` granted the host, whose answer
//! must count one proxy connection per request.

mod site;

pub use site::PAGE;

use crate::clients::RunnerApi;
use crate::services::{Binaries, Service};
use crate::stats::{percentile, ratio};
use crate::tools_from_code::Quiet;
use anyhow::{bail, ensure, Context};
use sandbox_protocol::api::RunRequest;
use serde::Serialize;
use site::Site;

/// The name the section's host goes by (the runner's only open name).
pub const HOST: &str = "bench.test";
/// Sandboxes of the section's runner: the batch's, and its refill.
pub const POOL_SIZE: usize = 2;
/// A batch's run may take this long (ms); each request is bounded by curl's `-m 10`.
const RUN_TIMEOUT_MS: u64 = 120_000;

/// How many requests the section makes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Measured requests per side.
    pub requests: usize,
    /// Requests per batch (one run, then as many from the host).
    pub batch: usize,
    /// Unmeasured requests per side first.
    pub warmup: usize,
}

/// The section: measured, or skipped and why.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum EgressSection {
    /// What it measured.
    Measured(Box<EgressFigures>),
    /// It could not run here.
    Skipped {
        /// Why.
        reason: String,
    },
}

/// The median and the 90th percentile of a series, in ms (or of two series' ratio).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spread {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
}

/// What the section measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressFigures {
    /// Its sizes.
    pub requests: usize,
    /// Requests per batch.
    pub batch: usize,
    /// Unmeasured requests per side first.
    pub warmup: usize,
    /// From the host directly, ms.
    pub direct_ms: Spread,
    /// From a sandbox through the proxy, ms.
    pub proxied_ms: Spread,
    /// What the proxy adds: the proxied percentile less the direct one, ms.
    pub added_ms: Spread,
    /// The proxied percentile over the direct one.
    pub ratio: Spread,
    /// Until the TLS handshake was done (curl's `time_appconnect`), from the host, ms.
    pub direct_tls_ms: Spread,
    /// The same through the proxy (the CONNECT's exchange included), ms.
    pub proxied_tls_ms: Spread,
}

/// One request's times, ms.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Timing {
    /// The whole request (curl's `time_total`).
    total: f64,
    /// Until its TLS handshake was done (`time_appconnect`).
    tls: f64,
}

/// Measures the section, or skips it (loudly) where it cannot run.
pub async fn measure(
    bins: &Binaries,
    runner_token: &str,
    sizes: &Sizes,
) -> anyhow::Result<EgressSection> {
    if let Some(reason) = site::missing() {
        eprintln!("bench: !!! SKIPPED the egress section: {reason}");
        return Ok(EgressSection::Skipped { reason });
    }
    let site = Site::start()?;
    let env = [("RUNNER_EGRESS_ALLOW", HOST), ("RUNNER_WARM_IMPORTS", "")];
    let runner =
        Service::runner_wrapped(&bins.runner, runner_token, POOL_SIZE, &site.wrapper(), &env)
            .await?;
    let measured = match RunnerApi::new(&runner.url, runner_token) {
        Ok(api) => series(&api, &site, sizes).await,
        Err(e) => Err(e),
    };
    let stopped = runner.stop().await.context("stopping sandbox-runner");
    let figures = measured?;
    stopped?;
    Ok(EgressSection::Measured(Box::new(figures)))
}

/// The warm-up, then batches from each side in turn until both have `sizes.requests`.
async fn series(api: &RunnerApi, site: &Site, sizes: &Sizes) -> anyhow::Result<EgressFigures> {
    eprintln!("bench: egress, an HTTPS request through the proxy and from the host");
    let cert = site.cert()?;
    if sizes.warmup > 0 {
        proxied(api, &cert, sizes.warmup).await?;
        direct(site, sizes.warmup).await?;
    }
    let quiet = Quiet { api };
    let (mut through, mut from_host) = (Vec::new(), Vec::new());
    while from_host.len() < sizes.requests {
        let n = sizes.batch.min(sizes.requests - from_host.len());
        // Each side on a quiet runner: not beside the refill of the sandbox just spent.
        quiet.wait().await?;
        through.extend(proxied(api, &cert, n).await?);
        quiet.wait().await?;
        from_host.extend(direct(site, n).await?);
    }
    let direct_ms = spread(&from_host, |t| t.total)?;
    let proxied_ms = spread(&through, |t| t.total)?;
    Ok(EgressFigures {
        requests: sizes.requests,
        batch: sizes.batch,
        warmup: sizes.warmup,
        direct_ms,
        proxied_ms,
        added_ms: Spread {
            p50: proxied_ms.p50 - direct_ms.p50,
            p90: proxied_ms.p90 - direct_ms.p90,
        },
        ratio: Spread {
            p50: ratio(proxied_ms.p50, direct_ms.p50).unwrap_or(f64::NAN),
            p90: ratio(proxied_ms.p90, direct_ms.p90).unwrap_or(f64::NAN),
        },
        direct_tls_ms: spread(&from_host, |t| t.tls)?,
        proxied_tls_ms: spread(&through, |t| t.tls)?,
    })
}

/// `n` requests from one sandbox run granted [`HOST`]: their times, ms.
async fn proxied(api: &RunnerApi, cert: &str, n: usize) -> anyhow::Result<Vec<Timing>> {
    let code = format!(
        "cat > /tmp/ca.pem <<'END'\n{cert}END\n{}",
        requests(n, "/tmp/ca.pem", "")
    );
    let request = RunRequest {
        lang: "bash".into(),
        code,
        timeout_ms: Some(RUN_TIMEOUT_MS),
        tools: None,
        egress: Some(vec![HOST.into()]),
    };
    let answer = api.run_request(&request).await?;
    ensure!(answer.exit_code == 0, "the batch's run: {answer:?}");
    let usage = answer.egress.unwrap_or_default();
    ensure!(
        usage.connections == n as u64 && usage.refused == 0,
        "{n} requests, not one proxy connection each: {answer:?}"
    );
    times(&answer.stdout, n)
}

/// `n` requests from the host, to the site's address: their times, ms.
async fn direct(site: &Site, n: usize) -> anyhow::Result<Vec<Timing>> {
    let cert = site.path("cert.pem").display().to_string();
    let resolve = format!("--resolve {HOST}:443:{}", site.ip);
    let out = tokio::process::Command::new("bash")
        .args(["-c", &requests(n, &cert, &resolve)])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .await
        .context("bash")?;
    ensure!(out.status.success(), "the host's requests: {out:?}");
    times(&String::from_utf8_lossy(&out.stdout), n)
}

/// A bash loop of `n` curl requests for the page, verified with the CA at `ca`; a line
/// `TOTAL STATUS TLS` each, in seconds (`failed` when curl fails).
fn requests(n: usize, ca: &str, extra: &str) -> String {
    format!(
        "for i in $(seq {n}); do curl -sS -m 10 -o /dev/null --cacert {ca} {extra} \
         -w '%{{time_total}} %{{http_code}} %{{time_appconnect}}\\n' https://{HOST}/ || echo failed; done"
    )
}

/// The times of `n` lines `TOTAL 200 TLS`, in ms.
fn times(out: &str, n: usize) -> anyhow::Result<Vec<Timing>> {
    let mut timings = Vec::with_capacity(n);
    for line in out.lines() {
        let [total, "200", tls] = line.split(' ').collect::<Vec<_>>()[..] else {
            bail!("a request failed: {line:?} in {out:?}");
        };
        timings.push(Timing {
            total: ms(total)?,
            tls: ms(tls)?,
        });
    }
    ensure!(
        timings.len() == n,
        "{n} requests, {} times: {out:?}",
        timings.len()
    );
    Ok(timings)
}

/// curl's seconds, in ms.
fn ms(secs: &str) -> anyhow::Result<f64> {
    let secs: f64 = secs
        .parse()
        .with_context(|| format!("curl's time {secs:?}"))?;
    Ok(secs * 1e3)
}

/// The median and 90th percentile of `of` the timings.
fn spread(timings: &[Timing], of: fn(&Timing) -> f64) -> anyhow::Result<Spread> {
    let mut ms: Vec<f64> = timings.iter().map(of).collect();
    ms.sort_by(f64::total_cmp);
    let at = |p| percentile(&ms, p).context("no requests measured");
    Ok(Spread {
        p50: at(50.0)?,
        p90: at(90.0)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_from_curls_lines_and_a_failure_is_an_error() {
        let read = times("0.0125 200 0.01\n0.5 200 0.25\n", 2).unwrap();
        let timing = |total, tls| Timing { total, tls };
        assert_eq!(read, [timing(12.5, 10.0), timing(500.0, 250.0)]);
        assert!(times("0.0125 200 0.01\nfailed\n", 2).is_err());
        assert!(times("0.0125 403 0.01\n", 1).is_err());
        assert!(times("0.0125 200\n", 1).is_err(), "no TLS time");
        assert!(times("0.0125 200 0.01\n", 2).is_err(), "a missing line");
    }

    #[test]
    fn the_spread_is_the_median_and_the_90th_percentile() {
        let timings: Vec<Timing> = (1..=10)
            .rev()
            .map(|n| Timing {
                total: f64::from(n),
                tls: f64::from(n) / 2.0,
            })
            .collect();
        let total = spread(&timings, |t| t.total).unwrap();
        assert_eq!(total, Spread { p50: 5.0, p90: 9.0 });
        let tls = spread(&timings, |t| t.tls).unwrap();
        assert_eq!(tls, Spread { p50: 2.5, p90: 4.5 });
        assert!(spread(&[], |t| t.total).is_err());
    }

    #[test]
    fn the_loop_verifies_with_the_ca_and_times_each_request() {
        let code = requests(3, "/tmp/ca.pem", "--resolve x");
        assert!(code.starts_with("for i in $(seq 3); do curl"), "{code}");
        assert!(code.contains("--cacert /tmp/ca.pem --resolve x"), "{code}");
        assert!(
            code.contains("%{time_total} %{http_code} %{time_appconnect}\\n"),
            "{code}"
        );
        assert!(code.contains(&format!("https://{HOST}/")), "{code}");
    }
}
