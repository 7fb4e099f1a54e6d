import { secret } from "./lib/linked.mjs";
export default () => ({ secret });
