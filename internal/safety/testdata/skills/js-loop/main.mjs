export default function () {
  for (;;) {}
}
