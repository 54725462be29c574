//! The package set in a guest, plots, inline dependencies refused, and the warm imports
//! only where a program uses them.

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

/// A VM is prepared with the warm imports only for a program that imports one (issue
/// 35): under TCG they take the guest seconds after its boot, which a `print(1)` given
/// that VM would wait for.
#[tokio::test]
async fn a_vm_imports_the_warm_imports_only_for_a_program_that_uses_them() {
    let _serial = SERIAL.lock().await;
    common::require_packages();
    // numpy's import under TCG, on a host busy with other tests, is part of the boot.
    let flags = ["--warm-imports=numpy", "--vm-boot-timeout-ms", "240000"];
    let runner = vm_runner_with(2, &state_dir("warm-choice"), &flags);
    let loaded = "import sys\nprint('numpy' in sys.modules)\n";
    for (program, warm) in [("", "False"), ("import numpy", "True"), ("", "False")] {
        // Both VMs of the first fill (one lean, one with the warm imports), or the
        // lean one and the replacement of the last run, which is of its kind.
        let deadline = Instant::now() + Duration::from_secs(480);
        loop {
            let health = runner.health().await;
            if health["available"] == 2 {
                break;
            }
            assert!(Instant::now() < deadline, "the pool did not fill: {health}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let code = format!("{loaded}{program}");
        let out = runner
            .run_with_timeout("python", &code, Some(200_000))
            .await;
        assert_eq!(stdout(&out), format!("{warm}\n"), "{program:?}: {out}");
    }
}
