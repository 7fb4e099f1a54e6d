// Exponential backtracking runs inside the engine's regular-expression
// matcher, which does not return to the interpreter, so only the host's
// wall enforcement can stop it.
export default function () {
  return { match: /(a+)+(?=b)/.test("a".repeat(30) + "c") };
}
