//! Sandboxes (issue 12) through rmcp's clients against the real `sandbox-mcp serve` and
//! `stdio`, wired to a real `sandbox-runner serve`: create, runs that keep their files,
//! files in and out, list, close; sandbox ids that are forged, altered or another
//! credential's reach no runner; an id made by one replica works on another.
//!
//! Needs the runner binary (built beside these tests, or SANDBOX_RUNNER_BIN) and root.

mod common;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use common::{
    call, call_err, call_ok, connect, start_mcp, start_mcp_with_token, start_runner, text, tool,
    Client,
};
use rmcp::model::{CallToolRequestParams, ResourceContents};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::ServiceExt;
use serde_json::json;

/// A 1x1 PNG.
const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

/// A Python program that writes a real PNG and a CSV file under outputs/.
const WRITE_OUTPUTS: &str = r#"
import os, struct, zlib
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
png = (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0))
       + chunk(b'IDAT', zlib.compress(b'\x00\xff\x00\x00')) + chunk(b'IEND', b''))
os.makedirs('/home/sandbox/outputs', exist_ok=True)
open('/home/sandbox/outputs/plot.png', 'wb').write(png)
open('/home/sandbox/outputs/data.csv', 'w').write('a,b\n1,2\n')
print('written')
"#;

async fn create(client: &Client) -> String {
    let (_, structured) = call_ok(client, tool("create_sandbox", json!({}))).await;
    let id = structured["sandboxId"]
        .as_str()
        .expect("sandboxId")
        .to_owned();
    assert!(id.starts_with("sbx_"), "{id}");
    assert!(
        structured["idleTimeoutMs"].as_u64().unwrap_or_default() > 0,
        "{structured}"
    );
    assert!(structured["expiresAt"].as_str().is_some(), "{structured}");
    id
}

fn run_in(lang_tool: &'static str, code: &str, sandbox_id: &str) -> CallToolRequestParams {
    tool(lang_tool, json!({"code": code, "sandboxId": sandbox_id}))
}

#[tokio::test]
async fn a_sandbox_keeps_its_files_and_moves_files_in_and_out() {
    let runner = start_runner();
    let server = start_mcp(&[
        ("SANDBOX_RUNNER_URL", runner.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
    ]);
    let client = connect(&server, &server.token).await.expect("initialize");
    let id = create(&client).await;

    // Files written by one run are read by the next, in each language.
    let write = "open('/home/sandbox/kept.txt', 'w').write('kept 42')\nprint('wrote')";
    let (_, first) = call_ok(&client, run_in("run_python", write, &id)).await;
    assert_eq!(first["stdout"], "wrote\n");
    assert_eq!(first["stateLost"], false, "{first}");
    let read = "print(open('/home/sandbox/kept.txt').read())";
    let (_, second) = call_ok(&client, run_in("run_python", read, &id)).await;
    assert_eq!(second["stdout"], "kept 42\n");
    let (_, bash) = call_ok(
        &client,
        run_in("run_bash", "cat ~/kept.txt; echo > /tmp/t", &id),
    )
    .await;
    assert_eq!(bash["stdout"], "kept 42");
    let node = "console.log(require('fs').existsSync('/tmp/t'))";
    let (_, node) = call_ok(&client, run_in("run_node", node, &id)).await;
    assert_eq!(node["stdout"], "true\n");
    // Python's globals and Node's declarations live on between calls.
    let (_, _) = call_ok(&client, run_in("run_python", "x = 41", &id)).await;
    let (_, py) = call_ok(&client, run_in("run_python", "print(x + 1)", &id)).await;
    assert_eq!(py["stdout"], "42\n", "{py}");
    let (_, _) = call_ok(&client, run_in("run_node", "const greeting = 'hi';", &id)).await;
    let (_, js) = call_ok(&client, run_in("run_node", "console.log(greeting)", &id)).await;
    assert_eq!(js["stdout"], "hi\n", "{js}");
    // A one-shot run is another sandbox.
    let (_, one_shot) = call_ok(&client, call("run_bash", "ls ~/kept.txt 2>&1; true", None)).await;
    assert!(one_shot["stdout"]
        .as_str()
        .unwrap_or_default()
        .contains("No such file"));
    assert!(one_shot.get("stateLost").is_none(), "{one_shot}");

    // Text in and out.
    let upload = json!({"sandboxId": id, "path": "data/in put.csv", "content": "a,b\n1,2\n"});
    let (_, uploaded) = call_ok(&client, tool("upload_file", upload)).await;
    assert_eq!(uploaded["path"], "data/in put.csv");
    assert_eq!(uploaded["size"], 8);
    let sum =
        "import csv\nprint(sum(int(r['b']) for r in csv.DictReader(open('data/in put.csv'))))";
    let (_, summed) = call_ok(&client, run_in("run_python", sum, &id)).await;
    assert_eq!(summed["stdout"], "2\n");
    let (text_file, fields) = call_ok(
        &client,
        tool(
            "download_file",
            json!({"sandboxId": id, "path": "/home/sandbox/data/in put.csv"}),
        ),
    )
    .await;
    assert_eq!(text(&text_file), "a,b\n1,2\n");
    assert_eq!(fields["mimeType"], "text/csv");

    // A PNG comes back as image content.
    let png = json!({"sandboxId": id, "path": "pic.png", "content": PNG, "encoding": "base64"});
    call_ok(&client, tool("upload_file", png)).await;
    let (image, fields) = call_ok(
        &client,
        tool("download_file", json!({"sandboxId": id, "path": "pic.png"})),
    )
    .await;
    let block = image.content[0].as_image().expect("image content");
    assert_eq!(block.mime_type, "image/png");
    assert_eq!(block.data, PNG);
    assert_eq!(fields["mimeType"], "image/png");

    // A binary file comes back as a blob resource, byte for byte.
    let make = "import os\nopen('blob.bin', 'wb').write(bytes(range(256)) * 4)";
    call_ok(&client, run_in("run_python", make, &id)).await;
    let (blob, fields) = call_ok(
        &client,
        tool(
            "download_file",
            json!({"sandboxId": id, "path": "blob.bin"}),
        ),
    )
    .await;
    match &blob.content[0].as_resource().expect("a resource").resource {
        ResourceContents::BlobResourceContents {
            blob, mime_type, ..
        } => {
            let expected: Vec<u8> = (0..4).flat_map(|_| 0..=255u8).collect();
            assert_eq!(STANDARD.decode(blob).unwrap(), expected);
            assert_eq!(mime_type.as_deref(), Some("application/octet-stream"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fields["size"], 1024);

    // The listing has what was put there.
    let (listing, listed) = call_ok(&client, tool("list_files", json!({"sandboxId": id}))).await;
    let paths: Vec<&str> = listed["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    for path in ["kept.txt", "data", "data/in put.csv", "pic.png", "blob.bin"] {
        assert!(paths.contains(&path), "{path} not in {paths:?}");
    }
    assert!(
        text(&listing).contains("data/in put.csv"),
        "{}",
        text(&listing)
    );

    // What cannot be done says what to do.
    let missing = json!({"sandboxId": id, "path": "nope.txt"});
    call_err(
        &client,
        tool("download_file", missing),
        "file_not_found",
        "list_files",
    )
    .await;
    let outside = json!({"sandboxId": id, "path": "../../etc/passwd"});
    call_err(
        &client,
        tool("download_file", outside),
        "invalid_arguments",
        "/home/sandbox",
    )
    .await;
    call_ok(&client, run_in("run_bash", "ln -s / ~/root", &id)).await;
    let through_link = json!({"sandboxId": id, "path": "root/etc/passwd"});
    call_err(
        &client,
        tool("download_file", through_link),
        "bad_path",
        "/home/sandbox",
    )
    .await;

    // One call at a time per sandbox.
    let peer = client.peer().clone();
    let slow = run_in("run_bash", "sleep 3; echo slept", &id);
    let first = tokio::spawn(async move { peer.call_tool(slow).await });
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    call_err(
        &client,
        run_in("run_bash", "echo hi", &id),
        "sandbox_busy",
        "wait",
    )
    .await;
    let slept = first.await.expect("join").expect("tools/call");
    assert_eq!(
        slept.structured_content.expect("structured")["stdout"],
        "slept\n"
    );

    // Closed: every use says to create a new sandbox.
    let (_, closed) = call_ok(&client, tool("close_sandbox", json!({"sandboxId": id}))).await;
    assert_eq!(closed["closed"], true);
    call_err(
        &client,
        run_in("run_python", read, &id),
        "sandbox_not_found",
        "create_sandbox",
    )
    .await;
    let after = json!({"sandboxId": id, "path": "kept.txt"});
    call_err(
        &client,
        tool("download_file", after),
        "sandbox_not_found",
        "create_sandbox",
    )
    .await;
    call_err(
        &client,
        tool("close_sandbox", json!({"sandboxId": id})),
        "sandbox_not_found",
        "create_sandbox",
    )
    .await;
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn forged_altered_and_other_credentials_ids_reach_no_runner() {
    let common::TwoHolders {
        runner: _runner,
        proxy,
        alice: _alice,
        bob: _bob,
        alice_client,
        bob_client,
    } = common::two_holders().await;
    let id = create(&alice_client).await;
    assert_eq!(
        proxy.requests_to("/sessions"),
        1,
        "the creation went through"
    );

    // One character in the middle (the last one may carry only padding bits).
    let mut altered = id.clone().into_bytes();
    altered[20] = if altered[20] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).expect("ASCII");
    let forged = format!("sbx_{}", "A".repeat(70));
    for (client, sandbox_id) in [
        (&bob_client, id.as_str()),
        (&alice_client, altered.as_str()),
        (&alice_client, forged.as_str()),
        (&alice_client, "0123456789abcdef0123456789abcdef"),
    ] {
        call_err(
            client,
            run_in("run_python", "print(1)", sandbox_id),
            "invalid_sandbox_id",
            "create_sandbox",
        )
        .await;
        for (name, arguments) in [
            (
                "upload_file",
                json!({"sandboxId": sandbox_id, "path": "x", "content": "x"}),
            ),
            (
                "download_file",
                json!({"sandboxId": sandbox_id, "path": "x"}),
            ),
            ("list_files", json!({"sandboxId": sandbox_id})),
            ("close_sandbox", json!({"sandboxId": sandbox_id})),
        ] {
            call_err(
                client,
                tool(name, arguments),
                "invalid_sandbox_id",
                "create_sandbox",
            )
            .await;
        }
    }
    assert_eq!(
        proxy.requests_to("/sessions"),
        1,
        "no refused id reached the runner"
    );
    // The real holder still can, through the same path.
    call_ok(&alice_client, run_in("run_bash", "echo mine", &id)).await;
    call_ok(
        &alice_client,
        tool("close_sandbox", json!({"sandboxId": id})),
    )
    .await;
    assert_eq!(proxy.requests_to("/sessions"), 3);
    alice_client.cancel().await.expect("close");
    bob_client.cancel().await.expect("close");
}

#[tokio::test]
async fn an_id_made_by_one_replica_works_on_another() {
    let runner = start_runner();
    let env = [
        ("SANDBOX_RUNNER_URL", runner.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
    ];
    let token = "shared-client-token-0123456789abcdef".to_owned();
    let first = start_mcp_with_token(&env, token.clone());
    let second = start_mcp_with_token(&env, token.clone());
    let on_first = connect(&first, &token).await.expect("initialize");
    let on_second = connect(&second, &token).await.expect("initialize");
    let id = create(&on_first).await;
    call_ok(&on_first, run_in("run_bash", "echo from-first > note", &id)).await;
    let (_, read) = call_ok(&on_second, run_in("run_bash", "cat note", &id)).await;
    assert_eq!(read["stdout"], "from-first\n");
    call_ok(&on_second, tool("close_sandbox", json!({"sandboxId": id}))).await;
    call_err(
        &on_first,
        run_in("run_bash", "cat note", &id),
        "sandbox_not_found",
        "create_sandbox",
    )
    .await;

    // An explicit SANDBOX_HANDLE_KEY is the key instead: a replica without it refuses.
    let key = "k".repeat(40);
    let keyed_env = [env[0], env[1], ("SANDBOX_HANDLE_KEY", key.as_str())];
    let keyed = start_mcp_with_token(&keyed_env, token.clone());
    let on_keyed = connect(&keyed, &token).await.expect("initialize");
    let keyed_id = create(&on_keyed).await;
    call_err(
        &on_first,
        run_in("run_bash", "true", &keyed_id),
        "invalid_sandbox_id",
        "create_sandbox",
    )
    .await;
    call_ok(
        &on_keyed,
        tool("close_sandbox", json!({"sandboxId": keyed_id})),
    )
    .await;
    on_first.cancel().await.expect("close");
    on_second.cancel().await.expect("close");
    on_keyed.cancel().await.expect("close");
}

fn stdio_client_command(runner: &common::Server) -> tokio::process::Command {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_sandbox-mcp")).configure(|cmd| {
        cmd.arg("stdio")
            .env_remove("MCP_AUTH_TOKEN")
            .env_remove("SANDBOX_HANDLE_KEY")
            .env("SANDBOX_RUNNER_URL", &runner.url)
            .env("SANDBOX_RUNNER_TOKEN", &runner.token)
            .env("RUST_LOG", "warn");
    })
}

#[tokio::test]
async fn sandboxes_work_over_stdio_and_belong_to_their_process() {
    let runner = start_runner();
    let transport = TokioChildProcess::new(stdio_client_command(&runner)).expect("spawn");
    let client = ().serve(transport).await.expect("initialize");
    let id = create(&client).await;
    call_ok(
        &client,
        run_in("run_python", "open('f', 'w').write('over stdio')", &id),
    )
    .await;
    let (_, read) = call_ok(
        &client,
        run_in("run_python", "print(open('f').read())", &id),
    )
    .await;
    assert_eq!(read["stdout"], "over stdio\n");
    let (downloaded, _) = call_ok(
        &client,
        tool("download_file", json!({"sandboxId": id, "path": "f"})),
    )
    .await;
    assert_eq!(text(&downloaded), "over stdio");

    // Another stdio process (another client) with the same runner cannot use it.
    let other = TokioChildProcess::new(stdio_client_command(&runner)).expect("spawn");
    let other = ().serve(other).await.expect("initialize");
    call_err(
        &other,
        run_in("run_python", "print(1)", &id),
        "invalid_sandbox_id",
        "create_sandbox",
    )
    .await;
    other.cancel().await.expect("close");

    call_ok(&client, tool("close_sandbox", json!({"sandboxId": id}))).await;
    client.cancel().await.expect("close");
}

/// Files a run writes under /home/sandbox/outputs/ come back as content.
///
/// Passes once the runner collects outputs/ (the agent's side of issue 12); until then
/// `outputs` is always empty and this test fails at its first outputs assertion.
#[tokio::test]
async fn outputs_come_back_as_content() {
    let runner = start_runner();
    let server = start_mcp(&[
        ("SANDBOX_RUNNER_URL", runner.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
    ]);
    let client = connect(&server, &server.token).await.expect("initialize");
    let id = create(&client).await;
    for (label, params) in [
        ("one-shot", call("run_python", WRITE_OUTPUTS, None)),
        ("sandbox", run_in("run_python", WRITE_OUTPUTS, &id)),
    ] {
        let (result, structured) = call_ok(&client, params).await;
        assert_eq!(structured["stdout"], "written\n", "{label}");
        let listed: Vec<(&str, &str)> = structured["outputs"]
            .as_array()
            .expect("outputs")
            .iter()
            .map(|f| {
                (
                    f["path"].as_str().unwrap_or(""),
                    f["mimeType"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            listed,
            [("data.csv", "text/csv"), ("plot.png", "image/png")],
            "{label}: {structured}"
        );
        let image = result
            .content
            .iter()
            .find_map(|c| c.as_image())
            .unwrap_or_else(|| panic!("{label}: no image content in {:?}", result.content));
        assert_eq!(image.mime_type, "image/png");
        assert!(STANDARD
            .decode(&image.data)
            .unwrap()
            .starts_with(b"\x89PNG"));
        let csv = result
            .content
            .iter()
            .find_map(|c| c.as_resource())
            .expect("the CSV as a resource");
        match &csv.resource {
            ResourceContents::TextResourceContents { text, .. } => assert_eq!(text, "a,b\n1,2\n"),
            other => panic!("{label}: {other:?}"),
        }
    }
    call_ok(&client, tool("close_sandbox", json!({"sandboxId": id}))).await;
    client.cancel().await.expect("close");
}

/// What a hostile program leaves in its sandbox (a FIFO, a listing far larger than the
/// runner's channel carries) gets a clear answer at once, and the sandbox lives on.
#[tokio::test]
async fn fifos_and_oversized_listings_leave_the_sandbox_working() {
    let within = std::time::Duration::from_secs(10);
    let runner = start_runner();
    let server = start_mcp(&[
        ("SANDBOX_RUNNER_URL", runner.url.as_str()),
        ("SANDBOX_RUNNER_TOKEN", runner.token.as_str()),
    ]);
    let client = connect(&server, &server.token).await.expect("initialize");
    let id = create(&client).await;
    call_ok(
        &client,
        run_in("run_bash", "echo kept > ~/kept; mkfifo ~/fifo", &id),
    )
    .await;
    let alive = || async {
        let (_, out) = call_ok(&client, run_in("run_bash", "cat ~/kept", &id)).await;
        assert_eq!(out["stdout"], "kept\n", "{out}");
    };
    let download = tool("download_file", json!({"sandboxId": id, "path": "fifo"}));
    tokio::time::timeout(within, call_err(&client, download, "not_a_file", "FIFO"))
        .await
        .expect("download_file of a FIFO answers at once");
    alive().await;
    let upload = tool(
        "upload_file",
        json!({"sandboxId": id, "path": "fifo", "content": "x"}),
    );
    tokio::time::timeout(within, call_err(&client, upload, "not_a_file", "FIFO"))
        .await
        .expect("upload_file to a FIFO answers at once");
    alive().await;

    let make = "import os\nos.makedirs('deep', exist_ok=True); os.chdir('deep')\n\
                for i in range(15):\n    os.mkdir('%02d' % i + 'd' * 240); os.chdir('%02d' % i + 'd' * 240)\n\
                for i in range(9000):\n    open('%05d' % i + 'f' * 245, 'w').close()";
    call_ok(&client, run_in("run_python", make, &id)).await;
    let list = tool("list_files", json!({"sandboxId": id}));
    let (listing, listed) = tokio::time::timeout(within, call_ok(&client, list))
        .await
        .expect("list_files answers");
    assert_eq!(listed["truncated"], true, "{}", text(&listing));
    assert!(
        text(&listing).contains("more than listed"),
        "{}",
        text(&listing)
    );
    alive().await;
    client.cancel().await.expect("close");
}
