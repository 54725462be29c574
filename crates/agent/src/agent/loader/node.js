// Pre-started Node. Reads a request line on descriptor 3: {"path": ..., "session": ...};
// its stdout and stderr streams are made while it waits.
// One-shot (session false): runs the program as `node PATH` would (require.main,
// process.argv, CommonJS or ES module).
// Session: runs each requested program as a script in the one global context, as the
// REPL does (var, let, const, functions and globalThis persist), awaits the value it
// ends with when that is a promise, waits until what it started is done (timers,
// requests, child processes; not listening servers), then writes {"exit": CODE, "run": N} on
// descriptor 4 and waits for the next request. A program with import/export or
// top-level await runs as an ES module instead (only globalThis persists from it).
// A request's "tools" numbers the state of the `tools` package the agent wrote: when it
// changed since the last run, `require("tools")` loads it afresh (its entries leave the
// require cache); an ES module `import` of it stays cached for the interpreter's life.
// `node -e LOADER typescript`: the same for TypeScript. The compiler is loaded (and
// warmed up) while the loader waits; a program's types are stripped (transpiled to
// CommonJS, not checked) before it runs, or to an ES module when it awaits at its top
// level (anywhere outside a function, found in its syntax tree), which then runs as
// one, one-shot or in a session. One-shot: {"compiled": true|false} goes on
// descriptor 4 first (false: the diagnostics on stderr, exit 1); a session's report
// says "compileError": true when its program did not compile. Files it requires that
// end in .ts are transpiled too.
(() => {
  const fs = require('fs');
  const vm = require('vm');
  const util = require('util');
  const nodePath = require('path');
  const { createRequire, runMain } = require('module');
  const { pathToFileURL } = require('url');
  const Module = require('module');

  // TypeScript: the compiler, and the program's source as JavaScript (module: 'cjs'
  // or 'esm').
  const ts = process.argv[1] === 'typescript' ? require('typescript') : null;
  const transpile = (source, fileName, module) => {
    const out = ts.transpileModule(source, {
      fileName,
      reportDiagnostics: true,
      compilerOptions: {
        module: module === 'esm' ? ts.ModuleKind.ESNext : ts.ModuleKind.CommonJS,
        target: ts.ScriptTarget.ES2022,
        esModuleInterop: true,
        inlineSourceMap: true,
      },
    });
    const errors = (out.diagnostics || []).filter((d) => d.category === ts.DiagnosticCategory.Error);
    if (errors.length === 0) return { ok: true, js: out.outputText };
    const host = {
      getCanonicalFileName: (f) => f,
      getCurrentDirectory: () => nodePath.dirname(fileName),
      getNewLine: () => '\n',
    };
    return { ok: false, diagnostics: ts.formatDiagnostics(errors, host) };
  };
  if (ts) {
    transpile('const warm: number = [1].map((x: number) => x + 1)[0]; export {};', 'warm.ts', 'cjs');
    Module._extensions['.ts'] = (module, filename) => {
      const result = transpile(fs.readFileSync(filename, 'utf8'), filename, 'cjs');
      if (!result.ok) throw new SyntaxError(result.diagnostics);
      module._compile(result.js, filename);
    };
  }
  // Whether a TypeScript program awaits at its top level (outside any function), read
  // as an ES module reads it: then it must run as one. (Transpiled to CommonJS, an
  // `await (f)(x)` is a call of a function named await, and `f(await x)` fails with
  // "missing ) after argument list": the JavaScript is no guide.)
  const tsAwaitsAtTop = (source, fileName) => {
    const file = ts.createSourceFile(fileName, source, {
      languageVersion: ts.ScriptTarget.ES2022,
      setExternalModuleIndicator: (f) => { f.externalModuleIndicator = true; },
    }, false, ts.ScriptKind.TS);
    const visit = (node) => {
      if (ts.isFunctionLike(node)) return false;
      if (ts.isAwaitExpression(node)) return true;
      if (ts.isForOfStatement(node) && node.awaitModifier) return true;
      return ts.forEachChild(node, visit) || false;
    };
    return ts.forEachChild(file, visit) || false;
  };
  // A TypeScript program as JavaScript: CommonJS, or an ES module (`module: true`) when
  // it awaits at its top level and compiles as one (else its CommonJS form, where an
  // identifier named await still works).
  const compile = (source, fileName) => {
    const cjs = transpile(source, fileName, 'cjs');
    if (!cjs.ok || !tsAwaitsAtTop(source, fileName)) return { ...cjs, module: false };
    const esm = transpile(source, fileName, 'esm');
    return esm.ok ? { ...esm, module: true } : { ...cjs, module: false };
  };
  // Whether JavaScript that is not a script uses top-level await: it does not compile as
  // a function body but does as an async one (V8's message is no guide: `f(await x)`
  // fails as "missing ) after argument list").
  const compiles = (js) => {
    try {
      new vm.Script(js);
      return true;
    } catch (e) {
      if (e instanceof SyntaxError) return false;
      throw e;
    }
  };
  const awaitsAtTop = (js) =>
    !compiles(`(function () {\n${js}\n})`) && compiles(`(async function () {\n${js}\n})`);

  let pending = Buffer.alloc(0);
  const request = () => {
    const chunk = Buffer.alloc(4096);
    for (;;) {
      const nl = pending.indexOf(10);
      if (nl >= 0) {
        const line = pending.subarray(0, nl).toString();
        pending = pending.subarray(nl + 1);
        return JSON.parse(line);
      }
      let n;
      try {
        n = fs.readSync(3, chunk, 0, chunk.length, null);
      } catch (e) {
        if (e.code === 'EAGAIN' || e.code === 'EINTR') continue;
        throw e;
      }
      if (n === 0) {
        const line = pending.toString();
        pending = Buffer.alloc(0);
        return line.trim() ? JSON.parse(line) : null;
      }
      pending = Buffer.concat([pending, chunk.subarray(0, n)]);
    }
  };

  // A program's first write to stdout or stderr makes node's stream for it (a pipe's:
  // `net` loaded, a handle, the console bound to it), about 3 ms of CPU: made here, while
  // the sandbox waits for its run, it is off the run's path. (Node makes both the same way
  // at a program's first write; only `process.getActiveResourcesInfo()` can tell, listing
  // their pipes before it.)
  void process.stdout;
  void process.stderr;
  const first = request();
  if (!first) process.exit(0);
  for (const name of ['module', 'require', 'exports', '__filename', '__dirname']) {
    delete globalThis[name];
  }
  if (!first.session) {
    fs.closeSync(3);
    process.argv[1] = first.path;
    if (ts) {
      const source = fs.readFileSync(first.path, 'utf8');
      const result = compile(source, first.path);
      fs.writeSync(4, JSON.stringify({ compiled: result.ok }) + '\n');
      fs.closeSync(4);
      if (!result.ok) {
        process.stderr.write(result.diagnostics);
        process.exitCode = 1;
        return;
      }
      if (result.module) {
        const module = first.path.replace(/\.ts$/, '') + '.mjs';
        fs.writeFileSync(module, result.js);
        import(pathToFileURL(module).href);
        return;
      }
    } else {
      fs.closeSync(4);
    }
    runMain();
    return;
  }

  // What the program ended with, or threw, during the current run.
  let status = 0;
  const exitRequest = Symbol('process.exit');
  const realExit = process.exit;
  process.exit = (code) => {
    status = Number(code ?? process.exitCode ?? 0) & 0xff;
    throw exitRequest;
  };
  const uncaught = (e) => {
    if (e === exitRequest) return;
    const text = e instanceof Error && typeof e.stack === 'string'
      ? e.stack.split('\n').filter((l) => !/\[eval\]|node:vm:/.test(l)).join('\n')
      : `Uncaught ${util.inspect(e)}`;
    process.stderr.write(text + '\n');
    status = 1;
  };
  process.on('uncaughtException', uncaught);
  process.on('unhandledRejection', uncaught);

  // Resources that do not keep a run going: listening servers. (The pipes of our own
  // stdout and stderr, made before the first request, are in every run's baseline; any
  // pipe beyond them, such as a child's that a program still reads, keeps it going.)
  const background = new Set(['TCPServerWrap', 'PipeServerWrap', 'UDPWrap']);
  const counts = () => {
    const seen = new Map();
    for (const name of process.getActiveResourcesInfo()) {
      seen.set(name, (seen.get(name) || 0) + 1);
    }
    return seen;
  };
  const busy = (before) => {
    for (const [name, n] of counts()) {
      if (background.has(name)) continue;
      if (n > (before.get(name) || 0)) return true;
    }
    return false;
  };
  const settled = (before) => new Promise((resolve) => {
    let pause = 1;
    const check = () => {
      if (!busy(before)) return resolve();
      pause = Math.min(pause * 2, 20);
      setTimeout(check, pause).unref();
    };
    setImmediate(check);
  });

  // The `tools` package: its files leave the require cache (and the cache of resolved
  // paths) when the agent says it changed.
  let toolsSeen;
  const forgetTools = (job) => {
    if (job.tools === toolsSeen) return;
    toolsSeen = job.tools;
    const sep = nodePath.sep;
    const ours = (file) => typeof file === 'string' && file.includes(`${sep}node_modules${sep}tools${sep}`);
    for (const file of Object.keys(Module._cache)) {
      if (ours(file)) delete Module._cache[file];
    }
    for (const [key, file] of Object.entries(Module._pathCache || {})) {
      if (ours(file)) delete Module._pathCache[key];
    }
  };

  // Set when the current run's program did not compile (TypeScript).
  let compileError = false;
  const run = async (path) => {
    let source = fs.readFileSync(path, 'utf8');
    let module = false;
    if (ts) {
      const result = compile(source, path);
      if (!result.ok) {
        process.stderr.write(result.diagnostics);
        compileError = true;
        status = 1;
        return;
      }
      source = result.js;
      module = result.module;
      globalThis.exports = {};
    }
    Object.assign(globalThis, {
      require: createRequire(path),
      __filename: path,
      __dirname: nodePath.dirname(path),
    });
    process.argv[1] = path;
    let script;
    if (!module) {
      try {
        script = new vm.Script(source, { filename: path, importModuleDynamically: vm.constants?.USE_MAIN_CONTEXT_DEFAULT_LOADER });
      } catch (e) {
        if (!(e instanceof SyntaxError) || !(/import|export/.test(e.message) || awaitsAtTop(source))) throw e;
        module = true;
      }
    }
    if (module) {
      const file = path.replace(/\.[jt]s$/, '') + '.mjs';
      fs.writeFileSync(file, source);
      try {
        await import(`${pathToFileURL(file)}?run=${Date.now()}`);
      } finally {
        fs.rmSync(file, { force: true });
      }
      return;
    }
    const value = script.runInThisContext({ displayErrors: true });
    if (value && typeof value.then === 'function') await value;
  };

  const loop = async (job) => {
    while (job) {
      status = 0;
      compileError = false;
      process.exitCode = undefined;
      // Keeps the event loop alive while the run settles; counted in the baseline.
      const alive = setInterval(() => {}, 1 << 30);
      const before = counts();
      forgetTools(job);
      try {
        await run(job.path);
      } catch (e) {
        uncaught(e);
      }
      await settled(before);
      clearInterval(alive);
      if (status === 0 && process.exitCode) status = Number(process.exitCode) & 0xff;
      const report = { exit: status, run: job.run };
      if (compileError) report.compileError = true;
      fs.writeSync(4, JSON.stringify(report) + '\n');
      job = request();
    }
    realExit(0);
  };
  loop(first);
})();
