// Reads the clock and the random source.
export default function observe() {
  let random = "no error";
  try {
    Math.random();
  } catch (e) {
    random = `${e.name}: ${e.message}`;
  }
  const d = new Date();
  return {
    now: Date.now(),
    iso: d.toISOString(),
    hours: d.getHours(),
    offset: d.getTimezoneOffset(),
    random,
  };
}
