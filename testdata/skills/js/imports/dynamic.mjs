export default async () => {
  const m = await import("./ok.mjs");
  return { ok: m.ok };
};
