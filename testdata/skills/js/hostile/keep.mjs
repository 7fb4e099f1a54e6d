// Keeps about half of a 32 MiB heap alive when it returns; the next call
// of its worker must not find it there.
export default function () {
  globalThis.keep = Array.from({ length: 800_000 }, (_, i) => i * 0.5);
  return { kept: globalThis.keep.length };
}
