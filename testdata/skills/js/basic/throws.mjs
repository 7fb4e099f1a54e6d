export default function () {
  throw new TypeError("boom from the module");
}
