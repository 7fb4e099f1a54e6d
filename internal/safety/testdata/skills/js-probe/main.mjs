function attempt(f) {
  try {
    return String(f());
  } catch (e) {
    return "refused: " + String(e);
  }
}

export default function () {
  return {
    globals: Object.getOwnPropertyNames(globalThis),
    env: attempt(() => JSON.stringify(process.env)),
    key: attempt(() => process.env.OPENAI_API_KEY),
    deno: attempt(() => JSON.stringify(Deno.env.toObject())),
  };
}
