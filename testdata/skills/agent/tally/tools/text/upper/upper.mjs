export default async function upper(inputs) {
  return { text: inputs.text.toUpperCase() };
}
