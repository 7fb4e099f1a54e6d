export function split(text) {
  return text.split(/\s+/).filter((w) => w !== "");
}
