// Throws while the module is evaluated, before any export is called.
throw new Error("evaluation boom");

export default function () {
  return {};
}
