// Starts the real binaries on loopback for the tests; SANDBOX_MCP_BIN and SANDBOX_RUNNER_BIN
// name them.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const START_TIMEOUT_MS = 60_000;

export function bin(name) {
  const path = process.env[name];
  if (!path) throw new Error(`${name} must name the built binary`);
  return path;
}

function cleanEnv() {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!/^(SANDBOX_|MCP_|FEATURE_)/.test(k)) env[k] = v;
  }
  return env;
}

function start(argv, env, prefix) {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), { env, stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr = (stderr + d).slice(-4000)));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${argv[0]} did not start: ${stderr}`));
    }, START_TIMEOUT_MS);
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${argv[0]} exited with ${code}: ${stderr}`));
    });
    const lines = createInterface({ input: child.stdout });
    lines.once("line", (line) => {
      clearTimeout(timer);
      if (!line.startsWith(prefix)) {
        child.kill("SIGKILL");
        reject(new Error(`unexpected first line ${JSON.stringify(line)}`));
        return;
      }
      resolve({
        child,
        url: line.split(" ").pop(),
        stop: () =>
          new Promise((done) => {
            if (child.exitCode !== null || child.signalCode !== null) return done();
            child.removeAllListeners("exit");
            const force = setTimeout(() => child.kill("SIGKILL"), 10_000);
            child.once("exit", () => {
              clearTimeout(force);
              done();
            });
            child.kill("SIGTERM");
          }),
      });
    });
  });
}

export async function startRunner() {
  const token = randomBytes(16).toString("hex");
  const argv = [bin("SANDBOX_RUNNER_BIN"), "serve", "--listen", "127.0.0.1:0", "--token", token, "--pool-size", "2"];
  // A data folder of its own: no two runners may share one.
  const data = join(mkdtempSync(join(tmpdir(), "runner-data-")), "data");
  const proc = await start(argv, { ...cleanEnv(), RUNNER_DATA_DIR: data }, "sandbox-runner listening on ");
  return { ...proc, token };
}

export async function startMcp(runner, extraEnv = {}) {
  const token = randomBytes(16).toString("hex");
  const env = { ...cleanEnv(), MCP_AUTH_TOKEN: token, PORT: "0", BIND: "127.0.0.1", RUST_LOG: "info" };
  if (runner) Object.assign(env, { SANDBOX_RUNNER_URL: runner.url, SANDBOX_RUNNER_TOKEN: runner.token });
  Object.assign(env, extraEnv);
  const proc = await start([bin("SANDBOX_MCP_BIN"), "serve"], env, "sandbox-mcp listening on ");
  return { ...proc, token, base: proc.url.replace(/\/mcp$/, "") };
}

export async function connect(server, token = server.token) {
  const transport = new StreamableHTTPClientTransport(new URL(server.url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "sandbox-mcp-ts-tests", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

export function text(result) {
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
}

// A 1x1 PNG.
export const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

// A Python program that writes a real PNG and a CSV file under outputs/.
export const WRITE_OUTPUTS = String.raw`
import os, struct, zlib
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
png = (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0))
       + chunk(b'IDAT', zlib.compress(b'\x00\xff\x00\x00')) + chunk(b'IEND', b''))
os.makedirs('/home/sandbox/outputs', exist_ok=True)
open('/home/sandbox/outputs/plot.png', 'wb').write(png)
open('/home/sandbox/outputs/data.csv', 'w').write('a,b\n1,2\n')
print('written')
`;

async function ok(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  if (result.isError) throw new Error(`${name}: ${text(result)}`);
  if (result.structuredContent.error !== null) throw new Error(`${name}: ${JSON.stringify(result.structuredContent)}`);
  return result;
}

async function createSandbox(client) {
  const created = (await ok(client, "create_sandbox", {})).structuredContent;
  if (!created.sandboxId.startsWith("sbx_") || !(created.idleTimeoutMs > 0) || !created.expiresAt) {
    throw new Error(JSON.stringify(created));
  }
  return created.sandboxId;
}

// create, two runs that share a file, files in and out (text, a PNG, a binary), list, a
// pause woken by a run, a fork of two, close, and a use after close.
export async function checkSandboxFlow(client) {
  const { default: assert } = await import("node:assert/strict");
  const sandboxId = await createSandbox(client);
  const first = await ok(client, "run_python", { code: "open('kept.txt', 'w').write('kept 42')\nprint('wrote')", sandboxId });
  assert.equal(first.structuredContent.stdout, "wrote\n");
  assert.equal(first.structuredContent.stateLost, false);
  const second = await ok(client, "run_node", { code: "console.log(require('fs').readFileSync('kept.txt', 'utf8'))", sandboxId });
  assert.equal(second.structuredContent.stdout, "kept 42\n");
  await ok(client, "run_node", { code: "let total = 41;", sandboxId });
  const sum = await ok(client, "run_node", { code: "console.log(total + 1)", sandboxId });
  assert.equal(sum.structuredContent.stdout, "42\n");

  await ok(client, "upload_file", { sandboxId, path: "data/in.csv", content: "a,b\n1,2\n" });
  const csv = await ok(client, "download_file", { sandboxId, path: "data/in.csv" });
  assert.equal(text(csv), "a,b\n1,2\n");
  assert.equal(csv.structuredContent.mimeType, "text/csv");

  await ok(client, "upload_file", { sandboxId, path: "pic.png", content: PNG, encoding: "base64" });
  const image = await ok(client, "download_file", { sandboxId, path: "pic.png" });
  assert.equal(image.content[0].type, "image");
  assert.equal(image.content[0].mimeType, "image/png");
  assert.equal(image.content[0].data, PNG);

  const bytes = Buffer.from([...Array(256).keys()]);
  await ok(client, "upload_file", { sandboxId, path: "b.bin", content: bytes.toString("base64"), encoding: "base64" });
  const blob = await ok(client, "download_file", { sandboxId, path: "b.bin" });
  assert.equal(blob.content[0].type, "resource");
  assert.deepEqual(Buffer.from(blob.content[0].resource.blob, "base64"), bytes);

  const listed = (await ok(client, "list_files", { sandboxId })).structuredContent;
  const paths = listed.files.map((f) => f.path);
  for (const path of ["kept.txt", "data", "data/in.csv", "pic.png", "b.bin"]) assert.ok(paths.includes(path), path);

  // Paused, it wakes at its next run and says so; each fork has its own copy of the files.
  assert.equal((await ok(client, "pause_sandbox", { sandboxId })).structuredContent.paused, true);
  const woken = (await ok(client, "run_bash", { code: "cat kept.txt", sandboxId })).structuredContent;
  assert.equal(woken.stdout, "kept 42");
  assert.equal(woken.resumed, true);
  assert.equal(typeof woken.stateLost, "boolean");
  const { sandboxIds } = (await ok(client, "fork_sandbox", { sandboxId, count: 2 })).structuredContent;
  assert.equal(sandboxIds.length, 2);
  await ok(client, "run_bash", { code: "echo fork > kept.txt", sandboxId: sandboxIds[0] });
  for (const other of [sandboxIds[1], sandboxId]) {
    const read = await ok(client, "run_bash", { code: "cat kept.txt", sandboxId: other });
    assert.equal(read.structuredContent.stdout, "kept 42");
  }
  for (const fork of sandboxIds) await ok(client, "close_sandbox", { sandboxId: fork });

  assert.equal((await ok(client, "close_sandbox", { sandboxId })).structuredContent.closed, true);
  const after = await client.callTool({ name: "run_python", arguments: { code: "print(1)", sandboxId } });
  assert.equal(after.isError, true);
  assert.equal(after.structuredContent.error.code, "sandbox_not_found");
  assert.match(text(after), /create_sandbox/);
}

// A one-shot run and a sandbox run that write outputs/plot.png and outputs/data.csv get
// them back: the PNG as image content, the CSV as a text resource, both listed.
export async function checkOutputsComeBack(client) {
  const { default: assert } = await import("node:assert/strict");
  const sandboxId = await createSandbox(client);
  try {
    for (const args of [{ code: WRITE_OUTPUTS }, { code: WRITE_OUTPUTS, sandboxId }]) {
      const result = await ok(client, "run_python", args);
      assert.equal(result.structuredContent.stdout, "written\n");
      assert.deepEqual(
        result.structuredContent.outputs.map((o) => [o.path, o.mimeType]),
        [["data.csv", "text/csv"], ["plot.png", "image/png"]],
      );
      const image = result.content.find((c) => c.type === "image");
      assert.ok(image, JSON.stringify(result.content));
      assert.equal(image.mimeType, "image/png");
      assert.ok(Buffer.from(image.data, "base64").subarray(0, 4).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47])));
      const csv = result.content.find((c) => c.type === "resource");
      assert.equal(csv.resource.text, "a,b\n1,2\n");
    }
  } finally {
    await client.callTool({ name: "close_sandbox", arguments: { sandboxId } });
  }
}

// Reads a process's output with waitMs and the cursor until it has ended, then once more:
// all it wrote to stdout, and the last answer.
async function untilEnded(client, sandboxId, pid) {
  let stdout = "";
  let cursor;
  for (let reads = 0; reads < 30; reads++) {
    const answer = (await ok(client, "process_output", { sandboxId, pid, cursor, waitMs: 2000 })).structuredContent;
    stdout += answer.stdout;
    cursor = answer.cursor;
    if (!answer.running) {
      const last = (await ok(client, "process_output", { sandboxId, pid, cursor })).structuredContent;
      return { stdout: stdout + last.stdout, last };
    }
  }
  throw new Error(`process ${pid} did not end`);
}

// A process fed through its input and read with the cursor, another stopped with TERM, both
// listed: every process tool's result passes the SDK's check of its output schema.
export async function checkProcessFlow(client) {
  const { default: assert } = await import("node:assert/strict");
  const sandboxId = await createSandbox(client);
  try {
    const cat = (await ok(client, "start_process", { sandboxId, command: "cat" })).structuredContent.pid;
    const sleeper = (await ok(client, "start_process", { sandboxId, command: "sleep 300" })).structuredContent.pid;
    const written = await ok(client, "write_stdin", { sandboxId, pid: cat, data: "hi\n", eof: true });
    assert.deepEqual(written.structuredContent, { written: 3, closed: true, error: null });
    const fed = await untilEnded(client, sandboxId, cat);
    assert.equal(fed.stdout, "hi\n");
    assert.equal(fed.last.exitCode, 0);
    const sent = await ok(client, "kill_process", { sandboxId, pid: sleeper });
    assert.equal(sent.structuredContent.signal, "TERM");
    assert.equal((await untilEnded(client, sandboxId, sleeper)).last.exitCode, 143);
    const { processes } = (await ok(client, "list_processes", { sandboxId })).structuredContent;
    assert.deepEqual(
      processes.map((p) => [p.pid, p.running, p.exitCode]),
      [[cat, false, 0], [sleeper, false, 143]],
    );
    const unknown = await client.callTool({ name: "process_output", arguments: { sandboxId, pid: 999999 } });
    assert.equal(unknown.isError, true);
    assert.equal(unknown.structuredContent.error.code, "process_not_found");
    assert.match(text(unknown), /list_processes/);
  } finally {
    await client.callTool({ name: "close_sandbox", arguments: { sandboxId } });
  }
}
