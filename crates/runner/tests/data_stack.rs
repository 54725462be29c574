//! A Python program gets a lean sandbox, or one whose interpreter holds the data stack
//! (the warm imports), from what it imports (issue 35). The choice must never change a
//! result: the same programs give the same answers on every path (a runner choosing per
//! program, one without warm imports, one making jails, a session), and a program the
//! choice misses (an import by a computed name) imports the stack itself.

mod common;

use common::{require_packages, stdout, Options, Runner};
use serde_json::{json, Value};

/// Programs with what each must print: plain, the data stack, two PEP 723 scripts
/// (one of them with the stack), a plot, the stack imported by a computed name, and a
/// table and plot on Agg.
const PROGRAMS: &[(&str, &str, &str)] = &[
    (
        "plain",
        "import json, hashlib, random\nrandom.seed(7)\n\
         print(json.dumps({'a': [1, 2]}), hashlib.sha256(b'x').hexdigest()[:12])\n\
         print(random.randint(0, 10**6))",
        "{\"a\": [1, 2]} 2d711642b726\n",
    ),
    (
        "data",
        "import numpy as np\nimport pandas as pd\n\
         df = pd.DataFrame({'x': np.arange(6), 'g': list('ababab')})\n\
         print(df.groupby('g').x.sum().to_dict(), round(float(np.linalg.det(np.eye(3) * 2)), 6))\n\
         print(np.random.default_rng(7).integers(0, 1000, 3).tolist())",
        "{'a': 6, 'b': 9} 8.0\n",
    ),
    (
        "pep723",
        "# /// script\n# dependencies = [\"humanize\"]\n# ///\n\
         import humanize\nprint(humanize.intcomma(1234567))",
        "1,234,567\n",
    ),
    (
        "pep723-data",
        "# /// script\n# dependencies = [\"humanize\"]\n# ///\n\
         import humanize\nimport pandas as pd\n\
         print(humanize.intcomma(int(pd.Series([1000, 234567]).sum())))",
        "235,567\n",
    ),
    (
        "plot",
        "import matplotlib.pyplot as plt\nplt.figure(figsize=(2, 2), dpi=50)\n\
         plt.plot([1, 3, 2])\nplt.show()\nprint('shown')",
        "shown\n",
    ),
    (
        "computed",
        "import importlib\npd = importlib.import_module('pan' + 'das')\n\
         print(pd.Series([1, 2, 3]).sum())",
        "6\n",
    ),
    (
        // A first table and plot on Agg: the plotting modules a sandbox with the stack
        // has warm change nothing. (Last: a session keeps the backend it chooses.)
        "agg-plot",
        "import numpy as np\nimport pandas as pd\nimport matplotlib\nmatplotlib.use('Agg')\n\
         import matplotlib.pyplot as plt\n\
         df = pd.DataFrame({'x': np.arange(20), 'y': np.arange(20) % 7})\n\
         print(df.describe().loc['mean'].to_dict())\n\
         df.plot(x='x', y='y', figsize=(2, 2))\nplt.savefig('outputs/plot.png', dpi=40)\nplt.close('all')",
        "{'x': 9.5, 'y': 2.85}\n",
    ),
];

/// What a run's answer says that must not depend on the path: its streams, exit code
/// and outputs (names and bytes).
fn result(answer: &Value) -> Value {
    let outputs: Vec<Value> = answer["outputs"]
        .as_array()
        .map(|o| o.iter().map(|f| json!([f["path"], f["data"]])).collect())
        .unwrap_or_default();
    json!({
        "stdout": answer["stdout"],
        "stderr": answer["stderr"],
        "exitCode": answer["exitCode"],
        "outputs": outputs,
    })
}

fn runner(env: &[(&str, &str)]) -> Runner {
    Runner::with(Options {
        pool_size: 2,
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    })
}

/// Every program's result on `runner`, one-shot, or in one session when `session`.
async fn results(runner: &Runner, session: bool) -> Vec<Value> {
    let id = match session {
        true => Some(runner.open_session(json!({})).await),
        false => None,
    };
    let mut results = Vec::new();
    for (name, code, _) in PROGRAMS {
        let body = json!({"lang": "python", "code": code, "timeoutMs": 120_000});
        let (status, answer) = match &id {
            Some(id) => {
                let path = format!("/sessions/{id}/run");
                runner.request("POST", &path, Some(&body)).await
            }
            None => runner.post(&body).await,
        };
        assert_eq!(status, 200, "{name}: {answer}");
        results.push(result(&answer));
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_gives_the_same_results() {
    require_packages();
    let chosen = runner(&[]);
    let expected = results(&chosen, false).await;
    for ((name, _, starts), got) in PROGRAMS.iter().zip(&expected) {
        let out = got["stdout"].as_str().unwrap_or_default();
        assert!(out.starts_with(starts), "{name}: {got}");
        assert_eq!(
            (&got["stderr"], &got["exitCode"]),
            (&json!(""), &json!(0)),
            "{name}: {got}"
        );
    }
    let plot = &expected[4]["outputs"];
    assert_eq!(plot[0][0], "figure-1.png", "{plot}");
    let agg = &expected[PROGRAMS.len() - 1]["outputs"];
    assert_eq!(agg.as_array().map(Vec::len), Some(1), "{agg}");
    assert_eq!(agg[0][0], "plot.png", "{agg}");
    let paths = [
        ("a session", results(&chosen, true).await),
        (
            "no warm imports",
            results(&runner(&[("RUNNER_WARM_IMPORTS", "")]), false).await,
        ),
        (
            "jails",
            results(&runner(&[("RUNNER_TEMPLATES", "false")]), false).await,
        ),
    ];
    for (path, got) in paths {
        for (((name, _, _), want), got) in PROGRAMS.iter().zip(&expected).zip(&got) {
            assert_eq!(got, want, "{name} on {path}");
        }
    }
}

#[tokio::test]
async fn a_program_gets_the_stack_warm_when_it_imports_from_it_and_lean_otherwise() {
    require_packages();
    // A pool of two: one lean python sandbox and one with the stack; each run's refill
    // is of the kind its program wanted, so the mix stays while the programs alternate
    // (a lean program takes a sandbox with the stack when no lean one is warm).
    let runner = runner(&[]);
    let loaded =
        "import sys\nprint([m in sys.modules for m in ('numpy', 'pandas', 'matplotlib.pyplot')])\n";
    let lean = ["", "import json", "import requests"];
    // seaborn requires pandas and matplotlib: the set's metadata says so.
    let data = [
        "import pandas",
        "from matplotlib import pyplot",
        "import seaborn",
    ];
    for (plain, stack) in lean.iter().zip(data) {
        runner.wait_until_full().await;
        let out = runner.run("python", &format!("{loaded}{plain}")).await;
        assert_eq!(stdout(&out), "[False, False, False]\n", "{plain:?}: {out}");
        runner.wait_until_full().await;
        let out = runner.run("python", &format!("{loaded}{stack}")).await;
        assert_eq!(stdout(&out), "[True, True, True]\n", "{stack}: {out}");
    }
    // A sandbox with the stack has what a first table and plot load lazily imported
    // too, but no pyplot backend (sandbox_plots saves the figures a program leaves open).
    runner.wait_until_full().await;
    let plotting = "import pandas, sys\nprint([m in sys.modules for m in \
         ('pandas.plotting._matplotlib', 'matplotlib.backends.backend_agg', 'PIL.PngImagePlugin', \
         'sandbox_plots')])";
    let out = runner.run("python", plotting).await;
    assert_eq!(stdout(&out), "[True, True, True, False]\n", "{out}");
    // A figure left open on Agg is not handed back: only what the program saved.
    runner.wait_until_full().await;
    let agg = "import pandas as pd\nimport matplotlib\nmatplotlib.use('Agg')\n\
               import matplotlib.pyplot as plt\npd.Series([1, 3, 2]).plot(figsize=(2, 2))\n\
               plt.savefig('outputs/mine.png', dpi=40)";
    let out = runner.run("python", agg).await;
    let outputs: Vec<&str> = out["outputs"]
        .as_array()
        .map(|o| o.iter().filter_map(|f| f["path"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(outputs, ["mine.png"], "{out}");
    // A lean sandbox imports the stack itself when its program asks by a computed name.
    runner.wait_until_full().await;
    let computed =
        "import importlib\nnp = importlib.import_module('num' + 'py')\nprint(np.arange(4).sum())";
    let out = runner
        .run_with_timeout("python", &format!("{loaded}{computed}"), Some(60_000))
        .await;
    assert_eq!(stdout(&out), "[False, False, False]\n6\n", "{out}");
}
