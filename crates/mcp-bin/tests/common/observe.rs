//! What running services say about themselves over HTTP: a runner's count of programs from
//! its `/metrics`, and JSON pages such as `/health`. Included (`#[path]`) by the tests that
//! count runs on each runner (scale_out, scale_out_dns), beside `common`.

use serde_json::Value;

/// A client that never goes through a proxy: the services are on loopback or in the
/// test's own network namespaces.
fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("HTTP client")
}

/// The body of `GET url`.
async fn get_text(url: String) -> String {
    http()
        .get(&url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("GET {url} body: {e}"))
}

/// The JSON body of `GET url`, whatever its status (a 503 `/health` has a body too).
pub async fn get_json(url: String) -> Value {
    let body = get_text(url.clone()).await;
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

/// The `/metrics` page of the service at `base`.
pub async fn metrics(base: &str) -> String {
    get_text(format!("{base}/metrics")).await
}

/// Programs the runner at `base` has started (every language, every outcome but
/// "rejected", which counts refusals such as a full queue's 429), from its `/metrics`.
pub async fn runs_started(base: &str) -> u64 {
    metrics(base)
        .await
        .lines()
        .filter(|l| l.starts_with("sandbox_runner_runs_total{"))
        .filter(|l| !l.contains("outcome=\"rejected\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}
