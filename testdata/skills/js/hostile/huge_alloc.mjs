// One allocation far beyond the worker's address-space headroom.
export default function () {
  return { length: "x".repeat(2 ** 31 - 1).length };
}
