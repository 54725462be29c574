// The official TypeScript SDK's StdioClientTransport against `sandbox-mcp stdio`.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

import { bin, checkOutputsComeBack, checkProcessFlow, checkSandboxFlow, startRunner, text } from "./servers.mjs";

test("stdio: list the tools and call one without a runner", async () => {
  const transport = new StdioClientTransport({
    command: bin("SANDBOX_MCP_BIN"),
    args: ["stdio"],
    env: { RUST_LOG: "warn" },
    stderr: "pipe",
  });
  const client = new Client({ name: "sandbox-mcp-ts-tests", version: "1.0.0" });
  await client.connect(transport);
  const { tools } = await client.listTools();
  assert.deepEqual(
    tools.map((t) => t.name).sort(),
    [
      "close_sandbox", "create_sandbox", "download_file", "fork_sandbox", "kill_process", "list_files",
      "list_processes", "pause_sandbox", "process_output", "run_bash", "run_code", "run_node", "run_python",
      "snapshot_sandbox", "start_process", "upload_file", "write_stdin",
    ],
  );
  const result = await client.callTool({ name: "run_bash", arguments: { code: "echo hi" } });
  assert.equal(result.isError, true);
  assert.match(text(result), /SANDBOX_RUNNER_URL/);
  await client.close();
});

test("stdio: run code through a runner", { skip: !process.env.SANDBOX_RUNNER_BIN }, async () => {
  const runner = await startRunner();
  try {
    const transport = new StdioClientTransport({
      command: bin("SANDBOX_MCP_BIN"),
      args: ["stdio"],
      env: { RUST_LOG: "warn", SANDBOX_RUNNER_URL: runner.url, SANDBOX_RUNNER_TOKEN: runner.token },
      stderr: "pipe",
    });
    const client = new Client({ name: "sandbox-mcp-ts-tests", version: "1.0.0" });
    await client.connect(transport);
    await client.listTools();
    const result = await client.callTool({ name: "run_node", arguments: { code: "console.log(6 * 7)" } });
    assert.equal(result.isError, false, text(result));
    assert.equal(result.structuredContent.stdout, "42\n");
    await client.close();
  } finally {
    await runner.stop();
  }
});

async function withStdioClient(body) {
  const runner = await startRunner();
  try {
    const transport = new StdioClientTransport({
      command: bin("SANDBOX_MCP_BIN"),
      args: ["stdio"],
      env: { RUST_LOG: "warn", SANDBOX_RUNNER_URL: runner.url, SANDBOX_RUNNER_TOKEN: runner.token },
      stderr: "pipe",
    });
    const client = new Client({ name: "sandbox-mcp-ts-tests", version: "1.0.0" });
    await client.connect(transport);
    try {
      await body(client);
    } finally {
      await client.close();
    }
  } finally {
    await runner.stop();
  }
}

test("stdio: a sandbox keeps its files and moves files in and out", { skip: !process.env.SANDBOX_RUNNER_BIN }, async () => {
  await withStdioClient(checkSandboxFlow);
});

test("stdio: outputs/ files come back as content (an image as image content)", { skip: !process.env.SANDBOX_RUNNER_BIN }, async () => {
  await withStdioClient(checkOutputsComeBack);
});

test("stdio: a process is fed, read with its cursor, stopped and listed", { skip: !process.env.SANDBOX_RUNNER_BIN }, async () => {
  await withStdioClient(checkProcessFlow);
});
