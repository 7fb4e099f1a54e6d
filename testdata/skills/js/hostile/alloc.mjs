// Keeps every allocation alive until the heap limit stops it.
export default function () {
  const keep = [];
  for (;;) {
    keep.push("x".repeat(1 << 20) + keep.length);
  }
}
