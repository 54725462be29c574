//! The package set in a guest, plots, and inline dependencies refused.

use super::*;

#[tokio::test]
async fn the_guest_sees_the_package_set_and_plots_come_back() {
    let _serial = SERIAL.lock().await;
    common::require_packages();
    let runner = vm_runner(1, &state_dir("packages"));
    let code = "import numpy as np, pandas as pd, matplotlib.pyplot as plt\n\
                print(pd.Series(np.arange(4)).sum())\n\
                plt.plot([1, 2, 3]); plt.show()\n\
                open('/opt/packages/python/evil.py', 'w')";
    let out = runner.run_with_timeout("python", code, Some(200_000)).await;
    assert_eq!(stdout(&out), "6\n", "{out}");
    assert!(stderr(&out).contains("Read-only file system"), "{out}");
    assert_eq!(out["outputs"][0]["mimeType"], "image/png", "{out}");
    let out = runner
        .run("node", "console.log(require('lodash').sum([1, 2]))")
        .await;
    assert_eq!(stdout(&out), "3\n", "{out}");
    let health = runner.health().await;
    assert_eq!(health["packages"]["inlineDependencies"], false, "{health}");
    let block = "# /// script\n# dependencies = [\"humanize\"]\n# ///\nprint('RAN')";
    let (status, body) = runner
        .post(&serde_json::json!({"lang": "python", "code": block}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "dependencies_unsupported", "{body}");
}
