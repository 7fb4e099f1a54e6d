// One export per result shape.
export const returnsUndefined = () => undefined;
export const nestedUndefined = () => ({ a: { b: undefined } });
export const bigint = () => ({ n: 10n });
export const func = () => ({ f() {} });
export const symbol = () => ({ s: Symbol("x") });
export const cycle = () => {
  const a = { name: "a", list: [] };
  a.list.push(a);
  return a;
};
export const nan = () => ({ x: NaN });
export const map = () => new Map([["a", 1]]);
export const hole = () => [1, , 3];
// A hole stays a hole where a prototype has that index.
export const holeArrayPrototype = () => {
  Array.prototype[1] = "x";
  return [1, , 3];
};
export const holeProxyPrototype = () => {
  const a = [1, , 3];
  Object.setPrototypeOf(a, new Proxy([], { get: (t, k, r) => (k === "1" ? "x" : Reflect.get(t, k, r)) }));
  return a;
};
export const holeObjectPrototype = () => {
  Object.prototype[1] = "y";
  return [1, , 3];
};
export const tooLarge = () => "x".repeat(4 * 1024 * 1024 + 1);
export const getterThrows = () => ({
  get x() {
    throw new Error("getter boom");
  },
});
export const fine = () => ({
  s: "quote\" back\\ nl\n tab\t \u0001 é 😀",
  n: [0, -0, 1.5, 1e21, 2 ** 53, -7, 0.1 + 0.2],
  t: true,
  f: false,
  z: null,
  nested: { arr: [[]], obj: {}, bare: Object.create(null) },
});
export const loneSurrogate = () => ({ s: "a\ud800b" });
export const deep = () => {
  let v = [];
  for (let i = 0; i < 1001; i++) v = [v];
  return v;
};
// Keys with an unpaired surrogate next to one holding U+FFFD.
export const loneSurrogateKeys = () => ({ ["\uD800"]: 1, "\uFFFD": 2, nested: { ["x\uDC00"]: [3] } });
// Object.keys replaced by one that lies, for a result whose keys Go text
// cannot hold.
export const lyingObjectKeys = () => {
  Object.keys = () => ({ length: 1e15 });
  return { ["a\uD800"]: 1 };
};
