import { nope } from "./lib/nope.mjs";
export default () => ({ nope });
