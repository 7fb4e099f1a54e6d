import { secret } from "../outside/secret.mjs";

export default function () {
  return { secret };
}
