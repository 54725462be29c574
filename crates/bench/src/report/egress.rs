//! The "Network by operator policy" section: a small HTTPS request from a sandbox through
//! the runner's proxy next to the same request from the host.

use crate::egress::{EgressFigures, EgressSection, Spread, HOST, POOL_SIZE};
use std::fmt::Write;

/// The section, or why it was skipped.
pub fn markdown(section: &EgressSection, md: &mut String) {
    md.push_str("### Network by operator policy: an HTTPS request through the proxy\n\n");
    match section {
        EgressSection::Measured(figures) => measured(figures, md),
        EgressSection::Skipped { reason } => {
            let _ = writeln!(md, "**Skipped**: {reason}.\n");
        }
    }
}

fn measured(f: &EgressFigures, md: &mut String) {
    let _ = writeln!(
        md,
        "`curl --cacert` of a {page}-byte page at `https://{HOST}/` (the bench's own host: a \
         Python HTTPS server in a network namespace, its own CA), a new connection and TLS \
         handshake each, timed by curl (`time_total`; `time_appconnect`: until the TLS \
         handshake was done, through the proxy the CONNECT's exchange included): from a \
         sandbox granted `{HOST}` (through the runner's proxy; one `POST /run` per batch of \
         {batch}, the runner's pool {POOL_SIZE}) and from the host directly, batches in \
         turn; {n} requests per side after {warmup} unmeasured. Added: the proxied \
         percentile less the direct one.\n",
        page = crate::egress::PAGE.len(),
        batch = f.batch,
        n = f.requests,
        warmup = f.warmup,
    );
    md.push_str(
        "| | p50, ms | p90, ms |\n\
         |---|---|---|\n",
    );
    row("from the host", &f.direct_ms, md);
    row("from a sandbox, through the proxy", &f.proxied_ms, md);
    row("added by the proxy", &f.added_ms, md);
    let _ = writeln!(
        md,
        "| ratio (proxied / host) | {:.2}x | {:.2}x |",
        f.ratio.p50, f.ratio.p90
    );
    row(
        "TLS done (`time_appconnect`), from the host",
        &f.direct_tls_ms,
        md,
    );
    row("TLS done, through the proxy", &f.proxied_tls_ms, md);
    md.push('\n');
}

fn row(label: &str, spread: &Spread, md: &mut String) {
    let _ = writeln!(md, "| {label} | {:.2} | {:.2} |", spread.p50, spread.p90);
}
