export default async (inputs) => {
  const m = await import(inputs.name);
  return { ok: m.ok };
};
