import { sum } from "./lib/math.mjs";

// Default export, synchronous.
export default function total(inputs) {
  return { total: sum(inputs.values ?? []), kind: "sync" };
}
