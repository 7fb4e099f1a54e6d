import { secret } from "/etc/libos-outside.mjs";
export default () => ({ secret });
