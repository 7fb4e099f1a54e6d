import { ok } from "./lib/reexport.mjs";
export default () => ({ ok });
