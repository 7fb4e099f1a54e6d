import { split } from "./lib/words.mjs";

export function tally(inputs) {
  const words = split(inputs.text).filter((w) => w.length >= inputs.min_length);
  let longest = "";
  for (const w of words) {
    if (w.length > longest.length) longest = w;
  }
  return { words: words.length, longest };
}
