import { label } from "./format.js";

export function sum(values) {
  return values.reduce((a, b) => a + b, 0);
}

export function describe(a, b) {
  return label(`${a}+${b}`);
}
