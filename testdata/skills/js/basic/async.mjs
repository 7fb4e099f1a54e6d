import { sum } from "./lib/math.mjs";

const later = (v) => Promise.resolve().then(() => v);

// Default export, asynchronous: awaits a chain of promise jobs.
export default async function total(inputs) {
  let acc = 0;
  for (const v of inputs.values ?? []) {
    acc = sum([acc, await later(v)]);
  }
  return { total: acc, kind: "async" };
}

export async function rejects() {
  await later(1);
  throw new Error("async boom");
}

export function pending() {
  return new Promise(() => {});
}
