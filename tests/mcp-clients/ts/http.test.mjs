// The official TypeScript SDK (StreamableHTTPClientTransport) against `sandbox-mcp serve`.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

import { checkOutputsComeBack, checkProcessFlow, checkSandboxFlow, connect, startMcp, startRunner, text } from "./servers.mjs";

const RUN_TOOLS = ["run_bash", "run_node", "run_python"];
const SANDBOX_TOOLS = ["close_sandbox", "create_sandbox", "download_file", "list_files", "upload_file"];
const SNAPSHOT_TOOLS = ["fork_sandbox", "pause_sandbox", "snapshot_sandbox"];
const PROCESS_TOOLS = ["kill_process", "list_processes", "process_output", "start_process", "write_stdin"];
const TOOLS = [...RUN_TOOLS, "run_code", ...SANDBOX_TOOLS, ...SNAPSHOT_TOOLS, ...PROCESS_TOOLS].sort();
const withRunner = process.env.SANDBOX_RUNNER_BIN ? describe : describe.skip;

describe("without a runner", () => {
  let server;
  before(async () => (server = await startMcp(null)));
  after(() => server.stop());

  test("initialize and list the tools", async () => {
    const { client } = await connect(server);
    assert.equal(client.getServerVersion().name, "sandbox-mcp");
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
    for (const tool of tools.filter((t) => RUN_TOOLS.includes(t.name))) {
      assert.deepEqual(tool.inputSchema.required, ["code"]);
      assert.ok(tool.inputSchema.properties.sandboxId);
      assert.ok(tool.outputSchema.properties.exitCode);
      assert.equal(tool.annotations.readOnlyHint, false);
      assert.equal(tool.annotations.openWorldHint, false);
      assert.match(tool.description, /no network/);
      assert.match(tool.description, /Without sandboxId/);
    }
    for (const tool of tools) {
      assert.ok(tool.outputSchema.properties.error, tool.name);
      assert.equal(tool.annotations.openWorldHint, false);
    }
    const create = tools.find((t) => t.name === "create_sandbox");
    assert.match(create.description, /multi-step/);
    for (const field of ["sandboxId", "expiresAt", "idleTimeoutMs"]) assert.ok(create.outputSchema.properties[field], field);
    await client.close();
  });

  test("not configured: every call is an error that says 503 and what to set", async () => {
    const { client } = await connect(server);
    for (const name of TOOLS) {
      const args = { language: "bash", code: "true", sandboxId: "sbx_x", path: "x", content: "" };
      const result = await client.callTool({ name, arguments: args });
      assert.equal(result.isError, true);
      assert.match(text(result), /503/);
      assert.match(text(result), /not configured/);
      assert.match(text(result), /SANDBOX_RUNNER_URL/);
      assert.equal(result.structuredContent.error.code, "not_configured");
    }
    await client.close();
  });

  for (const [label, token] of [["without a token", ""], ["with a wrong token", "wrong-token-0123456789"]]) {
    test(`401 ${label}`, async () => {
      await assert.rejects(connect(server, token), (err) => {
        assert.ok(err instanceof StreamableHTTPError, String(err));
        assert.equal(err.code, 401);
        return true;
      });
    });
  }

  test("403 for a foreign Origin", async () => {
    const response = await fetch(server.url, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${server.token}`,
        Origin: "http://evil.example",
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
    });
    assert.equal(response.status, 403);
  });

  test("two sessions at once", async () => {
    const [a, b] = await Promise.all([connect(server), connect(server)]);
    assert.notEqual(a.transport.sessionId, b.transport.sessionId);
    const [la, lb] = await Promise.all([a.client.listTools(), b.client.listTools()]);
    assert.equal(la.tools.length, TOOLS.length);
    assert.equal(lb.tools.length, TOOLS.length);
    await Promise.all([a.client.close(), b.client.close()]);
  });

  test("the GET stream opens and DELETE ends the session", async () => {
    const { client, transport } = await connect(server);
    const session = transport.sessionId;
    assert.ok(session);
    const auth = { Authorization: `Bearer ${server.token}`, "Mcp-Session-Id": session };
    const controller = new AbortController();
    const stream = await fetch(server.url, {
      headers: { ...auth, Accept: "text/event-stream" },
      signal: controller.signal,
    });
    assert.equal(stream.status, 200);
    assert.match(stream.headers.get("content-type"), /text\/event-stream/);
    controller.abort();
    await transport.terminateSession();
    assert.equal(transport.sessionId, undefined);
    const afterDelete = await fetch(server.url, {
      method: "POST",
      headers: { ...auth, "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 9, method: "tools/list" }),
    });
    assert.equal(afterDelete.status, 404);
    await client.close();
  });
});

describe("FEATURE_SANDBOX_EXEC=false", () => {
  let server;
  before(async () => (server = await startMcp(null, { FEATURE_SANDBOX_EXEC: "false" })));
  after(() => server.stop());

  test("lists no tools and refuses calls with a JSON-RPC error", async () => {
    const { client } = await connect(server);
    assert.deepEqual((await client.listTools()).tools, []);
    await assert.rejects(client.callTool({ name: "run_python", arguments: { code: "print(1)" } }), /unknown tool/);
    await client.close();
  });
});

withRunner("with a runner", () => {
  let runner;
  let server;
  before(async () => {
    runner = await startRunner();
    server = await startMcp(runner);
  });
  after(async () => {
    await server.stop();
    await runner.stop();
  });

  test("each tool runs its language", async () => {
    const { client } = await connect(server);
    await client.listTools();
    const programs = {
      run_bash: "echo bash $((6 * 7))",
      run_python: "print('python', 6 * 7)",
      run_node: "console.log('node', 6 * 7)",
    };
    for (const [name, code] of Object.entries(programs)) {
      const result = await client.callTool({ name, arguments: { code } });
      assert.equal(result.isError, false, text(result));
      assert.match(result.structuredContent.stdout, /42/);
      assert.equal(result.structuredContent.exitCode, 0);
    }
    await client.close();
  });

  test("a failing program", async () => {
    const { client } = await connect(server);
    await client.listTools();
    const result = await client.callTool({ name: "run_node", arguments: { code: "console.error('bad'); process.exit(4)" } });
    assert.equal(result.isError, false);
    assert.equal(result.structuredContent.exitCode, 4);
    assert.match(text(result), /bad/);
    await client.close();
  });

  test("a timeout", async () => {
    const { client } = await connect(server);
    const started = Date.now();
    const result = await client.callTool({ name: "run_python", arguments: { code: "import time\ntime.sleep(30)", timeoutMs: 1000 } });
    assert.ok(Date.now() - started < 8000);
    assert.equal(result.isError, false);
    assert.equal(result.structuredContent.timedOut, true);
    await client.close();
  });

  test("8 parallel calls in one session", async () => {
    const { client } = await connect(server);
    await client.listTools();
    const results = await Promise.all(
      [...Array(8).keys()].map((i) => client.callTool({ name: "run_bash", arguments: { code: `echo $((${i} * ${i}))` } })),
    );
    assert.deepEqual(
      results.map((r) => r.structuredContent.stdout.trim()),
      [...Array(8).keys()].map((i) => String(i * i)),
    );
    await client.close();
  });

  test("progress notifications while a run is in flight", async () => {
    const { client } = await connect(server);
    const seen = [];
    const result = await client.callTool(
      { name: "run_bash", arguments: { code: "sleep 2.5; echo done" } },
      undefined,
      { onprogress: (p) => seen.push(p.progress) },
    );
    assert.equal(result.isError, false, text(result));
    assert.ok(seen.length >= 2, JSON.stringify(seen));
    await client.close();
  });

  test("cancelling a call stops the wait", async () => {
    const { client } = await connect(server);
    const controller = new AbortController();
    const started = Date.now();
    const call = client.callTool(
      { name: "run_bash", arguments: { code: "sleep 20", timeoutMs: 3000 } },
      undefined,
      { signal: controller.signal },
    );
    setTimeout(() => controller.abort("test cancels"), 500);
    await assert.rejects(call);
    assert.ok(Date.now() - started < 5000);
    // The session still works afterwards.
    const result = await client.callTool({ name: "run_bash", arguments: { code: "echo after" } });
    assert.equal(result.structuredContent.stdout.trim(), "after");
    await client.close();
  });

  test("a sandbox keeps its files and moves files in and out", async () => {
    const { client } = await connect(server);
    await checkSandboxFlow(client);
    await client.close();
  });

  test("a sandbox id is refused for another token, and when altered", async () => {
    const { client } = await connect(server);
    const created = await client.callTool({ name: "create_sandbox", arguments: {} });
    const sandboxId = created.structuredContent.sandboxId;
    const middle = Math.floor(sandboxId.length / 2);
    const altered = sandboxId.slice(0, middle) + (sandboxId[middle] === "B" ? "C" : "B") + sandboxId.slice(middle + 1);
    const other = await startMcp(runner);
    try {
      const { client: stranger } = await connect(other);
      for (const [who, id] of [[stranger, sandboxId], [client, altered]]) {
        const result = await who.callTool({ name: "list_files", arguments: { sandboxId: id } });
        assert.equal(result.isError, true);
        assert.equal(result.structuredContent.error.code, "invalid_sandbox_id");
        assert.match(text(result), /create_sandbox/);
      }
      await stranger.close();
    } finally {
      await other.stop();
    }
    await client.callTool({ name: "close_sandbox", arguments: { sandboxId } });
    await client.close();
  });

  test("a process is fed, read with its cursor, stopped and listed", async () => {
    const { client } = await connect(server);
    await checkProcessFlow(client);
    await client.close();
  });

  test("outputs/ files come back as content (an image as image content)", async () => {
    const { client } = await connect(server);
    await checkOutputsComeBack(client);
    await client.close();
  });

  test("the runner stopped mid-test", async () => {
    const ownRunner = await startRunner();
    const ownServer = await startMcp(ownRunner);
    try {
      const { client } = await connect(ownServer);
      const before = await client.callTool({ name: "run_bash", arguments: { code: "echo up" } });
      assert.equal(before.isError, false, text(before));
      await ownRunner.stop();
      const started = Date.now();
      const down = await client.callTool({ name: "run_bash", arguments: { code: "echo up" } });
      assert.ok(Date.now() - started < 10_000);
      assert.equal(down.isError, true);
      assert.match(text(down), /unreachable/);
      assert.match(text(down), /retry/);
      await client.close();
    } finally {
      await ownServer.stop();
      await ownRunner.stop();
    }
  });
});

withRunner("tools from code (MCP_UPSTREAMS: the reference everything server over stdio)", () => {
  let runner;
  let server;
  let folder;
  before(async () => {
    const everything = fileURLToPath(
      new URL("./node_modules/@modelcontextprotocol/server-everything/dist/index.js", import.meta.url),
    );
    folder = mkdtempSync(join(tmpdir(), "upstreams-"));
    const file = join(folder, "upstreams.toml");
    writeFileSync(
      file,
      `[[server]]\nname = "everything"\ncommand = ["node", ${JSON.stringify(everything)}, "stdio"]\nallow = ["echo", "get-sum"]\n`,
    );
    runner = await startRunner();
    server = await startMcp(runner, { MCP_UPSTREAMS: file });
  });
  after(async () => {
    await server.stop();
    await runner.stop();
    rmSync(folder, { recursive: true, force: true });
  });

  test("a TypeScript program calls the tools, and search_tools shows their stubs", async () => {
    const { client } = await connect(server);
    const tools = (await client.listTools()).tools;
    const runTs = tools.find((t) => t.name === "run_typescript");
    assert.match(runTs.description, /everything/);
    const code = `
import { everything } from "tools";
const [sum, echoed] = await Promise.all([everything.get_sum({ a: 20, b: 22 }), everything.echo({ message: "hi" })]);
console.log(sum, "|", echoed);
`;
    let result;
    for (let attempt = 0; attempt < 30; attempt++) {
      result = await client.callTool({ name: "run_typescript", arguments: { code } });
      if (result.structuredContent.exitCode === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 1000)); // the upstream may still be starting
    }
    assert.equal(result.structuredContent.exitCode, 0, text(result));
    assert.equal(result.structuredContent.stdout, "The sum of 20 and 22 is 42. | Echo: hi\n");
    const made = result.structuredContent.toolCalls.map((c) => `${c.server}.${c.tool}:${c.isError}`).sort();
    assert.deepEqual(made, ["everything.echo:false", "everything.get-sum:false"]);
    const stubs = text(await client.callTool({ name: "search_tools", arguments: { query: "sum" } }));
    assert.match(stubs, /def get_sum\(/);
    assert.match(stubs, /get_sum\(args: \{/);
    await client.close();
  });
});
