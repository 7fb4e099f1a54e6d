import { secret } from "../outside.mjs";
export default () => ({ secret });
