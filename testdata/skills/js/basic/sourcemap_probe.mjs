// Code parsed at run time may name a source map; the engine must not go
// looking for it on the host's filesystem (inputs.path is a FIFO, which
// would block a reader forever).
export default function (inputs) {
  const indirectEval = eval;
  const a = indirectEval(`40 + 2\n//# sourceMappingURL=${inputs.path}`);
  const f = new Function(`return 7\n//# sourceMappingURL=${inputs.path}`);
  return { a, b: f() };
}
