// Pre-started Node: waits for the path of the program on descriptor 3, then runs it as
// `node PATH` would: require.main, process.argv, CommonJS or ES module.
(() => {
  const fs = require('fs');
  const { runMain } = require('module');
  const path = fs.readFileSync(3, 'utf8');
  fs.closeSync(3);
  if (!path) process.exit(0);
  for (const name of ['module', 'require', 'exports', '__filename', '__dirname']) {
    delete globalThis[name];
  }
  process.argv[1] = path;
  runMain();
})();
