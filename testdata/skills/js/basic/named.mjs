import { sum, describe } from "./lib/math.mjs";
import table from "./lib/table.json";

export function add(inputs) {
  return { sum: sum([inputs.a, inputs.b]), label: describe(inputs.a, inputs.b) };
}

export const lookup = (inputs) => ({ value: table[inputs.key] ?? null });

export const notAFunction = 42;

export default function () {
  return { which: "default" };
}
