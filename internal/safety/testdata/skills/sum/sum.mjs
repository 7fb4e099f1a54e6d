export function add(inputs) {
  return { sum: inputs.a + inputs.b };
}
