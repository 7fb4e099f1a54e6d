// Keeps 16 MiB alive when it returns, half a 32 MiB heap limit: the next
// call of its worker fails that limit if it finds it there.
export default function () {
  globalThis.keep = "x".repeat(16 << 20);
  return { kept: globalThis.keep.length };
}

// Keeps as much, then returns a value whose encoding throws.
export function keepAndThrow() {
  globalThis.keep = "x".repeat(16 << 20);
  return [[1], { get x() { throw new Error("boom while encoding"); } }];
}
